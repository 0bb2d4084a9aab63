package scaling

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTheLastWriterOfTheLevelIsFoundInManagedFields(t *testing.T) {
	at := func(minute int) *metav1.Time {
		return &metav1.Time{Time: time.Date(2024, 6, 5, 20, minute, 0, 0, time.UTC)}
	}
	entry := func(manager string, op metav1.ManagedFieldsOperationType, minute int, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Time: at(minute), FieldsV1: metav1.NewFieldsV1(fields)}
	}
	replicas := `{"f:spec":{"f:replicas":{}}}`
	cases := []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		path    []string
		want    string
	}{
		{"Argo CD's server-side apply owns spec.replicas", []metav1.ManagedFieldsEntry{
			entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, 5, `{"f:status":{"f:replicas":{}}}`),
			entry("argocd-controller", metav1.ManagedFieldsOperationApply, 3, replicas),
		}, []string{"spec", "replicas"}, "argocd-controller"},
		{"Argo CD's client-side apply, an update, owns spec.replicas", []metav1.ManagedFieldsEntry{
			entry("argocd-controller", metav1.ManagedFieldsOperationApply, 1, `{"f:metadata":{"f:labels":{}}}`),
			entry("argocd-application-controller", metav1.ManagedFieldsOperationUpdate, 3, replicas),
		}, []string{"spec", "replicas"}, "argocd-application-controller"},
		{"the operator's own ownership does not count", []metav1.ManagedFieldsEntry{
			entry(FieldManager, metav1.ManagedFieldsOperationApply, 9, replicas),
			entry("kubectl", metav1.ManagedFieldsOperationUpdate, 2, replicas),
		}, []string{"spec", "replicas"}, "kubectl"},
		{"of two owners, the latest writer", []metav1.ManagedFieldsEntry{
			entry("kustomize-controller", metav1.ManagedFieldsOperationApply, 1, replicas),
			entry("helm-controller", metav1.ManagedFieldsOperationUpdate, 4, `{"f:spec":{"f:replicas":{},"f:template":{}}}`),
		}, []string{"spec", "replicas"}, "helm-controller"},
		{"a DaemonSet's nodeSelector, deep in the template", []metav1.ManagedFieldsEntry{
			entry("helm-controller", metav1.ManagedFieldsOperationUpdate, 4, `{"f:spec":{"f:template":{"f:spec":{"f:nodeSelector":{}}}}}`),
		}, []string{"spec", "template", "spec", "nodeSelector"}, "helm-controller"},
		{"nobody owns it", []metav1.ManagedFieldsEntry{entry("kubectl", metav1.ManagedFieldsOperationUpdate, 1, `{"f:metadata":{}}`)},
			[]string{"spec", "replicas"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, found := lastWriter(c.entries, c.path)
			if found != (c.want != "") || w.manager != c.want {
				t.Errorf("lastWriter = %q (found %v), want %q", w.manager, found, c.want)
			}
		})
	}
}

func TestAGitOpsControllerIsNamedWithItsFix(t *testing.T) {
	for manager, want := range map[string][]string{
		"argocd-controller":             {"Argo CD (field manager argocd-controller) put spec.replicas back", "RespectIgnoreDifferences=true", "#argo-cd"},
		"argocd-application-controller": {"Argo CD (field manager argocd-application-controller) put spec.replicas back", "RespectIgnoreDifferences=true", "#argo-cd"},
		"kustomize-controller":          {"Flux (kustomize-controller)", "spec.ignore", "#flux"},
		"helm-controller":               {"Flux (helm-controller)", "suspend the HelmRelease", "#flux"},
	} {
		e, ok := gitOpsNote(deployments.traits, levelWriter{manager: manager}, "spec.replicas")
		if !ok || !e.warning || e.reason != ReasonGitOpsConflict {
			t.Fatalf("%s: %+v", manager, e)
		}
		for _, w := range want {
			if !strings.Contains(e.note, w) {
				t.Errorf("%s: %q does not say %q", manager, e.note, w)
			}
		}
	}
	if _, ok := gitOpsNote(deployments.traits, levelWriter{manager: "kubectl"}, "spec.replicas"); ok {
		t.Error("a person's kubectl is taken for a GitOps controller")
	}
}
