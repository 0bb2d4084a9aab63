package scaling_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

// TestARestoreRemovesWhatAnotherFieldManagerAlsoWrote has a second field manager write
// one of the operator's fields during a downtime, with kubectl as people and tools do:
// kubectl annotate --overwrite, a merge patch (what kubectl edit sends), a client-side
// kubectl apply of YAML exported during a downtime, and an Argo CD-like client-side
// apply. Server-side apply deletes a field the operator stops applying only when it
// owns it alone; the restore must remove it anyway. Left behind, original-replicas
// would be written back over every later change of the replicas, paused-replicas would
// pause KEDA for good, and the operator's nodeSelector key would keep a DaemonSet off
// every node.
func TestARestoreRemovesWhatAnotherFieldManagerAlsoWrote(t *testing.T) {
	startOperator(t, scaling.Options{})
	spec, _ := downtimeForAnHour()
	replicas := func(o *appsv1.Deployment) func(Gomega) int32 {
		return func(g Gomega) int32 { return ptr.Deref(live(o)(g).Spec.Replicas, -1) }
	}
	setReplicas := func(t *testing.T, ns, resource string, n int) {
		kubectl(t, "", "-n", ns, "scale", resource, fmt.Sprintf("--replicas=%d", n))
	}

	t.Run("kubectl annotate --overwrite of original-replicas", func(t *testing.T) {
		g := expect(t)
		ns := newNamespace(t, nil)
		web := newDeployment(t, ns, "web", 3, map[string]string{scaling.AnnotationDowntime: spec})
		g.Eventually(replicas(web)).WithTimeout(timeout).Should(BeEquivalentTo(0))

		kubectl(t, "", "-n", ns, "annotate", "--overwrite", "deployment/web", scaling.AnnotationOriginalReplicas+"=4")
		kubectl(t, "", "-n", ns, "annotate", "deployment/web", scaling.AnnotationDowntime+"-")
		g.Eventually(replicas(web)).WithTimeout(timeout).Should(BeEquivalentTo(4), "the record, as changed, is what comes back")
		g.Eventually(annotations(web)).WithTimeout(timeout).ShouldNot(HaveKey(scaling.AnnotationOriginalReplicas))

		setReplicas(t, ns, "deployment/web", 6)
		g.Consistently(replicas(web)).WithTimeout(3*time.Second).Should(BeEquivalentTo(6), "no stale count is written back")
	})

	t.Run("a merge patch of KEDA's paused-replicas", func(t *testing.T) {
		g := expect(t)
		ns := newNamespace(t, nil)
		web := newDeployment(t, ns, "web", 3, nil)
		so := newScaledObject(t, ns, "web", "web", 2, 5)
		sim := simulateKEDA(t, so, web, 2, 5)
		annotate(g, web, map[string]string{scaling.AnnotationDowntime: spec, scaling.AnnotationDowntimeReplicas: "1"})
		g.Eventually(annotations(so)).WithTimeout(timeout).Should(HaveKeyWithValue(scaling.KEDAPausedReplicas, "1"))
		g.Eventually(sim.hpaExists).WithTimeout(timeout).Should(BeFalse())

		kubectl(t, "", "-n", ns, "patch", "scaledobjects.keda.sh/web", "--type", "merge",
			"-p", `{"metadata":{"annotations":{"`+scaling.KEDAPausedReplicas+`":"2"}}}`)
		annotate(g, web, map[string]string{scaling.AnnotationDowntime: "", scaling.AnnotationDowntimeReplicas: ""})
		g.Eventually(annotations(so)).WithTimeout(timeout).Should(And(
			Not(HaveKey(scaling.KEDAPausedReplicas)), Not(HaveKey(scaling.AnnotationOriginalReplicas))))
		g.Eventually(sim.hpaExists).WithTimeout(timeout).Should(BeTrue(), "KEDA autoscales again")
	})

	t.Run("a merge patch that removes a DaemonSet's own nodeSelector key", func(t *testing.T) {
		g := expect(t)
		ns := newNamespace(t, nil)
		template := podTemplate("agent")
		template.Spec.NodeSelector = map[string]string{"type": "kwok"}
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent", Annotations: map[string]string{scaling.AnnotationDowntime: spec}},
			Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}, Template: template},
		}
		g.Expect(admin.Create(t.Context(), ds)).To(Succeed())
		selector := func(g Gomega) map[string]string { return live(ds)(g).Spec.Template.Spec.NodeSelector }
		g.Eventually(selector).WithTimeout(timeout).Should(Equal(map[string]string{"type": "kwok", scaling.NodeSelectorScaledDown: "true"}))

		kubectl(t, "", "-n", ns, "patch", "daemonset/agent", "--type", "merge", "-p", `{"spec":{"template":{"spec":{"nodeSelector":{"type":null}}}}}`)
		g.Expect(selector(g)).To(Equal(map[string]string{scaling.NodeSelectorScaledDown: "true"}))
		kubectl(t, "", "-n", ns, "annotate", "daemonset/agent", scaling.AnnotationDowntime+"-")
		g.Eventually(selector).WithTimeout(timeout).Should(BeEmpty(), "the operator's key goes with the restore")
		g.Expect(annotations(ds)(g)).NotTo(Or(HaveKey(scaling.AnnotationOriginalNodeSelector), HaveKey(scaling.AnnotationOriginalReplicas)))
		g.Eventually(func(g Gomega) int32 { return live(ds)(g).Status.DesiredNumberScheduled }).WithTimeout(timeout).Should(BeNumerically(">", 0),
			"its pods run again")
	})

	statefulSetReplicas := func(ns, name string) func(Gomega) int32 {
		return func(g Gomega) int32 {
			return ptr.Deref(live(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})(g).Spec.Replicas, -1)
		}
	}
	statefulSetAnnotations := func(ns, name string) func(Gomega) map[string]string {
		return annotations(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}

	t.Run("a client-side kubectl apply of YAML exported during a downtime", func(t *testing.T) {
		g := expect(t)
		ns := newNamespace(t, nil)
		kubectl(t, statefulSetYAML(t, ns, "db", 2, map[string]string{scaling.AnnotationDowntime: spec}), "apply", "-f", "-")
		g.Eventually(statefulSetReplicas(ns, "db")).WithTimeout(timeout).Should(BeEquivalentTo(0))
		kubectl(t, "", "-n", ns, "annotate", "statefulset/db", scaling.AnnotationDowntime+"-")
		g.Eventually(statefulSetReplicas(ns, "db")).WithTimeout(timeout).Should(BeEquivalentTo(2))

		// The night's export applied again: replicas 0 and the record come back, and
		// kubectl's client-side apply now shares the record with the operator.
		kubectl(t, statefulSetYAML(t, ns, "db", 0, map[string]string{scaling.AnnotationOriginalReplicas: "2"}), "apply", "-f", "-")
		g.Eventually(statefulSetReplicas(ns, "db")).WithTimeout(timeout).Should(BeEquivalentTo(2), "the record is restored")
		g.Eventually(statefulSetAnnotations(ns, "db")).WithTimeout(timeout).ShouldNot(HaveKey(scaling.AnnotationOriginalReplicas))
		setReplicas(t, ns, "statefulset/db", 4)
		g.Consistently(statefulSetReplicas(ns, "db")).WithTimeout(3 * time.Second).Should(BeEquivalentTo(4))
	})

	t.Run("an Argo CD-like client-side apply of the record during the downtime", func(t *testing.T) {
		g := expect(t)
		ns := newNamespace(t, nil)
		const argo = "argocd-application-controller"
		kubectl(t, statefulSetYAML(t, ns, "cache", 3, map[string]string{scaling.AnnotationDowntime: spec}), "apply", "--field-manager="+argo, "-f", "-")
		g.Eventually(statefulSetReplicas(ns, "cache")).WithTimeout(timeout).Should(BeEquivalentTo(0))

		// Git now holds an export from a night when it ran 5, and Argo CD syncs it.
		kubectl(t, statefulSetYAML(t, ns, "cache", 0, map[string]string{scaling.AnnotationDowntime: spec, scaling.AnnotationOriginalReplicas: "5"}),
			"apply", "--field-manager="+argo, "-f", "-")
		g.Eventually(statefulSetAnnotations(ns, "cache")).WithTimeout(timeout).Should(HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "5"))
		// The downtime ends when Git drops it.
		kubectl(t, statefulSetYAML(t, ns, "cache", 0, map[string]string{scaling.AnnotationOriginalReplicas: "5"}), "apply", "--field-manager="+argo, "-f", "-")
		g.Eventually(statefulSetReplicas(ns, "cache")).WithTimeout(timeout).Should(BeEquivalentTo(5))
		g.Eventually(statefulSetAnnotations(ns, "cache")).WithTimeout(timeout).ShouldNot(HaveKey(scaling.AnnotationOriginalReplicas))
		setReplicas(t, ns, "statefulset/cache", 1)
		g.Consistently(statefulSetReplicas(ns, "cache")).WithTimeout(3 * time.Second).Should(BeEquivalentTo(1))
	})
}

// statefulSetYAML is the manifest of a StatefulSet as a user keeps it in Git or exports
// it with kubectl get -o yaml.
func statefulSetYAML(t *testing.T, ns, name string, replicas int, annotations map[string]string) string {
	t.Helper()
	data, err := yaml.Marshal(map[string]any{
		"apiVersion": "apps/v1", "kind": "StatefulSet",
		"metadata": map[string]any{"namespace": ns, "name": name, "annotations": annotations},
		"spec": map[string]any{
			"replicas": replicas, "serviceName": name,
			"selector": map[string]any{"matchLabels": map[string]string{"app": name}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]string{"app": name}},
				"spec":     map[string]any{"containers": []any{map[string]string{"name": "app", "image": "registry.k8s.io/pause:3.10"}}},
			},
		},
	})
	expect(t).Expect(err).NotTo(HaveOccurred())
	return string(data)
}
