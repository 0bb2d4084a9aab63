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

// pacer spreads restores over time at a cluster-wide rate: each restore takes the next
// free slot, one per interval, in the order they fall due, so that a morning's restores
// reach the cluster (and its node autoscaler) a few at a time instead of all at once.
// A slot is held for its object until the object is restored or the slot has long
// passed. The zero interval lets every restore through at once. Safe for concurrent use
// by the reconcilers of every kind.
type pacer struct {
	interval time.Duration

	mu sync.Mutex
	// next is the first free slot.
	next time.Time
	// slots are the slots given and not yet used, by object.
	slots map[types.UID]time.Time
}

// abandoned is how long after its slot a slot that was not used is kept: an object
// whose restore was called off (its schedule changed, it was deleted) frees it then.
const abandoned = time.Minute

func newPacer(rate float64) *pacer {
	p := &pacer{slots: map[types.UID]time.Time{}}
	if rate > 0 {
		p.interval = time.Duration(float64(time.Second) / rate)
	}
	return p
}

// admit returns the zero time when the restore of uid may be written at now, else the
// time of the slot it was given, when it may be.
func (p *pacer) admit(uid types.UID, now time.Time) time.Time {
	if p == nil || p.interval == 0 {
		return time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { restoresWaiting.Set(float64(len(p.slots))) }()
	for u, s := range p.slots {
		if now.Sub(s) > abandoned {
			delete(p.slots, u)
		}
	}
	if s, ok := p.slots[uid]; ok {
		if now.Before(s) {
			return s
		}
		delete(p.slots, uid)
		return time.Time{}
	}
	slot := p.next
	if slot.Before(now) {
		slot = now
	}
	p.next = slot.Add(p.interval)
	if !slot.After(now) {
		return time.Time{}
	}
	p.slots[uid] = slot
	return slot
}

// release gives back the slot of uid, whose restore was called off before its turn.
func (p *pacer) release(uid types.UID) {
	if p == nil || p.interval == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.slots, uid)
	restoresWaiting.Set(float64(len(p.slots)))
}
