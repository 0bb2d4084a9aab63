package scaling

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// asker asks the pacer for restores at given times, as the reconcilers do when woken.
type asker struct {
	t *testing.T
	p *pacer
}

// goes checks that uid's restore may be written at now.
func (a asker) goes(uid types.UID, priority int, now time.Time) {
	a.t.Helper()
	if s := a.p.admit(uid, priority, now); !s.IsZero() {
		a.t.Fatalf("%s at %s waits until %s", uid, now.Format("15:04:05.000"), s.Format("15:04:05.000"))
	}
}

// waits checks that uid's restore waits until want.
func (a asker) waits(uid types.UID, priority int, now, want time.Time) {
	a.t.Helper()
	if s := a.p.admit(uid, priority, now); !s.Equal(want) {
		a.t.Fatalf("%s at %s: ask again at %s, want %s", uid, now.Format("15:04:05.000"), s.Format("15:04:05.000"), want.Format("15:04:05.000"))
	}
}

func TestThePacerGivesOneRestorePerIntervalInTheOrderTheyFellDue(t *testing.T) {
	a := asker{t, newPacer(2)} // one every 500 ms
	t0 := time.Date(2024, 6, 6, 8, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	// The first of a burst waits the gather time for the others of its moment.
	a.waits("a", 0, t0, ms(200))
	a.waits("b", 0, ms(10), ms(700))
	a.waits("c", 0, ms(20), ms(1200))
	// At its time each goes; asking early changes nothing.
	a.goes("a", 0, ms(200))
	a.waits("c", 0, ms(600), ms(1200))
	a.goes("b", 0, ms(700))
	// A restore that falls due later queues behind c.
	a.waits("d", 0, ms(800), ms(1700))
	a.goes("c", 0, ms(1200))
	a.goes("d", 0, ms(1700))
	// Called off before its turn: it gives its place up.
	a.waits("e", 0, ms(1800), ms(2200))
	a.waits("f", 0, ms(1800), ms(2700))
	a.p.release("e")
	a.waits("f", 0, ms(1900), ms(2200))
	a.goes("f", 0, ms(2200))
	// One that never asks again holds the others back until it is forgotten, a minute
	// after its time.
	a.waits("g", 0, ms(2300), ms(2700))
	a.waits("h", 0, ms(2300), ms(3200))
	now := ms(3200)
	for s := a.p.admit("h", 0, now); !s.IsZero(); s = a.p.admit("h", 0, now) {
		if !s.After(now) {
			t.Fatalf("h asked at %s to ask again at %s", now, s)
		}
		now = s
	}
	if gone := ms(2700).Add(abandoned); now.Before(gone) || now.After(gone.Add(time.Second)) {
		t.Errorf("h went at %s, want within a second after g was forgotten at %s", now, gone)
	}
	if _, held := a.p.waiting["g"]; held {
		t.Error("a restore abandoned a minute ago still waits")
	}
}

func TestHigherPrioritiesGoFirst(t *testing.T) {
	a := asker{t, newPacer(2)}
	t0 := time.Date(2024, 6, 6, 8, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	a.waits("low-1", 0, t0, ms(200))
	a.waits("db", 100, ms(10), ms(200))
	a.waits("low-2", 0, ms(20), ms(1200))
	a.waits("cache", 50, ms(30), ms(700))
	// low-1 came first but goes after the two of higher priority.
	a.waits("low-1", 0, ms(200), ms(1200))
	a.goes("db", 100, ms(200))
	a.goes("cache", 50, ms(700))
	a.goes("low-1", 0, ms(1200))
	a.goes("low-2", 0, ms(1700))
	// A priority raised while it waits counts at once.
	a.waits("x", 0, ms(1800), ms(2200))
	a.waits("y", 0, ms(1810), ms(2700))
	a.waits("y", 7, ms(1900), ms(2200))
	a.goes("y", 7, ms(2200))
	a.goes("x", 0, ms(2700))
}

func TestWithoutARateEveryRestoreGoesAtOnce(t *testing.T) {
	for _, p := range []*pacer{nil, newPacer(0)} {
		now := time.Now()
		for _, uid := range []types.UID{"a", "b", "c", "d"} {
			if s := p.admit(uid, 0, now); !s.IsZero() {
				t.Errorf("%s waits until %s", uid, s)
			}
		}
	}
}
