package samples

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

// StorageBucketKind is the StorageBucket samples' kind.
var StorageBucketKind = schema.GroupKind{Group: phalanksv1beta1.GroupVersion.Group, Kind: "StorageBucket"}

// adaptStorageBucket points a StorageBucket sample at the environment's MinIO.
func adaptStorageBucket(ctx context.Context, e Env, obj *unstructured.Unstructured) error {
	return PointAtMinIO(ctx, e.Client, e.S3, obj)
}

// storageBucketReady expects every StorageBucket sample to become Ready.
func storageBucketReady(_ context.Context, _ Env, obj *unstructured.Unstructured) (bool, string, error) {
	sb, err := AsHub(obj)
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
