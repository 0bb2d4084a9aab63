package storagebucket

import (
	"encoding/json"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

// TestTheCacheHoldsSharedStringsOnce decodes two StorageBuckets from JSON, as the
// informer does (each decoded string its own copy), and checks that the transform
// leaves them sharing what they hold alike, keeps what is their own, and drops
// managedFields.
func TestTheCacheHoldsSharedStringsOnce(t *testing.T) {
	decode := func(name string) *phalanksv1beta1.StorageBucket {
		doc := `{"metadata":{"namespace":"team-a","name":"` + name + `","finalizers":["phalanks.io/storagebucket-protection"],
			"managedFields":[{"manager":"kubectl","operation":"Apply"}]},
			"spec":{"bucketName":"` + name + `-data","endpoint":"https://s3.eu-central-1.amazonaws.com","region":"eu-central-1",
			"credentialsSecretRef":{"name":"team-a-s3"},"healthCheck":{"depth":"HeadBucket"}},
			"status":{"conditions":[{"type":"Ready","status":"True","reason":"BucketReady","message":"bucket ` + name + `-data is ready"}]}}`
		sb := &phalanksv1beta1.StorageBucket{}
		if err := json.Unmarshal([]byte(doc), sb); err != nil {
			t.Fatal(err)
		}
		got, err := slimStorageBucket(sb)
		if err != nil {
			t.Fatal(err)
		}
		return got.(*phalanksv1beta1.StorageBucket)
	}
	a, b := decode("photos"), decode("videos")
	for what, pair := range map[string][2]string{
		"namespace":        {a.Namespace, b.Namespace},
		"finalizer":        {a.Finalizers[0], b.Finalizers[0]},
		"endpoint":         {a.Spec.Endpoint, b.Spec.Endpoint},
		"region":           {a.Spec.Region, b.Spec.Region},
		"depth":            {string(a.Spec.HealthCheck.Depth), string(b.Spec.HealthCheck.Depth)},
		"Secret's name":    {a.Spec.CredentialsSecretRef.Name, b.Spec.CredentialsSecretRef.Name},
		"condition type":   {a.Status.Conditions[0].Type, b.Status.Conditions[0].Type},
		"condition reason": {a.Status.Conditions[0].Reason, b.Status.Conditions[0].Reason},
	} {
		if pair[0] != pair[1] || !sameBytes(pair[0], pair[1]) {
			t.Errorf("the %s (%q, %q) is held twice", what, pair[0], pair[1])
		}
	}
	if a.Name != "photos" || a.Spec.BucketName != "photos-data" || a.Status.Conditions[0].Message != "bucket photos-data is ready" {
		t.Errorf("what is its own changed: %q %q %q", a.Name, a.Spec.BucketName, a.Status.Conditions[0].Message)
	}
	if a.ManagedFields != nil {
		t.Error("managedFields kept")
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	got, err := slimStorageBucket(other)
	if err != nil || got.(*corev1.ConfigMap).ManagedFields != nil {
		t.Errorf("another kind: %v, managedFields %v", err, got.(*corev1.ConfigMap).ManagedFields)
	}
}

// sameBytes reports whether two strings share their bytes, not only their value.
func sameBytes(a, b string) bool {
	return unsafe.StringData(a) == unsafe.StringData(b) //nolint:gosec // G103: where the bytes are is what the test checks
}
