package storagebucket

import (
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"
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
