package scaling_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

// testScope labels the namespaces of a test whose operator has defaults: its
// --scaling-exclude-namespace-selector keeps every other namespace of the shared cluster
// out of them.
const testScope = "e2e.phalanks.io/scope"

// scopedNamespace creates a namespace named name (or generated from it, if it ends in
// a dash) in scope, with more labels.
func scopedNamespace(t *testing.T, scope, name string, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{testScope: scope}}}
	if strings.HasSuffix(name, "-") {
		ns.GenerateName = name
	} else {
		ns.Name = name
	}
	for k, v := range labels {
		ns.Labels[k] = v
	}
	expect(t).Expect(admin.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

// TestDefaultsTouchOnlyWhatTheyMean is a platform team turning on a default downtime
// for the whole cluster. It scales the Deployments and StatefulSets of ordinary
// namespaces, and nothing else: not DaemonSets or CronJobs (scheduled by their own
// annotations only), not a workload whose pods run at system-cluster-critical priority,
// not the cluster's and the platform's namespaces (kube-*, by the default list), not a
// namespace labelled phalanks.io/scaling=disabled. Namespaces of the default list and
// labelled ones are created while the operator runs, each with a workload at once
// (annotated to go down, too): a workload that reaches the operator before its new
// Namespace reaches the operator's cache must wait for it, not be taken for one in an
// ordinary namespace. Labelling an ordinary namespace disabled restores what is in it.
func TestDefaultsTouchOnlyWhatTheyMean(t *testing.T) {
	g := expect(t)
	ctx := context.Background()
	scope := rand.String(6)
	startOperator(t, scaling.Options{DefaultDowntime: "always", ExcludeNamespaceSelector: testScope + "!=" + scope})

	plain := scopedNamespace(t, scope, "defaults-", nil)
	web := newDeployment(t, plain, "web", 3, nil)
	db := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: plain, Name: "db"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: podTemplate("db")},
	}
	g.Expect(admin.Create(ctx, db)).To(Succeed())
	agent := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: plain, Name: "agent"},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}, Template: podTemplate("agent")},
	}
	g.Expect(admin.Create(ctx, agent)).To(Succeed())
	report := newCronJob(t, plain, "report", false, nil)
	critical := newDeploymentWith(t, plain, "dns", 2, nil, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.PriorityClassName = "system-cluster-critical"
	})

	var excluded []*appsv1.Deployment
	for i := range 10 {
		sys := scopedNamespace(t, scope, fmt.Sprintf("kube-e2e-%s-%d", scope, i), nil)
		excluded = append(excluded, newDeployment(t, sys, "web", 2, map[string]string{scaling.AnnotationDowntime: "always"}))
		off := scopedNamespace(t, scope, "disabled-", map[string]string{scaling.LabelScaling: scaling.ScalingDisabled})
		excluded = append(excluded, newDeployment(t, off, "web", 2, map[string]string{scaling.AnnotationDowntime: "always"}))
	}

	replicas := func(d *appsv1.Deployment) func(Gomega) int32 {
		return func(g Gomega) int32 { return ptr.Deref(live(d)(g).Spec.Replicas, -1) }
	}
	g.Eventually(replicas(web)).WithTimeout(timeout).Should(BeEquivalentTo(0))
	g.Eventually(func(g Gomega) int32 { return ptr.Deref(live(db)(g).Spec.Replicas, -1) }).WithTimeout(timeout).Should(BeEquivalentTo(0))
	g.Eventually(notes(critical, scaling.ReasonSystemCritical)).WithTimeout(timeout).Should(ContainElement(
		ContainSubstring("never scaled: its pods run at priority class system-cluster-critical")))
	g.Consistently(func(g Gomega) {
		g.Expect(replicas(critical)(g)).To(BeEquivalentTo(2), "pods at system-cluster-critical priority")
		g.Expect(live(agent)(g).Spec.Template.Spec.NodeSelector).To(BeEmpty(), "a DaemonSet")
		g.Expect(live(report)(g).Spec.Suspend).To(HaveValue(BeFalse()), "a CronJob")
		for _, d := range excluded {
			g.Expect(replicas(d)(g)).To(BeEquivalentTo(2), "namespace %s", d.Namespace)
		}
	}).WithTimeout(5 * time.Second).WithPolling(time.Second).Should(Succeed())

	kubectl(t, "", "label", "namespace", plain, scaling.LabelScaling+"="+scaling.ScalingDisabled)
	g.Eventually(replicas(web)).WithTimeout(timeout).Should(BeEquivalentTo(3), "a namespace labelled disabled gets back what was scaled down")
	g.Eventually(func(g Gomega) int32 { return ptr.Deref(live(db)(g).Spec.Replicas, -1) }).WithTimeout(timeout).Should(BeEquivalentTo(2))
}
