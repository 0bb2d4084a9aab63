package scaling

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// replicaSetReader serves the metadata of ReplicaSets in one namespace, as the API
// server would, and counts the reads; ownerFinder reads nothing else.
type replicaSetReader struct {
	client.Reader
	namespace string
	sets      map[string]metav1.ObjectMeta
	err       error
	gets      int
}

func (r *replicaSetReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.gets++
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok || m.GroupVersionKind() != appsv1.SchemeGroupVersion.WithKind("ReplicaSet") {
		return fmt.Errorf("read %s %T as a ReplicaSet's metadata", key, obj)
	}
	if r.err != nil {
		return r.err
	}
	meta, found := r.sets[key.Name]
	if !found || key.Namespace != r.namespace {
		return apierrors.NewNotFound(appsv1.Resource("replicasets"), key.Name)
	}
	meta.DeepCopyInto(&m.ObjectMeta)
	return nil
}

func controllerRef(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}
}

func podControlledBy(refs ...metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "pod", OwnerReferences: refs}}
}

// TestAPodsOwnerIsFoundThroughControllerReferencesCheckedByUID follows pods to the
// workload they belong to, as a budget's decision needs: Pod → ReplicaSet → Deployment
// only where each object exists with the UID the reference names, and only through the
// apps group's kinds.
func TestAPodsOwnerIsFoundThroughControllerReferencesCheckedByUID(t *testing.T) {
	web := controllerRef("apps/v1", "Deployment", "web", "web-uid")
	sets := map[string]metav1.ObjectMeta{
		"web-7c9f4": {Name: "web-7c9f4", UID: "rs-uid", OwnerReferences: []metav1.OwnerReference{web}},
		"db-5d8b6": {Name: "db-5d8b6", UID: "rollout-rs-uid", OwnerReferences: []metav1.OwnerReference{
			controllerRef("argoproj.io/v1alpha1", "Rollout", "db", "rollout-uid")}},
		"api-6f7d8": {Name: "api-6f7d8", UID: "api-rs-uid", OwnerReferences: []metav1.OwnerReference{
			controllerRef("example.com/v1", "Deployment", "api", "api-uid")}},
		"orphan-1a2b3": {Name: "orphan-1a2b3", UID: "orphan-uid", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "web-uid"}}},
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want podOwner
	}{
		{"a pod of a Deployment's ReplicaSet belongs to the Deployment, with the UID the ReplicaSet names",
			podControlledBy(controllerRef("apps/v1", "ReplicaSet", "web-7c9f4", "rs-uid")),
			podOwner{kind: "Deployment", name: "web", uid: "web-uid"}},
		{"a reference to the ReplicaSet's name with another UID (a re-created or forged one) stops at the ReplicaSet",
			podControlledBy(controllerRef("apps/v1", "ReplicaSet", "web-7c9f4", "forged-uid")),
			podOwner{kind: "ReplicaSet", name: "web-7c9f4", uid: "forged-uid"}},
		{"a ReplicaSet that is gone stops the chain at the ReplicaSet",
			podControlledBy(controllerRef("apps/v1", "ReplicaSet", "web-0ld00", "old-uid")),
			podOwner{kind: "ReplicaSet", name: "web-0ld00", uid: "old-uid"}},
		{"a ReplicaSet a Rollout controls keeps its pods: the operator does not scale Rollouts through budgets",
			podControlledBy(controllerRef("apps/v1", "ReplicaSet", "db-5d8b6", "rollout-rs-uid")),
			podOwner{kind: "ReplicaSet", name: "db-5d8b6", uid: "rollout-rs-uid"}},
		{"a ReplicaSet controlled by a Deployment of another group keeps its pods",
			podControlledBy(controllerRef("apps/v1", "ReplicaSet", "api-6f7d8", "api-rs-uid")),
			podOwner{kind: "ReplicaSet", name: "api-6f7d8", uid: "api-rs-uid"}},
		{"a ReplicaSet that merely references a Deployment, without controller, keeps its pods",
			podControlledBy(controllerRef("apps/v1", "ReplicaSet", "orphan-1a2b3", "orphan-uid")),
			podOwner{kind: "ReplicaSet", name: "orphan-1a2b3", uid: "orphan-uid"}},
		{"a StatefulSet's pod is the StatefulSet's",
			podControlledBy(controllerRef("apps/v1", "StatefulSet", "db", "db-uid")),
			podOwner{kind: "StatefulSet", name: "db", uid: "db-uid"}},
		{"a pod a kind the operator does not scale controls is that kind's, by name and UID",
			podControlledBy(controllerRef("v1", "ConfigMap", "db-cluster", "cm-uid")),
			podOwner{kind: "ConfigMap", name: "db-cluster", uid: "cm-uid"}},
		{"a pod of an operator's custom resource is named with its group",
			podControlledBy(controllerRef("postgresql.cnpg.io/v1", "Cluster", "db", "cnpg-uid")),
			podOwner{kind: "Cluster.postgresql.cnpg.io", name: "db", uid: "cnpg-uid"}},
		{"a StatefulSet of another group is another kind altogether",
			podControlledBy(controllerRef("example.com/v1", "StatefulSet", "db", "db-uid")),
			podOwner{kind: "StatefulSet.example.com", name: "db", uid: "db-uid"}},
		{"a pod with owners but no controller belongs to nothing",
			podControlledBy(metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7c9f4", UID: "rs-uid"}),
			podOwner{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := ownerFinder{reader: &replicaSetReader{namespace: "team", sets: sets}, namespace: "team",
				replicaSets: map[string]*metav1.OwnerReference{}}
			got, err := f.of(context.Background(), c.pod)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("owner = %s (UID %q), want %s (UID %q)", got, got.uid, c.want, c.want.uid)
			}
		})
	}
}

func TestAReplicaSetIsReadOncePerLookupAndAFailedReadFailsIt(t *testing.T) {
	ctx := context.Background()
	reader := &replicaSetReader{namespace: "team", sets: map[string]metav1.ObjectMeta{
		"web-7c9f4": {Name: "web-7c9f4", UID: "rs-uid", OwnerReferences: []metav1.OwnerReference{
			controllerRef("apps/v1", "Deployment", "web", "web-uid")}},
	}}
	f := ownerFinder{reader: reader, namespace: "team", replicaSets: map[string]*metav1.OwnerReference{}}
	pod := podControlledBy(controllerRef("apps/v1", "ReplicaSet", "web-7c9f4", "rs-uid"))
	for range 3 {
		if got, err := f.of(ctx, pod); err != nil || got.kind != "Deployment" {
			t.Fatalf("owner = %+v, %v", got, err)
		}
	}
	if reader.gets != 1 {
		t.Errorf("%d reads of one ReplicaSet for three pods, want 1", reader.gets)
	}

	failing := &replicaSetReader{namespace: "team", err: errors.New("connection refused")}
	f = ownerFinder{reader: failing, namespace: "team", replicaSets: map[string]*metav1.OwnerReference{}}
	if got, err := f.of(ctx, pod); err == nil {
		t.Errorf("owner = %+v without an error, although the ReplicaSet could not be read", got)
	}
}

func TestCachedPodsShareTheirCommonStrings(t *testing.T) {
	pod := func(name string) *metav1.PartialObjectMetadata {
		// Each pod's strings are its own, as a decoder makes them.
		own := func(s string) string { return string([]byte(s)) }
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: own("team"), UID: types.UID(name + "-uid"), ResourceVersion: "42",
			Labels:          map[string]string{own("app"): own("web"), own("pod-template-hash"): own("7c9f4")},
			Annotations:     map[string]string{"kubectl.kubernetes.io/restartedAt": "now"},
			OwnerReferences: []metav1.OwnerReference{controllerRef(own("apps/v1"), own("ReplicaSet"), own("web-7c9f4"), types.UID(own("rs-uid")))},
		}}
	}
	slim := func(p *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
		out, err := slimPod(p)
		if err != nil {
			t.Fatal(err)
		}
		return out.(*metav1.PartialObjectMetadata)
	}
	a, b := slim(pod("web-7c9f4-a")), slim(pod("web-7c9f4-b"))
	want := metav1.ObjectMeta{Name: "web-7c9f4-a", Namespace: "team", Labels: map[string]string{"app": "web", "pod-template-hash": "7c9f4"},
		OwnerReferences: []metav1.OwnerReference{controllerRef("apps/v1", "ReplicaSet", "web-7c9f4", "rs-uid")}}
	if !equality.Semantic.DeepEqual(a.ObjectMeta, want) {
		t.Fatalf("slimPod kept %+v; want %+v", a.ObjectMeta, want)
	}
	same := func(what, x, y string) {
		if !sameBytes(x, y) {
			t.Errorf("the two pods hold two copies of %s %q", what, x)
		}
	}
	same("the namespace", a.Namespace, b.Namespace)
	same("a label value", a.Labels["pod-template-hash"], b.Labels["pod-template-hash"])
	for k := range a.Labels {
		for k2 := range b.Labels {
			if k == k2 {
				same("a label key", k, k2)
			}
		}
	}
	ra, rb := a.OwnerReferences[0], b.OwnerReferences[0]
	same("the controller's name", ra.Name, rb.Name)
	same("the controller's kind", ra.Kind, rb.Kind)
	same("the controller's UID", string(ra.UID), string(rb.UID))
}

// sameBytes reports whether two strings share their bytes, not only their value.
func sameBytes(a, b string) bool {
	return unsafe.StringData(a) == unsafe.StringData(b) //nolint:gosec // G103: where the bytes are is what the tests check
}
