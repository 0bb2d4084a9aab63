package grandfather_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/grandfather"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const crdName = "storagebuckets.phalanks.io"

func bucket(uid, secret string) *phalanksv1beta1.StorageBucket {
	return &phalanksv1beta1.StorageBucket{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "backups", UID: types.UID(uid)},
		Spec: phalanksv1beta1.StorageBucketSpec{
			Endpoint:             "https://s3.example.com",
			BucketName:           "backups",
			CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: secret},
		},
	}
}

func TestAKeyIsTheWholeReference(t *testing.T) {
	base := bucket("uid-1", "creds")
	key, ok := grandfather.KeyOf(base)
	if !ok {
		t.Fatal("a StorageBucket with credentials has a key")
	}
	for name, change := range map[string]func(*phalanksv1beta1.StorageBucket){
		"another StorageBucket (a re-created one of the same name)": func(sb *phalanksv1beta1.StorageBucket) { sb.UID = "uid-2" },
		"another Secret":   func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.CredentialsSecretRef.Name = "db-password" },
		"another endpoint": func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.Endpoint = "https://attacker.example.net" },
		"another access key ID key": func(sb *phalanksv1beta1.StorageBucket) {
			sb.Spec.CredentialsSecretRef.AccessKeyIDKey = "password"
		},
		"another secret access key key": func(sb *phalanksv1beta1.StorageBucket) {
			sb.Spec.CredentialsSecretRef.SecretAccessKeyKey = "token"
		},
		"a session token key added (one more value of the Secret sent)": func(sb *phalanksv1beta1.StorageBucket) {
			sb.Spec.CredentialsSecretRef.SessionTokenKey = "AWS_SESSION_TOKEN"
		},
		"parts moved across the separator": func(sb *phalanksv1beta1.StorageBucket) {
			sb.UID, sb.Spec.CredentialsSecretRef.Name = "uid-1c", "reds"
		},
	} {
		t.Run(name, func(t *testing.T) {
			changed := base.DeepCopy()
			change(changed)
			if k, _ := grandfather.KeyOf(changed); k == key {
				t.Error("the key did not change")
			}
		})
	}
	same := base.DeepCopy()
	same.Labels = map[string]string{"grandfathered": "true"}
	same.Annotations = map[string]string{"phalanks.io/grandfathered": "true"}
	same.Spec.HealthCheck.Depth = phalanksv1beta1.ProbeList
	same.Spec.CredentialsSecretRef.AccessKeyIDKey = phalanksv1beta1.DefaultAccessKeyIDKey
	if k, _ := grandfather.KeyOf(same); k != key {
		t.Error("labels, annotations, other spec fields or the default key names spelled out changed the key")
	}
	anonymous := base.DeepCopy()
	anonymous.Spec.CredentialsSecretRef = nil
	if _, ok := grandfather.KeyOf(anonymous); ok {
		t.Error("an anonymous StorageBucket has a key")
	}
}

func TestTheMessageSaysWhatToDoAndUntilWhen(t *testing.T) {
	msg := grandfather.Message("team-a", "creds")
	for _, want := range []string{"kubectl label secret creds -n team-a phalanks.io/storagebucket-secret=true",
		"from release " + grandfather.EnforcedFrom, "upgrade to " + grandfather.RuleFrom} {
		if !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(msg) {
			t.Errorf("the message %q does not say %q", msg, want)
		}
	}
}

// TestTheHeadDoesNotEnforceYet fails when the release being developed reaches the one
// from which grandfathered references are to be refused: that release removes the grace.
func TestTheHeadDoesNotEnforceYet(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VERSION \?= (\S+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile sets no VERSION")
	}
	head := version.MustParseSemantic(string(m[1]))
	if !head.LessThan(version.MustParseSemantic(grandfather.EnforcedFrom)) {
		t.Errorf("the head is %s, which is to refuse the grandfathered Secret references (EnforcedFrom %s): "+
			"remove internal/grandfather and say so in CHANGELOG.md, or move EnforcedFrom and the docs that name it",
			head, grandfather.EnforcedFrom)
	}
	if !version.MustParseSemantic(grandfather.RuleFrom).LessThan(version.MustParseSemantic(grandfather.EnforcedFrom)) {
		t.Errorf("RuleFrom %s is not before EnforcedFrom %s", grandfather.RuleFrom, grandfather.EnforcedFrom)
	}
}

// env is one API server with the StorageBucket CRD, shared by the tests below; each
// test uses namespaces of its own.
var (
	envOnce sync.Once
	env     *envtest.Env
	errEnv  error
)

func startEnv(t *testing.T) *envtest.Env {
	t.Helper()
	envOnce.Do(func() {
		s := runtime.NewScheme()
		utilruntime.Must(clientgoscheme.AddToScheme(s))
		utilruntime.Must(apiextensionsv1.AddToScheme(s))
		utilruntime.Must(phalanksv1beta1.AddToScheme(s))
		env, errEnv = envtest.Start(envtest.Options{Scheme: s})
	})
	if errEnv != nil {
		t.Fatal(errEnv)
	}
	return env
}

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

func newNamespace(t *testing.T, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// setStoredVersions makes the CRD look as an upgrade from a release that stored
// v1alpha1 leaves it (both versions), or as after the storage migration.
func setStoredVersions(t *testing.T, c client.Client, versions ...string) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(t.Context(), client.ObjectKey{Name: crdName}, crd); err != nil {
		t.Fatal(err)
	}
	crd.Status.StoredVersions = versions
	if err := c.Status().Update(t.Context(), crd); err != nil {
		t.Fatal(err)
	}
}

func createBucket(t *testing.T, c client.Client, ns, name, secret string) *phalanksv1beta1.StorageBucket {
	t.Helper()
	sb := &phalanksv1beta1.StorageBucket{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: phalanksv1beta1.StorageBucketSpec{
			Endpoint: "https://s3.example.com", BucketName: name, Region: "us-east-1",
			CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: secret},
		},
	}
	if err := c.Create(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

func record(c client.Client, ns string) *grandfather.Record {
	return &grandfather.Record{Namespace: ns, CRDName: crdName, Reader: c, Writer: c, Cache: c}
}

// records counts the records in every namespace.
func records(t *testing.T, c client.Client) int {
	t.Helper()
	var list corev1.ConfigMapList
	if err := c.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cm := range list.Items {
		if cm.Name == grandfather.ConfigMapName {
			n++
		}
	}
	return n
}

func allows(t *testing.T, r *grandfather.Record, sb *phalanksv1beta1.StorageBucket) bool {
	t.Helper()
	ok, err := r.Allows(context.Background(), sb)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// The envtest tests share one CRD's storedVersions, so they run one after the other.
func TestRecord(t *testing.T) {
	e := startEnv(t)
	c := e.Client
	t.Run("an upgrade from a release that stored v1alpha1 grandfathers the references that exist, and no later one", func(t *testing.T) {
		setStoredVersions(t, c, "v1alpha1", "v1beta1")
		operator, tenant := newNamespace(t, c, "operator-"), newNamespace(t, c, "tenant-")
		old := createBucket(t, c, tenant, "old", "creds")
		anonymous := createBucket(t, c, tenant, "anonymous", "creds")
		anonymous.Spec.CredentialsSecretRef = nil
		if err := c.Update(t.Context(), anonymous); err != nil {
			t.Fatal(err)
		}

		// Two replicas decide at once: both end up with the one record created first.
		replicas := []*grandfather.Record{record(c, operator), record(c, operator)}
		var wg sync.WaitGroup
		errs := make([]error, len(replicas))
		for i, r := range replicas {
			wg.Go(func() { errs[i] = r.Ensure(t.Context()) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("replica %d: %v", i, err)
			}
		}
		for i, r := range replicas {
			if r.Len() != 1 {
				t.Errorf("replica %d holds %d references, want the one StorageBucket with credentials", i, r.Len())
			}
			if !allows(t, r, old) {
				t.Errorf("replica %d does not grandfather the reference that existed", i)
			}
		}
		cm := &corev1.ConfigMap{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: operator, Name: grandfather.ConfigMapName}, cm); err != nil {
			t.Fatal(err)
		}
		if cm.Data["enforcedFrom"] != grandfather.EnforcedFrom || cm.Data["count"] != "1" {
			t.Errorf("the record says %v", cm.Data)
		}

		// After the snapshot: a new StorageBucket, a changed reference, a re-created one.
		later := createBucket(t, c, tenant, "later", "creds")
		changed := old.DeepCopy()
		changed.Spec.CredentialsSecretRef.Name = "other"
		moved := old.DeepCopy()
		moved.Spec.Endpoint = "https://elsewhere.example.net"
		recreated := old.DeepCopy()
		recreated.UID = "a-new-object-of-the-same-name"
		for name, sb := range map[string]*phalanksv1beta1.StorageBucket{"new": later, "another Secret": changed,
			"another endpoint": moved, "re-created": recreated} {
			if allows(t, replicas[0], sb) {
				t.Errorf("a reference made after the upgrade (%s) is grandfathered", name)
			}
		}

		// A restart reads the record; the snapshot is not taken again, although
		// storedVersions still lists v1alpha1 and new StorageBuckets exist.
		restarted := record(c, operator)
		if err := restarted.Ensure(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !allows(t, restarted, old) || allows(t, restarted, later) {
			t.Error("a restarted operator did not read the same record")
		}
	})

	t.Run("forgeries in the tenant's namespace and on the StorageBucket change nothing", func(t *testing.T) {
		setStoredVersions(t, c, "v1beta1")
		operator, tenant := newNamespace(t, c, "operator-"), newNamespace(t, c, "tenant-")
		sb := createBucket(t, c, tenant, "forged", "creds")
		sb.Labels = map[string]string{"phalanks.io/grandfathered": "true"}
		sb.Annotations = map[string]string{"phalanks.io/grandfathered": "true"}
		if err := c.Update(t.Context(), sb); err != nil {
			t.Fatal(err)
		}
		sb.Status.Conditions = []metav1.Condition{{Type: phalanksv1beta1.ConditionSecretLabelMissing, Status: metav1.ConditionTrue,
			Reason: "Grandfathered", Message: "forged", LastTransitionTime: metav1.Now()}}
		if err := c.Status().Update(t.Context(), sb); err != nil {
			t.Fatal(err)
		}
		// A record of the tenant's own, holding exactly this reference, in their namespace.
		key, _ := grandfather.KeyOf(sb)
		forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: grandfather.ConfigMapName},
			Data: map[string]string{"count": "1", "enforcedFrom": grandfather.EnforcedFrom}, BinaryData: map[string][]byte{"references": key[:]}}
		if err := c.Create(t.Context(), forged); err != nil {
			t.Fatal(err)
		}
		r := record(c, operator)
		if allows(t, r, sb) {
			t.Error("a StorageBucket created after the upgrade is grandfathered by what its tenant wrote")
		}
		if r.Len() != 0 {
			t.Errorf("a cluster that never stored v1alpha1 grandfathers %d references", r.Len())
		}
	})

	t.Run("deleting the record ends the grace period once the storage migration is done", func(t *testing.T) {
		setStoredVersions(t, c, "v1alpha1", "v1beta1")
		operator, tenant := newNamespace(t, c, "operator-"), newNamespace(t, c, "tenant-")
		old := createBucket(t, c, tenant, "old", "creds")
		r := record(c, operator)
		if !allows(t, r, old) {
			t.Fatal("the reference that existed is not grandfathered")
		}
		setStoredVersions(t, c, "v1beta1")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: operator, Name: grandfather.ConfigMapName}}
		if err := c.Delete(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
		if allows(t, r, old) {
			t.Error("the reference is still grandfathered after its record was deleted")
		}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(cm), cm); err != nil {
			t.Fatalf("the record was not written again (empty): %v", err)
		}
		if cm.Data["count"] != "0" {
			t.Errorf("the new record holds %s references, want 0", cm.Data["count"])
		}
	})

	t.Run("without a namespace nothing is grandfathered and nothing is written", func(t *testing.T) {
		setStoredVersions(t, c, "v1alpha1", "v1beta1")
		tenant := newNamespace(t, c, "tenant-")
		sb := createBucket(t, c, tenant, "old", "creds")
		before := records(t, c)
		r := record(c, "")
		if err := r.Ensure(t.Context()); err != nil {
			t.Fatal(err)
		}
		if allows(t, r, sb) {
			t.Error("a record without a namespace grandfathers a reference")
		}
		if after := records(t, c); after != before {
			t.Errorf("%d records before, %d after: one was written", before, after)
		}
	})
	setStoredVersions(t, c, "v1beta1")
}
