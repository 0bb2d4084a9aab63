package workers

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// gate is a reconciler whose reconciles run until released, counting how many run at
// once.
type gate struct {
	mu       sync.Mutex
	running  int
	started  chan struct{}
	released chan struct{}
}

func newGate() *gate {
	return &gate{started: make(chan struct{}, 100), released: make(chan struct{})}
}

func (g *gate) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	g.mu.Lock()
	g.running++
	g.mu.Unlock()
	g.started <- struct{}{}
	<-g.released
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
	return reconcile.Result{}, nil
}

func (g *gate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running
}

// expectStarted waits for n more reconciles to start, then checks that no more
// start for a while.
func expectStarted(t *testing.T, g *gate, n int) {
	t.Helper()
	for range n {
		select {
		case <-g.started:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d reconciles running, want %d", g.count(), n)
		}
	}
	select {
	case <-g.started:
		t.Fatalf("more reconciles started than %d: %d running", n, g.count())
	case <-time.After(200 * time.Millisecond):
	}
}

func TestLimitChangesWhileReconcilesRun(t *testing.T) {
	l := New(2, 8)
	g := newGate()
	r := Reconciler(l, g)
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() { _, _ = r.Reconcile(ctx, reconcile.Request{}) })
	}
	expectStarted(t, g, 2)

	if got := l.Set(4); got != 4 {
		t.Fatalf("Set(4) = %d", got)
	}
	expectStarted(t, g, 2)
	if g.count() != 4 {
		t.Fatalf("%d running at a limit of 4", g.count())
	}

	// Lowered: the four running finish; the two waiting run one at a time.
	l.Set(1)
	for range 4 {
		g.released <- struct{}{}
	}
	expectStarted(t, g, 1)
	g.released <- struct{}{}
	expectStarted(t, g, 1)
	g.released <- struct{}{}
	wg.Wait()
}

func TestLimitStaysWithinTheWorkersStarted(t *testing.T) {
	if l := New(10, 64); l.Workers() != 64 || l.Set(65) != 64 || l.Set(0) != 1 {
		t.Errorf("a limit of 10 up to 64: %d workers, Set(65) = %d, Set(0) = %d", l.Workers(), l.Set(65), l.Set(0))
	}
	if l := New(128, 64); l.Workers() != 128 || l.Set(200) != 128 {
		t.Errorf("a limit of 128 at start, up to 64: %d workers, Set(200) = %d", l.Workers(), l.Set(200))
	}
}

func TestWaitingReconcileEndsWithItsContext(t *testing.T) {
	l := New(1, 8)
	g := newGate()
	r := Reconciler(l, g)
	go func() { _, _ = r.Reconcile(context.Background(), reconcile.Request{}) }()
	<-g.started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := r.Reconcile(ctx, reconcile.Request{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a reconcile waiting for its place returned %v when its context ended", err)
	}
	g.released <- struct{}{}
}

func TestWaitingReconcilesRunInTheOrderTheyCame(t *testing.T) {
	l := New(1, 8)
	g := newGate()
	r := Reconciler(l, g)
	go func() { _, _ = r.Reconcile(context.Background(), reconcile.Request{}) }()
	<-g.started
	order := make(chan string, 5)
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		wg.Go(func() {
			_, _ = Reconciler(l, reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
				order <- name
				return reconcile.Result{}, nil
			})).Reconcile(context.Background(), reconcile.Request{})
		})
		// Each waits before the next comes.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			l.mu.Lock()
			n := len(l.waiting)
			l.mu.Unlock()
			if n == int(name[0]-'a')+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never waited", name)
			}
		}
	}
	g.released <- struct{}{}
	wg.Wait()
	close(order)
	var got string
	for name := range order {
		got += name
	}
	if got != "abcde" {
		t.Errorf("the waiting reconciles ran in the order %q, want abcde", got)
	}
}
