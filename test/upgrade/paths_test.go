package upgrade_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/test/harness/deploy"
)

// Where config/default puts the operator (its namespace and namePrefix).
const (
	kustomizeNamespace  = "phalanks-system"
	kustomizeDeployment = "phalanks-controller-manager"
)

var _ = Describe("upgrade paths", Ordered, func() {
	Describe("make deploy of the new image over a kustomize install of the previous one", Ordered, func() {
		It("installs the previous release with make deploy, and the fleet settles", func() {
			makeDeploy(previous.Image)
			expectRolledOut(kustomizeNamespace, kustomizeDeployment, previous.Image)
			createFleet()
		})

		It("upgrades with make deploy: nothing flaps, every bucket is probed within the bound, nothing is lost", func() {
			upgrade("make deploy", kustomizeNamespace, kustomizeDeployment, current.Image, func() { makeDeploy(current.Image) })
			endWindowAndExpectRestored()
		})

		It("rolls back with make deploy of the previous image: the same holds", func() {
			upgrade("make deploy, rolled back", kustomizeNamespace, kustomizeDeployment, previous.Image, func() { makeDeploy(previous.Image) })
			endWindowAndExpectRestored()
		})
	})

	// The checks above can fail: an operator that is gone for longer than the bound
	// leaves a probe gap and failed v1alpha1 reads, and the sampler sees both.
	It("sees an outage it is there to catch: the operator scaled to zero for longer than the bound", func() {
		expectBucketsSettled()
		s := startSampling()
		from := time.Now()
		scaleOperator(0)
		Eventually(func() time.Duration { return probes.longestGap("head", from, time.Now()) }).
			WithTimeout(podTimeout).WithPolling(poll).Should(BeNumerically(">", gapBound))
		scaleOperator(2)
		expectRolledOut(kustomizeNamespace, kustomizeDeployment, previous.Image)
		r := s.measure("the operator scaled to zero (the sampler's own check)", from, time.Now(), 0)
		printResult(GinkgoWriter, r)
		Expect(r.longestGap).To(BeNumerically(">", gapBound))
		Expect(r.conversion).NotTo(BeEmpty(), "v1alpha1 reads without a webhook did not fail")
		expectBucketsSettled()
	})
})

func scaleOperator(replicas int32) {
	GinkgoHelper()
	dep := &appsv1.Deployment{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: kustomizeNamespace, Name: kustomizeDeployment}, dep)).To(Succeed())
	base := dep.DeepCopy()
	dep.Spec.Replicas = ptr.To(replicas)
	Expect(k8s.Patch(ctx, dep, client.MergeFrom(base))).To(Succeed())
}

func makeDeploy(image string) {
	GinkgoHelper()
	out, err := deploy.Make(ctx, local.Kubeconfig, "deploy", "IMG="+image)
	check(err)
	GinkgoWriter.Print(out)
}

// upgrade samples the fleet every second while act upgrades the operator, until the
// Deployment runs image on every replica and every observed StorageBucket has been
// probed twice by the new pods, and checks every invariant over that time.
func upgrade(path, namespace, name, image string, act func()) {
	GinkgoHelper()
	expectBucketsSettled()
	s := startSampling()
	from := time.Now()
	act()
	expectRolledOut(namespace, name, image)
	rolledOut := time.Now()
	rollout := rolledOut.Sub(from)
	Eventually(func(g Gomega) {
		for _, b := range fleetBuckets {
			if b.observed {
				g.Expect(probes.countSince(b.name, rolledOut)).To(BeNumerically(">=", 2), "probes of %s since the rollout", b.name)
			}
		}
	}).WithTimeout(settle + gapBound).WithPolling(poll).Should(Succeed())
	s.evaluate(path, from, time.Now(), rollout)
}

// expectRolledOut waits until the operator's Deployment runs image on all its replicas,
// every one Ready, and no pod of an older template is left.
func expectRolledOut(namespace, name, image string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		alive()
		dep := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, dep)).To(Succeed())
		want := ptr.Deref(dep.Spec.Replicas, 1)
		g.Expect(dep.Status.ObservedGeneration).To(Equal(dep.Generation))
		g.Expect(dep.Spec.Template.Spec.Containers[0].Image).To(Equal(image))
		g.Expect(dep.Status.UpdatedReplicas).To(Equal(want), "%s: %+v", name, dep.Status)
		g.Expect(dep.Status.AvailableReplicas).To(Equal(want), "%s: %+v", name, dep.Status)
		pods := &corev1.PodList{}
		g.Expect(k8s.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels(dep.Spec.Selector.MatchLabels))).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(int(want)), "pods of %s: %s", name, describePods(pods.Items))
		for _, p := range pods.Items {
			g.Expect(p.Spec.Containers[0].Image).To(Equal(image), "pod %s", p.Name)
		}
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
}

func describePods(pods []corev1.Pod) string {
	out := ""
	for _, p := range pods {
		out += fmt.Sprintf("%s %s %s; ", p.Name, p.Status.Phase, p.Spec.Containers[0].Image)
	}
	return out
}
