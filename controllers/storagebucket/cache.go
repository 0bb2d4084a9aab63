package storagebucket

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/intern"
)

// CacheByObject is the manager cache configuration the StorageBucket controller needs:
// StorageBuckets as slimStorageBucket keeps them.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{&phalanksv1beta1.StorageBucket{}: {Transform: slimStorageBucket}}
}

// bucketStrings shares the strings many cached StorageBuckets hold alike.
var bucketStrings = intern.New(1 << 14)

// slimStorageBucket is the cache's transform of StorageBuckets: without managedFields,
// which nothing reads, and with the strings that many StorageBuckets hold alike held
// once: the namespace, the finalizer, the endpoint, the region, the policies and
// depth, the names of the Secret and CA bundle and their keys, and each condition's
// type, status and reason. What is unique to one StorageBucket (its name, UID,
// resourceVersion, bucket name, condition messages) stays as decoded.
func slimStorageBucket(obj any) (any, error) {
	sb, ok := obj.(*phalanksv1beta1.StorageBucket)
	if !ok {
		return cache.TransformStripManagedFields()(obj)
	}
	of := bucketStrings.Of
	sb.ManagedFields = nil
	sb.Namespace = of(sb.Namespace)
	for i, f := range sb.Finalizers {
		sb.Finalizers[i] = of(f)
	}
	s := &sb.Spec
	s.Endpoint, s.Region = of(s.Endpoint), of(s.Region)
	s.AddressingStyle = phalanksv1beta1.AddressingStyle(of(string(s.AddressingStyle)))
	s.HealthCheck.Depth = phalanksv1beta1.ProbeDepth(of(string(s.HealthCheck.Depth)))
	s.ManagementPolicy = phalanksv1beta1.ManagementPolicy(of(string(s.ManagementPolicy)))
	s.DeletionPolicy = phalanksv1beta1.DeletionPolicy(of(string(s.DeletionPolicy)))
	s.NonEmptyStrategy = phalanksv1beta1.NonEmptyStrategy(of(string(s.NonEmptyStrategy)))
	if r := s.CredentialsSecretRef; r != nil {
		r.Name, r.AccessKeyIDKey, r.SecretAccessKeyKey, r.SessionTokenKey = of(r.Name), of(r.AccessKeyIDKey), of(r.SecretAccessKeyKey), of(r.SessionTokenKey)
	}
	if ca := s.CABundle; ca != nil {
		for _, ref := range []*phalanksv1beta1.KeyReference{ca.ConfigMapKeyRef, ca.SecretKeyRef} {
			if ref != nil {
				ref.Name, ref.Key = of(ref.Name), of(ref.Key)
			}
		}
	}
	st := &sb.Status
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Type, c.Status, c.Reason = of(c.Type), metav1.ConditionStatus(of(string(c.Status))), of(c.Reason)
	}
	st.Region = of(st.Region)
	if c := st.CreatedBucket; c != nil {
		c.Endpoint, c.Region = of(c.Endpoint), of(c.Region)
	}
	return sb, nil
}
