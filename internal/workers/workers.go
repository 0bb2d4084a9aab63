// Package workers lets a controller's concurrency change while it runs.
// controller-runtime starts a controller's workers once (MaxConcurrentReconciles); a
// Limit admits at most its current number of them into the reconciler at a time, and
// Set changes that number: a lower one lets the reconciles already running finish and
// holds the next ones back, a higher one lets the waiting ones in at once.
package workers

import (
	"context"
	"slices"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Limit bounds how many reconciles run at once. Those waiting for a place get it in the
// order they came, so the queue's order (FIFO, or controller-runtime's priorities) is
// the order they run in.
type Limit struct {
	mu      sync.Mutex
	limit   int
	workers int
	running int
	// waiting are the reconciles waiting for a place, first come first; a place is
	// given by closing the channel.
	waiting []chan struct{}
}

// New returns a Limit of n (at least 1) for a controller that starts Workers workers:
// upTo, or n if that is higher. The limit can rise while the controller runs up to the
// workers started, and beyond them at the next start. An idle worker is a goroutine
// waiting on the queue, about 3 KiB.
func New(n, upTo int) *Limit {
	n = max(n, 1)
	return &Limit{limit: n, workers: max(n, upTo)}
}

// Workers is the MaxConcurrentReconciles of the controller the Limit is for.
func (l *Limit) Workers() int { return l.workers }

// Set changes the limit (at least 1); it returns the limit in force, which is at most
// the workers started.
func (l *Limit) Set(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.limit = min(max(n, 1), l.workers)
	l.admit()
	return l.limit
}

// admit gives the free places to the first waiting reconciles.
func (l *Limit) admit() {
	for l.running < l.limit && len(l.waiting) > 0 {
		close(l.waiting[0])
		l.waiting = l.waiting[1:]
		l.running++
	}
}

// acquire waits for a place under the limit, or for ctx to end.
func (l *Limit) acquire(ctx context.Context) error {
	l.mu.Lock()
	if l.running < l.limit && len(l.waiting) == 0 {
		l.running++
		l.mu.Unlock()
		return nil
	}
	place := make(chan struct{})
	l.waiting = append(l.waiting, place)
	l.mu.Unlock()
	select {
	case <-place:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if i := slices.Index(l.waiting, place); i >= 0 {
			l.waiting = slices.Delete(l.waiting, i, i+1)
			return ctx.Err()
		}
		// Given a place as the context ended: hand it on.
		l.running--
		l.admit()
		return ctx.Err()
	}
}

func (l *Limit) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running--
	l.admit()
}

// Reconciler runs r under the limit. A reconcile that waits for its place holds its
// request, as a busy worker does: nobody else reconciles it meanwhile.
func Reconciler[T comparable](l *Limit, r reconcile.TypedReconciler[T]) reconcile.TypedReconciler[T] {
	return reconcile.TypedFunc[T](func(ctx context.Context, req T) (reconcile.Result, error) {
		if err := l.acquire(ctx); err != nil {
			return reconcile.Result{}, err
		}
		defer l.release()
		return r.Reconcile(ctx, req)
	})
}
