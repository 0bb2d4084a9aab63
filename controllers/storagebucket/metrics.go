package storagebucket

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/phalanks/phalanks-operator/internal/s3probe"
)

// Per-probe detail lives here, not in the StorageBucket status. Every series is served
// by the manager's metrics endpoint (controller-runtime's registry).
var (
	probeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "phalanks_storagebucket_probe_duration_seconds",
		Help:    "Wall time of one bucket probe, by depth and result (success or failure).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"depth", "result"})

	probeFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "phalanks_storagebucket_probe_failures_total",
		Help: "Failed bucket probes, by condition reason.",
	}, []string{"reason"})

	probeLateness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "phalanks_storagebucket_probe_lateness_seconds",
		Help: "How long after its due time a scheduled probe started.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, .75, 1, 1.5, 2, 3, 5, 10, 30, 60,
			120, 300},
	})

	probesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "phalanks_storagebucket_probes_total",
		Help: "Bucket probes, by what caused them: schedule (due time reached), new (never probed), spec (generation changed), inputs (Secret, CA or adopt annotation changed), resume (taken over from another replica whose last due probe may have been missed).",
	}, []string{"cause"})

	statusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "phalanks_storagebucket_status_writes_total",
		Help: "StorageBucket status writes, by cause: changed (a user-visible field changed) or heartbeat.",
	}, []string{"cause"})

	scheduledBuckets = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "phalanks_storagebucket_scheduled",
		Help: "StorageBuckets on the probe schedule.",
	})

	dispatchedBuckets = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "phalanks_storagebucket_dispatched_total",
		Help: "Due buckets the ticker sent to the controller.",
	})

	endpointDownMarks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "phalanks_storagebucket_endpoint_down_marks_total",
		Help: "Due buckets marked with the result of another bucket's probe, instead of probed, because their endpoint did not answer (its circuit breaker was open).",
	})
)

func init() {
	metrics.Registry.MustRegister(probeDuration, probeFailures, bucketSeries, probeLateness, probesTotal,
		statusWrites, scheduledBuckets, dispatchedBuckets, endpointDownMarks)
}

// The per-StorageBucket series. Their labels are not called namespace and name: a
// scrape adds the target's own namespace label (the operator's), which would rename
// ours.
var (
	bucketLabels = []string{"storagebucket_namespace", "storagebucket"}
	upDesc       = prometheus.NewDesc("phalanks_storagebucket_up",
		"1 when the last probe found the bucket Ready, 0 otherwise; removed with the StorageBucket.", bucketLabels, nil)
	// consecutive failures let an alert wait for a number of probes, whatever each
	// bucket's interval: "not Ready for N intervals" is N failures in a row.
	failuresDesc = prometheus.NewDesc("phalanks_storagebucket_consecutive_failures",
		"Probes in a row that found the bucket not Ready (0 after a healthy one); removed with the StorageBucket.", bucketLabels, nil)
)

// bucketSeries serves the per-StorageBucket series at each scrape from what the running
// reconcilers remember of their buckets (memory.series), rather than keeping a gauge
// per bucket and series between scrapes: a gauge vector's child, its label pairs and
// its map entries cost about 400 bytes per series, two series per bucket, for the whole
// life of the process; a scrape's copies are garbage once it is served. A bucket's
// series exist from its first probe until it is forgotten (deleted, re-created under
// its name, or handed over to another replica), as the gauges did.
var bucketSeries = &seriesCollector{memories: map[*memory]struct{}{}}

// seriesCollector is a prometheus.Collector over the memories of the reconcilers
// running in this process (one in the operator; more in tests).
type seriesCollector struct {
	mu       sync.Mutex
	memories map[*memory]struct{}
}

// serve makes m's buckets' series part of every scrape until ctx ends.
func (c *seriesCollector) serve(ctx context.Context, m *memory) {
	c.add(m)
	<-ctx.Done()
	c.remove(m)
}

func (c *seriesCollector) add(m *memory) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.memories[m] = struct{}{}
}

func (c *seriesCollector) remove(m *memory) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.memories, m)
}

// seriesServer serves a reconciler's series while it runs: on the leader, or on every
// replica of a ring, as the controller itself.
type seriesServer struct {
	mem        *memory
	leaderOnly bool
}

func (s seriesServer) Start(ctx context.Context) error {
	bucketSeries.serve(ctx, s.mem)
	return nil
}

func (s seriesServer) NeedLeaderElection() bool { return s.leaderOnly }

// Describe implements prometheus.Collector.
func (c *seriesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upDesc
	ch <- failuresDesc
}

// Collect implements prometheus.Collector. Each name is served once, whatever holds it
// twice (two reconcilers of one process during a handover, in tests; two objects of one
// name taken over together, neither reconciled yet): a scrape with two samples of one
// series fails whole, every metric of the process with it.
func (c *seriesCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	var all []seriesValue
	for m := range c.memories {
		all = m.series(all)
	}
	c.mu.Unlock()
	slices.SortFunc(all, func(a, b seriesValue) int {
		return cmp.Or(strings.Compare(a.key.Namespace, b.key.Namespace), strings.Compare(a.key.Name, b.key.Name))
	})
	for i, s := range all {
		if i > 0 && all[i-1].key == s.key {
			continue
		}
		up := 0.0
		if s.ready {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up, s.key.Namespace, s.key.Name)
		ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.GaugeValue, float64(s.failures), s.key.Namespace, s.key.Name)
	}
}

// The series every probe touches are looked up once, not per probe.
var (
	probesByCause = func() map[probeCause]prometheus.Counter {
		out := map[probeCause]prometheus.Counter{}
		for _, c := range []probeCause{causeResume, causeNew, causeSpec, causeInputs, causeSchedule} {
			out[c] = probesTotal.WithLabelValues(string(c))
		}
		return out
	}()
	durations = func() map[s3probe.Depth][2]prometheus.Observer {
		out := map[s3probe.Depth][2]prometheus.Observer{}
		for _, d := range []s3probe.Depth{s3probe.DepthConnect, s3probe.DepthHeadBucket, s3probe.DepthList, s3probe.DepthReadWrite} {
			out[d] = [2]prometheus.Observer{probeDuration.WithLabelValues(string(d), "success"), probeDuration.WithLabelValues(string(d), "failure")}
		}
		return out
	}()
)

// probeCounter returns the probe counter of a cause.
func probeCounter(c probeCause) prometheus.Counter {
	if counter, ok := probesByCause[c]; ok {
		return counter
	}
	return probesTotal.WithLabelValues(string(c))
}

// durationObserver returns the duration histogram of a depth and result.
func durationObserver(d s3probe.Depth, failed bool) prometheus.Observer {
	i := 0
	if failed {
		i = 1
	}
	if o, ok := durations[d]; ok {
		return o[i]
	}
	return probeDuration.WithLabelValues(string(d), [2]string{"success", "failure"}[i])
}
