// Package foo_test benchmarks the Foo controller against kubernetes/sample-controller:
// both run as separate processes against one API server at the same time, each with its
// own Foos, and the benchmark measures how long each takes until every Foo's Deployment
// exists and every Foo's status matches it, and how much CPU each process used to get
// there. See docs/benchmarks.md.
package foo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/measure"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const (
	// defaultFooCount is the number of Foos each controller gets; FOO_BENCH_COUNT
	// overrides it for a quick run.
	defaultFooCount = 1000
	// syncTimeout bounds the wait for both controllers.
	syncTimeout = 20 * time.Minute
	// poll is how often the benchmark checks progress in its informer cache.
	poll = 100 * time.Millisecond
	// progressLog is how often it logs progress.
	progressLog = 30 * time.Second
	// clientQPS and clientBurst are client-go's defaults, which sample-controller uses
	// and has no flags to change; in EqualClientLimits our manager gets the same.
	clientQPS   = 5
	clientBurst = 10
	// workers is sample-controller's fixed worker count; --foo-concurrency matches it.
	workers = 2
)

// sampleFooGVK is sample-controller's Foo.
var sampleFooGVK = schema.GroupVersionKind{Group: "samplecontroller.k8s.io", Version: "v1alpha1", Kind: "Foo"}

// side is one controller under measurement.
type side struct {
	name      string
	namespace string
	gvk       schema.GroupVersionKind
	proc      *process.Process
	started   time.Time
	// done is set once every Foo is synced.
	done     bool
	duration time.Duration
	cpu      time.Duration
}

// BenchmarkFooSync1000 runs the scenario twice, each time on a fresh API server:
//
//   - EqualClientLimits: our manager gets the client-side limits sample-controller runs
//     with (client-go's defaults, 5 requests/s and bursts of 10 per API group, which it
//     has no flags to change) and its 2 workers. This is the like-for-like comparison.
//   - ShippedDefaults: each as it ships. Ours has no client-side limit (controller-runtime
//     relies on API Priority and Fairness); sample-controller keeps client-go's.
func BenchmarkFooSync1000(b *testing.B) {
	count := defaultFooCount
	if v := os.Getenv("FOO_BENCH_COUNT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("FOO_BENCH_COUNT=%q: want a positive integer", v)
		}
		count = n
	}
	b.Run("EqualClientLimits", func(b *testing.B) {
		for range b.N {
			runScenario(b, count, "--kube-api-qps", strconv.Itoa(clientQPS), "--kube-api-burst", strconv.Itoa(clientBurst))
		}
	})
	b.Run("ShippedDefaults", func(b *testing.B) {
		for range b.N {
			runScenario(b, count)
		}
	})
}

// runScenario runs both controllers side by side over count Foos each; oursArgs are
// extra flags for our manager.
func runScenario(b *testing.B, count int, oursArgs ...string) {
	ctx := b.Context()
	// The benchmark's own cache logs through controller-runtime; nothing to see there.
	ctrllog.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	root, err := tools.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	manager := filepath.Join(root, "bin", "manager")
	sample, err := tools.Path("sample-controller")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(manager); err != nil {
		b.Fatal("bin/manager is missing: run `make bench` (it builds the manager first)")
	}

	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(s))
	env, err := envtest.Start(envtest.Options{Scheme: s})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })

	sampleCRD, err := sampleControllerCRD(root)
	if err != nil {
		b.Fatal(err)
	}
	if err := crds.Install(ctx, env.Client, []*apiextensionsv1.CustomResourceDefinition{sampleCRD}, nil); err != nil {
		b.Fatal(err)
	}

	ours := &side{name: "phalanks", namespace: "bench-phalanks", gvk: phalanksv1alpha1.GroupVersion.WithKind("Foo")}
	theirs := &side{name: "sample-controller", namespace: "bench-sample-controller", gvk: sampleFooGVK}
	for _, sd := range []*side{ours, theirs} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sd.namespace}}); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	if err := createFoos(ctx, env.Client, ours.namespace, theirs.namespace, count); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d Foos of each kind in %s", count, time.Since(start).Round(time.Millisecond))

	// The benchmark's own view of progress, from watches rather than repeated lists.
	view, err := cache.New(env.Config, cache.Options{Scheme: s})
	if err != nil {
		b.Fatal(err)
	}
	viewCtx, stopView := context.WithCancel(ctx)
	defer stopView()
	go func() { _ = view.Start(viewCtx) }()
	if !view.WaitForCacheSync(ctx) {
		b.Fatal("benchmark cache did not sync")
	}
	prog := &progress{cache: view, count: count}
	for _, sd := range []*side{ours, theirs} {
		if _, err := prog.synced(ctx, sd.gvk, sd.namespace); err != nil {
			b.Fatal(err)
		}
	}

	dir := b.TempDir()
	if ours.proc, err = ourManager(env, manager, dir, oursArgs...); err != nil {
		b.Fatal(err)
	}
	if theirs.proc, err = sampleController(env, sample, dir); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = ours.proc.Stop(10 * time.Second)
		_ = theirs.proc.Stop(10 * time.Second)
	})

	// Both start together and run side by side: each sees the same API server, under the
	// same load, at the same time.
	b.ResetTimer()
	ours.started = time.Now()
	if err := ours.proc.Start(); err != nil {
		b.Fatal(err)
	}
	theirs.started = time.Now()
	if err := theirs.proc.Start(); err != nil {
		b.Fatal(err)
	}

	deadline := time.Now().Add(syncTimeout)
	nextLog := time.Now().Add(progressLog)
	for !ours.done || !theirs.done {
		for _, sd := range []*side{ours, theirs} {
			if err := sd.proc.FailedEarly(); err != nil {
				b.Fatal(err)
			}
		}
		oursSynced, err := prog.synced(ctx, ours.gvk, ours.namespace)
		if err != nil {
			b.Fatal(err)
		}
		theirsSynced, err := prog.synced(ctx, theirs.gvk, theirs.namespace)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range []struct {
			sd     *side
			synced int
		}{{ours, oursSynced}, {theirs, theirsSynced}} {
			if p.sd.done || p.synced < count {
				continue
			}
			p.sd.done = true
			p.sd.duration = time.Since(p.sd.started)
			if p.sd.cpu, err = cpuTime(p.sd.proc.PID()); err != nil {
				b.Fatal(err)
			}
			b.Logf("%s: all %d Foos synced after %s, %s CPU", p.sd.name, count, p.sd.duration.Round(time.Millisecond), p.sd.cpu)
		}
		if time.Now().After(nextLog) {
			oursCPU, _ := cpuTime(ours.proc.PID())
			theirsCPU, _ := cpuTime(theirs.proc.PID())
			b.Logf("progress: %s %d/%d (%s CPU), %s %d/%d (%s CPU)", ours.name, oursSynced, count, oursCPU,
				theirs.name, theirsSynced, count, theirsCPU)
			nextLog = nextLog.Add(progressLog)
		}
		if time.Now().After(deadline) {
			b.Fatalf("not synced after %s: %s %d/%d (log %s), %s %d/%d (log %s)", syncTimeout,
				ours.name, oursSynced, count, ours.proc.LogPath, theirs.name, theirsSynced, count, theirs.proc.LogPath)
		}
		select {
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-time.After(poll):
		}
	}
	b.StopTimer()

	b.ReportMetric(ours.duration.Seconds(), "ours-s")
	b.ReportMetric(theirs.duration.Seconds(), "sample-controller-s")
	b.ReportMetric(ours.duration.Seconds()/theirs.duration.Seconds(), "time-ours/theirs")
	b.ReportMetric(ours.cpu.Seconds(), "ours-cpu-s")
	b.ReportMetric(theirs.cpu.Seconds(), "sample-controller-cpu-s")
	b.ReportMetric(ours.cpu.Seconds()/theirs.cpu.Seconds(), "cpu-ours/theirs")
}

// sampleControllerCRD reads sample-controller's Foo CRD from its module in the module
// cache, at the version hack/tools/peers pins.
//
// It is crd-status-subresource.yaml, not crd.yaml: crd.yaml serves no /status
// subresource, so sample-controller's UpdateStatus calls would fail with 404 and no Foo
// would ever be synced. Its README says to use this file; the two differ in nothing else.
func sampleControllerCRD(root string) (*apiextensionsv1.CustomResourceDefinition, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "k8s.io/sample-controller")
	cmd.Dir = filepath.Join(root, "hack", "tools", "peers")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("locate k8s.io/sample-controller in the module cache: %w", err)
	}
	var mod struct{ Dir, Version string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(mod.Dir, "artifacts", "examples", "crd-status-subresource.yaml"))
	if err != nil {
		return nil, err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(crd); err != nil {
		return nil, fmt.Errorf("decode sample-controller %s CRD: %w", mod.Version, err)
	}
	return crd, nil
}

// createFoos creates count Foos of each kind, with the same names and specs.
func createFoos(ctx context.Context, c client.Client, oursNS, theirsNS string, count int) error {
	names := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range names {
				name := fmt.Sprintf("foo-%04d", i)
				ours := &phalanksv1alpha1.Foo{
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: oursNS},
					Spec:       phalanksv1alpha1.FooSpec{DeploymentName: name, Replicas: ptr.To[int32](1)},
				}
				theirs := &unstructured.Unstructured{}
				theirs.SetGroupVersionKind(sampleFooGVK)
				theirs.SetName(name)
				theirs.SetNamespace(theirsNS)
				theirs.Object["spec"] = map[string]any{"deploymentName": name, "replicas": int64(1)}
				if err := errors.Join(c.Create(ctx, ours), c.Create(ctx, theirs)); err != nil {
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

// progress counts synced Foos in the benchmark's cache: a Foo is synced when a Deployment
// of its deploymentName exists, is controlled by it and has its replicas, and the Foo's
// status.availableReplicas is written and equals the Deployment's. Both sides are
// judged by the same rule.
type progress struct {
	cache cache.Cache
	count int
}

type fooView struct {
	uid            types.UID
	deploymentName string
	replicas       int64
	available      *int64
}

// synced returns how many Foos of kind gvk in ns are synced.
func (p *progress) synced(ctx context.Context, gvk schema.GroupVersionKind, ns string) (int, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := p.cache.List(ctx, list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	foos := make([]fooView, 0, len(list.Items))
	for i := range list.Items {
		f := &list.Items[i]
		name, _, _ := unstructured.NestedString(f.Object, "spec", "deploymentName")
		replicas, found, _ := unstructured.NestedInt64(f.Object, "spec", "replicas")
		if !found {
			replicas = 1
		}
		v := fooView{uid: f.GetUID(), deploymentName: name, replicas: replicas}
		if available, found, _ := unstructured.NestedInt64(f.Object, "status", "availableReplicas"); found {
			v.available = ptr.To(available)
		}
		foos = append(foos, v)
	}
	return p.match(ctx, ns, foos)
}

func (p *progress) match(ctx context.Context, ns string, foos []fooView) (int, error) {
	if len(foos) != p.count {
		return 0, fmt.Errorf("namespace %s holds %d Foos, want %d", ns, len(foos), p.count)
	}
	var deps appsv1.DeploymentList
	if err := p.cache.List(ctx, &deps, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	byName := make(map[string]*appsv1.Deployment, len(deps.Items))
	for i := range deps.Items {
		byName[deps.Items[i].Name] = &deps.Items[i]
	}
	synced := 0
	for _, f := range foos {
		dep := byName[f.deploymentName]
		if dep == nil || f.available == nil {
			continue
		}
		owner := metav1.GetControllerOf(dep)
		if owner == nil || owner.UID != f.uid || int64(ptr.Deref(dep.Spec.Replicas, 1)) != f.replicas {
			continue
		}
		if *f.available == int64(dep.Status.AvailableReplicas) {
			synced++
		}
	}
	return synced, nil
}

// ourManager prepares bin/manager with only the Foo controller at work, sample-controller's
// worker count and the extra flags given. Leader election, metrics and health endpoints
// are off, as sample-controller has none.
func ourManager(env *envtest.Env, bin, dir string, extra ...string) (*process.Process, error) {
	kubeconfig, err := writeKubeconfig(env, dir, "phalanks-bench")
	if err != nil {
		return nil, err
	}
	// main.go serves CRD conversion, so the manager needs a serving certificate.
	ca, err := certs.NewCA("foo-bench-webhook-ca")
	if err != nil {
		return nil, err
	}
	pair, err := ca.Issue(certs.LeafOptions{CommonName: "phalanks-webhook", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "webhook-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	if err := pair.Write(certDir, "tls.crt", "tls.key"); err != nil {
		return nil, err
	}
	port, err := process.FreePort()
	if err != nil {
		return nil, err
	}
	return &process.Process{
		Name: "manager",
		Path: bin,
		Args: append([]string{
			"--kubeconfig", kubeconfig,
			"--foo-concurrency", strconv.Itoa(workers),
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
			"--webhook-port", strconv.Itoa(port), "--webhook-cert-dir", certDir,
		}, extra...),
		LogPath: filepath.Join(dir, "manager.log"),
	}, nil
}

// sampleController prepares sample-controller as its README runs it.
func sampleController(env *envtest.Env, bin, dir string) (*process.Process, error) {
	kubeconfig, err := writeKubeconfig(env, dir, "sample-controller-bench")
	if err != nil {
		return nil, err
	}
	return &process.Process{
		Name:    "sample-controller",
		Path:    bin,
		Args:    []string{"--kubeconfig", kubeconfig},
		LogPath: filepath.Join(dir, "sample-controller.log"),
	}, nil
}

// writeKubeconfig writes a kubeconfig for a user of its own in system:masters, so both
// controllers get the same authorization and API Priority and Fairness treatment.
func writeKubeconfig(env *envtest.Env, dir, user string) (string, error) {
	data, err := env.KubeconfigUser(user, "system:masters")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, user+".kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

// cpuTime returns the user plus system CPU time a process has used.
func cpuTime(pid int) (time.Duration, error) { return measure.CPU(pid) }
