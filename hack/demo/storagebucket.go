package main

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/samples"
)

var storageBucketKind = schema.GroupKind{Group: phalanksv1beta1.GroupVersion.Group, Kind: "StorageBucket"}

func init() {
	adapters[storageBucketKind] = adaptStorageBucket
	expectations[storageBucketKind] = storageBucketReady
}

// adaptStorageBucket points a StorageBucket sample at the demo's MinIO.
func adaptStorageBucket(ctx context.Context, e *env, obj *unstructured.Unstructured) error {
	return samples.PointAtMinIO(ctx, e.client, e.s3, obj)
}

// storageBucketReady expects every StorageBucket sample to become Ready.
func storageBucketReady(_ context.Context, _ *env, obj *unstructured.Unstructured) (bool, string, error) {
	sb, err := samples.AsHub(obj)
	if err != nil {
		return false, "", err
	}
	ready := meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionReady)
	if ready == nil {
		return false, "not probed yet", nil
	}
	state := fmt.Sprintf("Ready=%s %s", ready.Status, ready.Reason)
	if ready.Status != metav1.ConditionTrue {
		state += ": " + ready.Message
	}
	return ready.Status == metav1.ConditionTrue, state, nil
}
