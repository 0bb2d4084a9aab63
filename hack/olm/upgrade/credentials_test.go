package upgrade_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/internal/operatortest"
	"github.com/phalanks/phalanks-operator/internal/grandfather"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// The StorageBuckets of the credentials test, by what happens to them.
const (
	// legacy, tidy and labelled exist before the upgrade, as v1alpha1 objects of the
	// previous release; legacy's Secret stays unlabelled, tidy's is labelled after the
	// upgrade, labelled's was labelled before it.
	legacy   = "legacy"
	tidy     = "tidy"
	labelled = "labelled"
	// rereferenced and relocated exist before the upgrade too; after it, one names
	// another unlabelled Secret and the other another endpoint.
	rereferenced = "rereferenced"
	relocated    = "relocated"
	// newcomer is created after the upgrade, as v1beta1, naming legacy's Secret; its
	// tenant then tries to grant it the exemption.
	newcomer = "newcomer"

	tenantNamespace = "team-a"
	tenantUser      = "team-a-developer"
)

// TestCredentialsThatWorkedBeforeTheUpgradeKeepWorking upgrades from the previous
// release, which read any Secret, to the current one, which reads only labelled Secrets:
// every StorageBucket whose credentials worked before the upgrade stays Ready, with a
// Warning and the SecretLabelMissing condition naming the release that will refuse it;
// a reference made or changed after the upgrade is refused as before; what a tenant can
// write grants nothing.
func TestCredentialsThatWorkedBeforeTheUpgradeKeepWorking(t *testing.T) {
	ctx := t.Context()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	current, err := apimanifests.GetBundleFromDir(filepath.Join(root, bundle.Dir))
	if err != nil {
		t.Fatal(err)
	}
	prevName, prevCRDs, _ := previousRelease(t, root, current)
	t.Logf("upgrading from %s to %s", prevName, current.CSV.Name)

	s3 := minio.StartForTest(t, minio.Options{})
	for _, b := range []string{legacy, tidy, labelled, rereferenced, relocated, newcomer} {
		if err := s3.MakeBucket(ctx, b, miniogo.MakeBucketOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	env := operatortest.StartEnv(t)
	c := env.Client
	op := operatortest.Prepare(t)
	// MinIO listens on loopback, which the endpoint policy denies unless allowed.
	op.AddArgs("--storagebucket-endpoint-allow-cidrs=127.0.0.1/32")
	if err := crds.Install(ctx, c, prevCRDs, op.Webhook); err != nil {
		t.Fatal(err)
	}

	// The previous release's cluster: unlabelled Secrets (the label meant nothing then),
	// StorageBuckets in v1alpha1, Ready as its operator reported them.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNamespace}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"legacy-creds", "tidy-creds", "labelled-creds", "other-creds"} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace, Name: name},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": s3.AccessKey, "AWS_SECRET_ACCESS_KEY": s3.SecretKey}}
		if name == "labelled-creds" {
			sec.Labels = map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}
		}
		if err := c.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
	}
	for name, secret := range map[string]string{legacy: "legacy-creds", tidy: "tidy-creds", labelled: "labelled-creds",
		rereferenced: "legacy-creds", relocated: "legacy-creds"} {
		createV1alpha1(t, c, name, secret, s3)
	}

	// The upgrade: the new CRDs, then the new operator.
	if err := crds.Install(ctx, c, current.V1CRDs, op.Webhook); err != nil {
		t.Fatal(err)
	}
	op.Start(ctx, t, env, current.CSV)
	k8s := typedClient(t, env.Config)
	samples := sampleReady(t, k8s)

	for _, name := range []string{legacy, tidy, rereferenced, relocated} {
		eventually(t, fmt.Sprintf("%s Ready with the SecretLabelMissing notice", name), func() error {
			sb := getBucket(t, k8s, name)
			if err := probedReady(sb); err != nil {
				return err
			}
			notice := meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionSecretLabelMissing)
			if notice == nil || notice.Status != metav1.ConditionTrue || notice.Message != grandfather.Message(tenantNamespace, sb.Spec.CredentialsSecretRef.Name) {
				return fmt.Errorf("SecretLabelMissing is %v", notice)
			}
			return nil
		})
		eventually(t, name+"'s Warning event", func() error {
			return hasEvent(t, k8s, name, corev1.EventTypeWarning, phalanksv1beta1.ConditionSecretLabelMissing, "from release "+grandfather.EnforcedFrom)
		})
	}
	eventually(t, "labelled Ready without a notice", func() error {
		sb := getBucket(t, k8s, labelled)
		if meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionSecretLabelMissing) != nil {
			return fmt.Errorf("a labelled Secret has the notice")
		}
		return probedReady(sb)
	})

	// After the upgrade: a new reference to the same unlabelled Secret, and changes of two
	// grandfathered ones, are refused exactly as a release with the rule refuses them.
	fresh := &phalanksv1beta1.StorageBucket{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace, Name: newcomer},
		Spec: phalanksv1beta1.StorageBucketSpec{BucketName: newcomer, Endpoint: s3.URL, InsecureAllowHTTP: true, Region: s3.Region,
			CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "legacy-creds"},
			HealthCheck: phalanksv1beta1.HealthCheck{Interval: &metav1.Duration{Duration: 5 * time.Second},
				Timeout: &metav1.Duration{Duration: 2 * time.Second}}}}
	if err := k8s.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	patchAs(t, k8s, rereferenced, func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.CredentialsSecretRef.Name = "other-creds" })
	patchAs(t, k8s, relocated, func(sb *phalanksv1beta1.StorageBucket) {
		sb.Spec.Endpoint = strings.Replace(s3.URL, "127.0.0.1", "localhost", 1)
	})
	for _, name := range []string{newcomer, rereferenced, relocated} {
		eventually(t, name+" refused as SecretNotLabeled", func() error { return refused(getBucket(t, k8s, name)) })
	}

	// The tenant, who may write StorageBuckets, their status and ConfigMaps in their own
	// namespace, forges every kind of exemption they can write.
	tenant := tenantClient(t, env)
	patchAs(t, tenant, newcomer, func(sb *phalanksv1beta1.StorageBucket) {
		sb.Labels = map[string]string{"phalanks.io/grandfathered": "true"}
		sb.Annotations = map[string]string{"phalanks.io/grandfathered": "true"}
	})
	sb := getBucket(t, tenant, newcomer)
	forged := sb.DeepCopy()
	meta.SetStatusCondition(&forged.Status.Conditions, metav1.Condition{Type: phalanksv1beta1.ConditionSecretLabelMissing,
		Status: metav1.ConditionTrue, Reason: "Grandfathered", Message: "forged"})
	meta.SetStatusCondition(&forged.Status.Conditions, metav1.Condition{Type: phalanksv1beta1.ConditionReady,
		Status: metav1.ConditionTrue, Reason: "BucketReady", Message: "forged"})
	if err := tenant.Status().Patch(ctx, forged, client.MergeFrom(sb)); err != nil {
		t.Fatalf("the tenant patches the status: %v", err)
	}
	key, _ := grandfather.KeyOf(sb)
	record := func(ns string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: grandfather.ConfigMapName},
			Data: map[string]string{"count": "1", "enforcedFrom": grandfather.EnforcedFrom}, BinaryData: map[string][]byte{"references": key[:]}}
	}
	if err := tenant.Create(ctx, record(tenantNamespace)); err != nil {
		t.Fatalf("the tenant writes a record in their namespace: %v", err)
	}
	if err := tenant.Create(ctx, record(operatortest.Namespace)); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant writing a record in the operator's namespace: %v, want Forbidden", err)
	}
	eventually(t, "the forged status replaced by the operator's", func() error {
		sb := getBucket(t, k8s, newcomer)
		if meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionSecretLabelMissing) != nil {
			return fmt.Errorf("the forged SecretLabelMissing is still there")
		}
		return refused(sb)
	})

	// Labelling tidy's Secret ends its notice, and it stays Ready.
	labelSecret(t, k8s, "tidy-creds")
	eventually(t, "tidy without the notice", func() error {
		sb := getBucket(t, k8s, tidy)
		if meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionSecretLabelMissing) != nil {
			return fmt.Errorf("the notice is still there")
		}
		return probedReady(sb)
	})

	// A restart of the operator (new pods) reads the record: storedVersions no longer shows
	// the upgrade by now, so it could not be taken again.
	eventually(t, "the storage migration", func() error {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: "storagebuckets.phalanks.io"}, live); err != nil {
			return err
		}
		if len(live.Status.StoredVersions) != 1 {
			return fmt.Errorf("storedVersions %v", live.Status.StoredVersions)
		}
		return nil
	})
	op.Restart(t)
	// A spec change the reference does not depend on makes the restarted operator probe
	// legacy again at once: still grandfathered.
	patchAs(t, k8s, legacy, func(sb *phalanksv1beta1.StorageBucket) {
		sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 6 * time.Second}
	})
	eventually(t, "legacy probed by the restarted operator at its new generation, still Ready with the notice", func() error {
		sb := getBucket(t, k8s, legacy)
		if meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionSecretLabelMissing) == nil {
			return fmt.Errorf("no SecretLabelMissing notice")
		}
		return probedReady(sb)
	})
	if err := refused(getBucket(t, k8s, newcomer)); err != nil {
		t.Errorf("after the restart: %v", err)
	}

	// Through all of it, no StorageBucket whose credentials worked before the upgrade was
	// ever anything but Ready, and none got a SecretNotLabeled event.
	for _, name := range []string{legacy, tidy, labelled} {
		if seen := samples.notReady(name); len(seen) > 0 {
			t.Errorf("%s left Ready: %v", name, seen)
		}
		if err := hasEvent(t, k8s, name, corev1.EventTypeWarning, "SecretNotLabeled", ""); err == nil {
			t.Errorf("%s got a SecretNotLabeled event", name)
		}
	}
	t.Logf("%d samples of the StorageBuckets' Ready conditions", samples.count())
}

// createV1alpha1 creates a StorageBucket as the previous release's users did, probed
// every 5 s, with the status its operator wrote for a healthy bucket.
func createV1alpha1(t *testing.T, c client.Client, name, secret string, s3 *minio.Server) {
	t.Helper()
	sb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "phalanks.io/v1alpha1", "kind": "StorageBucket",
		"metadata": map[string]any{"name": name, "namespace": tenantNamespace},
		"spec": map[string]any{"bucketName": name, "endpoint": s3.Endpoint, "insecure": true, "region": s3.Region,
			"secretName": secret, "intervalSeconds": int64(5)},
	}}
	if err := c.Create(t.Context(), sb); err != nil {
		t.Fatalf("create %s as v1alpha1: %v", name, err)
	}
	if err := unstructured.SetNestedField(sb.Object, map[string]any{"healthy": true, "message": "bucket reachable",
		"lastChecked": time.Now().UTC().Format(time.RFC3339)}, "status"); err != nil {
		t.Fatal(err)
	}
	if err := c.Status().Update(t.Context(), sb); err != nil {
		t.Fatalf("the previous release's status of %s: %v", name, err)
	}
}

func typedClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	s := operatortest.Scheme()
	if err := phalanksv1beta1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := eventsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tenantClient acts as a developer of the tenant's namespace: they may do anything with
// StorageBuckets there, status included, and with Secrets and ConfigMaps there.
func tenantClient(t *testing.T, env *envtest.Env) client.Client {
	t.Helper()
	ctx := t.Context()
	admin := env.Client
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace, Name: "developer"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{phalanksv1beta1.GroupVersion.Group}, Resources: []string{"storagebuckets", "storagebuckets/status"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"*"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace, Name: "developer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenantUser}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}}
	for _, o := range []client.Object{role, binding} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, err := env.KubeconfigUser(tenantUser)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return typedClient(t, cfg)
}

func getBucket(t *testing.T, c client.Client, name string) *phalanksv1beta1.StorageBucket {
	t.Helper()
	sb := &phalanksv1beta1.StorageBucket{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: tenantNamespace, Name: name}, sb); err != nil {
		t.Fatalf("get StorageBucket %s: %v", name, err)
	}
	return sb
}

func patchAs(t *testing.T, c client.Client, name string, change func(*phalanksv1beta1.StorageBucket)) {
	t.Helper()
	sb := getBucket(t, c, name)
	base := sb.DeepCopy()
	change(sb)
	if err := c.Patch(t.Context(), sb, client.MergeFrom(base)); err != nil {
		t.Fatalf("patch StorageBucket %s: %v", name, err)
	}
}

func labelSecret(t *testing.T, c client.Client, name string) {
	t.Helper()
	sec := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: tenantNamespace, Name: name}, sec); err != nil {
		t.Fatal(err)
	}
	base := sec.DeepCopy()
	sec.Labels = map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}
	if err := c.Patch(t.Context(), sec, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// probedReady says why sb is not Ready as the new operator reported it (for the
// current generation, with the new release's reason).
func probedReady(sb *phalanksv1beta1.StorageBucket) error {
	ready := meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionReady)
	switch {
	case ready == nil:
		return fmt.Errorf("no Ready condition")
	case ready.Status != metav1.ConditionTrue || ready.Reason != "BucketReady":
		return fmt.Errorf("Ready is %s/%s: %s", ready.Status, ready.Reason, ready.Message)
	case sb.Status.ObservedGeneration != sb.Generation:
		return fmt.Errorf("observedGeneration %d, generation %d", sb.Status.ObservedGeneration, sb.Generation)
	}
	return nil
}

// refused says why sb is not refused as a release with the label rule refuses an
// unlabelled Secret.
func refused(sb *phalanksv1beta1.StorageBucket) error {
	ready := meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionReady)
	want := fmt.Sprintf("Secret %q holds the credentials but lacks the label %s=true", sb.Spec.CredentialsSecretRef.Name, phalanksv1beta1.LabelSecretAllowed)
	switch {
	case ready == nil:
		return fmt.Errorf("no Ready condition")
	case ready.Status != metav1.ConditionFalse || ready.Reason != "SecretNotLabeled" || !strings.HasPrefix(ready.Message, want):
		return fmt.Errorf("Ready is %s/%s: %s", ready.Status, ready.Reason, ready.Message)
	case sb.Status.ObservedGeneration != sb.Generation:
		return fmt.Errorf("observedGeneration %d, generation %d", sb.Status.ObservedGeneration, sb.Generation)
	}
	return nil
}

func hasEvent(t *testing.T, c client.Client, name, eventType, reason, note string) error {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(t.Context(), &list, client.InNamespace(tenantNamespace)); err != nil {
		return err
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Type == eventType && e.Reason == reason && strings.Contains(e.Note, note) {
			return nil
		}
	}
	return fmt.Errorf("no %s event %s about %s", eventType, reason, name)
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		last = check()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: not within two minutes; last: %v", what, last)
	}
}

// readySamples are the Ready conditions seen of each StorageBucket, read every 200 ms
// from the new operator's start to the end of the test.
type readySamples struct {
	mu   sync.Mutex
	seen map[string][]string
	n    int
}

func sampleReady(t *testing.T, c client.Client) *readySamples {
	t.Helper()
	s := &readySamples{seen: map[string][]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			var list phalanksv1beta1.StorageBucketList
			if err := c.List(ctx, &list, client.InNamespace(tenantNamespace)); err == nil {
				s.mu.Lock()
				s.n++
				for _, sb := range list.Items {
					if ready := meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionReady); ready != nil && ready.Status != metav1.ConditionTrue {
						s.seen[sb.Name] = append(s.seen[sb.Name], ready.Reason+": "+ready.Message)
					}
				}
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func (s *readySamples) notReady(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[name]
}

func (s *readySamples) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
