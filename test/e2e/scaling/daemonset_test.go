package scaling_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

// TestADaemonSetLeavesEveryNodeAndComesBackExactly scales a DaemonSet down for a
// downtime: its pods select a node label no node has, kube-controller-manager's
// DaemonSet controller removes them from the node, and after the restore the pod
// template is exactly what it was (the user's own nodeSelector included), so the
// controller goes back to the original revision and runs its pod again.
func TestADaemonSetLeavesEveryNodeAndComesBackExactly(t *testing.T) {
	g := expect(t)
	ns := newNamespace(t, nil)
	startOperator(t, scaling.Options{})
	template := podTemplate("agent")
	template.Spec.NodeSelector = map[string]string{"type": "kwok"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: template,
		},
	}
	g.Expect(admin.Create(context.Background(), ds)).To(Succeed())
	running := func(g Gomega) appsv1.DaemonSetStatus { return live(ds)(g).Status }
	g.Eventually(running).WithTimeout(timeout).Should(And(
		HaveField("DesiredNumberScheduled", BeEquivalentTo(1)), HaveField("NumberReady", BeEquivalentTo(1))))
	original := live(ds)(g).Spec.Template

	spec, next := downtimeForAnHour()
	annotate(g, ds, map[string]string{scaling.AnnotationDowntime: spec})
	g.Eventually(func(g Gomega) *appsv1.DaemonSet { return live(ds)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.Template.Spec.NodeSelector", Equal(map[string]string{"type": "kwok", scaling.NodeSelectorScaledDown: "true"})),
		HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "1")),
		HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationNextTransition, next)),
	))
	g.Eventually(running).WithTimeout(timeout).Should(And(
		HaveField("DesiredNumberScheduled", BeEquivalentTo(0)), HaveField("CurrentNumberScheduled", BeEquivalentTo(0))),
		"a DaemonSet scaled down runs no pod on any node")

	annotate(g, ds, map[string]string{scaling.AnnotationDowntime: ""})
	g.Eventually(func(g Gomega) bool {
		return equality.Semantic.DeepEqual(live(ds)(g).Spec.Template, original)
	}).WithTimeout(timeout).Should(BeTrue(), "the pod template comes back exactly")
	g.Eventually(running).WithTimeout(timeout).Should(And(
		HaveField("DesiredNumberScheduled", BeEquivalentTo(1)), HaveField("NumberReady", BeEquivalentTo(1))))
	g.Expect(live(ds)(g).Annotations).NotTo(HaveKey(scaling.AnnotationOriginalReplicas))
	revisions := &appsv1.ControllerRevisionList{}
	g.Expect(admin.List(context.Background(), revisions, client.InNamespace(ns))).To(Succeed())
	g.Expect(revisions.Items).To(HaveLen(2), "the original revision is taken up again, not a third one made")
}

// TestADaemonSetKeepsASelectorChangedDuringTheDowntime changes a scaled-down
// DaemonSet's nodeSelector the way a helm upgrade does (a strategic merge patch that
// moves disk: ssd to disk: nvme and keeps the operator's key): the restore keeps the
// new selector, and the DaemonSet runs on the node that has the new label.
func TestADaemonSetKeepsASelectorChangedDuringTheDowntime(t *testing.T) {
	g := expect(t)
	ctx := context.Background()
	const disk = "e2e.phalanks.io/disk"
	nodes := &corev1.NodeList{}
	g.Expect(admin.List(ctx, nodes)).To(Succeed())
	g.Expect(nodes.Items).NotTo(BeEmpty())
	node := &nodes.Items[0]
	labelNode := func(value string) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, disk, value)
		g.Expect(admin.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
	}
	labelNode(`"nvme"`)
	t.Cleanup(func() { labelNode("null") })

	ns := newNamespace(t, nil)
	startOperator(t, scaling.Options{})
	template := podTemplate("agent")
	template.Spec.NodeSelector = map[string]string{"type": "kwok", disk: "ssd"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: template,
		},
	}
	g.Expect(admin.Create(ctx, ds, client.FieldOwner("helm"))).To(Succeed())

	spec, _ := downtimeForAnHour()
	annotate(g, ds, map[string]string{scaling.AnnotationDowntime: spec})
	g.Eventually(func(g Gomega) map[string]string { return live(ds)(g).Spec.Template.Spec.NodeSelector }).WithTimeout(timeout).
		Should(Equal(map[string]string{"type": "kwok", disk: "ssd", scaling.NodeSelectorScaledDown: "true"}))

	upgrade := fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:"nvme"}}}}}`, disk)
	g.Expect(admin.Patch(ctx, ds, client.RawPatch(types.StrategicMergePatchType, []byte(upgrade)), client.FieldOwner("helm"))).To(Succeed())
	g.Expect(live(ds)(g).Spec.Template.Spec.NodeSelector).To(Equal(
		map[string]string{"type": "kwok", disk: "nvme", scaling.NodeSelectorScaledDown: "true"}), "the upgrade kept the operator's key")

	annotate(g, ds, map[string]string{scaling.AnnotationDowntime: ""})
	g.Eventually(func(g Gomega) map[string]string { return live(ds)(g).Spec.Template.Spec.NodeSelector }).WithTimeout(timeout).
		Should(Equal(map[string]string{"type": "kwok", disk: "nvme"}), "the restore removes the operator's key and nothing else")
	g.Expect(live(ds)(g).Annotations).NotTo(HaveKey(scaling.AnnotationOriginalNodeSelector))
	g.Eventually(notes(ds, scaling.ReasonScaleUp)).WithTimeout(timeout).Should(ContainElement(
		ContainSubstring(`changed during the downtime, is kept as it is now: {"` + disk + `":"nvme","type":"kwok"}`)))
	g.Eventually(func(g Gomega) appsv1.DaemonSetStatus { return live(ds)(g).Status }).WithTimeout(timeout).Should(And(
		HaveField("DesiredNumberScheduled", BeEquivalentTo(1)), HaveField("NumberReady", BeEquivalentTo(1))),
		"it runs on the node the new selector names")
}
