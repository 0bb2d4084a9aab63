package foo_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/measure"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const (
	// rssDeployments is the number of Deployments in the cluster; DEPLOYMENT_RSS_COUNT
	// overrides it for a quick run.
	rssDeployments = 10000
	// rssSettle is how long memory is sampled once the manager has synced.
	rssSettle = 15 * time.Second
)

// BenchmarkDeploymentCacheRSS measures the manager's memory in a cluster holding 10,000
// Deployments that no Foo owns and that do not use scheduled scaling: what the Foo
// controller and scheduled scaling pay to watch Deployments. It runs bin/manager and, if
// DEPLOYMENT_RSS_BASELINE names another manager binary (say, one built from the commit
// before a change), that binary too, one after the other against the same API server, so
// the two are compared in one run.
//
// A manager counts as synced when a Foo created after its start has its Deployment and
// status (the Foo controller's watches have synced) and scheduled scaling reports the
// one annotated Deployment (its watches have synced); memory is then sampled for
// rssSettle and the last and the highest readings are reported.
func BenchmarkDeploymentCacheRSS(b *testing.B) {
	count := rssDeployments
	if v := os.Getenv("DEPLOYMENT_RSS_COUNT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("DEPLOYMENT_RSS_COUNT=%q: want a positive integer", v)
		}
		count = n
	}
	root, err := tools.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	type candidate struct{ name, bin string }
	candidates := []candidate{{"ours", filepath.Join(root, "bin", "manager")}}
	if v := os.Getenv("DEPLOYMENT_RSS_BASELINE"); v != "" {
		candidates = append([]candidate{{"baseline", v}}, candidates...)
	}
	for _, c := range candidates {
		if _, err := os.Stat(c.bin); err != nil {
			b.Fatalf("%s manager %s: %v (run `make bench`, which builds bin/manager)", c.name, c.bin, err)
		}
	}

	ctx := b.Context()
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(s))
	env, err := envtest.Start(envtest.Options{Scheme: s})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })

	const ns = "bench-rss"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := createDeployments(ctx, env.Client, ns, count); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d Deployments in %s", count, time.Since(start).Round(time.Millisecond))

	for i, c := range candidates {
		m := measureRSS(ctx, b, env, c.bin, ns, fmt.Sprintf("probe-%d", i))
		b.Logf("%s (%s): synced after %s; RSS %.1f MiB (peak %.1f MiB), Go heap in use %.1f MiB",
			c.name, c.bin, m.synced.Round(time.Millisecond), m.rssMiB, m.peakMiB, m.heapMiB)
		b.ReportMetric(m.rssMiB, c.name+"-rss-MiB")
		b.ReportMetric(m.peakMiB, c.name+"-peak-rss-MiB")
		b.ReportMetric(m.heapMiB, c.name+"-heap-inuse-MiB")
	}
}

// rssReading is what one manager used.
type rssReading struct {
	synced                   time.Duration
	rssMiB, peakMiB, heapMiB float64
	// liveMiB is the Go heap allocated right after a collection: what it holds.
	liveMiB float64
	// metrics is the manager's last scrape.
	metrics string
}

// measureRSS starts bin with every controller, waits until it has synced, samples its
// memory and stops it.
func measureRSS(ctx context.Context, b *testing.B, env *envtest.Env, bin, ns, probe string) rssReading {
	p, err := ourManager(env, bin, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	foo := &phalanksv1alpha1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: probe, Namespace: ns},
		Spec:       phalanksv1alpha1.FooSpec{DeploymentName: probe, Replicas: ptr.To[int32](1)},
	}
	return sampleManager(ctx, b, p, syncProbe{
		create: func() error { return env.Client.Create(ctx, foo) },
		check: func(metrics string) error {
			if err := fooSynced(ctx, env.Client, foo); err != nil {
				return err
			}
			return scalingSynced(metrics)
		},
	})
}

// syncProbe tells when a manager has synced: create makes the objects it is to act on,
// once it has started; check returns nil once it has, given a scrape of its metrics.
type syncProbe struct {
	create func() error
	check  func(metrics string) error
}

// sampleManager starts p with a plain-HTTP metrics endpoint on loopback, waits until
// probe says it has synced, samples its memory for rssSettle and stops it. The reading
// holds the last and the highest RSS, the Go heap in use and the last scrape.
func sampleManager(ctx context.Context, b *testing.B, p *process.Process, probe syncProbe) rssReading {
	port, err := process.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	// Replace ourManager's disabled metrics endpoint with a plain-HTTP one on loopback.
	for i, a := range p.Args {
		if a == "--metrics-bind-address" {
			p.Args[i+1] = process.HostPort(port)
		}
	}
	pprofPort, err := process.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	p.Args = append(p.Args, "--metrics-secure=false", "--pprof-bind-address="+process.HostPort(pprofPort))
	metricsURL := "http://" + process.HostPort(port) + "/metrics"

	started := time.Now()
	if err := p.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Stop(20 * time.Second) }()

	if err := probe.create(); err != nil {
		b.Fatal(err)
	}
	err = process.WaitFor(p, 10*time.Minute, func() error {
		body, err := scrape(ctx, metricsURL)
		if err != nil {
			return err
		}
		return probe.check(body)
	})
	if err != nil {
		b.Fatalf("%v; manager log %s ends:\n%s", err, p.LogPath, process.Tail(p.LogPath, 30))
	}
	r := rssReading{synced: time.Since(started)}
	sampleRSS(ctx, b, p.PID(), rssSettle, &r)
	if r.metrics, err = scrape(ctx, metricsURL); err != nil {
		b.Fatal(err)
	}
	heap, err := metricValue(r.metrics, "go_memstats_heap_inuse_bytes")
	if err != nil {
		b.Fatal(err)
	}
	r.heapMiB = heap / (1 << 20)
	// A heap profile with gc=1 collects first: what is allocated right after is what
	// the manager holds, without the garbage the heap in use still counts.
	profile, err := scrape(ctx, "http://"+process.HostPort(pprofPort)+"/debug/pprof/heap?gc=1")
	if err != nil {
		b.Fatal(err)
	}
	if dir := os.Getenv("BENCH_HEAP_PROFILES"); dir != "" {
		// For `go tool pprof -sample_index=inuse_space -top bin/manager FILE`.
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.pb.gz", b.Name(), time.Now().UnixNano()))
		if err := os.WriteFile(path, []byte(profile), 0o600); err != nil { //nolint:gosec // G703: a directory the developer named
			b.Fatal(err)
		}
		b.Logf("heap profile: %s", path)
	}
	after, err := scrape(ctx, metricsURL)
	if err != nil {
		b.Fatal(err)
	}
	live, err := metricValue(after, "go_memstats_heap_alloc_bytes")
	if err != nil {
		b.Fatal(err)
	}
	r.liveMiB = live / (1 << 20)
	return r
}

// sampleRSS reads the RSS of process pid every half second for d into r: the last
// reading and the highest.
func sampleRSS(ctx context.Context, b *testing.B, pid int, d time.Duration, r *rssReading) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		rss, peak, err := procMemory(pid)
		if err != nil {
			b.Fatal(err)
		}
		r.rssMiB, r.peakMiB = float64(rss)/1024, float64(peak)/1024
		select {
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// fooSynced returns nil once the Foo controller has written foo's status for its
// current generation.
func fooSynced(ctx context.Context, c client.Client, foo *phalanksv1alpha1.Foo) error {
	live := &phalanksv1alpha1.Foo{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(foo), live); err != nil {
		return err
	}
	if live.Status.ObservedGeneration != live.Generation {
		return errors.New("the probe Foo is not synced yet")
	}
	return nil
}

// scalingSynced returns nil once scheduled scaling reports the one annotated Deployment
// (createDeployments' first) in metrics.
func scalingSynced(metrics string) error {
	const want = `phalanks_scaling_workloads{kind="Deployment",state="up"} 1`
	if !strings.Contains(metrics, want) {
		var seen []string
		for line := range strings.SplitSeq(metrics, "\n") {
			if strings.HasPrefix(line, "phalanks_scaling_workloads{") && !strings.HasSuffix(line, " 0") {
				seen = append(seen, line)
			}
		}
		return fmt.Errorf("scheduled scaling has not decided the annotated Deployment yet (it reports %v)", seen)
	}
	return nil
}

// createDeployments creates count Deployments shaped like a typical chart's: labels,
// annotations, one container with environment, resources and probes. One carries a
// scheduled-scaling annotation that never scales it (markScaled), so the benchmark can
// tell when scheduled scaling has synced.
func createDeployments(ctx context.Context, c client.Client, ns string, count int) error {
	return createAll(ctx, c, count, func(i int) client.Object {
		d := chartDeployment(ns, fmt.Sprintf("app-%05d", i))
		if i == 0 {
			markScaled(d)
		}
		return d
	})
}

// markScaled puts d under scheduled scaling with a schedule that keeps it up for good:
// scheduled scaling reports it as up and never writes to it. ("never" as a downtime would
// not do: a schedule that says no and nothing else leaves the object unmanaged.)
func markScaled(d *appsv1.Deployment) { d.Annotations["phalanks.io/uptime"] = "always" }

// createAll creates the count objects object(0) … object(count-1), 16 at a time.
func createAll(ctx context.Context, c client.Client, count int, object func(i int) client.Object) error {
	names := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range names {
				if err := c.Create(ctx, object(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
loop:
	for i := range count {
		select {
		case names <- i:
		case err = <-errs:
			break loop
		}
	}
	close(names)
	wg.Wait()
	close(errs)
	return errors.Join(err, <-errs)
}

func chartDeployment(ns, name string) *appsv1.Deployment {
	template := chartPodTemplate(name)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, Labels: template.Labels,
			Annotations: map[string]string{"meta.helm.sh/release-name": name, "meta.helm.sh/release-namespace": ns},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: chartSelector(name)},
			Template: template,
		},
	}
}

// chartSelector is the selector of a chart's workload name.
func chartSelector(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/instance": name}
}

// chartPodTemplate is the pod template of a chart's workload name: labels, a config
// checksum, one container with environment, resources and probes.
func chartPodTemplate(name string) corev1.PodTemplateSpec {
	labels := map[string]string{
		"app.kubernetes.io/name":       name,
		"app.kubernetes.io/instance":   name,
		"app.kubernetes.io/version":    "1.4.2",
		"app.kubernetes.io/managed-by": "Helm",
		"helm.sh/chart":                "app-1.4.2",
	}
	var env []corev1.EnvVar
	for i := range 10 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", i), Value: fmt.Sprintf("value-%d-for-%s", i, name)})
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"checksum/config": strings.Repeat("0f", 32)}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.example.com/team/" + name + ":1.4.2",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Env:   env,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
				LivenessProbe:  probe,
				ReadinessProbe: probe,
			}},
		},
	}
}

func scrape(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	return string(data), err
}

// metricValue returns the value of an unlabelled metric in a Prometheus text exposition.
func metricValue(body, name string) (float64, error) {
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// procMemory returns a process's resident set size and its peak, in KiB.
func procMemory(pid int) (rss, peak int64, err error) {
	rss, peak, err = measure.Memory(pid)
	return rss >> 10, peak >> 10, err
}
