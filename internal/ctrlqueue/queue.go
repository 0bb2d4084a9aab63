// Package ctrlqueue gives the operator's controllers controller-runtime's priority
// queue with a shutdown that cannot hang.
//
// In controller-runtime v0.24.1 a worker waiting for an item leaves the queue through
// its shutdown signal without telling the queue it stopped waiting. When an item
// becomes ready at that moment, the queue hands it to the worker that is gone, blocks
// there holding its lock, and the worker still finishing a reconcile blocks in Done:
// the manager then waits its whole graceful-shutdown period and fails
// (kubernetes-sigs/controller-runtime#3538, fixed in v0.25.2, which needs the
// Kubernetes v0.37 libraries). The queue here ends every wait through the normal
// hand-over first and shuts the underlying queue down only when nobody waits.
package ctrlqueue

import (
	"math"
	"strconv"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// New returns a priority queue for the named controller, configured as
// controller-runtime configures its own, with a shutdown that cannot deadlock. Use it
// as controller.Options.NewQueue through NewFunc.
func New(controllerName string, rateLimiter workqueue.TypedRateLimiter[reconcile.Request], log logr.Logger) priorityqueue.PriorityQueue[reconcile.Request] {
	return wrap(priorityqueue.New(controllerName, func(o *priorityqueue.Opts[reconcile.Request]) {
		o.Log = log.WithValues("controller", controllerName)
		o.RateLimiter = rateLimiter
	}))
}

// NewFunc returns New as a controller.Options.NewQueue.
func NewFunc(log logr.Logger) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return New(name, rl, log)
	}
}

// wrap makes the shutdown of q safe. Everything but getting and shutting down goes to q.
func wrap(q priorityqueue.PriorityQueue[reconcile.Request]) priorityqueue.PriorityQueue[reconcile.Request] {
	return &queue{PriorityQueue: q}
}

// wakeNamespace names the items a shutdown hands to waiting workers; no object lives
// in a namespace of that name (a namespace name is a DNS label).
const wakeNamespace = "\x00shutdown"

type queue struct {
	priorityqueue.PriorityQueue[reconcile.Request]

	mu       sync.Mutex
	stopping bool
	// waiting counts the workers inside the underlying GetWithPriority.
	waiting int
}

// GetWithPriority returns the next item. Once the queue is shutting down it returns
// shutdown, and the last worker to leave shuts the underlying queue down.
func (q *queue) GetWithPriority() (reconcile.Request, int, bool) {
	q.mu.Lock()
	if q.stopping {
		q.mu.Unlock()
		return reconcile.Request{}, 0, true
	}
	q.waiting++
	q.mu.Unlock()

	item, priority, shutdown := q.PriorityQueue.GetWithPriority()

	q.mu.Lock()
	q.waiting--
	stopping, last := q.stopping, q.stopping && q.waiting == 0
	q.mu.Unlock()
	if !stopping {
		return item, priority, shutdown
	}
	// A wake item, or an item nobody will work on now: release its key.
	q.Done(item)
	if last {
		q.PriorityQueue.ShutDown()
	}
	return reconcile.Request{}, 0, true
}

// Get returns the next item, as GetWithPriority.
func (q *queue) Get() (reconcile.Request, bool) {
	item, _, shutdown := q.GetWithPriority()
	return item, shutdown
}

// ShutDown stops handing out items. Workers waiting for one each get an item of their
// own, leave through the queue's normal hand-over, and the last of them shuts the
// underlying queue down; with nobody waiting it is shut down at once.
func (q *queue) ShutDown() {
	q.mu.Lock()
	if q.stopping {
		q.mu.Unlock()
		return
	}
	q.stopping = true
	waiting := q.waiting
	q.mu.Unlock()
	if waiting == 0 {
		q.PriorityQueue.ShutDown()
		return
	}
	first := math.MaxInt
	for i := range waiting {
		q.AddWithOpts(priorityqueue.AddOpts{Priority: &first}, reconcile.Request{
			NamespacedName: types.NamespacedName{Namespace: wakeNamespace, Name: strconv.Itoa(i)},
		})
	}
}

// ShutDownWithDrain is ShutDown: controller-runtime's priority queue does not drain.
func (q *queue) ShutDownWithDrain() { q.ShutDown() }

// ShuttingDown reports whether ShutDown was called.
func (q *queue) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stopping
}
