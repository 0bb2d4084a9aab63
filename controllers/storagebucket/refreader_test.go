package storagebucket

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// A cluster's ConfigMaps come and go (every new namespace brings one); the change
// counts must not keep an entry for each object that ever changed.
func TestRefReaderCountsChangesOnlyOfObjectsInUse(t *testing.T) {
	r := &refReader{}
	used := refKey{kind: kindSecret, NamespacedName: types.NamespacedName{Namespace: "ns", Name: "creds"}}
	bucket := bucketRef{UID: "uid-1", Key: types.NamespacedName{Namespace: "ns", Name: "sb"}}
	r.use(bucket, []refKey{used})

	for i := range 1000 {
		r.changed(refKey{kind: kindConfigMap, NamespacedName: types.NamespacedName{Namespace: fmt.Sprintf("ns-%d", i), Name: "kube-root-ca.crt"}})
	}
	r.changed(used)
	if len(r.versions) != 1 || r.versions[used] != 1 {
		t.Fatalf("versions = %v, want only %v counted once", r.versions, used)
	}
	if got := r.unusedChangeCount(); got != 1000 {
		t.Errorf("unusedChangeCount() = %d, want 1000", got)
	}

	r.release(bucket.UID)
	if len(r.versions) != 0 || len(r.users) != 0 {
		t.Errorf("after the last user left: versions %v, users %v, want both empty", r.versions, r.users)
	}
}
