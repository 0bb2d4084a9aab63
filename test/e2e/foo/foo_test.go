// Package foo_test runs the Foo controller against the local cluster harness, where
// kube-controller-manager, kube-scheduler and kwok make Deployments Available and
// garbage-collect what a deleted owner leaves behind.
package foo_test

import (
	"bytes"
	"context"
	_ "embed"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	"github.com/phalanks/phalanks-operator/controllers/foo"
	"github.com/phalanks/phalanks-operator/internal/conditions"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/report"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

//go:embed testdata/example-foo.yaml
var exampleFoo []byte

// Pods start through the scheduler and kwok; give them room on a loaded machine.
const (
	timeout  = 3 * time.Minute
	interval = 250 * time.Millisecond
)

var k8s client.Client

func TestFooOnALocalCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Foo on a local cluster")
}

var _ = BeforeSuite(func() {
	log.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(timeout)
	SetDefaultEventuallyPollingInterval(interval)

	startCtx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := cluster.Start(startCtx, cluster.Options{Dir: GinkgoT().TempDir()})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(c.Stop)

	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(s))
	k8s, err = client.New(c.Config, client.Options{Scheme: s})
	Expect(err).NotTo(HaveOccurred())

	root, err := tools.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	all, err := crds.Load(filepath.Join(root, "config", "crd", "bases"))
	Expect(err).NotTo(HaveOccurred())
	var fooCRD []*apiextensionsv1.CustomResourceDefinition
	for _, crd := range all {
		if crd.Name == "foos.phalanks.io" {
			fooCRD = append(fooCRD, crd)
		}
	}
	Expect(fooCRD).To(HaveLen(1))
	Expect(crds.Install(startCtx, k8s, fooCRD, nil)).To(Succeed())

	mgr, err := ctrl.NewManager(c.Config, manager.Options{
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: foo.CacheByObject()},
	})
	Expect(err).NotTo(HaveOccurred())
	_, err = foo.SetupWithManager(mgr, foo.Options{Concurrency: 2})
	Expect(err).NotTo(HaveOccurred())
	mgrCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(mgrCtx)).To(Succeed())
	}()
	DeferCleanup(func() {
		stop()
		Eventually(done).Should(BeClosed())
	})
})

var _ = Describe("A Foo on a cluster with real controllers", Ordered, func() {
	ctx := context.Background()
	const ns = "foo-e2e"

	BeforeAll(func() {
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	})

	getFoo := func(g Gomega, name string) *phalanksv1alpha1.Foo {
		f := &phalanksv1alpha1.Foo{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, f)).To(Succeed())
		return f
	}
	// expectAvailable waits until the Deployment is Available with want replicas and the
	// Foo reports them and is Ready.
	expectAvailable := func(fooName, deployment string, want int32) {
		Eventually(func(g Gomega) {
			dep := &appsv1.Deployment{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: deployment}, dep)).To(Succeed())
			g.Expect(dep.Status.AvailableReplicas).To(Equal(want))
			g.Expect(dep.Status.Conditions).To(ContainElement(And(
				HaveField("Type", appsv1.DeploymentAvailable), HaveField("Status", corev1.ConditionTrue))))
			f := getFoo(g, fooName)
			g.Expect(metav1.IsControlledBy(dep, f)).To(BeTrue())
			g.Expect(f.Status.AvailableReplicas).To(Equal(want))
			g.Expect(f.Status.ObservedGeneration).To(Equal(f.Generation))
			g.Expect(meta.IsStatusConditionTrue(f.Status.Conditions, conditions.TypeReady)).To(BeTrue())
		}).Should(Succeed())
	}

	It("reports availableReplicas reaching spec.replicas once the Deployment is Available", func() {
		f := &phalanksv1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec:       phalanksv1alpha1.FooSpec{DeploymentName: "web", Replicas: ptr.To[int32](3)},
		}
		Expect(k8s.Create(ctx, f)).To(Succeed())
		expectAvailable("web", "web", 3)
	})

	It("scales the Deployment when the Foo's replicas change", func() {
		f := getFoo(Default, "web")
		f.Spec.Replicas = ptr.To[int32](1)
		Expect(k8s.Update(ctx, f)).To(Succeed())
		expectAvailable("web", "web", 1)
	})

	It("accepts and reconciles sample-controller's example-foo.yaml with only apiVersion changed", func() {
		obj := map[string]any{}
		Expect(utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(exampleFoo), 4096).Decode(&obj)).To(Succeed())
		example := &phalanksv1alpha1.Foo{}
		Expect(runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj, example, true)).To(Succeed())
		example.Namespace = ns
		Expect(k8s.Create(ctx, example)).To(Succeed())
		expectAvailable("example-foo", "example-foo", 1)
	})

	It("garbage-collects the Deployment when its Foo is deleted", func() {
		Expect(k8s.Delete(ctx, &phalanksv1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}})).To(Succeed())
		Eventually(func() bool {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &appsv1.Deployment{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue())
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "example-foo"}, &appsv1.Deployment{})).To(Succeed(),
			"deleting one Foo took another Foo's Deployment with it")
	})
})

// The failures once more at the end of the output, where CI shows its tail.
var _ = report.FailuresLast()
