// Package manifests_test checks the deployment manifests under config/ for the security
// baseline: least-privilege RBAC and a restricted, resource-bounded manager pod.
package manifests_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// objects decodes every YAML document in the files matching pattern under the repo root.
func objects(t *testing.T, pattern string) []*unstructured.Unstructured {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, pattern))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files match %s (%v)", pattern, err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("decode %s: %v", f, err)
			}
			if len(u.Object) > 0 {
				out = append(out, u)
			}
		}
	}
	return out
}

func convert[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatalf("convert %s/%s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

// rulesOf returns the policy rules of every Role and ClusterRole in the objects.
func rulesOf(t *testing.T, objs []*unstructured.Unstructured) map[string][]rbacv1.PolicyRule {
	t.Helper()
	rules := map[string][]rbacv1.PolicyRule{}
	for _, u := range objs {
		switch u.GetKind() {
		case "ClusterRole":
			rules["ClusterRole/"+u.GetName()] = convert[rbacv1.ClusterRole](t, u).Rules
		case "Role":
			rules["Role/"+u.GetName()] = convert[rbacv1.Role](t, u).Rules
		}
	}
	return rules
}

func wildcards(rules []rbacv1.PolicyRule) []string {
	var found []string
	for _, r := range rules {
		for field, values := range map[string][]string{
			"verbs": r.Verbs, "resources": r.Resources, "apiGroups": r.APIGroups,
			"nonResourceURLs": r.NonResourceURLs, "resourceNames": r.ResourceNames,
		} {
			for _, v := range values {
				if v == "*" {
					found = append(found, field)
				}
			}
		}
	}
	return found
}

func TestRolesGrantNoWildcard(t *testing.T) {
	rules := rulesOf(t, objects(t, "config/rbac/*.yaml"))
	if _, ok := rules["ClusterRole/manager-role"]; !ok {
		t.Fatal("config/rbac holds no generated manager-role: run `make manifests`")
	}
	for name, rs := range rules {
		if w := wildcards(rs); len(w) > 0 {
			t.Errorf("%s grants '*' in %v", name, w)
		}
	}
}

func TestWildcardCheckCatchesWildcards(t *testing.T) {
	for _, r := range []rbacv1.PolicyRule{
		{APIGroups: []string{"*"}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"*"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}},
	} {
		if len(wildcards([]rbacv1.PolicyRule{r})) == 0 {
			t.Errorf("rule %+v was not reported", r)
		}
	}
}

func TestManagerPodIsRestricted(t *testing.T) {
	var dep *appsv1.Deployment
	for _, u := range objects(t, "config/manager/manager.yaml") {
		if u.GetKind() == "Deployment" {
			dep = convert[appsv1.Deployment](t, u)
		}
	}
	if dep == nil {
		t.Fatal("config/manager/manager.yaml has no Deployment")
	}
	pod := dep.Spec.Template.Spec
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext must set runAsNonRoot and seccompProfile RuntimeDefault, got %+v", psc)
	}
	if pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken {
		t.Error("the manager needs its service account token")
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("container %s has no securityContext", c.Name)
			continue
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s must set allowPrivilegeEscalation: false", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %s must set readOnlyRootFilesystem: true", c.Name)
		case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
			t.Errorf("container %s must drop ALL capabilities", c.Name)
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[res]; !ok {
				t.Errorf("container %s has no %s request", c.Name, res)
			}
			if _, ok := c.Resources.Limits[res]; !ok {
				t.Errorf("container %s has no %s limit", c.Name, res)
			}
		}
	}
}
