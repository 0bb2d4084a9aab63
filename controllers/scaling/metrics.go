package scaling

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
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
	scaledDownDesc = prometheus.NewDesc("phalanks_scaling_replicas_scaled_down",
		"Replicas held below their saved count now, by the workload's namespace and kind (kinds with a replica count).",
		[]string{"workload_namespace", "kind"}, nil)
	podSecondsDesc = prometheus.NewDesc("phalanks_scaling_pod_seconds_saved_total",
		"Replicas held below their saved count, integrated over time, by the workload's namespace and kind.",
		[]string{"workload_namespace", "kind"}, nil)
	cpuSecondsDesc = prometheus.NewDesc("phalanks_scaling_cpu_request_core_seconds_saved_total",
		"CPU requests (cores) of the pods not running, integrated over time, from the pod template at the scale-down, by the workload's namespace and kind.",
		[]string{"workload_namespace", "kind"}, nil)
	memorySecondsDesc = prometheus.NewDesc("phalanks_scaling_memory_request_byte_seconds_saved_total",
		"Memory requests (bytes) of the pods not running, integrated over time, from the pod template at the scale-down, by the workload's namespace and kind.",
		[]string{"workload_namespace", "kind"}, nil)
)

// tracked holds the last decision per workload for the gauges, the savings and for
// deduplicating events. It is process-wide, like the metrics registry.
var tracked = newTracker(clock.RealClock{})

func newTracker(c clock.PassiveClock) *tracker {
	return &tracker{entries: map[trackKey]trackEntry{}, saved: map[scope]savedTotals{}, members: map[scope]int{}, clock: c}
}

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
	// savings is what the workload saves from observed on.
	savings  savings
	observed time.Time
}

// scope is what the savings are totalled by.
type scope struct{ namespace, kind string }

// savedTotals are the savings of workloads no longer saving what they did: counters.
type savedTotals struct{ podSeconds, cpuCoreSeconds, memoryByteSeconds float64 }

// add adds what s saved from one instant to another.
func (t *savedTotals) add(s savings, from, to time.Time) {
	secs := to.Sub(from).Seconds()
	if secs <= 0 || s.replicas <= 0 {
		return
	}
	pods := float64(s.replicas) * secs
	t.podSeconds += pods
	t.cpuCoreSeconds += pods * float64(s.cpuMilli) / 1000
	t.memoryByteSeconds += pods * float64(s.memoryBytes)
}

type tracker struct {
	mu      sync.Mutex
	entries map[trackKey]trackEntry
	// kinds are reported even with no object in them, so every series exists.
	kinds []string
	// saved totals what workloads saved up to their last observation.
	saved map[scope]savedTotals
	// members counts the entries of each scope. A scope's series go with its last
	// entry (its counters start again from zero if it comes back, which rate() and
	// increase() take as a reset): namespaces come and go, and series that outlive
	// them would grow without end.
	members map[scope]int
	// clock times the savings; the scaler's clock.
	clock clock.PassiveClock
}

// setClock makes the savings follow the scaler's clock (tests move it).
func (t *tracker) setClock(c clock.PassiveClock) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clock = c
}

// settle adds what an entry saved since it was observed to its scope's totals. Called
// with t.mu held.
func (t *tracker) settle(key trackKey, e trackEntry, now time.Time) {
	if e.savings.replicas == 0 {
		return
	}
	sc := scopeOf(key)
	totals := t.saved[sc]
	totals.add(e.savings, e.observed, now)
	t.saved[sc] = totals
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
	now := t.clock.Now()
	prev, had := t.entries[key]
	if had {
		t.settle(key, prev, now)
	}
	switch {
	case d.state == stateUnmanaged && had:
		t.remove(key)
	case d.state == stateUnmanaged:
	default:
		if !had {
			t.members[scopeOf(key)]++
		}
		t.entries[key] = trackEntry{state: d.state, saved: d.saved, events: events, savings: d.savings, observed: now}
	}
	if d.state == stateInvalid && (!had || prev.state != stateInvalid || prev.events != events) {
		invalidSchedules.WithLabelValues(kind).Inc()
	}
	return events != "" && (!had || prev.events != events)
}

func (t *tracker) forget(kind string, name types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := trackKey{kind, name}
	if e, ok := t.entries[key]; ok {
		t.settle(key, e, t.clock.Now())
		t.remove(key)
	}
}

// remove drops an entry, and its scope's totals with the scope's last entry. Called
// with t.mu held.
func (t *tracker) remove(key trackKey) {
	delete(t.entries, key)
	sc := scopeOf(key)
	if t.members[sc]--; t.members[sc] <= 0 {
		delete(t.members, sc)
		delete(t.saved, sc)
	}
}

func scopeOf(key trackKey) scope { return scope{key.name.Namespace, key.kind} }

// Describe implements prometheus.Collector.
func (t *tracker) Describe(ch chan<- *prometheus.Desc) {
	ch <- workloadsDesc
	ch <- savedDesc
	ch <- scaledDownDesc
	ch <- podSecondsDesc
	ch <- cpuSecondsDesc
	ch <- memorySecondsDesc
}

// Collect implements prometheus.Collector.
func (t *tracker) Collect(ch chan<- prometheus.Metric) {
	type ks struct {
		kind  string
		state state
	}
	counts := map[ks]int{}
	saved := map[string]int64{}
	scaledDown := map[scope]int64{}
	t.mu.Lock()
	now := t.clock.Now()
	totals := maps.Clone(t.saved)
	names := slices.Clone(t.kinds)
	for k, e := range t.entries {
		counts[ks{k.kind, e.state}]++
		saved[k.kind] += int64(e.saved)
		if !slices.Contains(names, k.kind) {
			names = append(names, k.kind)
		}
		if e.savings.replicas > 0 {
			sc := scope{k.name.Namespace, k.kind}
			scaledDown[sc] += int64(e.savings.replicas)
			tot := totals[sc]
			tot.add(e.savings, e.observed, now)
			totals[sc] = tot
		}
	}
	t.mu.Unlock()
	for sc, tot := range totals {
		ch <- prometheus.MustNewConstMetric(scaledDownDesc, prometheus.GaugeValue, float64(scaledDown[sc]), sc.namespace, sc.kind)
		ch <- prometheus.MustNewConstMetric(podSecondsDesc, prometheus.CounterValue, tot.podSeconds, sc.namespace, sc.kind)
		ch <- prometheus.MustNewConstMetric(cpuSecondsDesc, prometheus.CounterValue, tot.cpuCoreSeconds, sc.namespace, sc.kind)
		ch <- prometheus.MustNewConstMetric(memorySecondsDesc, prometheus.CounterValue, tot.memoryByteSeconds, sc.namespace, sc.kind)
	}
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
