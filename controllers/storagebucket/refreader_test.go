package storagebucket

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// The data of a referenced object is kept while some StorageBucket uses it, and goes
// with its last user.
func TestRefReaderDropsDataWithItsLastUser(t *testing.T) {
	r := &refReader{}
	key := refKey{kind: kindSecret, NamespacedName: types.NamespacedName{Namespace: "ns", Name: "creds"}}
	a := bucketRef{UID: "uid-1", Key: types.NamespacedName{Namespace: "ns", Name: "a"}}
	b := bucketRef{UID: "uid-2", Key: types.NamespacedName{Namespace: "ns", Name: "b"}}
	r.use(a, []refKey{key})
	r.use(b, []refKey{key})
	r.data = map[refKey]refData{key: {resourceVersion: "1"}}

	r.release(a.UID)
	if len(r.usersOf(key)) != 1 || len(r.data) != 1 {
		t.Fatalf("with one user left: users %v, data %v; want both kept", r.usersOf(key), r.data)
	}
	r.release(b.UID)
	if len(r.users) != 0 || len(r.data) != 0 {
		t.Errorf("after the last user left: users %v, data %v; want both empty", r.users, r.data)
	}
}
