package foo_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	"github.com/phalanks/phalanks-operator/controllers/foo"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// memorySettle is how long a controller's memory is sampled once its informers synced.
const memorySettle = 20 * time.Second

// BenchmarkFooMemory measures what one Foo costs in memory, ours against
// kubernetes/sample-controller: each controller's RSS with FOO_MEMORY_COUNTS Foos (1,000
// and 5,000) and as many Deployments they own, and the slope between the two counts.
//
// Each controller runs alone on an API server of its own per count, as a user's cluster
// would hold only its Foos: ours with only the Foo controller (--controllers=foo) and
// sample-controller's client limits (5 requests/s, bursts of 10), sample-controller as
// its README runs it. The Foos and their Deployments (the Deployment each controller
// makes for a Foo, controlled by it: ours carries its label foo.LabelOwned besides, which
// its Deployment watch selects) exist before the controller starts, so both list the same
// objects and neither has Deployments to create; both then write the status of every Foo
// at 5 requests/s. A controller counts as synced at its log line that says its
// workers started (after its informers synced); its RSS is then sampled every half
// second for memorySettle, and the last reading and the highest are reported.
func BenchmarkFooMemory(b *testing.B) {
	counts := []int{1000, 5000}
	if v := os.Getenv("FOO_MEMORY_COUNTS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				b.Fatalf("FOO_MEMORY_COUNTS=%q: want two positive integers, comma-separated", v)
			}
			counts = append(counts, n)
		}
	}
	if len(counts) != 2 || counts[0] >= counts[1] {
		b.Fatalf("FOO_MEMORY_COUNTS: want two counts, the smaller first; got %v", counts)
	}
	// The benchmark's own client logs through controller-runtime; nothing to see there.
	ctrllog.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	root, err := tools.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	manager := filepath.Join(root, "bin", "manager")
	if _, err := os.Stat(manager); err != nil {
		b.Fatal("bin/manager is missing: run `make bench` (it builds the manager first)")
	}
	sample, err := tools.Path("sample-controller")
	if err != nil {
		b.Fatal(err)
	}
	sampleCRD, err := sampleControllerCRD(root)
	if err != nil {
		b.Fatal(err)
	}
	sides := []memorySide{
		{name: "phalanks", gvk: phalanksv1alpha1.GroupVersion.WithKind("Foo"), started: `"Starting workers","controller":"foo"`,
			labels: map[string]string{foo.LabelOwned: "true"},
			proc: func(env *envtest.Env, dir string) (*process.Process, error) {
				return ourManager(env, manager, dir, "--controllers=foo",
					"--kube-api-qps", strconv.Itoa(clientQPS), "--kube-api-burst", strconv.Itoa(clientBurst))
			}},
		{name: "sample-controller", gvk: sampleFooGVK, started: `"Started workers"`,
			proc: func(env *envtest.Env, dir string) (*process.Process, error) {
				return sampleController(env, sample, dir)
			}},
	}
	for range b.N {
		rss := map[string][]float64{}
		for _, n := range counts {
			for _, sd := range sides {
				r := fooMemory(b, sd, sampleCRD, n)
				b.Logf("%s with %d Foos: RSS %.1f MiB (peak %.1f MiB), workers started after %s", sd.name, n, r.rssMiB, r.peakMiB,
					r.synced.Round(time.Millisecond))
				b.ReportMetric(r.rssMiB, fmt.Sprintf("%s-%d-rss-MiB", sd.name, n))
				rss[sd.name] = append(rss[sd.name], r.rssMiB)
			}
		}
		slope := map[string]float64{}
		for _, sd := range sides {
			// KiB per Foo between the two counts, and the RSS the line meets at no Foo.
			s := (rss[sd.name][1] - rss[sd.name][0]) * 1024 / float64(counts[1]-counts[0])
			slope[sd.name] = s
			b.Logf("%s: %.2f KiB per Foo (with its Deployment) between %d and %d, %.1f MiB at none", sd.name, s, counts[0], counts[1],
				rss[sd.name][0]-s*float64(counts[0])/1024)
			b.ReportMetric(s, sd.name+"-KiB/Foo")
		}
		b.ReportMetric(slope["phalanks"]/slope["sample-controller"], "slope-ours/theirs")
	}
}

// memorySide is one controller of BenchmarkFooMemory.
type memorySide struct {
	name string
	gvk  schema.GroupVersionKind
	// started is what its log says once its workers started; labels are those it puts
	// on the Deployments it makes.
	started string
	labels  map[string]string
	proc    func(env *envtest.Env, dir string) (*process.Process, error)
}

// fooMemory starts an API server holding count Foos of side's kind and their
// Deployments, runs side's controller until its workers started and memorySettle
// after, and returns its memory.
func fooMemory(b *testing.B, sd memorySide, sampleCRD *apiextensionsv1.CustomResourceDefinition, count int) rssReading {
	ctx := b.Context()
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(s))
	env, err := envtest.Start(envtest.Options{Scheme: s})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	if err := crds.Install(ctx, env.Client, []*apiextensionsv1.CustomResourceDefinition{sampleCRD}, nil); err != nil {
		b.Fatal(err)
	}
	const ns = "bench-memory"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := createOwnedFoos(ctx, env.Client, sd, ns, count); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: created %d Foos and their Deployments in %s", sd.name, count, time.Since(start).Round(time.Millisecond))

	p, err := sd.proc(env, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	started := time.Now()
	if err := p.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Stop(10 * time.Second) }()
	err = process.WaitFor(p, 5*time.Minute, func() error {
		log, err := os.ReadFile(p.LogPath)
		if err != nil {
			return err
		}
		if !strings.Contains(string(log), sd.started) {
			return fmt.Errorf("%s has not started its workers", sd.name)
		}
		return nil
	})
	if err != nil {
		b.Fatalf("%v; log %s ends:\n%s", err, p.LogPath, process.Tail(p.LogPath, 30))
	}
	r := rssReading{synced: time.Since(started)}
	sampleRSS(ctx, b, p.PID(), memorySettle, &r)
	if err := p.FailedEarly(); err != nil {
		b.Fatal(err)
	}
	return r
}

// createOwnedFoos creates count Foos of sd's kind in ns and, for each, the Deployment
// sd's controller would make for it, controlled by it.
func createOwnedFoos(ctx context.Context, c client.Client, sd memorySide, ns string, count int) error {
	foos := make([]*unstructured.Unstructured, count)
	err := createAll(ctx, c, count, func(i int) client.Object {
		f := &unstructured.Unstructured{}
		f.SetGroupVersionKind(sd.gvk)
		f.SetName(fmt.Sprintf("foo-%05d", i))
		f.SetNamespace(ns)
		f.Object["spec"] = map[string]any{"deploymentName": f.GetName(), "replicas": int64(1)}
		foos[i] = f
		return f
	})
	if err != nil {
		return err
	}
	return createAll(ctx, c, count, func(i int) client.Object {
		d := sampleDeployment(foos[i])
		d.Labels = sd.labels
		return d
	})
}

// sampleDeployment is the Deployment sample-controller's newDeployment makes for foo.
func sampleDeployment(foo *unstructured.Unstructured) *appsv1.Deployment {
	labels := map[string]string{"app": "nginx", "controller": foo.GetName()}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: foo.GetName(), Namespace: foo.GetNamespace(),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(foo, foo.GroupVersionKind())},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:latest"}}},
			},
		},
	}
}
