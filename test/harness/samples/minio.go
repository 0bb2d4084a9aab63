package samples

import (
	"context"
	"fmt"

	miniogo "github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
)

// PointAtMinIO adapts a StorageBucket sample, in its namespace, to s3 (plain HTTP, so
// without a CA bundle): endpoint and region, its credentials Secret created with the
// MinIO keys and the label the operator requires, and, for a bucket it only observes,
// the bucket it expects. Samples of the first release's v1alpha1 API get the same, in
// that API's fields.
func PointAtMinIO(ctx context.Context, c client.Client, s3 *minio.Server, obj *unstructured.Unstructured) error {
	spec, _, err := unstructured.NestedMap(obj.Object, "spec")
	if err != nil {
		return err
	}
	spec["region"] = s3.Region
	if obj.GroupVersionKind().Version == phalanksv1alpha1.GroupVersion.Version {
		spec["endpoint"] = s3.Endpoint
		spec["insecure"] = true
	} else {
		spec["endpoint"] = s3.URL
		spec["insecureAllowHTTP"] = true
		delete(spec, "caBundle")
	}
	if err := unstructured.SetNestedMap(obj.Object, spec, "spec"); err != nil {
		return err
	}
	sb, err := AsHub(obj)
	if err != nil {
		return err
	}
	if ref := sb.Spec.CredentialsSecretRef; ref != nil {
		idKey, secretKey := ref.Keys()
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: ref.Name,
				Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
			StringData: map[string]string{idKey: s3.AccessKey, secretKey: s3.SecretKey},
		}
		if err := c.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create credentials Secret %s: %w", ref.Name, err)
		}
	}
	if sb.Spec.ManagementPolicy != phalanksv1beta1.ManagementManage {
		err := s3.MakeBucket(ctx, sb.Spec.BucketName, miniogo.MakeBucketOptions{})
		if code := miniogo.ToErrorResponse(err).Code; err != nil && code != "BucketAlreadyOwnedByYou" {
			return fmt.Errorf("create bucket %s in MinIO: %w", sb.Spec.BucketName, err)
		}
	}
	return nil
}

// AsHub reads a StorageBucket of either served version as the v1beta1 hub.
func AsHub(obj *unstructured.Unstructured) (*phalanksv1beta1.StorageBucket, error) {
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
