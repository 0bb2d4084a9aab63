package storagebucket

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

// ticker is the Runnable that turns due times into reconcile requests. It runs on the
// elected leader only, or on every replica when the replicas share the buckets
// through a shard ring (each then schedules only its own share).
//
// It sleeps until the earliest due time on the schedule (or a kick, when something
// became due sooner), pops every bucket due by then and sends them into the channel the
// controller watches, as one event; the handler adds them to the queue with one call per
// priority. A due bucket thus crosses one heap (the schedule) and one queue, once, and
// the channel, the source's goroutines and the queue's add buffer are crossed once per
// wake-up, not once per bucket: the ticker decides when, the channel delivers.
type ticker struct {
	sched  *scheduler
	events chan<- event.TypedGenericEvent[dueBatch]
	// period is the longest the ticker sleeps without looking at the schedule.
	period time.Duration
	clock  clock.WithTicker
	// onDispatch observes how many buckets a wake-up dispatched.
	onDispatch func(n int)
	leaderOnly bool
	// gather is how long the ticker sleeps past the due time it waits for, so that the
	// buckets that come due meanwhile go in the same wake-up. Every bucket has its own
	// phase on its interval's grid, so the due times are spread: without it, each probe
	// of a steady state would wake the ticker, the channel source and the queue by
	// itself. Buckets due already (a kick, a backlog) go at once.
	gather time.Duration
	// due is the last wake-up's buckets, its array reused by the next.
	due []dueBucket
}

// dispatchGather is the ticker's gather: a probe starts at most this much later than
// its due time for it (on time is within a second).
const dispatchGather = 20 * time.Millisecond

// dueBatch is the requests of the buckets one wake-up found due, earliest first, by
// priority. Its slices belong to the event that carries them: the queue keeps them
// until it flushes its add buffer.
type dueBatch struct {
	scheduled, resumed []reconcile.Request
}

// NeedLeaderElection keeps an unsharded ticker on the elected leader.
func (t *ticker) NeedLeaderElection() bool { return t.leaderOnly }

// Start runs until ctx ends. Sends give way to shutdown, so a full channel never
// holds the manager up.
func (t *ticker) Start(ctx context.Context) error {
	timer := t.clock.NewTimer(0)
	defer timer.Stop()
	for {
		t.dispatch(ctx)
		wait := t.period
		if next, ok := t.sched.NextDue(); ok {
			if d := next.Sub(t.clock.Now()); d > 0 {
				wait = min(wait, d+t.gather)
			} else {
				wait = 0
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
		case <-t.sched.kick:
		}
	}
}

func (t *ticker) dispatch(ctx context.Context) {
	t.due = t.sched.PopDue(t.clock.Now(), t.due[:0])
	if len(t.due) == 0 {
		return
	}
	if t.onDispatch != nil {
		t.onDispatch(len(t.due))
	}
	resumed := 0
	for _, d := range t.due {
		if d.Resume {
			resumed++
		}
	}
	b := dueBatch{scheduled: make([]reconcile.Request, 0, len(t.due)-resumed)}
	if resumed > 0 {
		b.resumed = make([]reconcile.Request, 0, resumed)
	}
	for _, d := range t.due {
		req := reconcile.Request{NamespacedName: d.Key}
		if d.Resume {
			b.resumed = append(b.resumed, req)
		} else {
			b.scheduled = append(b.scheduled, req)
		}
	}
	select {
	case t.events <- event.TypedGenericEvent[dueBatch]{Object: b}:
	case <-ctx.Done():
	}
}

// schedulePriority ranks scheduled probes below every watch event (priority 0), so a
// user's edit is never stuck behind a burst of due buckets. resumePriority ranks the
// probes of buckets taken over from another replica (those whose due instant may have
// been missed during the handover) below the scheduled ones: a handover of thousands
// uses the capacity the schedule leaves, rather than making every scheduled probe late.
const (
	schedulePriority = handler.LowPriority
	resumePriority   = handler.LowPriority - 1
)

// dueHandler enqueues a wake-up's due buckets at once, at low priority, in the order
// they came due: one add per priority, whatever their number.
func dueHandler() handler.TypedEventHandler[dueBatch, reconcile.Request] {
	return handler.TypedFuncs[dueBatch, reconcile.Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[dueBatch], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
				pq.AddWithOpts(scheduleOpts, e.Object.scheduled...)
				pq.AddWithOpts(resumeOpts, e.Object.resumed...)
				return
			}
			for _, req := range e.Object.scheduled {
				q.Add(req)
			}
			for _, req := range e.Object.resumed {
				q.Add(req)
			}
		},
	}
}

// The queue options of due buckets, made once.
var (
	scheduleOpts = priorityqueue.AddOpts{Priority: new(schedulePriority)}
	resumeOpts   = priorityqueue.AddOpts{Priority: new(resumePriority)}
)

// handoverHandler enqueues the StorageBuckets of slots taken over at the scheduled
// probes' low priority: a handover of thousands must not delay a user's edit, and the
// passes it causes only put the buckets on the schedule (or due now, in turn).
func handoverHandler() handler.TypedEventHandler[*phalanksv1beta1.StorageBucket, reconcile.Request] {
	return handler.TypedFuncs[*phalanksv1beta1.StorageBucket, reconcile.Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[*phalanksv1beta1.StorageBucket], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)}
			if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
				pq.AddWithOpts(scheduleOpts, req)
				return
			}
			q.Add(req)
		},
	}
}
