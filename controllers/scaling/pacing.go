package scaling

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	restoresWaiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "phalanks_scaling_restores_waiting",
		Help: "Restores due that wait for their turn under --scaling-restore-rate.",
	})
	restoreLag = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "phalanks_scaling_restore_lag_seconds",
		Help: "How long after its scheduled time (the next-transition it recorded) a workload was restored, by kind.",
		// From the operator's own latency to a long queue under a low rate.
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600},
	}, []string{"kind"})
)

func init() {
	metrics.Registry.MustRegister(restoresWaiting, restoreLag)
}

// pacer spreads restores over time at a cluster-wide rate, so that a morning's restores
// reach the cluster (and its node autoscaler) a few at a time instead of all at once:
// one restore per interval, the waiting ones in order of priority
// (AnnotationRestorePriority, higher first) and, within a priority, in the order they
// fell due. A restore that comes while none was written for an interval waits a short
// while (gather) for the others of its moment, so that a burst is ordered as a whole.
// The zero interval lets every restore through at once. Safe for concurrent use by the
// reconcilers of every kind.
type pacer struct {
	interval time.Duration

	mu sync.Mutex
	// next is the earliest time the next restore may be written.
	next time.Time
	// waiting are the restores due that were not written yet, by object.
	waiting map[types.UID]waiter
	// arrivals numbers the restores in the order they fell due.
	arrivals uint64
}

// waiter is a restore that waits for its turn.
type waiter struct {
	priority int
	arrival  uint64
	// askAgain is when it was told to ask again.
	askAgain time.Time
}

// before reports whether w goes before o.
func (w waiter) before(o waiter) bool {
	if w.priority != o.priority {
		return w.priority > o.priority
	}
	return w.arrival < o.arrival
}

// abandoned is how long after the time it was told to ask again a restore that did not
// ask is forgotten: one whose restore was called off (its schedule changed, it was
// deleted) gives its place up then.
const abandoned = time.Minute

// gather is the longest a burst's first restore waits for the others of its moment.
const gather = 200 * time.Millisecond

func newPacer(rate float64) *pacer {
	p := &pacer{waiting: map[types.UID]waiter{}}
	if rate > 0 {
		p.interval = time.Duration(float64(time.Second) / rate)
	}
	return p
}

// admit returns the zero time when the restore of uid, of the priority, may be written
// at now; else when to ask again, which its turn will not be before.
func (p *pacer) admit(uid types.UID, priority int, now time.Time) time.Time {
	if p == nil || p.interval == 0 {
		return time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { restoresWaiting.Set(float64(len(p.waiting))) }()
	for u, w := range p.waiting {
		if now.Sub(w.askAgain) > abandoned {
			delete(p.waiting, u)
		}
	}
	w, ok := p.waiting[uid]
	if !ok {
		p.arrivals++
		w = waiter{arrival: p.arrivals}
		if !p.next.After(now) && len(p.waiting) == 0 {
			// The first of a burst, after a quiet interval: the others of its moment
			// come within the gather time and are ordered with it.
			p.next = now.Add(min(gather, p.interval))
		}
	}
	w.priority = priority
	ahead := 0
	for u, o := range p.waiting {
		if u != uid && o.before(w) {
			ahead++
		}
	}
	start := p.next
	if start.Before(now) {
		start = now
	}
	if ahead == 0 && !start.After(now) {
		delete(p.waiting, uid)
		p.next = now.Add(p.interval)
		return time.Time{}
	}
	w.askAgain = start.Add(time.Duration(ahead) * p.interval)
	p.waiting[uid] = w
	return w.askAgain
}

// release forgets the restore of uid, called off before its turn.
func (p *pacer) release(uid types.UID) {
	if p == nil || p.interval == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiting, uid)
	restoresWaiting.Set(float64(len(p.waiting)))
}
