package sharding_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/measure"
)

// BenchmarkShardingHandover measures what a change of the ring costs the buckets: one
// replica probes every StorageBucket, a second one joins (1→2), then the first one
// stops with SIGTERM (2→1). For each handover it reports how long it took until every
// slot had its new owner, the longest time a bucket went unprobed (seen at the S3
// stub, which counts every HeadBucket) and the lateness of the probes in the two
// intervals after the change.
//
//	make bench BENCH=ShardingHandover
//
// PHALANKS_BENCH_HANDOVER_BUCKETS (default 50000), PHALANKS_BENCH_HANDOVER_CONCURRENCY
// (default 64: one replica can carry every bucket, so what is measured is the handover
// and not a lack of capacity), PHALANKS_BENCH_SHARDING_LATENCY (default 20ms),
// PHALANKS_BENCH_HANDOVER_MODE (client or server) and PHALANKS_BENCH_MANAGER_BIN (a
// manager binary to measure instead of the one built from this tree) change it.
func BenchmarkShardingHandover(b *testing.B) {
	for range b.N {
		buckets := envInt(b, "PHALANKS_BENCH_HANDOVER_BUCKETS", 50000)
		workers := envInt(b, "PHALANKS_BENCH_HANDOVER_CONCURRENCY", 64)
		latency, err := time.ParseDuration(envString("PHALANKS_BENCH_SHARDING_LATENCY", "20ms"))
		must(b, err)
		serverSide := envString("PHALANKS_BENCH_HANDOVER_MODE", "client") == "server"
		bin := os.Getenv("PHALANKS_BENCH_MANAGER_BIN")
		if bin == "" {
			bin = buildManager(b)
		}

		scheme := runtime.NewScheme()
		utilruntime.Must(clientgoscheme.AddToScheme(scheme))
		utilruntime.Must(phalanksv1beta1.AddToScheme(scheme))
		env, err := envtest.Start(envtest.Options{Scheme: scheme, APIServerArgs: map[string][]string{
			"feature-gates":         {fmt.Sprintf("ShardedListAndWatch=%t", serverSide)},
			"max-requests-inflight": {"2000"}, "max-mutating-requests-inflight": {"1000"},
		}})
		must(b, err)
		b.Cleanup(func() { _ = env.Stop() })
		stub := startS3Stub(b, latency)
		kubeconfig := adminKubeconfig(b, env)
		createBuckets(context.Background(), b, env.Client, stub.url, buckets)

		a := startManagerWith(b, bin, kubeconfig, "replica-a", workers)
		waitFor(b, "one replica to probe every bucket", 15*time.Minute, func() bool {
			return stub.distinct() >= buckets
		})
		progress("one replica probes all %d buckets; one interval of steady state", buckets)
		time.Sleep(interval)

		var rows []handoverRow
		progress("1→2: a second replica joins")
		second := &manager{}
		rows = append(rows, measureHandover(b, stub, "1→2 (a replica joins)", "join", func() []*manager {
			second = startManagerWith(b, bin, kubeconfig, "replica-b", workers)
			return []*manager{a, second}
		}, []*manager{a}))
		progress("2→1: the first replica stops (SIGTERM)")
		rows = append(rows, measureHandover(b, stub, "2→1 (a replica stops)", "leave", func() []*manager {
			_ = a.proc.Stop(30 * time.Second)
			return []*manager{second}
		}, []*manager{a, second}))

		var out strings.Builder
		l1, l5 := loadAverage()
		fmt.Fprintf(&out, "\n%d StorageBuckets (%s list path), HeadBucket every %s, S3 latency %s, --storagebucket-concurrency=%d, load average %.2f, %.2f\n\n",
			buckets, modeName(serverSide), interval, latency, workers, l1, l5)
		out.WriteString("| handover | every slot owned after | longest time a bucket went unprobed | probes on time (≤ 1 s) | p99 lateness ≤ | max lateness ≤ |\n")
		out.WriteString("|---|---:|---:|---:|---:|---:|\n")
		for _, r := range rows {
			fmt.Fprintf(&out, "| %s | %s | %s | %.2f %% | %s | %s |\n", r.name, r.settled.Round(100*time.Millisecond),
				r.longestGap.Round(100*time.Millisecond), r.onTime, lateText(r.p99), lateText(r.max))
			b.ReportMetric(r.longestGap.Seconds(), r.metric+"_longest_gap_s")
			b.ReportMetric(r.onTime, r.metric+"_ontime_%")
		}
		fmt.Print(out.String())
	}
}

// handoverRow is what one handover cost.
type handoverRow struct {
	name, metric     string
	settled          time.Duration
	longestGap       time.Duration
	onTime, p99, max float64
}

// measureHandover makes a change (change returns the managers that run afterwards) and
// measures the two intervals that follow it.
func measureHandover(b *testing.B, stub *s3Stub, name, metric string, change func() []*manager, before []*manager) handoverRow {
	lateBefore := measure.Histogram{}
	for _, m := range before {
		lateBefore = sumHistograms(lateBefore, m.scrape(b).Histogram("phalanks_storagebucket_probe_lateness_seconds"))
	}
	stub.startWindow()
	start := time.Now()
	after := change()
	row := handoverRow{name: name, metric: metric}
	waitFor(b, "every slot to have its owner", 5*time.Minute, func() bool {
		slots, owners := 0.0, 0
		for _, m := range after {
			if s := m.scrape(b).Sum("phalanks_storagebucket_shard_slots", nil); s > 0 {
				slots += s
				owners++
			}
		}
		return slots == 64 && owners == len(after)
	})
	row.settled = time.Since(start)
	time.Sleep(max(0, 2*interval-time.Since(start)))
	row.longestGap = stub.longestGap()
	lateAfter := measure.Histogram{}
	for _, m := range after {
		lateAfter = sumHistograms(lateAfter, m.scrape(b).Histogram("phalanks_storagebucket_probe_lateness_seconds"))
	}
	// A stopped replica's counts are gone; what it counted before the change is not
	// part of the window.
	late := lateAfter
	if len(after) >= len(before) {
		late = lateAfter.Since(lateBefore)
	}
	row.onTime = 100 * late.AtMost(onTime.Seconds()) / late.Count
	row.p99 = late.Quantile(0.99)
	row.max = late.Quantile(1)
	return row
}

// sumHistograms adds two scrapes of the same histogram (one per replica).
func sumHistograms(a, b measure.Histogram) measure.Histogram {
	if len(a.Bounds) == 0 {
		return b
	}
	out := measure.Histogram{Bounds: a.Bounds, Count: a.Count + b.Count, Counts: make([]float64, len(a.Counts))}
	for i := range a.Counts {
		out.Counts[i] = a.Counts[i] + b.Counts[i]
	}
	return out
}

// probeGaps tracks, per bucket, when the stub last saw a request for it, and the
// longest time between two requests for one bucket that ended inside the window.
type probeGaps struct {
	mu          sync.Mutex
	last        map[string]time.Time
	windowStart time.Time
	longest     time.Duration
}

func (g *probeGaps) saw(bucket string, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last == nil {
		g.last = map[string]time.Time{}
	}
	if prev, ok := g.last[bucket]; ok && !g.windowStart.IsZero() && at.After(g.windowStart) {
		g.longest = max(g.longest, at.Sub(prev))
	}
	g.last[bucket] = at
}

func (s *s3Stub) distinct() int {
	s.gaps.mu.Lock()
	defer s.gaps.mu.Unlock()
	return len(s.gaps.last)
}

func (s *s3Stub) startWindow() {
	s.gaps.mu.Lock()
	defer s.gaps.mu.Unlock()
	s.gaps.windowStart, s.gaps.longest = time.Now(), 0
}

// longestGap returns the longest gap that ended in the window, counting buckets not
// probed since as unprobed until now.
func (s *s3Stub) longestGap() time.Duration {
	s.gaps.mu.Lock()
	defer s.gaps.mu.Unlock()
	longest := s.gaps.longest
	now := time.Now()
	for _, at := range s.gaps.last {
		longest = max(longest, now.Sub(at))
	}
	return longest
}
