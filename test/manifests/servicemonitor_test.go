package manifests_test

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/phalanks/phalanks-operator/internal/certrotation"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// render runs kustomize build on a directory under config/.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	kustomize, err := tools.Path("kustomize")
	if err != nil {
		t.Fatal(err)
	}
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kustomize, "build", root+"/"+dir).Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

func str(t *testing.T, u *unstructured.Unstructured, path ...string) string {
	t.Helper()
	v, _, err := unstructured.NestedString(u.Object, path...)
	if err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), strings.Join(path, "."), err)
	}
	return v
}

// TestServiceMonitorVerifiesTLSAndAuthorizes follows every reference the rendered
// ServiceMonitor makes and checks that they meet: the CA it trusts is the one of the
// certificate the manager serves, for the name it checks; the token it presents belongs
// to a service account that may read the metrics. It uses no deprecated or insecure
// field.
func TestServiceMonitorVerifiesTLSAndAuthorizes(t *testing.T) {
	objs := render(t, "config/prometheus")
	sm := find(objs, "ServiceMonitor", "")
	if sm == nil {
		t.Fatal("config/prometheus renders no ServiceMonitor")
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("%d endpoints, want 1", len(endpoints))
	}
	ep := &unstructured.Unstructured{Object: endpoints[0].(map[string]any)}
	for _, banned := range [][]string{{"tlsConfig", "insecureSkipVerify"}, {"bearerTokenFile"}, {"bearerTokenSecret"}, {"basicAuth"}} {
		if _, found, _ := unstructured.NestedFieldNoCopy(ep.Object, banned...); found {
			t.Errorf("the endpoint sets %s", strings.Join(banned, "."))
		}
	}
	if s := str(t, ep, "scheme"); s != "https" {
		t.Errorf("scheme %q, want https", s)
	}

	// TLS: the CA and server name meet the certificate the manager serves: the one the
	// rotator issues into its Secret, for the names it gives the metrics Service.
	manager, _ := managerOf(t, objs)
	if v := rotationArg(manager); v != "true" {
		t.Fatalf("config/prometheus sets %s=%q: nothing issues the metrics endpoint's certificate", rotationFlag, v)
	}
	secretName := certrotation.DefaultSecretName
	if find(objs, "Secret", secretName) == nil {
		t.Fatalf("config/prometheus has no Secret %s", secretName)
	}
	if got := str(t, ep, "tlsConfig", "ca", "secret", "name"); got != secretName || str(t, ep, "tlsConfig", "ca", "secret", "key") != "ca.crt" {
		t.Errorf("the ServiceMonitor trusts %s, want ca.crt of %s, the rotator's Secret", got, secretName)
	}
	serverName := str(t, ep, "tlsConfig", "serverName")
	rotation := certrotation.New(t.Context(), certrotation.Options{
		WebhookService: certrotation.DefaultWebhookService, MetricsService: certrotation.DefaultMetricsService,
	}, webhookCertDir)
	if names := rotation.DNSNames(sm.GetNamespace()); !slices.Contains(names, serverName) {
		t.Errorf("serverName %q is not among the certificate's names %v", serverName, names)
	}
	svc := find(objs, "Service", "phalanks-controller-manager-metrics-service")
	if svc == nil || serverName != svc.GetName()+"."+svc.GetNamespace()+".svc" {
		t.Errorf("serverName %q does not name the metrics Service", serverName)
	}
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		if svc.GetLabels()[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the metrics Service lacks", k, v)
		}
	}
	for _, a := range manager.Args {
		if strings.HasPrefix(a, "--metrics-cert-dir") {
			t.Errorf("the manager sets %s: with the rotation on, the metrics endpoint serves the rotated certificate", a)
		}
	}

	// Authorization: the token belongs to a service account that may GET /metrics.
	if typ := str(t, ep, "authorization", "type"); typ != "Bearer" {
		t.Errorf("authorization type %q, want Bearer", typ)
	}
	tokenSecret := find(objs, "Secret", str(t, ep, "authorization", "credentials", "name"))
	if tokenSecret == nil || str(t, ep, "authorization", "credentials", "key") != "token" {
		t.Fatal("the authorization credentials name no token Secret of the render")
	}
	token := convert[corev1.Secret](t, tokenSecret)
	sa := token.Annotations[corev1.ServiceAccountNameKey]
	if token.Type != corev1.SecretTypeServiceAccountToken || sa == "" || token.Namespace != sm.GetNamespace() {
		t.Errorf("token Secret %s/%s is not a service account token in the ServiceMonitor's namespace", token.Namespace, token.Name)
	}
	rules := rulesOf(t, objs)
	mayScrape := false
	for _, u := range objs {
		if u.GetKind() != "ClusterRoleBinding" {
			continue
		}
		b := convert[rbacv1.ClusterRoleBinding](t, u)
		for _, s := range b.Subjects {
			if s.Kind != rbacv1.ServiceAccountKind || s.Name != sa || s.Namespace != token.Namespace {
				continue
			}
			for _, r := range rules["ClusterRole/"+b.RoleRef.Name] {
				if slices.Contains(r.NonResourceURLs, "/metrics") && slices.Contains(r.Verbs, "get") {
					mayScrape = true
				}
			}
		}
	}
	if !mayScrape {
		t.Errorf("service account %s may not GET /metrics", sa)
	}
}
