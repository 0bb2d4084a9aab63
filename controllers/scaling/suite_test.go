package scaling_test

import (
	"context"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/report"
)

var (
	env *envtest.Env
	k8s client.Client
)

func TestScheduledScaling(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Scheduled scaling")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	var err error
	env, err = envtest.Start(envtest.Options{Scheme: s})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	k8s = env.Client
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	SetDefaultConsistentlyDuration(3 * time.Second)
})

// runOperator starts a manager with scheduled scaling and returns a function that
// stops it (also called at the end of the spec).
func runOperator(o scaling.Options) (stop func()) {
	_, stop = startOperator(o)
	return stop
}

// startOperator is runOperator that also returns the scheduled scaling it runs.
func startOperator(o scaling.Options) (sc *scaling.Scaling, stop func()) {
	opts := env.ManagerOptions()
	// Specs start a manager each, in one process.
	opts.Controller.SkipNameValidation = ptr.To(true)
	mgr, err := ctrl.NewManager(env.Config, opts)
	Expect(err).NotTo(HaveOccurred())
	if o.Concurrency == 0 {
		o.Concurrency = 2
	}
	sc, err = scaling.SetupWithManager(mgr, o)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				// The manager waits up to 30 s for its runnables before it fails; say
				// which goroutines are still there while they are.
				var b strings.Builder
				_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
				AddReportEntry("goroutines 10 s into the manager's stop", b.String())
				<-done
			}
		})
	}
	DeferCleanup(stop)
	return sc, stop
}

var berlin = func() *time.Location {
	l, err := time.LoadLocation("Europe/Berlin")
	utilruntime.Must(err)
	return l
}()

// upcoming returns the given weekday and Berlin wall time at least two days from now,
// so workloads created now are long past their grace period at that time.
func upcoming(day time.Weekday, hour, minute, second int) time.Time {
	d := time.Now().In(berlin).AddDate(0, 0, 2)
	for d.Weekday() != day {
		d = d.AddDate(0, 0, 1)
	}
	return time.Date(d.Year(), d.Month(), d.Day(), hour, minute, second, 0, berlin)
}

// berlinDay returns the wall time hh:mm on the day of t plus days, in Berlin.
func berlinDay(t time.Time, days, hour, minute int) time.Time {
	t = t.In(berlin)
	return time.Date(t.Year(), t.Month(), t.Day()+days, hour, minute, 0, 0, berlin)
}

func newNamespace(annotations map[string]string) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "scaling-", Annotations: annotations}}
	Expect(k8s.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

func podTemplate(name string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
}

func newDeployment(ns, name string, replicas int32, annotations map[string]string) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name),
		},
	}
	Expect(k8s.Create(context.Background(), d)).To(Succeed())
	return d
}

func newStatefulSet(ns, name string, replicas int32, annotations map[string]string) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(replicas),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template:    podTemplate(name),
		},
	}
	Expect(k8s.Create(context.Background(), s)).To(Succeed())
	return s
}

// replicas returns a function for Eventually/Consistently reading the live replicas.
func replicas(obj client.Object) func(Gomega) int32 {
	return func(g Gomega) int32 {
		live := obj.DeepCopyObject().(client.Object)
		g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), live)).To(Succeed())
		switch o := live.(type) {
		case *appsv1.Deployment:
			return ptr.Deref(o.Spec.Replicas, -1)
		case *appsv1.StatefulSet:
			return ptr.Deref(o.Spec.Replicas, -1)
		}
		return -1
	}
}

// annotation returns a function reading one live annotation.
func annotation(obj client.Object, key string) func(Gomega) string {
	return func(g Gomega) string {
		live := obj.DeepCopyObject().(client.Object)
		g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), live)).To(Succeed())
		return live.GetAnnotations()[key]
	}
}

// notes returns a function listing the notes of the events with reason about obj.
func notes(obj client.Object, reason string) func(Gomega) []string {
	return func(g Gomega) []string {
		list := &eventsv1.EventList{}
		g.Expect(k8s.List(context.Background(), list, client.InNamespace(obj.GetNamespace()))).To(Succeed())
		var out []string
		for _, e := range list.Items {
			if e.Regarding.Name == obj.GetName() && e.Reason == reason {
				out = append(out, e.Type+": "+e.Note)
			}
		}
		return out
	}
}

// update changes a live object as a user would, with a plain update.
func update(obj client.Object, change func(client.Object)) {
	Eventually(func(g Gomega) {
		live := obj.DeepCopyObject().(client.Object)
		g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), live)).To(Succeed())
		change(live)
		g.Expect(k8s.Update(context.Background(), live, client.FieldOwner("kubectl-edit"))).To(Succeed())
	}).Should(Succeed())
}

func setReplicas(n int32) func(client.Object) {
	return func(o client.Object) {
		switch o := o.(type) {
		case *appsv1.Deployment:
			o.Spec.Replicas = ptr.To(n)
		case *appsv1.StatefulSet:
			o.Spec.Replicas = ptr.To(n)
		}
	}
}

func utc(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func containsAll(parts ...string) func(string) bool {
	return func(s string) bool {
		for _, p := range parts {
			if !strings.Contains(s, p) {
				return false
			}
		}
		return true
	}
}

// The failures once more at the end of the output, where CI shows its tail.
var _ = report.FailuresLast()
