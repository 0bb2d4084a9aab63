package scaling

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
)

func TestTrackerCountsWorkloadsByStateAndSavedReplicas(t *testing.T) {
	tr := &tracker{entries: map[trackKey]trackEntry{}}
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
	tr := &tracker{entries: map[trackKey]trackEntry{}}
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
