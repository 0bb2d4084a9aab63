package scaling

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// minWakeupDelay keeps a transition that has just passed (clock skew, rounding) from
// being scheduled in the past.
const minWakeupDelay = 10 * time.Millisecond

// wakeups queues each workload again at its next transition, timed on the injected
// clock. It is a source of the controller: the controller's own queue (the priority
// queue) stays as controller-runtime makes it, and a test that moves the clock reaches
// the next transition without waiting for it. One timer serves every workload of the
// kind.
type wakeups struct {
	clock clock.WithTicker

	mu      sync.Mutex
	due     map[reconcile.Request]time.Time
	order   wakeHeap
	changed chan struct{}
}

func newWakeups(c clock.WithTicker) *wakeups {
	return &wakeups{clock: c, due: map[reconcile.Request]time.Time{}, changed: make(chan struct{}, 1)}
}

// at schedules req for t, replacing what was scheduled for it; zero t cancels.
func (w *wakeups) at(req reconcile.Request, t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.IsZero() {
		delete(w.due, req)
		return
	}
	if earliest := w.clock.Now().Add(minWakeupDelay); t.Before(earliest) {
		t = earliest
	}
	if old, ok := w.due[req]; ok && old.Equal(t) {
		return
	}
	w.due[req] = t
	// Superseded entries stay in the heap and are dropped when they come up.
	heap.Push(&w.order, wake{req: req, at: t})
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Start implements source.TypedSource: from now on due workloads go into queue.
func (w *wakeups) Start(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	go w.run(ctx, queue)
	return nil
}

func (w *wakeups) String() string { return "scheduled transitions" }

func (w *wakeups) run(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	for {
		next, ok := w.fire(queue)
		var timer clock.Timer
		var fired <-chan time.Time
		if ok {
			timer = w.clock.NewTimer(next.Sub(w.clock.Now()))
			if !w.clock.Now().Before(next) {
				// The clock reached the transition while the timer was being made: fire
				// now rather than trust a timer of no duration, which a fake clock fires
				// only at its next step.
				timer.Stop()
				continue
			}
			fired = timer.C()
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-fired:
		case <-w.changed:
			if timer != nil {
				timer.Stop()
			}
		}
	}
}

// fire queues every workload that is due and returns when the next one is.
func (w *wakeups) fire(queue workqueue.TypedRateLimitingInterface[reconcile.Request]) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	for w.order.Len() > 0 {
		top := w.order[0]
		if t, ok := w.due[top.req]; !ok || !t.Equal(top.at) {
			heap.Pop(&w.order) // superseded or cancelled
			continue
		}
		if top.at.After(now) {
			return top.at, true
		}
		heap.Pop(&w.order)
		delete(w.due, top.req)
		queue.Add(top.req)
	}
	return time.Time{}, false
}

type wake struct {
	req reconcile.Request
	at  time.Time
}

// wakeHeap orders wakes by time, earliest first.
type wakeHeap []wake

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h wakeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)        { *h = append(*h, x.(wake)) }
func (h *wakeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
