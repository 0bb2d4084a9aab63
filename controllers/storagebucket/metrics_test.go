package storagebucket

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/s3probe"
)

// TestMetricLabelsSurviveAScrape: Prometheus attaches the target's labels (the
// operator's namespace, pod, service, ...) to every sample it scrapes, and renames a
// sample's own label of the same name to exported_<name>. No StorageBucket metric may
// use one of those names.
func TestMetricLabelsSurviveAScrape(t *testing.T) {
	bucketUp.WithLabelValues("team-a", "photos").Set(1)
	defer bucketUp.DeleteLabelValues("team-a", "photos")
	consecutiveFailures.WithLabelValues("team-a", "photos").Set(0)
	defer consecutiveFailures.DeleteLabelValues("team-a", "photos")
	probeDuration.WithLabelValues("HeadBucket", "success").Observe(0)
	probeFailures.WithLabelValues("Timeout").Add(0)
	probesTotal.WithLabelValues("schedule").Add(0)
	statusWrites.WithLabelValues("changed").Add(0)
	targetLabels := map[string]bool{"job": true, "instance": true, "namespace": true, "service": true, "pod": true,
		"container": true, "endpoint": true}
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "phalanks_storagebucket_") {
			continue
		}
		seen++
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if targetLabels[l.GetName()] {
					t.Errorf("%s has a label %q, which a scrape renames", f.GetName(), l.GetName())
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no StorageBucket metrics registered")
	}
}

// A StorageBucket deleted and re-created under its name: the new object's pass may
// record before the old one is forgotten, and forgetting the old one deletes the
// name's series. The new object's next pass must export its series again, although
// its state bound them once (they are looked up once, not per probe).
func TestANamesakeKeepsItsSeriesWhenTheOldObjectIsForgotten(t *testing.T) {
	r := &Reconciler{mem: newMemory(), sched: newScheduler(), refs: &refReader{}}
	key := types.NamespacedName{Namespace: "team-a", Name: "recreated"}
	old, namesake := seedSeries(key, "uid-old"), seedSeries(key, "uid-new")
	healthy := s3probe.Result{Start: time.Now(), Depth: s3probe.DepthHeadBucket}
	ready := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}
	r.record(old.sb, old.st, healthy, ready, true)
	r.record(namesake.sb, namesake.st, healthy, ready, true)
	r.forget("uid-old")
	r.record(namesake.sb, namesake.st, healthy, ready, true)
	defer bucketUp.DeleteLabelValues(key.Namespace, key.Name)
	defer consecutiveFailures.DeleteLabelValues(key.Namespace, key.Name)
	for _, name := range []string{"phalanks_storagebucket_up", "phalanks_storagebucket_consecutive_failures"} {
		if !exported(t, name, key) {
			t.Errorf("%s of %s is not exported after its namesake was forgotten", name, key)
		}
	}
}

type seeded struct {
	sb *phalanksv1beta1.StorageBucket
	st *bucketState
}

func seedSeries(key types.NamespacedName, uid types.UID) seeded {
	sb := &phalanksv1beta1.StorageBucket{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: uid}}
	return seeded{sb: sb, st: &bucketState{key: key}}
}

func exported(t *testing.T, name string, key types.NamespacedName) bool {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["storagebucket_namespace"] == key.Namespace && labels["storagebucket"] == key.Name {
				return true
			}
		}
	}
	return false
}
