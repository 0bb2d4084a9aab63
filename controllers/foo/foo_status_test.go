package foo

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	"github.com/phalanks/phalanks-operator/internal/conditions"
)

var (
	t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Hour)
)

// deploymentWith returns the Foo's Deployment with the given status.
func deploymentWith(foo *phalanksv1alpha1.Foo, available int32, availableCond *corev1.ConditionStatus) *appsv1.Deployment {
	dep := newDeployment(foo)
	dep.Status.AvailableReplicas = available
	if availableCond != nil {
		dep.Status.Conditions = []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentAvailable, Status: *availableCond,
			Reason: "MinimumReplicasUnavailable", Message: "Deployment does not have minimum availability.",
		}}
	}
	return dep
}

func TestComputeStatus(t *testing.T) {
	foo := testFoo(ptr.To[int32](2), "nginx:latest")
	previous := foo.DeepCopy()
	previous.Status = phalanksv1alpha1.FooStatus{AvailableReplicas: 1, ObservedGeneration: 2}
	type want struct {
		available          int32
		observedGeneration int64
		ready              metav1.ConditionStatus
		readyReason        string
	}
	for name, tc := range map[string]struct {
		foo  *phalanksv1alpha1.Foo
		obs  observation
		want want
	}{
		"a synced, available Deployment makes the Foo Ready": {
			foo, observation{deployment: deploymentWith(foo, 2, ptr.To(corev1.ConditionTrue))},
			want{2, 3, metav1.ConditionTrue, ReasonAvailable},
		},
		"a synced Deployment short of replicas reports Unavailable": {
			foo, observation{deployment: deploymentWith(foo, 1, ptr.To(corev1.ConditionFalse))},
			want{1, 3, metav1.ConditionFalse, ReasonUnavailable},
		},
		"a new Deployment without conditions reports Unavailable with 0 replicas": {
			foo, observation{deployment: deploymentWith(foo, 0, nil)},
			want{0, 3, metav1.ConditionFalse, ReasonUnavailable},
		},
		"a Deployment the Foo does not control keeps the last availableReplicas and observedGeneration": {
			previous, observation{notControlled: &notControlledError{name: "test-deployment"}},
			want{1, 2, metav1.ConditionFalse, ReasonResourceExists},
		},
		"an invalid spec is reported and keeps the last availableReplicas and observedGeneration": {
			previous, observation{invalidSpec: errors.New("spec.deploymentName is empty")},
			want{1, 2, metav1.ConditionFalse, ReasonInvalidSpec},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, changed := computeStatus(tc.foo, tc.obs, t0)
			if !changed {
				t.Error("a first pass reported no change")
			}
			if got.AvailableReplicas != tc.want.available || got.ObservedGeneration != tc.want.observedGeneration {
				t.Errorf("availableReplicas %d observedGeneration %d, want %d and %d",
					got.AvailableReplicas, got.ObservedGeneration, tc.want.available, tc.want.observedGeneration)
			}
			if len(got.Conditions) != 1 {
				t.Errorf("conditions %+v, want only Ready", got.Conditions)
			}
			ready := meta.FindStatusCondition(got.Conditions, conditions.TypeReady)
			if ready == nil || ready.Status != tc.want.ready || ready.Reason != tc.want.readyReason || ready.ObservedGeneration != tc.foo.Generation {
				t.Errorf("Ready = %+v, want %s, reason %s at generation %d", ready, tc.want.ready, tc.want.readyReason, tc.foo.Generation)
			}
			if tc.foo.Status.Conditions != nil {
				t.Error("computeStatus modified the Foo's status")
			}
		})
	}
}

func TestComputeStatusReportsTheNotControlledDeploymentByName(t *testing.T) {
	got, _ := computeStatus(testFoo(nil, ""), observation{notControlled: &notControlledError{name: "web"}}, t0)
	ready := meta.FindStatusCondition(got.Conditions, conditions.TypeReady)
	if want := `Resource "web" already exists and is not managed by Foo`; ready == nil || ready.Message != want {
		t.Errorf("Ready = %+v, want message %q", ready, want)
	}
}

func TestStatusChanges(t *testing.T) {
	foo := testFoo(ptr.To[int32](2), "nginx:latest")
	unavailable := observation{deployment: deploymentWith(foo, 1, ptr.To(corev1.ConditionFalse))}
	for name, tc := range map[string]struct {
		obs         observation
		generation  int64
		wantChanged bool
		wantLTT     time.Time
	}{
		"a later pass over the same state changes nothing, so nothing is written": {
			unavailable, 3, false, t0,
		},
		"one more available replica is a change; Ready keeps its transition time": {
			observation{deployment: deploymentWith(foo, 2, ptr.To(corev1.ConditionFalse))}, 3, true, t0,
		},
		"a new generation is a change": {
			unavailable, 4, true, t0,
		},
		"the Deployment becoming Available moves Ready's transition time": {
			observation{deployment: deploymentWith(foo, 2, ptr.To(corev1.ConditionTrue))}, 3, true, t1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := foo.DeepCopy()
			f.Status, _ = computeStatus(f, unavailable, t0)
			f.Generation = tc.generation
			got, changed := computeStatus(f, tc.obs, t1)
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if c := meta.FindStatusCondition(got.Conditions, conditions.TypeReady); !c.LastTransitionTime.Time.Equal(tc.wantLTT) {
				t.Errorf("Ready transitioned at %s, want %s", c.LastTransitionTime, tc.wantLTT)
			}
		})
	}
}

func TestStatusPatchStoresZeroAvailableReplicas(t *testing.T) {
	data, err := statusPatch(phalanksv1alpha1.FooStatus{ObservedGeneration: 1})
	if err != nil {
		t.Fatal(err)
	}
	var patch struct {
		Status map[string]json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(data, &patch); err != nil {
		t.Fatal(err)
	}
	if got := string(patch.Status["availableReplicas"]); got != "0" {
		t.Errorf("patch %s sets availableReplicas to %q, want 0", data, got)
	}
}
