package storagebucket

import (
	"sync/atomic"

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

	// The StorageBucket's labels are not called namespace and name: a scrape adds the
	// target's own namespace label (the operator's), which would rename ours.
	bucketUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "phalanks_storagebucket_up",
		Help: "1 when the last probe found the bucket Ready, 0 otherwise; removed with the StorageBucket.",
	}, []string{"storagebucket_namespace", "storagebucket"})

	// consecutiveFailures lets an alert wait for a number of probes, whatever each
	// bucket's interval: "not Ready for N intervals" is N failures in a row.
	consecutiveFailures = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "phalanks_storagebucket_consecutive_failures",
		Help: "Probes in a row that found the bucket not Ready (0 after a healthy one); removed with the StorageBucket.",
	}, []string{"storagebucket_namespace", "storagebucket"})

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
	metrics.Registry.MustRegister(probeDuration, probeFailures, bucketUp, consecutiveFailures, probeLateness, probesTotal,
		statusWrites, scheduledBuckets, dispatchedBuckets, endpointDownMarks)
}

// The series every probe touches are looked up once, not per probe.
var (
	// seriesDeletions counts deletions of per-StorageBucket series: a state's bound
	// series are looked up again after one.
	seriesDeletions atomic.Uint64

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
