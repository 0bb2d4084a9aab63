package scaling_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

// evict asks the API server to evict one running pod of app, as a node drain does, and
// returns its answer.
func evict(g Gomega, ns, app string) error {
	pods := &corev1.PodList{}
	g.Expect(admin.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app": app})).To(Succeed())
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp.IsZero() && p.Status.Phase == corev1.PodRunning {
			return admin.SubResource("eviction").Create(context.Background(), p,
				&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns}})
		}
	}
	return nil
}

// TestADisruptionBudgetStopsBlockingDrainsWhileItsWorkloadIsDown keeps one replica of a
// Deployment through a downtime: its PodDisruptionBudget (minAvailable 2) would block
// evicting it. The budget is relaxed while the Deployment is scaled down, the API
// server's eviction (which kube-controller-manager's disruption controller informs)
// lets the pod go, and the budget comes back exactly with the Deployment.
func TestADisruptionBudgetStopsBlockingDrainsWhileItsWorkloadIsDown(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, nil)
	startOperator(t, scaling.Options{})
	web := newDeployment(t, ns, "web", 2, nil)
	two := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &two,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
	}
	g.Expect(admin.Create(context.Background(), pdb)).To(Succeed())
	g.Eventually(func(g Gomega) policyv1.PodDisruptionBudgetStatus { return live(pdb)(g).Status }).WithTimeout(timeout).Should(And(
		HaveField("CurrentHealthy", BeEquivalentTo(2)), HaveField("DisruptionsAllowed", BeEquivalentTo(0))))
	g.Expect(apierrors.IsTooManyRequests(evict(g, ns, "web"))).To(BeTrue(), "the budget blocks an eviction")

	spec, next := downtimeForAnHour()
	annotate(g, web, map[string]string{scaling.AnnotationDowntime: spec, scaling.AnnotationDowntimeReplicas: "1"})
	g.Eventually(func(g Gomega) *policyv1.PodDisruptionBudget { return live(pdb)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.MinAvailable", HaveValue(Equal(intstr.FromInt32(0)))),
		HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationOriginalMinAvailable, "2")),
		HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationNextTransition, next)),
	))
	g.Eventually(notes(pdb, scaling.ReasonScaleDown)).WithTimeout(timeout).Should(ContainElement(
		ContainSubstring("relaxed minAvailable from 2 to 0 while Deployment web is scaled down")))
	g.Eventually(func(g Gomega) error { return evict(g, ns, "web") }).WithTimeout(timeout).Should(Succeed(),
		"with its workload scaled down the budget blocks no drain")

	annotate(g, web, map[string]string{scaling.AnnotationDowntime: "", scaling.AnnotationDowntimeReplicas: ""})
	g.Eventually(func(g Gomega) *policyv1.PodDisruptionBudget { return live(pdb)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.MinAvailable", HaveValue(Equal(intstr.FromInt32(2)))),
		HaveField("Annotations", Not(HaveKey(scaling.AnnotationOriginalMinAvailable))),
		HaveField("Annotations", Not(HaveKey(scaling.AnnotationNextTransition))),
	))
	g.Eventually(func(g Gomega) int32 { return live(pdb)(g).Status.CurrentHealthy }).WithTimeout(timeout).Should(BeEquivalentTo(2))
	g.Eventually(func(g Gomega) bool { return apierrors.IsTooManyRequests(evict(g, ns, "web")) }).WithTimeout(timeout).Should(BeTrue(),
		"the budget blocks evictions again")
}
