package scaling

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestTrackerCountsWorkloadsByStateAndSavedReplicas(t *testing.T) {
	tr := newTracker(clock.RealClock{})
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "team-a", Name: n} }
	tr.observe("Deployment", key("a"), decision{state: stateDown, saved: 3})
	tr.observe("Deployment", key("b"), decision{state: stateDown, saved: 2})
	tr.observe("Deployment", key("c"), decision{state: stateUp})
	tr.observe("StatefulSet", key("d"), decision{state: stateOverride, saved: 4})
	tr.observe("Deployment", key("e"), decision{state: stateUp})
	tr.observe("Deployment", key("e"), decision{state: stateUnmanaged})
	tr.forget("Deployment", key("c"))

	want := `
# HELP phalanks_scaling_replicas_saved Replicas the operator has saved in original-replicas annotations and will restore, by workload kind.
# TYPE phalanks_scaling_replicas_saved gauge
phalanks_scaling_replicas_saved{kind="Deployment"} 5
phalanks_scaling_replicas_saved{kind="StatefulSet"} 4
`
	if err := testutil.CollectAndCompare(tr, strings.NewReader(want), "phalanks_scaling_replicas_saved"); err != nil {
		t.Error(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(tr)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "phalanks_scaling_workloads" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["kind"]+"/"+labels["state"]] = m.GetGauge().GetValue()
		}
	}
	for series, want := range map[string]float64{"Deployment/down": 2, "Deployment/up": 0, "StatefulSet/override": 1, "StatefulSet/down": 0} {
		if got[series] != want {
			t.Errorf("phalanks_scaling_workloads %s = %v, want %v (all: %v)", series, got[series], want, got)
		}
	}
}

func TestTrackerReportsNewEventsOnlyOnce(t *testing.T) {
	tr := newTracker(clock.RealClock{})
	name := types.NamespacedName{Namespace: "team-a", Name: "web"}
	invalid := decision{state: stateInvalid, events: []eventSpec{{reason: ReasonInvalidSchedule, note: "hour 25"}}}
	before := testutil.ToFloat64(invalidSchedules.WithLabelValues("Deployment"))
	if !tr.observe("Deployment", name, invalid) {
		t.Error("the first invalid decision must be reported")
	}
	if tr.observe("Deployment", name, invalid) {
		t.Error("the same decision again must stay quiet")
	}
	changed := decision{state: stateInvalid, events: []eventSpec{{reason: ReasonInvalidSchedule, note: "minute 61"}}}
	if !tr.observe("Deployment", name, changed) {
		t.Error("a different problem must be reported")
	}
	if got := testutil.ToFloat64(invalidSchedules.WithLabelValues("Deployment")) - before; got != 2 {
		t.Errorf("invalid schedules counted %v times, want 2", got)
	}
}

func TestLongNotesAreCutOnACharacterBoundary(t *testing.T) {
	note := strings.Repeat("ä", 600) // 1200 bytes
	got := truncate(note, maxNote)
	if len(got) > maxNote || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Errorf("truncate gave %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
	if short := "scaled down"; truncate(short, maxNote) != short {
		t.Error("a short note must be kept as it is")
	}
}

func TestSavingsAreIntegratedOverTimeByNamespaceAndKind(t *testing.T) {
	start := time.Date(2024, 6, 5, 20, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	tr := newTracker(clk)
	web := types.NamespacedName{Namespace: "team-a", Name: "web"}
	db := types.NamespacedName{Namespace: "team-b", Name: "db"}
	down := savings{replicas: 3, cpuMilli: 250, memoryBytes: 256 << 20}
	tr.observe("Deployment", web, decision{state: stateDown, saved: 3, savings: down})
	tr.observe("StatefulSet", db, decision{state: stateDown, saved: 1, savings: savings{replicas: 1, cpuMilli: 1000}})
	clk.SetTime(start.Add(100 * time.Second))
	// A manual scale to 2 during the downtime: one replica saved from now on.
	tr.observe("Deployment", web, decision{state: stateOverride, saved: 3, savings: savings{replicas: 1, cpuMilli: 250, memoryBytes: 256 << 20}})
	clk.SetTime(start.Add(200 * time.Second))
	tr.observe("Deployment", web, decision{state: stateUp})
	// The last workload of team-b's StatefulSets goes, and their series with it.
	tr.forget("StatefulSet", db)
	clk.SetTime(start.Add(1000 * time.Second))

	want := fmt.Sprintf(`
# HELP phalanks_scaling_cpu_request_core_seconds_saved_total CPU requests (cores) of the pods not running, integrated over time, from the pod template at the scale-down, by the workload's namespace and kind.
# TYPE phalanks_scaling_cpu_request_core_seconds_saved_total counter
phalanks_scaling_cpu_request_core_seconds_saved_total{kind="Deployment",workload_namespace="team-a"} 100
# HELP phalanks_scaling_memory_request_byte_seconds_saved_total Memory requests (bytes) of the pods not running, integrated over time, from the pod template at the scale-down, by the workload's namespace and kind.
# TYPE phalanks_scaling_memory_request_byte_seconds_saved_total counter
phalanks_scaling_memory_request_byte_seconds_saved_total{kind="Deployment",workload_namespace="team-a"} %d
# HELP phalanks_scaling_pod_seconds_saved_total Replicas held below their saved count, integrated over time, by the workload's namespace and kind.
# TYPE phalanks_scaling_pod_seconds_saved_total counter
phalanks_scaling_pod_seconds_saved_total{kind="Deployment",workload_namespace="team-a"} 400
# HELP phalanks_scaling_replicas_scaled_down Replicas held below their saved count now, by the workload's namespace and kind (kinds with a replica count).
# TYPE phalanks_scaling_replicas_scaled_down gauge
phalanks_scaling_replicas_scaled_down{kind="Deployment",workload_namespace="team-a"} 0
`, 400*(256<<20))
	names := []string{"phalanks_scaling_cpu_request_core_seconds_saved_total", "phalanks_scaling_memory_request_byte_seconds_saved_total",
		"phalanks_scaling_pod_seconds_saved_total", "phalanks_scaling_replicas_scaled_down"}
	if err := testutil.CollectAndCompare(tr, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	// While a workload is down, its saving grows at every scrape.
	tr.observe("Deployment", web, decision{state: stateDown, saved: 3, savings: down})
	clk.SetTime(start.Add(1010 * time.Second))
	if got := testutil.ToFloat64(singleSeries(tr, podSecondsDesc, "team-a", "Deployment")); got != 430 {
		t.Errorf("pod-seconds 10 s into the next downtime = %v, want 430", got)
	}
}

// singleSeries collects one series of a tracker's.
func singleSeries(tr *tracker, desc *prometheus.Desc, labels ...string) prometheus.Collector {
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		all := make(chan prometheus.Metric, 1000)
		tr.Collect(all)
		close(all)
		want := prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, 0, labels...).Desc().String()
		for m := range all {
			if m.Desc().String() != want {
				continue
			}
			var pb dto.Metric
			if err := m.Write(&pb); err == nil && sameLabels(&pb, labels) {
				ch <- m
			}
		}
	})
}

func sameLabels(m *dto.Metric, values []string) bool {
	got := map[string]bool{}
	for _, l := range m.GetLabel() {
		got[l.GetValue()] = true
	}
	for _, v := range values {
		if !got[v] {
			return false
		}
	}
	return true
}

type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(f, ch) }
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

func TestAScaleDownRecordsWhenAndWhatAPodRequested(t *testing.T) {
	night := mustTime("2024-06-05T20:00:00Z")
	requests := "cpu=250m,memory=256Mi"
	in := inputs{now: night, kind: deployments.traits, grace: time.Minute,
		workload: workloadView{level: 3, created: mustTime("2024-01-01T00:00:00Z"), podRequests: requests,
			annotations: map[string]string{AnnotationUptime: "Mon-Fri 08:00-18:00 UTC"}}}
	d := decide(in)
	if d.workload == nil {
		t.Fatal("no scale-down")
	}
	a := d.workload.annotationsFor()
	if a[AnnotationScaledDownAt] != "2024-06-05T20:00:00Z" || a[AnnotationPodRequests] != "cpu=250m,memory=256Mi" {
		t.Errorf("record %v", a)
	}
	if d.savings != (savings{replicas: 3, cpuMilli: 250, memoryBytes: 256 << 20, since: night}) {
		t.Errorf("savings %+v", d.savings)
	}

	// Later, with a template that now requests more, the record of the scale-down holds.
	in.now = night.Add(time.Hour)
	in.workload.level = 1
	in.workload.podRequests = "cpu=2"
	in.workload.annotations = map[string]string{AnnotationUptime: "Mon-Fri 08:00-18:00 UTC", AnnotationDowntimeReplicas: "1",
		AnnotationOriginalReplicas: "3", AnnotationScaledDownAt: a[AnnotationScaledDownAt], AnnotationPodRequests: a[AnnotationPodRequests],
		AnnotationNextTransition: "2024-06-05T21:00:00Z"}
	d = decide(in)
	if d.workload == nil || d.workload.annotationsFor()[AnnotationPodRequests] != "cpu=250m,memory=256Mi" ||
		d.workload.annotationsFor()[AnnotationScaledDownAt] != "2024-06-05T20:00:00Z" {
		t.Errorf("the record is not kept: %+v", d.workload)
	}
	if d.savings.replicas != 2 || d.savings.cpuMilli != 250 {
		t.Errorf("savings %+v, want 2 replicas at 250m", d.savings)
	}

	// Kinds without a replica count save nothing countable.
	in.kind = cronJobs.traits
	in.workload.annotations = map[string]string{AnnotationUptime: "Mon-Fri 08:00-18:00 UTC"}
	in.workload.level = 1
	if d := decide(in); d.savings != (savings{}) || d.workload.annotationsFor()[AnnotationScaledDownAt] != "" {
		t.Errorf("a CronJob counts savings: %+v", d.savings)
	}
}
