package foo

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/report"
)

// Timeouts for a loaded 2-core machine.
const (
	timeout  = 60 * time.Second
	interval = 100 * time.Millisecond
)

var env *envtest.Env

func TestFooController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Foo controller")
}

var _ = BeforeSuite(func() {
	log.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(s))
	var err error
	env, err = envtest.Start(envtest.Options{Scheme: s})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(env.Stop()).To(Succeed()) })

	SetDefaultEventuallyTimeout(timeout)
	SetDefaultEventuallyPollingInterval(interval)
})

// newNamespace creates a namespace of the spec's own.
func newNamespace(ctx context.Context) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "foo-"}}
	Expect(env.Client.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// newManager returns a manager whose cache sees only namespace, with the Foo
// controller registered, not yet started.
func newManager(namespace string) manager.Manager {
	opts := env.ManagerOptions()
	opts.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}, ByObject: CacheByObject()}
	// Every spec runs its own manager and controller named "foo".
	opts.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
	mgr, err := manager.New(env.Config, opts)
	Expect(err).NotTo(HaveOccurred())
	_, err = SetupWithManager(mgr, Options{Concurrency: 2})
	Expect(err).NotTo(HaveOccurred())
	return mgr
}

// startManager runs the Foo controller for namespace until the spec ends.
func startManager(namespace string) manager.Manager {
	mgr := newManager(namespace)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	DeferCleanup(func() {
		cancel()
		Eventually(done).Should(BeClosed())
	})
	return mgr
}

// fooEvents lists the events.k8s.io Events regarding the named Foo.
func fooEvents(ctx context.Context, g Gomega, namespace, name string) []eventsv1.Event {
	var list eventsv1.EventList
	g.Expect(env.Client.List(ctx, &list, client.InNamespace(namespace))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Foo" && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// The failures once more at the end of the output, where CI shows its tail.
var _ = report.FailuresLast()
