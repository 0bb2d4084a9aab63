package selfscale

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/test/harness/envtest"
)

const ns = "operator"

// Against a real API server, which has no Deployment controller: the test plays it,
// writing each Deployment's status as its pods would come up. The Keeper finds its
// Deployment through the owners of its Pod, raises the count one replica at a time
// once every replica is available, lowers it at once, leaves a Deployment scaled to
// zero (a paused operator) so, and leaves alone a decoy that
// carries the operator's name and labels, a count of 0, and a Pod that no Deployment
// runs.
func TestTheKeeperScalesItsOwnDeploymentOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server")
	}
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	env, err := envtest.Start(envtest.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := t.Context()
	c := env.Client
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	labels := map[string]string{"control-plane": "controller-manager"}
	// The decoy is named as the operator's Deployment is under OLM and kustomize.
	decoy := deployment(t, c, "phalanks-controller-manager", labels)
	own := deployment(t, c, "renamed-by-an-overlay", labels)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: own.Name + "-5d8f", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{controllerRef(own, "Deployment")}},
		Spec: appsv1.ReplicaSetSpec{Selector: own.Spec.Selector, Template: own.Spec.Template},
	}
	must(t, c.Create(ctx, rs))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rs.Name + "-x7k2p", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{controllerRef(rs, "ReplicaSet")}},
		Spec: own.Spec.Template.Spec,
	}
	must(t, c.Create(ctx, pod))

	cs := kubernetes.NewForConfigOrDie(env.Config)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	t.Cleanup(broadcaster.Shutdown)
	k := New(Options{Reader: c, Writer: c.SubResource("scale"), Namespace: ns, Pod: pod.Name,
		Source: "ConfigMap operator/phalanks-operator-config", Log: logr.Discard(),
		Recorder: broadcaster.NewRecorder(s, "phalanks-operator")}, 3)

	counts := func() (int32, int32) {
		t.Helper()
		must(t, c.Get(ctx, client.ObjectKeyFromObject(own), own))
		must(t, c.Get(ctx, client.ObjectKeyFromObject(decoy), decoy))
		return *own.Spec.Replicas, *decoy.Spec.Replicas
	}
	step := func(wantOwn int32, why string) {
		t.Helper()
		must(t, k.Step(ctx))
		if o, d := counts(); o != wantOwn || d != 1 {
			t.Fatalf("%s: the operator's Deployment has %d replicas, the decoy %d; want %d and 1", why, o, d, wantOwn)
		}
	}

	step(1, "the Deployment's pods are not up yet")
	rollOut(t, c, own)
	step(2, "one replica up from 1, all available")
	step(2, "the second replica is not available yet")
	rollOut(t, c, own)
	step(3, "one replica up from 2, all available")
	rollOut(t, c, own)
	step(3, "at the count")

	k.Set(1)
	step(1, "down to the count at once")
	must(t, c.SubResource("scale").Update(ctx, own, client.WithSubResourceBody(scaleTo(own, 0))))
	rollOut(t, c, own)
	step(0, "scaled to zero by hand: a paused operator, left so")
	k.Set(0)
	must(t, c.SubResource("scale").Update(ctx, own, client.WithSubResourceBody(scaleTo(own, 5))))
	step(5, "a count of 0 leaves the Deployment alone")

	// The events are sent in the background.
	var notes []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		list := &eventsv1.EventList{}
		must(t, c.List(ctx, list, client.InNamespace(ns)))
		notes = nil
		for _, e := range list.Items {
			if e.Regarding.Name == decoy.Name {
				t.Fatalf("an event on the decoy: %s", e.Note)
			}
			if e.Regarding.Name == own.Name && e.Reason == ReasonScaled {
				notes = append(notes, e.Note)
			}
		}
		if strings.Contains(strings.Join(notes, "\n"), "from 2 to 3 replicas towards 3, as ConfigMap operator/phalanks-operator-config says") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events on the Deployment: %q", notes)
		}
	}

	// A Pod no Deployment runs, and one whose ReplicaSet was replaced by another of the
	// same name: nothing is scaled, and the error says why.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bare", Labels: labels}, Spec: pod.Spec}
	must(t, c.Create(ctx, bare))
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged", Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: "not-its-uid", Controller: ptr.To(true)}}},
		Spec: pod.Spec}
	must(t, c.Create(ctx, forged))
	for name, want := range map[string]string{"bare": "not run by a Deployment", "forged": "is not the one that owns pod forged"} {
		other := New(Options{Reader: c, Writer: c.SubResource("scale"), Namespace: ns, Pod: name, Log: logr.Discard(),
			Recorder: broadcaster.NewRecorder(s, "phalanks-operator")}, 2)
		if err := other.Step(ctx); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("pod %s: %v, want an error saying %q", name, err, want)
		}
		if o, d := counts(); o != 5 || d != 1 {
			t.Errorf("pod %s: the Deployments have %d and %d replicas, want 5 and 1 as before", name, o, d)
		}
	}
}

func deployment(t *testing.T, c client.Client, name string, labels map[string]string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "example.com/manager:v1"}}},
			},
		},
	}
	must(t, c.Create(t.Context(), d))
	return d
}

// rollOut writes the status the Deployment controller writes once every replica of the
// current template is available.
func rollOut(t *testing.T, c client.Client, d *appsv1.Deployment) {
	t.Helper()
	must(t, c.Get(t.Context(), client.ObjectKeyFromObject(d), d))
	n := *d.Spec.Replicas
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
			LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
	must(t, c.Status().Update(t.Context(), d))
}

func controllerRef(o metav1.Object, kind string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: o.GetName(), UID: o.GetUID(), Controller: ptr.To(true)}
}

func scaleTo(d *appsv1.Deployment, n int32) *autoscalingv1.Scale {
	return &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name}, Spec: autoscalingv1.ScaleSpec{Replicas: n}}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
