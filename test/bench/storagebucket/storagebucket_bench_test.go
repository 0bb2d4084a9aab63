// Package storagebucket_test benchmarks StorageBucket probing at scale: 5,000 buckets
// on a local MinIO, probed every 30 seconds by the manager binary against envtest,
// side by side with the seed-style naive design (./naive) and a raw minio-go HeadBucket
// loop at the same concurrency, all in the same run.
package storagebucket_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/measure"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// The scenario. PHALANKS_BENCH_BUCKETS overrides the bucket count for quick trials.
const (
	defaultBuckets = 5000
	interval       = 30 * time.Second
	windows        = 3 // intervals measured in steady state
	concurrency    = 16
	onTime         = time.Second // a probe is on time when it starts at most this long after its due time
	namespace      = "bench"
)

func BenchmarkStorageBucketProbing(b *testing.B) {
	for range b.N {
		runScenario(b)
	}
}

func runScenario(b *testing.B) {
	n := defaultBuckets
	if v := os.Getenv("PHALANKS_BENCH_BUCKETS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	sc := setup(b, n)

	progress("operator: starting bin/manager")
	args := []string{"--leader-elect", "--leader-elect-namespace", "phalanks-system",
		"--storagebucket-concurrency", strconv.Itoa(concurrency), "--metrics-secure=false",
		"--storagebucket-endpoint-allow-cidrs=127.0.0.1/32"} // MinIO listens on loopback
	// PHALANKS_BENCH_CPUPROFILE=<file> writes the manager's CPU profile of the second
	// capacity window there (go tool pprof -top <file>).
	profile := os.Getenv("PHALANKS_BENCH_CPUPROFILE")
	var pprofAddr string
	if profile != "" {
		port, err := process.FreePort()
		must(b, err)
		pprofAddr = process.HostPort(port)
		args = append(args, "--pprof-bind-address", pprofAddr)
	}
	op := sc.start(b, "manager", sc.managerBin, args...)
	waitFor(b, "every bucket Ready", 10*time.Minute, func() bool { return op.metric("phalanks_storagebucket_up", nil) >= float64(n) })
	progress("operator: all %d buckets Ready; warming up for one interval", n)
	time.Sleep(interval)
	opRes := sc.measure(b, op, windows*interval)

	// Capacity, twice, each time next to a raw HeadBucket loop of the same length: the
	// credentials Secret is rotated every rotationPeriod, which makes every bucket due
	// again well before the operator is through the last rotation's, so its workers are
	// busy the whole window; its probe rate and CPU time per probe over the window are its
	// capacity. The operator keeps probing on schedule during the raw loop, so the raw
	// side counts those probes too.
	var opRates, rawRates []float64
	var opCPU, rawCPU []time.Duration
	var opSide, rawSide []sideLoad
	rotations := 0
	// PHALANKS_BENCH_CAPACITY_ROUNDS sets how many rounds (default 4): the machine's
	// speed drifts by more than the difference measured, so each round's ratio pairs the
	// two windows next to each other, and the report gives the median round.
	rounds := 4
	if v := os.Getenv("PHALANKS_BENCH_CAPACITY_ROUNDS"); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			b.Fatalf("PHALANKS_BENCH_CAPACITY_ROUNDS=%q: want a positive number", v)
		}
	}
	for round := 1; round <= rounds; round++ {
		progress("capacity round %d: raw HeadBucket loop at concurrency %d", round, concurrency)
		bg := op.metric("phalanks_storagebucket_probes_total", nil)
		t := time.Now()
		side := sc.startSide()
		rawProfile := ""
		if profile != "" && round == 2 {
			rawProfile = profile + ".raw"
		}
		raw, cpu := sc.rawLoop(b, n, capacityWindow, rawProfile)
		background := (op.metric("phalanks_storagebucket_probes_total", nil) - bg) / time.Since(t).Seconds()
		rawRates, rawCPU = append(rawRates, raw+background), append(rawCPU, cpu)
		rawSide = append(rawSide, side.end(b, (raw+background)*time.Since(t).Seconds()))
		progress("capacity round %d: rotating the credentials Secret every %s, so every bucket stays due", round, rotationPeriod)
		profiled := ""
		if profile != "" && round == 2 {
			profiled = profile
		}
		rate, cpu, load := sc.saturate(b, op, &rotations, pprofAddr, profiled)
		opRates, opCPU, opSide = append(opRates, rate), append(opCPU, cpu), append(opSide, load)
		// Let the last rotations' probes end before the next raw loop.
		sc.reprobeAll(b, op, n, &rotations)
	}
	progress("one more rotation: how long re-probing every bucket takes")
	burst := sc.reprobeAll(b, op, n, &rotations)
	op.stop()

	progress("naive: starting the seed-style baseline")
	nv := sc.start(b, "naive", sc.naiveBin, "--concurrency", strconv.Itoa(concurrency), "--interval", interval.String())
	waitFor(b, "every bucket probed once", 10*time.Minute, func() bool {
		return nv.metric("phalanks_storagebucket_probes_total", nil) >= float64(n)
	})
	progress("naive: all buckets probed; warming up for one interval")
	time.Sleep(interval)
	nvRes := sc.measure(b, nv, windows*interval)
	nv.stop()

	report(b, n, opRes, nvRes, capacityResult{op: mean(opRates), raw: mean(rawRates), burst: burst,
		opCPUs: opCPU, rawCPUs: rawCPU, opRates: opRates, rawRates: rawRates,
		opSide: meanSide(opSide), rawSide: meanSide(rawSide)})
}

// capacityWindow is how long the raw loop runs, and how long the operator's capacity is
// measured after saturationRampUp of rotations.
const (
	capacityWindow   = 15 * time.Second
	saturationRampUp = 3 * time.Second
	// rotationPeriod makes buckets due four times a second: 20,000 probes a second of
	// demand at 5,000 buckets, several times what the operator can do (with one
	// rotation a second the queue ran dry at 5,000 probes a second).
	rotationPeriod = 250 * time.Millisecond
)

// saturate rotates the credentials Secret every rotationPeriod, so every bucket is due
// again before the operator has probed the last rotation's, and returns the operator's probe
// rate and CPU time per probe over capacityWindow, after saturationRampUp: the probes
// counted between two scrapes at the window's ends, and the process's CPU time between
// them (the two scrapes included, a few milliseconds). With profile set, the window's
// first ten seconds are profiled into that file, and the heap profiles at the window's
// ends into <profile>.allocs.0 and .1 (go tool pprof -sample_index=alloc_space -base
// <profile>.allocs.0 <profile>.allocs.1: what the window allocated).
func (sc *scenario) saturate(b *testing.B, op *proc, rotations *int, pprofAddr, profile string) (float64, time.Duration, sideLoad) {
	stop := make(chan struct{})
	rotated := make(chan error, 1)
	go func() {
		tick := time.NewTicker(rotationPeriod)
		defer tick.Stop()
		for {
			if err := sc.rotate(rotations); err != nil {
				rotated <- err
				return
			}
			select {
			case <-stop:
				rotated <- nil
				return
			case <-tick.C:
			}
		}
	}()
	time.Sleep(saturationRampUp)
	probes := func() float64 { return op.metric("phalanks_storagebucket_probes_total", nil) }
	p0, cpu0, t0 := probes(), cpuSeconds(op.p.PID()), time.Now()
	side := sc.startSide()
	var profiled chan error
	if profile != "" {
		must(b, saveProfile(pprofAddr, "allocs", profile+".allocs.0"))
		profiled = make(chan error, 1)
		go func() { profiled <- saveProfile(pprofAddr, "profile?seconds=10", profile) }()
	}
	time.Sleep(capacityWindow)
	p1, cpu1, t1 := probes(), cpuSeconds(op.p.PID()), time.Now()
	load := side.end(b, p1-p0)
	if profile != "" {
		must(b, saveProfile(pprofAddr, "allocs", profile+".allocs.1"))
	}
	close(stop)
	must(b, <-rotated)
	if profiled != nil {
		must(b, <-profiled)
		progress("CPU profile of the capacity window: %s", profile)
	}
	return (p1 - p0) / t1.Sub(t0).Seconds(), seconds((cpu1 - cpu0) / (p1 - p0)), load
}

// sideLoad is what else a capacity window cost: MinIO's CPU time per probe, and how
// busy the machine's CPUs were (both cores: MinIO, the prober and the API server share
// them).
type sideLoad struct {
	minioCPU time.Duration
	busy     float64
}

// sideStart is the beginning of a window's side load.
type sideStart struct {
	sc      *scenario
	minio   float64
	machine measure.Machine
}

func (sc *scenario) startSide() sideStart {
	m, _ := measure.ReadMachine()
	return sideStart{sc: sc, minio: cpuSeconds(sc.s3.PID()), machine: m}
}

// end returns the side load of the window started at s, in which probes were sent.
func (s sideStart) end(b *testing.B, probes float64) sideLoad {
	m, err := measure.ReadMachine()
	must(b, err)
	return sideLoad{minioCPU: seconds((cpuSeconds(s.sc.s3.PID()) - s.minio) / probes), busy: m.BusySince(s.machine)}
}

func meanSide(xs []sideLoad) sideLoad {
	var out sideLoad
	for _, x := range xs {
		out.minioCPU += x.minioCPU / time.Duration(len(xs))
		out.busy += x.busy / float64(len(xs))
	}
	return out
}

// rotate changes the credentials Secret (an annotation: the values stay valid), which
// makes every StorageBucket that uses it due at once.
func (sc *scenario) rotate(rotations *int) error {
	ctx := context.Background()
	sec := &corev1.Secret{}
	if err := sc.k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "s3"}, sec); err != nil {
		return err
	}
	*rotations++
	sec.Annotations = map[string]string{"rotated": strconv.Itoa(*rotations)}
	return sc.k8s.Update(ctx, sec)
}

// reprobeAll rotates the credentials Secret once and returns how long the operator
// takes to re-probe every bucket (sampled once a second).
func (sc *scenario) reprobeAll(b *testing.B, op *proc, n int, rotations *int) time.Duration {
	inputs := func() float64 {
		return op.metric("phalanks_storagebucket_probes_total", map[string]string{"cause": "inputs"})
	}
	base := inputs()
	must(b, sc.rotate(rotations))
	start := time.Now()
	waitFor(b, "every bucket re-probed", 10*time.Minute, func() bool { return inputs()-base >= float64(n) })
	return time.Since(start)
}

// saveProfile saves a profile from a pprof endpoint: what is "profile?seconds=10" for a
// CPU profile, "allocs" for the heap's allocations so far.
func saveProfile(addr, what, path string) error {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/%s", addr, what))
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s profile: %s", what, resp.Status)
	}
	f, err := os.Create(path) //nolint:gosec // G703: the file the benchmark's user named in PHALANKS_BENCH_CPUPROFILE
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func mean(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// scenario is what every phase shares.
type scenario struct {
	env        *envtest.Env
	k8s        client.Client
	s3         *minio.Server
	kubeconfig string
	managerBin string
	naiveBin   string
	dir        string
	auditLog   string
	buckets    []string
}

// controllerUser is the identity both controllers under test run as.
const controllerUser = "bench-controller"

// auditPolicy records the mutating requests of controllerUser, at metadata level.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + controllerUser + `"]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// auditWrites counts controllerUser's completed writes between from and to, by
// resource (with "/subresource").
func (sc *scenario) auditWrites(b *testing.B, from, to time.Time) map[string]float64 {
	data, err := os.ReadFile(sc.auditLog)
	must(b, err)
	out := map[string]float64{}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e struct {
			Stage          string    `json:"stage"`
			StageTimestamp time.Time `json:"stageTimestamp"`
			User           struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
		}
		must(b, json.Unmarshal(line, &e))
		if e.Stage != "ResponseComplete" || e.User.Username != controllerUser || e.StageTimestamp.Before(from) || e.StageTimestamp.After(to) {
			continue
		}
		key := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			key += "/" + e.ObjectRef.Subresource
		}
		out[key]++
	}
	return out
}

func setup(b *testing.B, n int) *scenario {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(phalanksv1beta1.AddToScheme(scheme))
	// The API server audits the writes of the controller under test (and nothing else),
	// so writes per probe count exactly its requests.
	dir := b.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	must(b, os.WriteFile(policy, []byte(auditPolicy), 0o600))
	audit := filepath.Join(dir, "audit.log")
	env, err := envtest.Start(envtest.Options{Scheme: scheme, APIServerArgs: map[string][]string{
		"audit-policy-file": {policy}, "audit-log-path": {audit}, "audit-log-format": {"json"},
		"audit-log-maxsize": {"0"},
	}})
	must(b, err)
	b.Cleanup(func() { _ = env.Stop() })
	sc := &scenario{env: env, k8s: env.Client, dir: dir, auditLog: audit}
	sc.s3, err = minio.Start(minio.Options{Dir: b.TempDir()})
	must(b, err)
	b.Cleanup(func() { _ = sc.s3.Stop() })

	progress("setup: building bin/manager and the naive baseline")
	root, err := tools.RepoRoot()
	must(b, err)
	sc.managerBin = filepath.Join(sc.dir, "manager")
	sc.naiveBin = filepath.Join(sc.dir, "naive")
	builds := map[string]string{sc.managerBin: ".", sc.naiveBin: "./test/bench/storagebucket/naive"}
	// PHALANKS_BENCH_MANAGER_BIN measures a manager built elsewhere (an older commit,
	// for a before/after comparison in one session).
	if bin := os.Getenv("PHALANKS_BENCH_MANAGER_BIN"); bin != "" {
		delete(builds, sc.managerBin)
		sc.managerBin = bin
	}
	for bin, pkg := range builds {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	kc, err := env.KubeconfigUser(controllerUser, "system:masters")
	must(b, err)
	sc.kubeconfig = filepath.Join(sc.dir, "kubeconfig")
	must(b, os.WriteFile(sc.kubeconfig, kc, 0o600))

	progress("setup: %d buckets in MinIO and %d StorageBuckets", n, n)
	for _, ns := range []string{namespace, "phalanks-system"} {
		must(b, sc.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	must(b, sc.k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "s3", Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": sc.s3.AccessKey, "AWS_SECRET_ACCESS_KEY": sc.s3.SecretKey},
	}))
	for i := range n {
		sc.buckets = append(sc.buckets, fmt.Sprintf("bench-%05d", i))
	}
	parallel(b, sc.buckets, func(name string) error {
		if err := sc.s3.MakeBucket(ctx, name, miniogo.MakeBucketOptions{}); err != nil {
			return err
		}
		return sc.k8s.Create(ctx, &phalanksv1beta1.StorageBucket{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: phalanksv1beta1.StorageBucketSpec{
				BucketName: name, Endpoint: sc.s3.URL, InsecureAllowHTTP: true, Region: sc.s3.Region,
				CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "s3"},
				HealthCheck: phalanksv1beta1.HealthCheck{
					Interval: &metav1.Duration{Duration: interval},
					Timeout:  &metav1.Duration{Duration: 5 * time.Second},
					Depth:    phalanksv1beta1.ProbeHeadBucket,
				},
			},
		})
	})
	return sc
}

// proc is a controller process under measurement.
type proc struct {
	p       *process.Process
	metrics string
}

func (sc *scenario) start(b *testing.B, name, bin string, args ...string) *proc {
	ports := make([]int, 3)
	for i := range ports {
		var err error
		ports[i], err = process.FreePort()
		must(b, err)
	}
	certDir := filepath.Join(sc.dir, name+"-certs")
	ca, err := certs.NewCA("bench-webhook")
	must(b, err)
	pair, err := ca.Issue(certs.LeafOptions{CommonName: "webhook", Hosts: []string{"127.0.0.1"}})
	must(b, err)
	must(b, pair.Write(certDir, "tls.crt", "tls.key"))
	args = append([]string{"--kubeconfig", sc.kubeconfig, "--metrics-bind-address", process.HostPort(ports[0])}, args...)
	if name == "manager" {
		args = append(args, "--health-probe-bind-address", process.HostPort(ports[1]),
			"--webhook-port", strconv.Itoa(ports[2]), "--webhook-cert-dir", certDir)
	}
	p := &proc{
		p:       &process.Process{Name: name, Path: bin, Args: args, LogPath: filepath.Join(sc.dir, name+".log")},
		metrics: "http://" + process.HostPort(ports[0]) + "/metrics",
	}
	if name == "manager" {
		// PHALANKS_BENCH_MANAGER_GOGC runs the manager (alone: not this process's raw
		// loop) with that GOGC, to see what its garbage collection costs.
		if v := os.Getenv("PHALANKS_BENCH_MANAGER_GOGC"); v != "" {
			p.p.Env = []string{"GOGC=" + v}
		}
	}
	must(b, p.p.Start())
	b.Cleanup(p.stop)
	must(b, process.WaitFor(p.p, time.Minute, func() error { _, err := p.scrape(); return err }))
	return p
}

func (p *proc) stop() { _ = p.p.Stop(30 * time.Second) }

func (p *proc) scrape() (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(p.metrics)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// metric sums a counter, gauge or histogram count over the series matching labels.
func (p *proc) metric(name string, labels map[string]string) float64 {
	fams, err := p.scrape()
	if err != nil {
		return math.NaN()
	}
	return sumFamily(fams[name], labels)
}

func sumFamily(f *dto.MetricFamily, labels map[string]string) float64 {
	if f == nil {
		return 0
	}
	return measure.Families{f.GetName(): f}.Sum(f.GetName(), labels)
}

// snapshot is what a measurement window compares.
type snapshot struct {
	at      time.Time
	fams    map[string]*dto.MetricFamily
	cpuSecs float64
}

// result of one steady-state window.
type result struct {
	probes         float64
	demanded       float64
	onTimeShare    float64
	p50, p99       time.Duration
	writesPerProbe float64
	objectWrites   float64 // StorageBucket, status and event writes
	writes         map[string]float64
	rssMiB, hwmMiB float64
	cpuCores       float64
}

func (sc *scenario) measure(b *testing.B, p *proc, d time.Duration) result {
	progress("%s: measuring for %s", p.p.Name, d)
	before := sc.snapshot(b, p)
	var maxRSS float64
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		maxRSS = math.Max(maxRSS, memMiB(p.p.PID(), false))
		time.Sleep(time.Second)
	}
	after := sc.snapshot(b, p)
	elapsed := after.at.Sub(before.at).Seconds()

	res := result{writes: map[string]float64{}, rssMiB: maxRSS, hwmMiB: memMiB(p.p.PID(), true)}
	res.probes = sumFamily(after.fams["phalanks_storagebucket_probes_total"], nil) - sumFamily(before.fams["phalanks_storagebucket_probes_total"], nil)
	res.demanded = float64(len(sc.buckets)) * elapsed / interval.Seconds()
	buckets, count := histogramDelta(before.fams["phalanks_storagebucket_probe_lateness_seconds"], after.fams["phalanks_storagebucket_probe_lateness_seconds"])
	res.onTimeShare = cumulativeAt(buckets, onTime.Seconds()) / count
	res.p50 = quantile(buckets, count, 0.50)
	res.p99 = quantile(buckets, count, 0.99)
	res.writes = sc.auditWrites(b, before.at, after.at)
	res.objectWrites = res.writes["storagebuckets"] + res.writes["storagebuckets/status"] + res.writes["events"]
	res.writesPerProbe = res.objectWrites / res.probes
	res.cpuCores = (after.cpuSecs - before.cpuSecs) / elapsed
	return res
}

func (sc *scenario) snapshot(b *testing.B, p *proc) snapshot {
	fams, err := p.scrape()
	must(b, err)
	return snapshot{at: time.Now(), fams: fams, cpuSecs: cpuSeconds(p.p.PID())}
}

type bucketCount struct {
	le    float64
	count float64
}

func histogramDelta(before, after *dto.MetricFamily) ([]bucketCount, float64) {
	prev := map[float64]float64{}
	var prevCount float64
	if before != nil && len(before.GetMetric()) > 0 {
		h := before.GetMetric()[0].GetHistogram()
		prevCount = float64(h.GetSampleCount())
		for _, bk := range h.GetBucket() {
			prev[bk.GetUpperBound()] = float64(bk.GetCumulativeCount())
		}
	}
	if after == nil || len(after.GetMetric()) == 0 {
		return nil, 0
	}
	h := after.GetMetric()[0].GetHistogram()
	var out []bucketCount
	for _, bk := range h.GetBucket() {
		out = append(out, bucketCount{le: bk.GetUpperBound(), count: float64(bk.GetCumulativeCount()) - prev[bk.GetUpperBound()]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].le < out[j].le })
	return out, float64(h.GetSampleCount()) - prevCount
}

func cumulativeAt(buckets []bucketCount, le float64) float64 {
	for _, bk := range buckets {
		if bk.le == le {
			return bk.count
		}
	}
	return math.NaN()
}

// quantile interpolates linearly inside the bucket holding the rank, as Prometheus'
// histogram_quantile does.
func quantile(buckets []bucketCount, count, q float64) time.Duration {
	rank := q * count
	lower, below := 0.0, 0.0
	for _, bk := range buckets {
		if bk.count >= rank {
			if bk.count == below {
				return seconds(bk.le)
			}
			return seconds(lower + (bk.le-lower)*(rank-below)/(bk.count-below))
		}
		lower, below = bk.le, bk.count
	}
	return seconds(lower) // beyond the last bucket: at least this
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// rawLoop runs HeadBucket on the buckets in turn from concurrency goroutines for d, over
// one shared transport, and returns the probes per second and the CPU time per probe
// (of this whole process, which does nothing else meanwhile). With profile set, it
// writes this process's CPU profile of the loop there.
func (sc *scenario) rawLoop(b *testing.B, n int, d time.Duration, profile string) (float64, time.Duration) {
	c, err := miniogo.New(sc.s3.Endpoint, &miniogo.Options{
		Creds:      credentials.NewStaticV4(sc.s3.AccessKey, sc.s3.SecretKey, ""),
		Region:     sc.s3.Region,
		Transport:  &http.Transport{MaxIdleConnsPerHost: concurrency, IdleConnTimeout: 90 * time.Second},
		MaxRetries: 1,
	})
	must(b, err)
	var done, next atomic.Int64
	var failed atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	if profile != "" {
		f, err := os.Create(profile) //nolint:gosec // G304: the file the benchmark's user named in PHALANKS_BENCH_CPUPROFILE
		must(b, err)
		must(b, pprof.StartCPUProfile(f))
		defer func() {
			pprof.StopCPUProfile()
			must(b, f.Close())
		}()
	}
	start := time.Now()
	cpuBefore := cpuSeconds(os.Getpid())
	for range concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) % int64(n)
				pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := c.BucketExists(pctx, sc.buckets[i])
				pcancel()
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					failed.Add(1)
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.Fatalf("raw loop: %d of %d HeadBucket requests failed", failed.Load(), done.Load())
	}
	cpu := seconds((cpuSeconds(os.Getpid()) - cpuBefore) / float64(done.Load()))
	return float64(done.Load()) / time.Since(start).Seconds(), cpu
}

// capacityResult compares the operator's probe capacity with the raw loop's.
type capacityResult struct {
	op, raw float64 // probes per second, mean of the rounds
	burst   time.Duration
	// Each round's CPU time per probe and probes per second, operator and raw loop.
	opCPUs, rawCPUs   []time.Duration
	opRates, rawRates []float64
	// opSide and rawSide are MinIO's CPU time per probe and the machine's busy share
	// in each side's windows.
	opSide, rawSide sideLoad
}

func report(b *testing.B, n int, op, nv result, c capacityResult) {
	capacity, raw, burst := c.op, c.raw, c.burst
	b.ReportMetric(capacity, "capacity_probes/s")
	b.ReportMetric(raw, "raw_probes/s")
	b.ReportMetric(100*op.onTimeShare, "ontime_%")
	b.ReportMetric(ms(op.p50), "p50_late_ms")
	b.ReportMetric(ms(op.p99), "p99_late_ms")
	b.ReportMetric(op.writesPerProbe, "writes/probe")
	b.ReportMetric(op.writes["leases"]/op.probes, "lease_writes/probe")
	b.ReportMetric(op.rssMiB, "rss_MiB")
	b.ReportMetric(op.cpuCores, "cpu_cores")
	cpuRatios, capRatios := make([]float64, len(c.opCPUs)), make([]float64, len(c.opCPUs))
	for i := range c.opCPUs {
		cpuRatios[i] = float64(c.opCPUs[i]) / float64(c.rawCPUs[i])
		capRatios[i] = c.opRates[i] / c.rawRates[i]
	}
	cpuRatio, capRatio := median(cpuRatios), median(capRatios)
	opCPU, rawCPU := seconds(median(durations(c.opCPUs))), seconds(median(durations(c.rawCPUs)))
	b.ReportMetric(capRatio, "capacity/raw")
	b.ReportMetric(float64(opCPU.Microseconds()), "cpu_us/probe")
	b.ReportMetric(float64(rawCPU.Microseconds()), "raw_cpu_us/probe")
	b.ReportMetric(cpuRatio, "cpu/raw_cpu")
	b.ReportMetric(100*nv.onTimeShare, "naive_ontime_%")
	b.ReportMetric(ms(nv.p50), "naive_p50_late_ms")
	b.ReportMetric(ms(nv.p99), "naive_p99_late_ms")
	b.ReportMetric(nv.writesPerProbe, "naive_writes/probe")
	b.ReportMetric(nv.rssMiB, "naive_rss_MiB")
	b.ReportMetric(nv.cpuCores, "naive_cpu_cores")

	row := func(name string, r result) string {
		return fmt.Sprintf("| %s | %.0f of %.0f | %.2f %% | %.1f ms | %.0f ms | %.4f (%.0f status/event, %.0f lease) | %.0f (peak %.0f) | %.3f |",
			name, r.probes, r.demanded, 100*r.onTimeShare, ms(r.p50), ms(r.p99),
			r.writesPerProbe, r.objectWrites, r.writes["leases"], r.rssMiB, r.hwmMiB, r.cpuCores)
	}
	fmt.Printf("\n%d StorageBuckets, HeadBucket every %s, %d intervals measured, concurrency %d\n\n", n, interval, windows, concurrency)
	fmt.Println("| design | probes in window | on time (≤ 1 s late) | p50 lateness | p99 lateness | writes per probe | RSS MiB | CPU cores |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	fmt.Println(row("operator (bin/manager)", op))
	fmt.Println(row("naive seed-style baseline", nv))
	fmt.Printf("\nProbe capacity (%d rounds of %s): operator %.0f probes/s, raw HeadBucket loop %.0f probes/s (means); "+
		"median round %.0f %% (rounds %s); all %d buckets re-probed in %s after one Secret rotation\n",
		len(capRatios), capacityWindow, capacity, raw, 100*capRatio, percents(capRatios), n, burst.Round(10*time.Millisecond))
	fmt.Printf("CPU per probe (medians): operator %s, raw loop %s; median round %.2f× (rounds %s); MinIO's per probe: %s and %s; "+
		"the machine's CPUs busy: %.0f %% and %.0f %%\n\n",
		opCPU.Round(time.Microsecond), rawCPU.Round(time.Microsecond), cpuRatio, ratios(cpuRatios),
		c.opSide.minioCPU.Round(time.Microsecond), c.rawSide.minioCPU.Round(time.Microsecond), 100*c.opSide.busy, 100*c.rawSide.busy)
}

// median returns the middle value (the mean of the two middle ones for an even count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func durations(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

func ratios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f×", x)
	}
	return strings.Join(parts, ", ")
}

func percents(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f %%", 100*x)
	}
	return strings.Join(parts, ", ")
}

// memMiB reads a process's resident set size, or its peak, in MiB.
func memMiB(pid int, peak bool) float64 {
	rss, hwm, err := measure.Memory(pid)
	switch {
	case err != nil:
		return math.NaN()
	case peak:
		return measure.MiB(hwm)
	}
	return measure.MiB(rss)
}

// cpuSeconds reads the CPU time a process has used, in seconds.
func cpuSeconds(pid int) float64 {
	cpu, err := measure.CPU(pid)
	if err != nil {
		return math.NaN()
	}
	return cpu.Seconds()
}

func parallel(b *testing.B, items []string, f func(string) error) {
	var wg sync.WaitGroup
	work := make(chan string)
	var mu sync.Mutex
	var firstErr error
	for range concurrency {
		wg.Go(func() {
			for it := range work {
				if err := f(it); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", it, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
	must(b, firstErr)
}

func waitFor(b *testing.B, what string, timeout time.Duration, cond func() bool) {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		// Each poll scrapes the controller's metrics (5,000 "up" series), which costs
		// it CPU; once a second keeps that small.
		time.Sleep(time.Second)
	}
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
