package scaling_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
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
	g := expect(t)
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

// budget creates a PodDisruptionBudget of app's pods with minAvailable n and waits until
// kube-controller-manager's disruption controller counts them healthy.
func budget(t *testing.T, ns, app string, n int32) *policyv1.PodDisruptionBudget {
	t.Helper()
	g := expect(t)
	minAvailable := intstr.FromInt32(n)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvailable,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}
	g.Expect(admin.Create(context.Background(), pdb)).To(Succeed())
	g.Eventually(func(g Gomega) int32 { return live(pdb)(g).Status.CurrentHealthy }).WithTimeout(timeout).Should(BeNumerically(">=", n))
	return pdb
}

// TestADecoyCannotRelaxABudgetThatProtectsPodsOfAnythingElse plays a tenant who may
// create Deployments but not edit budgets: a Deployment with replicas 0, a forged
// original-replicas, force-downtime and the database's pod labels. Whatever runs the
// database — a bare ReplicaSet, a StatefulSet without a schedule, a StatefulSet whose
// template moved on while its pod kept the labels, a Rollout's ReplicaSet, an
// operator's own pods — the platform team's budget stays as it is and still refuses an
// eviction. All but the StatefulSet without a schedule leave the decoy the only
// workload whose pod template the budget selects: a decision on templates alone (before
// 1c15d22) relaxed the budget for them.
func TestADecoyCannotRelaxABudgetThatProtectsPodsOfAnythingElse(t *testing.T) {
	ctx := context.Background()
	// Each database runner, and what the operator's BudgetKept event names as the reason.
	type database struct {
		run  func(t *testing.T, ns string)
		kept string
	}
	runners := map[string]database{
		"a Rollout's ReplicaSet": {
			kept: "it also protects pods the operator did not scale down: ReplicaSet db-7c9f4 (db-7c9f4-",
			run: func(t *testing.T, ns string) {
				// Argo Rollouts runs pods through ReplicaSets it controls; the Widget custom
				// resource stands in for the Rollout.
				g := expect(t)
				widgets, err := crds.Load(filepath.Join("testdata"))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(crds.Install(ctx, admin, widgets, nil)).To(Succeed())
				rollout := newWidget(t, ns, "db", 1, nil)
				template := podTemplate("db")
				template.Labels["rollouts-pod-template-hash"] = "7c9f4"
				g.Expect(admin.Create(ctx, &appsv1.ReplicaSet{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-7c9f4", OwnerReferences: []metav1.OwnerReference{{
						APIVersion: widgetGVK.GroupVersion().String(), Kind: widgetGVK.Kind, Name: rollout.GetName(), UID: rollout.GetUID(), Controller: ptr.To(true)}}},
					Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1),
						Selector: &metav1.LabelSelector{MatchLabels: template.Labels}, Template: template},
				})).To(Succeed())
			},
		},
		"a StatefulSet whose template moved on while its pod kept the labels": {
			kept: "it also protects pods the operator did not scale down: StatefulSet db (db-0)",
			run: func(t *testing.T, ns string) {
				// With the OnDelete strategy a template change reaches no running pod until
				// someone deletes it: the pod keeps app=db, the template no longer has it.
				g := expect(t)
				template := podTemplate("db")
				template.Labels["tier"] = "data"
				sts := &appsv1.StatefulSet{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
					Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: "db",
						Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "data"}}, Template: template,
						UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}},
				}
				g.Expect(admin.Create(ctx, sts)).To(Succeed())
				g.Eventually(func(g Gomega) []corev1.Pod {
					pods := &corev1.PodList{}
					g.Expect(admin.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app": "db"})).To(Succeed())
					return pods.Items
				}).WithTimeout(timeout).Should(HaveLen(1))
				g.Eventually(func(g Gomega) error {
					s := live(sts)(g)
					s.Spec.Template.Labels["app"] = "db-next"
					return admin.Update(ctx, s)
				}).WithTimeout(timeout).Should(Succeed())
			},
		},
		"a bare ReplicaSet": {
			kept: "it also protects pods the operator did not scale down: ReplicaSet db (db-",
			run: func(t *testing.T, ns string) {
				expect(t).Expect(admin.Create(ctx, &appsv1.ReplicaSet{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
					Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1),
						Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: podTemplate("db")},
				})).To(Succeed())
			},
		},
		"a StatefulSet without a schedule": {
			kept: "StatefulSet db is not",
			run: func(t *testing.T, ns string) {
				expect(t).Expect(admin.Create(ctx, &appsv1.StatefulSet{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
					Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: "db",
						Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: podTemplate("db")},
				})).To(Succeed())
			},
		},
		"an operator's pods": {
			kept: "it also protects pods the operator did not scale down: ConfigMap db-cluster (db-1)",
			run: func(t *testing.T, ns string) {
				g := expect(t)
				cluster := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-cluster"}}
				g.Expect(admin.Create(ctx, cluster)).To(Succeed())
				template := podTemplate("db")
				g.Expect(admin.Create(ctx, &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-1", Labels: template.Labels,
						OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: cluster.Name, UID: cluster.UID, Controller: ptr.To(true)}}},
					Spec: template.Spec,
				})).To(Succeed())
			},
		},
	}
	for name, db := range runners {
		t.Run(name, func(t *testing.T) {
			g := expect(t)
			ns := newNamespace(t, nil)
			startOperator(t, scaling.Options{})
			db.run(t, ns)
			pdb := budget(t, ns, "db", 1)

			decoy := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decoy", Annotations: map[string]string{
					scaling.AnnotationOriginalReplicas: "1", scaling.AnnotationForceDowntime: "true"}},
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: podTemplate("db")},
			}
			g.Expect(admin.Create(ctx, decoy)).To(Succeed())

			// The operator decides the budget either way: it relaxes it or says why not.
			relaxed := func(p *policyv1.PodDisruptionBudget) bool { return writtenBy(scaling.FieldManager)(p) }
			g.Eventually(func(g Gomega) bool {
				return relaxed(live(pdb)(g)) || len(notes(pdb, "BudgetKept")(g)) > 0
			}).WithTimeout(timeout).Should(BeTrue())
			g.Expect(notes(pdb, "BudgetKept")(g)).To(ContainElement(And(
				ContainSubstring("not relaxed although Deployment decoy is scaled down: "), ContainSubstring(db.kept))))
			g.Consistently(func(g Gomega) *policyv1.PodDisruptionBudget { return live(pdb)(g) }).WithTimeout(5*time.Second).Should(And(
				HaveField("Spec.MinAvailable", HaveValue(Equal(intstr.FromInt32(1)))),
				Not(Satisfy(relaxed)),
			), "the platform team's budget is never written")
			g.Expect(apierrors.IsTooManyRequests(evict(g, ns, "db"))).To(BeTrue(), "a drain still cannot evict the database")
		})
	}
}

// TestARelaxedBudgetIsRestoredWhenItSelectsAPodOfSomethingElse relaxes a budget while
// its Deployment keeps one replica through the downtime, then starts a pod of
// something else with the same labels: the budget now protects a pod the operator did
// not scale down, and comes back at once. Once that pod has finished, the budget is
// relaxed again.
func TestARelaxedBudgetIsRestoredWhenItSelectsAPodOfSomethingElse(t *testing.T) {
	g := expect(t)
	ctx := context.Background()
	ns := newNamespace(t, nil)
	startOperator(t, scaling.Options{})
	web := newDeployment(t, ns, "web", 2, nil)
	pdb := budget(t, ns, "web", 2)
	spec, _ := downtimeForAnHour()
	annotate(g, web, map[string]string{scaling.AnnotationDowntime: spec, scaling.AnnotationDowntimeReplicas: "1"})
	g.Eventually(func(g Gomega) *intstr.IntOrString { return live(pdb)(g).Spec.MinAvailable }).WithTimeout(timeout).
		Should(HaveValue(Equal(intstr.FromInt32(0))))

	template := podTemplate("web")
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "debug-web", Labels: template.Labels}, Spec: template.Spec}
	g.Expect(admin.Create(ctx, stray)).To(Succeed())
	g.Eventually(func(g Gomega) *policyv1.PodDisruptionBudget { return live(pdb)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.MinAvailable", HaveValue(Equal(intstr.FromInt32(2)))),
		HaveField("Annotations", Not(HaveKey(scaling.AnnotationOriginalMinAvailable))),
	))
	g.Eventually(notes(pdb, scaling.ReasonScaleUp)).WithTimeout(timeout).Should(ContainElement(
		ContainSubstring("also selects pods the operator did not scale down: no controller (debug-web)")))

	// A pod that finished runs nothing a drain could disrupt: the scaling cache holds only
	// pods that have not, and the budget is relaxed again.
	g.Eventually(func(g Gomega) error {
		p := live(stray)(g)
		p.Status.Phase = corev1.PodSucceeded
		return admin.Status().Update(ctx, p)
	}).WithTimeout(timeout).Should(Succeed())
	g.Eventually(func(g Gomega) *intstr.IntOrString { return live(pdb)(g).Spec.MinAvailable }).WithTimeout(timeout).
		Should(HaveValue(Equal(intstr.FromInt32(0))), "relaxed again once the other pod finished")
	g.Expect(admin.Delete(ctx, stray, client.GracePeriodSeconds(0))).To(Succeed())
}

// TestABudgetSwitchedToTheOtherFieldDuringTheDowntimeKeepsTheSwitch relaxes a budget's
// minAvailable for a downtime, then switches the budget to maxUnavailable with kubectl
// patch --type merge, as a person fixing it by hand would. The API server takes only
// one of the two: the restore keeps the switch and removes the operator's record (it
// used to apply the saved minAvailable next to maxUnavailable, which the API server
// refused at every retry, for good).
func TestABudgetSwitchedToTheOtherFieldDuringTheDowntimeKeepsTheSwitch(t *testing.T) {
	g := expect(t)
	ns := newNamespace(t, nil)
	startOperator(t, scaling.Options{})
	web := newDeployment(t, ns, "web", 2, nil)
	pdb := budget(t, ns, "web", 2)
	spec, _ := downtimeForAnHour()
	annotate(g, web, map[string]string{scaling.AnnotationDowntime: spec, scaling.AnnotationDowntimeReplicas: "1"})
	g.Eventually(func(g Gomega) *policyv1.PodDisruptionBudget { return live(pdb)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.MinAvailable", HaveValue(Equal(intstr.FromInt32(0)))),
		HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationOriginalMinAvailable, "2"))))

	kubectl(t, "", "-n", ns, "patch", "poddisruptionbudget/web", "--type", "merge", "-p", `{"spec":{"minAvailable":null,"maxUnavailable":1}}`)
	annotate(g, web, map[string]string{scaling.AnnotationDowntime: "", scaling.AnnotationDowntimeReplicas: ""})
	g.Eventually(func(g Gomega) *policyv1.PodDisruptionBudget { return live(pdb)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.MaxUnavailable", HaveValue(Equal(intstr.FromInt32(1)))),
		HaveField("Spec.MinAvailable", BeNil()),
		HaveField("Annotations", Not(HaveKey(scaling.AnnotationOriginalMinAvailable))),
		HaveField("Annotations", Not(HaveKey(scaling.AnnotationNextTransition)))))
	g.Eventually(notes(pdb, scaling.ReasonScaleUp)).WithTimeout(timeout).Should(ContainElement(ContainSubstring(
		"kept maxUnavailable 1, to which it was switched during the downtime (minAvailable 2 is not restored)")))
}
