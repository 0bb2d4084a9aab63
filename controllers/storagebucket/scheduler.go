package storagebucket

import (
	"container/heap"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/phalanks/phalanks-operator/internal/sharding"
)

// scheduler is the single source of "when is this bucket probed next": a min-heap of
// due times keyed by StorageBucket UID. The ticker pops what is due and feeds it to the
// controller; the reconciler sets the next due time after each probe. A StorageBucket
// re-created under the same name has a new UID and is not on the schedule of its
// predecessor.
//
// An item is either armed (in the heap, waiting for its due time) or dispatched (popped
// by the ticker, on its way through the channel and the queue). Every reconcile of a
// live bucket ends by arming it again, so a dispatched item whose event was merged with
// another one in the queue is never lost.
type scheduler struct {
	mu    sync.Mutex
	items map[types.UID]*schedItem
	// byKey names the scheduled UIDs of each name (a StorageBucket and, for a moment,
	// its predecessor of the same name).
	byKey map[types.NamespacedName][]types.UID
	heap  dueHeap
	// kick wakes the ticker before its next tick, when something became due now.
	kick chan struct{}
}

type schedItem struct {
	bucketRef
	due   time.Time
	index int // position in the heap; -1 while dispatched
	// resume marks a bucket taken over from another replica and due now because its
	// last due instant may have been missed meanwhile.
	resume bool
}

// dueBucket is what the ticker sends through the channel: a bucket and when it is due.
type dueBucket struct {
	bucketRef
	Due time.Time
	// Resume marks a bucket due because it was taken over (see scheduler.Resume).
	Resume bool
}

func newScheduler() *scheduler {
	return &scheduler{items: map[types.UID]*schedItem{}, byKey: map[types.NamespacedName][]types.UID{}, kick: make(chan struct{}, 1)}
}

// Due returns the bucket's due time, and false when the bucket is not scheduled.
func (s *scheduler) Due(uid types.UID) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[uid]
	if !ok {
		return time.Time{}, false
	}
	return it.due, true
}

// Schedule sets the bucket's due time and arms it.
func (s *scheduler) Schedule(b bucketRef, due time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(b, due)
}

// Arm puts a dispatched bucket back in the heap with its current due time. It does
// nothing for an armed or unscheduled bucket.
func (s *scheduler) Arm(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it, ok := s.items[uid]; ok && it.index < 0 {
		heap.Push(&s.heap, it)
	}
}

// TriggerNow makes the buckets due now (scheduling those that were not) and wakes the
// ticker, so they are probed at once through the same channel as every other probe.
func (s *scheduler) TriggerNow(now time.Time, buckets ...bucketRef) {
	if len(buckets) == 0 {
		return
	}
	s.mu.Lock()
	for _, b := range buckets {
		s.setLocked(b, now)
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Resume makes a bucket taken over from another replica due now: it is probed in turn
// with every other due bucket (earliest due first), not ahead of them.
func (s *scheduler) Resume(b bucketRef, now time.Time) {
	s.mu.Lock()
	s.setLocked(b, now).resume = true
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Resuming reports whether the bucket is due because of Resume.
func (s *scheduler) Resuming(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[uid]
	return ok && it.resume
}

func (s *scheduler) setLocked(b bucketRef, due time.Time) *schedItem {
	it, ok := s.items[b.UID]
	if !ok {
		it = &schedItem{bucketRef: b, index: -1}
		s.items[b.UID] = it
		s.byKey[b.Key] = append(s.byKey[b.Key], b.UID)
	}
	it.due, it.resume = due, false
	if it.index < 0 {
		heap.Push(&s.heap, it)
	} else {
		heap.Fix(&s.heap, it.index)
	}
	return it
}

// Forget drops the bucket from the schedule.
func (s *scheduler) Forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it, ok := s.items[uid]; ok {
		if it.index >= 0 {
			heap.Remove(&s.heap, it.index)
		}
		delete(s.items, uid)
		uids := s.byKey[it.Key]
		for i, u := range uids {
			if u == uid {
				uids = append(uids[:i], uids[i+1:]...)
				break
			}
		}
		if len(uids) == 0 {
			delete(s.byKey, it.Key)
		} else {
			s.byKey[it.Key] = uids
		}
	}
}

// UIDsIn returns the scheduled buckets whose slot is in slots.
func (s *scheduler) UIDsIn(slots sharding.Set) []types.UID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []types.UID
	for uid := range s.items {
		if slots.Has(sharding.SlotOf(uid)) {
			out = append(out, uid)
		}
	}
	return out
}

// UIDsOf returns the scheduled buckets named key (a StorageBucket and, for a moment,
// its predecessor of the same name).
func (s *scheduler) UIDsOf(key types.NamespacedName) []types.UID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]types.UID(nil), s.byKey[key]...)
}

// NextDue returns the earliest due time of an armed bucket, and false when none is.
func (s *scheduler) NextDue() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.heap) == 0 {
		return time.Time{}, false
	}
	return s.heap[0].due, true
}

// PopDue dispatches every armed bucket due at or before until, earliest first,
// appending them to out (which the ticker reuses from one wake-up to the next).
func (s *scheduler) PopDue(until time.Time, out []dueBucket) []dueBucket {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.heap) > 0 && !s.heap[0].due.After(until) {
		it := heap.Pop(&s.heap).(*schedItem)
		out = append(out, dueBucket{bucketRef: it.bucketRef, Due: it.due, Resume: it.resume})
	}
	return out
}

// Len returns how many buckets are scheduled.
func (s *scheduler) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// dueHeap orders schedule items by due time.
type dueHeap []*schedItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *dueHeap) Push(x any) {
	it := x.(*schedItem)
	it.index = len(*h)
	*h = append(*h, it)
}

func (h *dueHeap) Pop() any {
	old := *h
	n := len(old)
	it := old[n-1]
	old[n-1] = nil
	it.index = -1
	*h = old[:n-1]
	return it
}

// minInterval guards the grid arithmetic against an interval the schema would reject.
const minInterval = time.Second

// nextDue returns the first instant after now on the bucket's probe grid: the instants
// phase + k·interval, where the phase is a hash of the bucket's UID. Buckets with the
// same interval are thus spread evenly over it, stay spread after a restart or a
// failover (the grid does not depend on when the operator started), and a late probe
// does not push the following ones later.
func nextDue(uid types.UID, interval time.Duration, now time.Time) time.Time {
	interval = max(interval, minInterval)
	phase := int64(sharding.FNV64a(string(uid)) % uint64(interval)) //nolint:gosec // G115: the remainder is below interval, an int64

	n := now.UnixNano() - phase
	k := n / int64(interval)
	if n < 0 && n%int64(interval) != 0 {
		k-- // floor division for instants before the phase
	}
	return time.Unix(0, phase+(k+1)*int64(interval))
}
