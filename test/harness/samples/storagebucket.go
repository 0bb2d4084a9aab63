package samples

import (
	"context"
	"fmt"

	miniogo "github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

// StorageBucketKind is the StorageBucket samples' kind.
var StorageBucketKind = schema.GroupKind{Group: phalanksv1beta1.GroupVersion.Group, Kind: "StorageBucket"}

// adaptStorageBucket points a StorageBucket sample at the environment's MinIO (plain
// HTTP, so without a CA bundle), creates its credentials Secret with the MinIO keys,
// and, for a bucket that is only observed, creates the bucket it expects. Samples of the
// first release's v1alpha1 API get the same, in that API's fields.
func adaptStorageBucket(ctx context.Context, e Env, obj *unstructured.Unstructured) error {
	spec, _, err := unstructured.NestedMap(obj.Object, "spec")
	if err != nil {
		return err
	}
	spec["region"] = e.S3.Region
	if obj.GroupVersionKind().Version == phalanksv1alpha1.GroupVersion.Version {
		spec["endpoint"] = e.S3.Endpoint
		spec["insecure"] = true
	} else {
		spec["endpoint"] = e.S3.URL
		spec["insecureAllowHTTP"] = true
		delete(spec, "caBundle")
	}
	if err := unstructured.SetNestedMap(obj.Object, spec, "spec"); err != nil {
		return err
	}
	sb, err := asHub(obj)
	if err != nil {
		return err
	}
	if ref := sb.Spec.CredentialsSecretRef; ref != nil {
		idKey, secretKey := ref.Keys()
		// The operator reads only Secrets labelled for StorageBuckets.
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: ref.Name,
				Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
			StringData: map[string]string{idKey: e.S3.AccessKey, secretKey: e.S3.SecretKey},
		}
		if err := e.Client.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create credentials Secret %s: %w", ref.Name, err)
		}
	}
	if sb.Spec.ManagementPolicy != phalanksv1beta1.ManagementManage {
		err := e.S3.MakeBucket(ctx, sb.Spec.BucketName, miniogo.MakeBucketOptions{})
		if code := miniogo.ToErrorResponse(err).Code; err != nil && code != "BucketAlreadyOwnedByYou" {
			return fmt.Errorf("create bucket %s in MinIO: %w", sb.Spec.BucketName, err)
		}
	}
	return nil
}

// storageBucketReady expects every StorageBucket sample to become Ready.
func storageBucketReady(_ context.Context, _ Env, obj *unstructured.Unstructured) (bool, string, error) {
	sb, err := asHub(obj)
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

// asHub reads a StorageBucket of either served version as the v1beta1 hub.
func asHub(obj *unstructured.Unstructured) (*phalanksv1beta1.StorageBucket, error) {
	hub := &phalanksv1beta1.StorageBucket{}
	if obj.GroupVersionKind().Version != phalanksv1alpha1.GroupVersion.Version {
		return hub, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, hub)
	}
	spoke := &phalanksv1alpha1.StorageBucket{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, spoke); err != nil {
		return nil, err
	}
	return hub, spoke.ConvertTo(hub)
}
