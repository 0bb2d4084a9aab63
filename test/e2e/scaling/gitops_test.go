package scaling_test

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

// TestAGitOpsControllerThatPutsReplicasBackIsNamedWithItsFix scales a Deployment down,
// then writes spec.replicas back as each GitOps controller does during a downtime:
// Argo CD and Flux's kustomize-controller with a forced server-side apply under their
// field managers, Argo CD's client-side apply and Flux's helm-controller with a
// three-way merge patch (an update).
// The operator keeps the change as a manual one, and a Warning names the tool and its
// fix; a person's kubectl scale gets no such warning.
func TestAGitOpsControllerThatPutsReplicasBackIsNamedWithItsFix(t *testing.T) {
	ctx := context.Background()
	apply := func(manager string) func(*testing.T, *appsv1.Deployment) {
		return func(t *testing.T, d *appsv1.Deployment) {
			ac := appsv1ac.Deployment(d.Name, d.Namespace).WithSpec(appsv1ac.DeploymentSpec().WithReplicas(3))
			expect(t).Expect(admin.Apply(ctx, ac, client.FieldOwner(manager), client.ForceOwnership)).To(Succeed())
		}
	}
	patch := func(manager string) func(*testing.T, *appsv1.Deployment) {
		return func(t *testing.T, d *appsv1.Deployment) {
			expect(t).Expect(admin.Patch(ctx, d, client.RawPatch(types.StrategicMergePatchType, []byte(`{"spec":{"replicas":3}}`)),
				client.FieldOwner(manager))).To(Succeed())
		}
	}
	// Argo CD's default sync is a client-side apply: kubectl apply's three-way merge patch
	// with the last-applied configuration, which the API server records as an Update.
	clientSideApply := func(manager string) func(*testing.T, *appsv1.Deployment) {
		return func(t *testing.T, d *appsv1.Deployment) {
			g := expect(t)
			lastApplied := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"` + d.Name + `","namespace":"` + d.Namespace + `"},"spec":{"replicas":3}}`
			body, err := json.Marshal(map[string]any{
				"metadata": map[string]any{"annotations": map[string]string{corev1.LastAppliedConfigAnnotation: lastApplied}},
				"spec":     map[string]any{"replicas": 3},
			})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(admin.Patch(ctx, d, client.RawPatch(types.StrategicMergePatchType, body), client.FieldOwner(manager))).To(Succeed())
			g.Expect(live(d)(g).GetManagedFields()).To(ContainElement(And(
				HaveField("Manager", manager), HaveField("Operation", metav1.ManagedFieldsOperationUpdate))))
		}
	}
	for _, c := range []struct {
		manager, tool, fix string
		write              func(*testing.T, *appsv1.Deployment)
	}{
		{"argocd-controller", "Argo CD", "RespectIgnoreDifferences=true", apply("argocd-controller")},
		{"argocd-application-controller", "Argo CD", "RespectIgnoreDifferences=true", clientSideApply("argocd-application-controller")},
		{"kustomize-controller", "Flux (kustomize-controller)", "spec.ignore", apply("kustomize-controller")},
		{"helm-controller", "Flux (helm-controller)", "suspend the HelmRelease", patch("helm-controller")},
	} {
		t.Run(c.manager, func(t *testing.T) {
			g := expect(t)
			ns := newNamespace(t, nil)
			startOperator(t, scaling.Options{})
			spec, _ := downtimeForAnHour()
			web := newDeployment(t, ns, "web", 3, map[string]string{scaling.AnnotationDowntime: spec})
			g.Eventually(func(g Gomega) int32 { return ptr.Deref(live(web)(g).Spec.Replicas, -1) }).WithTimeout(timeout).Should(BeEquivalentTo(0))

			c.write(t, web)
			g.Eventually(notes(web, scaling.ReasonGitOpsConflict)).WithTimeout(timeout).Should(ContainElement(And(
				HavePrefix("Warning: "+c.tool+" (field manager "+c.manager+") put spec.replicas back during the downtime"),
				ContainSubstring(c.fix))))
			g.Expect(notes(web, scaling.ReasonManualOverride)(g)).NotTo(BeEmpty())
			g.Expect(live(web)(g).Annotations).To(HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "3"))
		})
	}

	t.Run("a person's kubectl scale", func(t *testing.T) {
		g := expect(t)
		ns := newNamespace(t, nil)
		startOperator(t, scaling.Options{})
		spec, _ := downtimeForAnHour()
		web := newDeployment(t, ns, "web", 3, map[string]string{scaling.AnnotationDowntime: spec})
		g.Eventually(func(g Gomega) int32 { return ptr.Deref(live(web)(g).Spec.Replicas, -1) }).WithTimeout(timeout).Should(BeEquivalentTo(0))
		g.Expect(admin.SubResource("scale").Patch(ctx, web, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`)),
			client.WithSubResourceBody(&autoscalingv1.Scale{}), client.FieldOwner("kubectl"))).To(Succeed())
		g.Eventually(notes(web, scaling.ReasonManualOverride)).WithTimeout(timeout).Should(ContainElement(ContainSubstring("changed to 2")))
		g.Expect(notes(web, scaling.ReasonGitOpsConflict)(g)).To(BeEmpty())
	})
}
