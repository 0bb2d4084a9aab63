// Package upstream pins behaviour of upstream libraries the operator relies on and that
// earlier releases got wrong: each test failed (or hung) on the release with the bug.
package upstream

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// newQueue returns the priority queue controller-runtime gives every controller.
func newQueue(name string) priorityqueue.PriorityQueue[reconcile.Request] {
	return priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) {
		o.Log = logr.Discard()
		o.RateLimiter = workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]()
	})
}

// Workers add and take items as fast as they can while the queue shuts down, as a
// controller's workers and its sources do when the manager stops: every worker must
// come back with shutdown. controller-runtime v0.24.1's queue hung here within a few
// rounds (a ready item handed to a worker that left, with the queue's lock held:
// kubernetes-sigs/controller-runtime#3538, fixed in v0.25.2); a manager then waited out
// its whole graceful-shutdown period. The operator wrapped the queue until v0.25.2.
func TestShutDownWhileWorkersAddAndGetReturnsEveryWorker(t *testing.T) {
	for round := range 200 {
		q := newQueue(fmt.Sprintf("round-%d", round))
		var workers sync.WaitGroup
		for w := range 20 {
			workers.Go(func() {
				for i := 0; ; i++ {
					priority := rand.IntN(3) //nolint:gosec // G404: a random test load, not a secret
					q.AddWithOpts(priorityqueue.AddOpts{Priority: &priority}, request(w, i))
					item, _, shutdown := q.GetWithPriority()
					if shutdown {
						return
					}
					q.Done(item)
				}
			})
		}
		time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond) //nolint:gosec // G404: as above
		q.ShutDown()
		done := make(chan struct{})
		go func() { workers.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: workers still inside the queue 10 s after its shutdown", round)
		}
		if !q.ShuttingDown() {
			t.Fatalf("round %d: the queue does not say it is shutting down", round)
		}
	}
}

// After a shutdown nothing is handed out any more.
func TestGetAfterShutDownReturnsShutdown(t *testing.T) {
	q := newQueue("after")
	q.Add(request(0, 0))
	q.ShutDown()
	if _, shutdown := q.Get(); !shutdown {
		t.Fatal("Get handed out an item after ShutDown")
	}
	if _, _, shutdown := q.GetWithPriority(); !shutdown {
		t.Fatal("GetWithPriority handed out an item after ShutDown")
	}
}

// Until the shutdown the queue hands out by priority: higher priority first.
func TestHandsOutByPriorityUntilShutDown(t *testing.T) {
	q := newQueue("priority")
	low, high := -100, 10
	q.AddWithOpts(priorityqueue.AddOpts{Priority: &low}, request(0, 1))
	q.AddWithOpts(priorityqueue.AddOpts{Priority: &high}, request(0, 2))
	time.Sleep(50 * time.Millisecond) // both in the ready set before the first Get
	first, priority, shutdown := q.GetWithPriority()
	if shutdown || first != request(0, 2) || priority != high {
		t.Fatalf("first item %v (priority %d, shutdown %t), want %v (priority %d)", first, priority, shutdown, request(0, 2), high)
	}
	q.Done(first)
	if second, _ := q.Get(); second != request(0, 1) {
		t.Fatalf("second item %v, want %v", second, request(0, 1))
	}
	q.ShutDown()
}

func request(worker, i int) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("w%d-%d", worker, i)}}
}
