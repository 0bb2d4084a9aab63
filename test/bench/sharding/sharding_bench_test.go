// Package sharding_test benchmarks StorageBucket probing shared by 1, 2 and 4 replicas
// (manager processes with --leader-elect) against a real API server, with and without
// the API server's ShardedListAndWatch, and a minimal S3 server that answers each
// HeadBucket after a fixed latency, so probes take as long as they would against a
// remote endpoint and the S3 side is never the bottleneck.
//
//	make bench BENCH=Sharding
//
// PHALANKS_BENCH_SHARDING_BUCKETS (default 20000), PHALANKS_BENCH_SHARDING_REPLICAS
// (default 1,2,4), PHALANKS_BENCH_SHARDING_MODES (default server,client) and
// PHALANKS_BENCH_SHARDING_LATENCY (default 20ms) change the scenario.
package sharding_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/measure"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const (
	interval    = 30 * time.Second
	window      = 2 * interval // measured per replica count
	concurrency = 32
	onTime      = time.Second // a probe is on time when it starts at most this long after its due time
	namespace   = "bench"
	leaseNS     = "phalanks-system"
)

func BenchmarkSharding(b *testing.B) {
	for range b.N {
		buckets := envInt(b, "PHALANKS_BENCH_SHARDING_BUCKETS", 20000)
		latency := 20 * time.Millisecond
		if v := os.Getenv("PHALANKS_BENCH_SHARDING_LATENCY"); v != "" {
			var err error
			latency, err = time.ParseDuration(v)
			must(b, err)
		}
		replicas := []int{1, 2, 4}
		if v := os.Getenv("PHALANKS_BENCH_SHARDING_REPLICAS"); v != "" {
			replicas = nil
			for _, f := range strings.Split(v, ",") {
				n, err := strconv.Atoi(f)
				must(b, err)
				replicas = append(replicas, n)
			}
		}
		modes := strings.Split(envString("PHALANKS_BENCH_SHARDING_MODES", "server,client"), ",")
		// PHALANKS_BENCH_MANAGER_BIN measures a manager built elsewhere (an older
		// commit, for a before/after comparison in one session).
		bin := os.Getenv("PHALANKS_BENCH_MANAGER_BIN")
		if bin == "" {
			bin = buildManager(b)
		}
		var rows []row
		for _, mode := range modes {
			rows = append(rows, runMode(b, bin, mode == "server", buckets, latency, replicas)...)
		}
		report(b, buckets, latency, rows)
	}
}

// row is one replica count's result in one mode.
type row struct {
	serverSide          bool
	replicas            int
	perReplica          []replicaResult
	writesPerProbe      float64
	load1, load5        float64
	demand, probesTotal float64
}

type replicaResult struct {
	slots         float64
	probesPerSec  float64
	onTimePercent float64
	p99Late       float64 // seconds (upper bound of the bucket)
	rssMiB        float64
	liveHeapMiB   float64 // Go heap right after a collection
	cpuCores      float64
	cached        float64
}

func runMode(b *testing.B, bin string, serverSide bool, buckets int, latency time.Duration, replicas []int) []row {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(phalanksv1beta1.AddToScheme(scheme))
	progress("%s: starting the API server (ShardedListAndWatch=%t)", modeName(serverSide), serverSide)
	env, err := envtest.Start(envtest.Options{Scheme: scheme, APIServerArgs: map[string][]string{
		"feature-gates": {fmt.Sprintf("ShardedListAndWatch=%t", serverSide)},
		// The benchmark's own creates and the managers' requests are not rate limited.
		"max-requests-inflight": {"2000"}, "max-mutating-requests-inflight": {"1000"},
	}})
	must(b, err)
	defer func() { _ = env.Stop() }()
	stub := startS3Stub(b, latency)
	kubeconfig := adminKubeconfig(b, env)
	createBuckets(ctx, b, env.Client, stub.url, buckets)

	var rows []row
	for _, n := range replicas {
		progress("%s: %d replica(s)", modeName(serverSide), n)
		managers := make([]*manager, n)
		for i := range managers {
			managers[i] = startManager(b, bin, kubeconfig, fmt.Sprintf("replica-%d-of-%d", i, n))
		}
		waitFor(b, "the ring to converge and every bucket to be probed once", 10*time.Minute, func() bool {
			slots, up := 0.0, 0.0
			for _, m := range managers {
				f := m.scrape(b)
				slots += f.Sum("phalanks_storagebucket_shard_slots", nil)
				up += f.Sum("phalanks_storagebucket_up", nil)
			}
			return slots == 64 && up >= float64(buckets)
		})
		progress("%s: %d replica(s) converged; one interval of steady state before measuring", modeName(serverSide), n)
		time.Sleep(interval)
		rows = append(rows, measureWindow(b, env, managers, serverSide, buckets))
		for _, m := range managers {
			_ = m.proc.Stop(30 * time.Second)
		}
	}
	return rows
}

func modeName(serverSide bool) string {
	if serverSide {
		return "server-side sharding"
	}
	return "client-side filtering"
}

// measureWindow measures the managers for one window.
func measureWindow(b *testing.B, env *envtest.Env, managers []*manager, serverSide bool, buckets int) row {
	type snap struct {
		f   measure.Families
		cpu time.Duration
	}
	take := func() []snap {
		out := make([]snap, len(managers))
		for i, m := range managers {
			cpu, err := measure.CPU(m.proc.PID())
			must(b, err)
			out[i] = snap{f: m.scrape(b), cpu: cpu}
		}
		return out
	}
	writesBefore := apiWrites(b, env)
	before, start := take(), time.Now()
	time.Sleep(window)
	after, elapsed := take(), time.Since(start)
	writes := apiWrites(b, env) - writesBefore
	r := row{serverSide: serverSide, replicas: len(managers), demand: float64(buckets) / interval.Seconds()}
	r.load1, r.load5 = loadAverage()
	for i, m := range managers {
		late := after[i].f.Histogram("phalanks_storagebucket_probe_lateness_seconds").Since(before[i].f.Histogram("phalanks_storagebucket_probe_lateness_seconds"))
		probes := after[i].f.Sum("phalanks_storagebucket_probes_total", nil) - before[i].f.Sum("phalanks_storagebucket_probes_total", nil)
		r.probesTotal += probes
		rss, _, err := measure.Memory(m.proc.PID())
		must(b, err)
		live := m.liveHeap(b, fmt.Sprintf("%d-of-%d-%d", i, len(managers), buckets))
		res := replicaResult{
			slots:        after[i].f.Sum("phalanks_storagebucket_shard_slots", nil),
			probesPerSec: probes / elapsed.Seconds(),
			p99Late:      late.Quantile(0.99),
			rssMiB:       measure.MiB(rss),
			liveHeapMiB:  live,
			cpuCores:     (after[i].cpu - before[i].cpu).Seconds() / elapsed.Seconds(),
			cached:       after[i].f.Sum("phalanks_storagebucket_cached", nil),
		}
		res.onTimePercent = 100 * late.AtMost(onTime.Seconds()) / late.Count
		r.perReplica = append(r.perReplica, res)
	}
	r.writesPerProbe = writes / r.probesTotal
	return r
}

// apiWrites counts the API server's completed writes to StorageBuckets (and their
// status) and Leases: everything the managers write while they probe.
func apiWrites(b *testing.B, env *envtest.Env) float64 {
	cs, err := kubernetes.NewForConfig(env.Config)
	must(b, err)
	data, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	must(b, err)
	f, err := measure.Parse(strings.NewReader(string(data)))
	must(b, err)
	total := 0.0
	for _, resource := range []string{"storagebuckets", "leases"} {
		for _, verb := range []string{"POST", "PUT", "PATCH", "DELETE"} {
			total += f.Sum("apiserver_request_total", map[string]string{"resource": resource, "verb": verb})
		}
	}
	return total
}

func report(b *testing.B, buckets int, latency time.Duration, rows []row) {
	var out strings.Builder
	fmt.Fprintf(&out, "\n%d StorageBuckets, HeadBucket every %s, S3 latency %s, --storagebucket-concurrency=%d, window %s per replica count\n\n",
		buckets, interval, latency, concurrency, window)
	out.WriteString("| list path | replicas | replica | slots | probes/s | on time (≤ 1 s) | p99 lateness ≤ | RSS MiB | live heap MiB | CPU cores | StorageBuckets cached |\n")
	out.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		for i, p := range r.perReplica {
			fmt.Fprintf(&out, "| %s | %d | %d | %.0f | %.1f | %.2f %% | %s | %.0f | %.1f | %.3f | %.0f |\n", modeName(r.serverSide), r.replicas, i,
				p.slots, p.probesPerSec, p.onTimePercent, lateText(p.p99Late), p.rssMiB, p.liveHeapMiB, p.cpuCores, p.cached)
		}
	}
	out.WriteString("\n| list path | replicas | probes/s (all) | demand/s | max/min probes per replica | writes per probe | load average (1 min, 5 min) |\n")
	out.WriteString("|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		lo, hi := math.Inf(1), 0.0
		for _, p := range r.perReplica {
			lo, hi = min(lo, p.probesPerSec), max(hi, p.probesPerSec)
		}
		fmt.Fprintf(&out, "| %s | %d | %.0f | %.0f | %.3f | %.4f | %.2f, %.2f |\n", modeName(r.serverSide), r.replicas,
			r.probesTotal/window.Seconds(), r.demand, hi/lo, r.writesPerProbe, r.load1, r.load5)
		prefix := fmt.Sprintf("%s_%dr_", map[bool]string{true: "server", false: "client"}[r.serverSide], r.replicas)
		minOnTime, maxRSS := 100.0, 0.0
		for _, p := range r.perReplica {
			minOnTime, maxRSS = min(minOnTime, p.onTimePercent), max(maxRSS, p.rssMiB)
		}
		b.ReportMetric(minOnTime, prefix+"ontime_%")
		b.ReportMetric(hi/lo, prefix+"probes_max/min")
		b.ReportMetric(maxRSS, prefix+"rss_MiB")
		b.ReportMetric(r.writesPerProbe, prefix+"writes/probe")
	}
	fmt.Print(out.String())
}

func lateText(s float64) string {
	switch {
	case math.IsNaN(s):
		return "—"
	case math.IsInf(s, 1):
		return "> 300 s"
	case s < 1:
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.1f s", s)
}

// s3Stub answers HeadBucket (and anything else) with 200 after a fixed latency.
type s3Stub struct {
	url      string
	requests atomic.Int64
	// gaps tracks the HeadBucket requests per bucket (BenchmarkShardingHandover).
	gaps probeGaps
}

func startS3Stub(b *testing.B, latency time.Duration) *s3Stub {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(b, err)
	s := &s3Stub{url: "http://" + l.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if r.Method == http.MethodHead {
			s.gaps.saw(strings.Trim(r.URL.Path, "/"), time.Now())
		}
		time.Sleep(latency)
		w.Header().Set("x-amz-bucket-region", "us-east-1")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(l) }()
	b.Cleanup(func() { _ = srv.Close() })
	return s
}

func createBuckets(ctx context.Context, b *testing.B, c client.Client, endpoint string, n int) {
	for _, ns := range []string{namespace, leaseNS} {
		must(b, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	must(b, c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "s3", Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"},
	}))
	progress("creating %d StorageBuckets", n)
	start := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 32 {
		wg.Go(func() {
			for i := range work {
				sb := &phalanksv1beta1.StorageBucket{
					ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("sb-%05d", i)},
					Spec: phalanksv1beta1.StorageBucketSpec{
						BucketName: fmt.Sprintf("bucket-%05d", i), Endpoint: endpoint, InsecureAllowHTTP: true,
						Region: "us-east-1", ManagementPolicy: phalanksv1beta1.ManagementObserve,
						CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "s3"},
						HealthCheck: phalanksv1beta1.HealthCheck{
							Interval: &metav1.Duration{Duration: interval},
							Timeout:  &metav1.Duration{Duration: 5 * time.Second},
							Depth:    phalanksv1beta1.ProbeHeadBucket,
						},
					},
				}
				if err := c.Create(ctx, sb); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("create StorageBuckets: %v", err)
	}
	progress("created %d StorageBuckets in %s", n, time.Since(start).Round(time.Second))
}

// adminKubeconfig writes a kubeconfig of a cluster administrator for the managers
// (their RBAC is the e2e tests' concern).
func adminKubeconfig(b *testing.B, env *envtest.Env) string {
	data, err := env.KubeconfigUser("bench-manager", "system:masters")
	must(b, err)
	path := filepath.Join(b.TempDir(), "kubeconfig")
	must(b, os.WriteFile(path, data, 0o600))
	return path
}

func buildManager(b *testing.B) string {
	root, err := tools.RepoRoot()
	must(b, err)
	bin := filepath.Join(b.TempDir(), "manager")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type manager struct {
	proc    *process.Process
	metrics string
	// pprof is the manager's profiling endpoint, for the live heap after a collection.
	pprof string
}

func startManager(b *testing.B, bin, kubeconfig, name string) *manager {
	return startManagerWith(b, bin, kubeconfig, name, concurrency)
}

// startManagerWith starts a manager probing with workers at once.
func startManagerWith(b *testing.B, bin, kubeconfig, name string, workers int) *manager {
	ports := make([]int, 4)
	for i := range ports {
		var err error
		ports[i], err = process.FreePort()
		must(b, err)
	}
	m := &manager{metrics: "http://" + process.HostPort(ports[0]) + "/metrics", pprof: "http://" + process.HostPort(ports[3]) + "/debug/pprof"}
	m.proc = &process.Process{Name: name, Path: bin, LogPath: filepath.Join(b.TempDir(), name+".log"), Args: []string{
		"--kubeconfig", kubeconfig, "--leader-elect", "--leader-elect-namespace", leaseNS,
		"--metrics-bind-address", process.HostPort(ports[0]), "--metrics-secure=false",
		"--health-probe-bind-address", process.HostPort(ports[1]), "--webhook-port", strconv.Itoa(ports[2]),
		"--storagebucket-concurrency", strconv.Itoa(workers),
		"--storagebucket-endpoint-allow-cidrs=127.0.0.1/32", // the stub listens on loopback
		"--pprof-bind-address", process.HostPort(ports[3]),
	}}
	must(b, m.proc.Start())
	b.Cleanup(func() { _ = m.proc.Stop(30 * time.Second) })
	must(b, process.WaitFor(m.proc, time.Minute, func() error { _, err := measure.Scrape(nil, m.metrics); return err }))
	return m
}

// liveHeap returns the manager's Go heap right after a collection, in MiB: a heap
// profile with gc=1 collects first. BENCH_HEAP_PROFILES=DIR keeps the profile, named
// after the replica and the bucket count, for `go tool pprof -sample_index=inuse_space
// -top bin/manager FILE`.
func (m *manager) liveHeap(b *testing.B, name string) float64 {
	resp, err := http.Get(m.pprof + "/heap?gc=1") //nolint:noctx // the manager this benchmark started, on loopback
	must(b, err)
	profile, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	must(b, err)
	if dir := os.Getenv("BENCH_HEAP_PROFILES"); dir != "" {
		path := filepath.Join(dir, "sharding-"+name+".pb.gz")
		must(b, os.WriteFile(path, profile, 0o600)) //nolint:gosec // G703: a directory the developer named
		b.Logf("heap profile: %s", path)
	}
	return m.scrape(b).Sum("go_memstats_heap_alloc_bytes", nil) / (1 << 20)
}

func (m *manager) scrape(b *testing.B) measure.Families {
	f, err := measure.Scrape(nil, m.metrics)
	must(b, err)
	return f
}

func loadAverage() (one, five float64) {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN(), math.NaN()
	}
	f := strings.Fields(string(data))
	one, _ = strconv.ParseFloat(f[0], 64)
	five, _ = strconv.ParseFloat(f[1], 64)
	return one, five
}

func waitFor(b *testing.B, what string, timeout time.Duration, cond func() bool) {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Second)
	}
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	must(b, err)
	return n
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format(time.TimeOnly), fmt.Sprintf(format, args...))
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
