package scaling

import (
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	scaleActions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "phalanks_scaling_actions_total",
		Help: "Scale actions decided by scheduled scaling, by workload kind and action; dry_run marks those not written.",
	}, []string{"kind", "action", "dry_run"})
	invalidSchedules = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "phalanks_scaling_invalid_schedules_total",
		Help: "Times a workload's scheduling annotations (or its namespace's) were found invalid, by workload kind.",
	}, []string{"kind"})
	workloadsDesc = prometheus.NewDesc("phalanks_scaling_workloads",
		"Objects under scheduled scaling, by kind and state (up, down, override, grace, excluded, owned, delegated, blocked, invalid).",
		[]string{"kind", "state"}, nil)
	savedDesc = prometheus.NewDesc("phalanks_scaling_replicas_saved",
		"Replicas the operator has saved in original-replicas annotations and will restore, by workload kind.",
		[]string{"kind"}, nil)
)

// tracked holds the last decision per workload for the gauges and for deduplicating
// events. It is process-wide, like the metrics registry.
var tracked = &tracker{entries: map[trackKey]trackEntry{}}

func init() {
	metrics.Registry.MustRegister(scaleActions, invalidSchedules, tracked)
}

type trackKey struct {
	kind string
	name types.NamespacedName
}

type trackEntry struct {
	state state
	saved int32
	// events is the last set of events emitted, so a reconcile that reaches the same
	// conclusion again stays quiet.
	events string
}

type tracker struct {
	mu      sync.Mutex
	entries map[trackKey]trackEntry
	// kinds are reported even with no object in them, so every series exists.
	kinds []string
}

// registerKind makes the gauges report a kind from now on.
func registerKind(name string) {
	tracked.mu.Lock()
	defer tracked.mu.Unlock()
	if !slices.Contains(tracked.kinds, name) {
		tracked.kinds = append(tracked.kinds, name)
	}
}

// observe records a decision and reports whether its events differ from the last ones
// emitted for the workload.
func (t *tracker) observe(kind string, name types.NamespacedName, d decision) (newEvents bool) {
	key := trackKey{kind, name}
	var events string
	for _, e := range d.events {
		events += e.reason + "\x00" + e.note + "\x00"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, had := t.entries[key]
	if d.state == stateUnmanaged {
		delete(t.entries, key)
	} else {
		t.entries[key] = trackEntry{state: d.state, saved: d.saved, events: events}
	}
	if d.state == stateInvalid && (!had || prev.state != stateInvalid || prev.events != events) {
		invalidSchedules.WithLabelValues(kind).Inc()
	}
	return events != "" && (!had || prev.events != events)
}

func (t *tracker) forget(kind string, name types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.entries, trackKey{kind, name})
}

// Describe implements prometheus.Collector.
func (t *tracker) Describe(ch chan<- *prometheus.Desc) {
	ch <- workloadsDesc
	ch <- savedDesc
}

// Collect implements prometheus.Collector.
func (t *tracker) Collect(ch chan<- prometheus.Metric) {
	type ks struct {
		kind  string
		state state
	}
	counts := map[ks]int{}
	saved := map[string]int64{}
	t.mu.Lock()
	names := slices.Clone(t.kinds)
	for k, e := range t.entries {
		counts[ks{k.kind, e.state}]++
		saved[k.kind] += int64(e.saved)
		if !slices.Contains(names, k.kind) {
			names = append(names, k.kind)
		}
	}
	t.mu.Unlock()
	slices.Sort(names)
	for _, name := range names {
		for _, s := range states {
			ch <- prometheus.MustNewConstMetric(workloadsDesc, prometheus.GaugeValue, float64(counts[ks{name, s}]), name, string(s))
		}
		ch <- prometheus.MustNewConstMetric(savedDesc, prometheus.GaugeValue, float64(saved[name]), name)
	}
}

func countActions(kind string, actions []string, dryRun bool) {
	for _, a := range actions {
		scaleActions.WithLabelValues(kind, a, strconv.FormatBool(dryRun)).Inc()
	}
}
