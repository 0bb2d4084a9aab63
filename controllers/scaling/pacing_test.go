package scaling

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestThePacerGivesOneSlotPerIntervalInTheOrderRestoresFallDue(t *testing.T) {
	p := newPacer(2) // one every 500 ms
	t0 := time.Date(2024, 6, 6, 8, 0, 0, 0, time.UTC)
	if s := p.admit("a", t0); !s.IsZero() {
		t.Fatalf("the first restore waits until %s", s)
	}
	b, c := p.admit("b", t0), p.admit("c", t0)
	if !b.Equal(t0.Add(500*time.Millisecond)) || !c.Equal(t0.Add(time.Second)) {
		t.Fatalf("slots %s and %s, want 500 ms and 1 s after the first", b, c)
	}
	// Asking again before its slot keeps the slot: no one overtakes.
	if s := p.admit("c", t0.Add(600*time.Millisecond)); !s.Equal(c) {
		t.Errorf("c asked again before its turn and got %s, want %s", s, c)
	}
	if s := p.admit("b", b); !s.IsZero() {
		t.Errorf("b at its slot waits until %s", s)
	}
	// A restore that falls due later queues behind c.
	if s := p.admit("d", t0.Add(600*time.Millisecond)); !s.Equal(t0.Add(1500 * time.Millisecond)) {
		t.Errorf("d got %s, want behind c", s)
	}
	// Called off: c's hold goes; after a quiet while a restore goes at once.
	p.release("c")
	if _, held := p.slots["c"]; held {
		t.Error("a released slot is still held")
	}
	if s := p.admit("e", t0.Add(time.Hour)); !s.IsZero() {
		t.Errorf("after an idle hour a restore waits until %s", s)
	}
	// d never came back for its slot: it was dropped after a minute.
	if _, held := p.slots[types.UID("d")]; held {
		t.Error("a slot abandoned an hour ago is still held")
	}
}

func TestWithoutARateEveryRestoreGoesAtOnce(t *testing.T) {
	for _, p := range []*pacer{nil, newPacer(0)} {
		now := time.Now()
		for _, uid := range []types.UID{"a", "b", "c", "d"} {
			if s := p.admit(uid, now); !s.IsZero() {
				t.Errorf("%s waits until %s", uid, s)
			}
		}
	}
}
