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
	r := servedReconciler(t)
	photos := seedSeries(types.NamespacedName{Namespace: "team-a", Name: "photos"}, "uid-photos")
	r.record(photos.sb, photos.st, s3probe.Result{Start: time.Now()}, []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}, true)
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

// servedReconciler is a reconciler whose buckets' series the registry serves until
// the test ends.
func servedReconciler(t *testing.T) *Reconciler {
	r := &Reconciler{mem: newMemory(), sched: newScheduler(), refs: &refReader{}}
	bucketSeries.add(r.mem)
	t.Cleanup(func() { bucketSeries.remove(r.mem) })
	return r
}

// A StorageBucket deleted and re-created under its name: the new object's pass may
// record before the old one is forgotten. Forgetting the old one must leave the name's
// series, which are the new object's now.
func TestANamesakeKeepsItsSeriesWhenTheOldObjectIsForgotten(t *testing.T) {
	r := servedReconciler(t)
	key := types.NamespacedName{Namespace: "team-a", Name: "recreated"}
	old, namesake := seedSeries(key, "uid-old"), seedSeries(key, "uid-new")
	healthy := s3probe.Result{Start: time.Now(), Depth: s3probe.DepthHeadBucket}
	ready := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}
	r.record(old.sb, old.st, healthy, ready, true)
	r.record(namesake.sb, namesake.st, healthy, ready, true)
	r.forget("uid-old")
	for _, name := range []string{"phalanks_storagebucket_up", "phalanks_storagebucket_consecutive_failures"} {
		if got := samples(t, name, key); len(got) != 1 {
			t.Errorf("%s of %s: %v after its namesake was forgotten, want one sample", name, key, got)
		}
	}
	r.forget("uid-new")
	for _, name := range []string{"phalanks_storagebucket_up", "phalanks_storagebucket_consecutive_failures"} {
		if got := samples(t, name, key); len(got) != 0 {
			t.Errorf("%s of %s: %v after both were forgotten, want none", name, key, got)
		}
	}
}

// A pass of a StorageBucket that was deleted and created again under its name may end
// after the new object's first pass forgot it, and store its state again. The scrape
// must still serve the name once, the new object's, not fail whole for a duplicate; so
// must one with two objects of a name that no pass has named yet.
func TestALatePassOfAReplacedStorageBucketDoesNotBreakTheScrape(t *testing.T) {
	r := servedReconciler(t)
	key := types.NamespacedName{Namespace: "team-a", Name: "replaced"}
	old, namesake := seedSeries(key, "uid-old"), seedSeries(key, "uid-new")
	at := s3probe.Result{Start: time.Now()}
	r.mem.track("uid-old", key)
	if prev, replaced := r.mem.track("uid-new", key); !replaced || prev != "uid-old" {
		t.Fatalf("track = %s, %v; want uid-old replaced", prev, replaced)
	}
	r.forget("uid-old")
	r.record(namesake.sb, namesake.st, at, []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}, true)
	r.record(old.sb, old.st, at, []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse}}, true)
	if got := samples(t, "phalanks_storagebucket_up", key); len(got) != 1 || got[0] != 1 {
		t.Errorf("up = %v, want the new object's [1]", got)
	}

	untracked := types.NamespacedName{Namespace: "team-a", Name: "taken-over"}
	first, second := seedSeries(untracked, "uid-first"), seedSeries(untracked, "uid-second")
	r.record(first.sb, first.st, at, []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}, true)
	r.record(second.sb, second.st, at, []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}, true)
	if got := samples(t, "phalanks_storagebucket_up", untracked); len(got) != 1 {
		t.Errorf("up = %v with two untracked objects of one name, want one sample", got)
	}
}

// The series show the last recorded probe: up 1 and no failures when Ready, up 0 and
// the failures in a row when not; a bucket two reconcilers of one process hold (a
// handover between two in one test process) is served once, as a scrape must be.
func TestTheSeriesShowTheLastProbeAndEachBucketOnce(t *testing.T) {
	r, other := servedReconciler(t), servedReconciler(t)
	key := types.NamespacedName{Namespace: "team-b", Name: "flaky"}
	b := seedSeries(key, "uid-flaky")
	at := s3probe.Result{Start: time.Now()}
	notReady := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse}}
	r.record(b.sb, b.st, at, notReady, true)
	r.record(b.sb, b.st, at, notReady, true)
	if got := samples(t, "phalanks_storagebucket_up", key); len(got) != 1 || got[0] != 0 {
		t.Errorf("up = %v, want [0]", got)
	}
	if got := samples(t, "phalanks_storagebucket_consecutive_failures", key); len(got) != 1 || got[0] != 2 {
		t.Errorf("consecutive failures = %v, want [2]", got)
	}
	copied := seedSeries(key, "uid-flaky")
	other.record(copied.sb, copied.st, at, []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}, true)
	if got := samples(t, "phalanks_storagebucket_up", key); len(got) != 1 {
		t.Errorf("up = %v with two reconcilers holding the bucket, want one sample", got)
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

// samples returns the values of name's samples for the bucket key.
func samples(t *testing.T, name string, key types.NamespacedName) []float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
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
				out = append(out, m.GetGauge().GetValue())
			}
		}
	}
	return out
}
