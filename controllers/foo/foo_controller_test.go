package foo

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	"github.com/phalanks/phalanks-operator/internal/conditions"
)

// The first four specs port sample-controller's controller_test.go: each prepares the
// API state its test preloads into fake informers, then runs the controller against a
// real API server and checks what it wrote.
var _ = Describe("Foo controller", func() {
	var (
		ctx context.Context
		ns  string
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	createFoo := func(name string, replicas int32) *phalanksv1alpha1.Foo {
		foo := &phalanksv1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       phalanksv1alpha1.FooSpec{DeploymentName: name + "-deployment", Replicas: ptr.To(replicas)},
		}
		Expect(env.Client.Create(ctx, foo)).To(Succeed())
		return foo
	}
	getDeployment := func(g Gomega, name string) *appsv1.Deployment {
		dep := &appsv1.Deployment{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, dep)).To(Succeed())
		return dep
	}
	getFoo := func(g Gomega, name string) *phalanksv1alpha1.Foo {
		foo := &phalanksv1alpha1.Foo{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, foo)).To(Succeed())
		return foo
	}
	// expectSynced waits for the Foo's status to describe its synced Deployment and for
	// the Normal Synced event.
	expectSynced := func(name string, available int32) {
		Eventually(func(g Gomega) {
			foo := getFoo(g, name)
			g.Expect(foo.Status.ObservedGeneration).To(Equal(foo.Generation))
			g.Expect(foo.Status.AvailableReplicas).To(Equal(available))
			// Ready passes the synced check; envtest runs no Deployment controller, so
			// the Deployment never reports Available.
			g.Expect(meta.FindStatusCondition(foo.Status.Conditions, conditions.TypeReady)).To(HaveField("Reason", BeElementOf(ReasonUnavailable, ReasonAvailable)))
			g.Expect(fooEvents(ctx, g, ns, name)).To(ContainElement(And(
				HaveField("Type", corev1.EventTypeNormal),
				HaveField("Reason", "Synced"),
				HaveField("Note", "Foo synced successfully"),
			)))
		}).Should(Succeed())
	}

	It("creates a Deployment controlled by the Foo (TestCreatesDeployment)", func() {
		foo := createFoo("test", 1)
		startManager(ns)

		Eventually(func(g Gomega) {
			dep := getDeployment(g, "test-deployment")
			g.Expect(metav1.IsControlledBy(dep, foo)).To(BeTrue())
			labels := map[string]string{"app": "nginx", "controller": "test"}
			g.Expect(dep.Spec.Selector.MatchLabels).To(Equal(labels))
			g.Expect(dep.Spec.Template.Labels).To(Equal(labels))
			g.Expect(dep.Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
			g.Expect(dep.Spec.Template.Spec.Containers).To(ConsistOf(And(
				HaveField("Name", "nginx"), HaveField("Image", "nginx:latest"))))
		}).Should(Succeed())
		expectSynced("test", 0)
	})

	It("leaves a Deployment that matches the Foo untouched and writes status (TestDoNothing)", func() {
		foo := createFoo("test", 1)
		dep := newDeployment(foo)
		Expect(env.Client.Create(ctx, dep)).To(Succeed())
		startManager(ns)

		expectSynced("test", 0)
		after := getDeployment(Default, "test-deployment")
		Expect(after.ResourceVersion).To(Equal(dep.ResourceVersion), "the controller wrote to a Deployment that matched")
	})

	It("updates the replicas of its Deployment and keeps fields it does not own (TestUpdateDeployment)", func() {
		foo := createFoo("test", 2)
		dep := newDeployment(foo)
		dep.Spec.Replicas = ptr.To[int32](1)
		dep.Annotations = map[string]string{"example.com/note": "set by someone else"}
		dep.Spec.Template.Spec.Containers = append(dep.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "busybox"})
		Expect(env.Client.Create(ctx, dep)).To(Succeed())
		startManager(ns)

		expectSynced("test", 0)
		after := getDeployment(Default, "test-deployment")
		Expect(after.Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))
		Expect(after.Annotations).To(HaveKeyWithValue("example.com/note", "set by someone else"))
		Expect(after.Spec.Template.Spec.Containers).To(ConsistOf(
			And(HaveField("Name", "nginx"), HaveField("Image", "nginx:latest")),
			And(HaveField("Name", "sidecar"), HaveField("Image", "busybox"))))

		By("following later edits of the Foo's replicas and image")
		foo = getFoo(Default, "test")
		foo.Spec.Replicas = ptr.To[int32](5)
		foo.Spec.Image = "nginx:1.27"
		Expect(env.Client.Update(ctx, foo)).To(Succeed())
		Eventually(func(g Gomega) {
			dep := getDeployment(g, "test-deployment")
			g.Expect(dep.Spec.Replicas).To(HaveValue(BeEquivalentTo(5)))
			g.Expect(dep.Spec.Template.Spec.Containers).To(ContainElement(And(
				HaveField("Name", "nginx"), HaveField("Image", "nginx:1.27"))))
		}).Should(Succeed())
		expectSynced("test", 0)
	})

	It("gives the pods of a Foo with podSecurity Restricted what that level requires, also when it is set later, and keeps what others set", func() {
		createFoo("test", 1)
		startManager(ns)
		expectSynced("test", 0)
		// The API server defaults an empty pod security context.
		Expect(getDeployment(Default, "test-deployment").Spec.Template.Spec.SecurityContext).To(HaveValue(And(
			HaveField("RunAsNonRoot", BeNil()), HaveField("SeccompProfile", BeNil()))))

		By("someone else setting a user id and a sidecar on the Deployment")
		dep := getDeployment(Default, "test-deployment")
		dep.Spec.Template.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](101)}
		dep.Spec.Template.Spec.Containers = append(dep.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "busybox"})
		Expect(env.Client.Update(ctx, dep)).To(Succeed())

		By("setting podSecurity Restricted on the Foo")
		foo := getFoo(Default, "test")
		foo.Spec.PodSecurity = phalanksv1alpha1.FooPodSecurityRestricted
		Expect(env.Client.Update(ctx, foo)).To(Succeed())
		Eventually(func(g Gomega) {
			pod := getDeployment(g, "test-deployment").Spec.Template.Spec
			g.Expect(pod.SecurityContext).To(HaveValue(And(
				HaveField("RunAsNonRoot", HaveValue(BeTrue())),
				HaveField("RunAsUser", HaveValue(BeEquivalentTo(101))),
				HaveField("SeccompProfile", HaveValue(HaveField("Type", corev1.SeccompProfileTypeRuntimeDefault))))))
			g.Expect(pod.Containers).To(ConsistOf(
				And(HaveField("Name", "nginx"), HaveField("SecurityContext", HaveValue(And(
					HaveField("AllowPrivilegeEscalation", HaveValue(BeFalse())),
					HaveField("Capabilities.Drop", ConsistOf(corev1.Capability("ALL"))))))),
				And(HaveField("Name", "sidecar"), HaveField("SecurityContext", BeNil()))))
		}).Should(Succeed())
		expectSynced("test", 0)

		By("refusing a level the API does not know at admission")
		foo = getFoo(Default, "test")
		foo.Spec.PodSecurity = "Privileged"
		Expect(apierrors.IsInvalid(env.Client.Update(ctx, foo))).To(BeTrue())
	})

	It("gives its container the Foo's resources once, and keeps a quantity the Foo does not name", func() {
		createFoo("test", 1)
		startManager(ns)
		expectSynced("test", 0)

		By("someone else setting a memory request on the Deployment")
		dep := getDeployment(Default, "test-deployment")
		dep.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
		Expect(env.Client.Update(ctx, dep)).To(Succeed())

		foo := getFoo(Default, "test")
		foo.Spec.Resources = &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.01")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		}
		Expect(env.Client.Update(ctx, foo)).To(Succeed())
		var generation int64
		Eventually(func(g Gomega) {
			dep := getDeployment(g, "test-deployment")
			res := dep.Spec.Template.Spec.Containers[0].Resources
			g.Expect(res.Requests.Cpu().String()).To(Equal("10m"))
			g.Expect(res.Requests.Memory().String()).To(Equal("64Mi"))
			g.Expect(res.Limits.Memory().String()).To(Equal("128Mi"))
			generation = dep.Generation
		}).Should(Succeed())
		expectSynced("test", 0)
		// The API server stores "0.01" as "10m": an equal quantity is not written again.
		Consistently(func() int64 { return getDeployment(Default, "test-deployment").Generation }, "3s").Should(Equal(generation))
	})

	It("reports a Deployment it does not control, retries, and leaves it alone (TestNotControlledByUs)", func() {
		foo := createFoo("test", 1)
		dep := newDeployment(foo)
		// Another's Deployment: no owner reference, and not the label Foos' Deployments carry.
		dep.OwnerReferences, dep.Labels = nil, nil
		dep.Spec.Replicas = ptr.To[int32](3)
		Expect(env.Client.Create(ctx, dep)).To(Succeed())
		startManager(ns)

		Eventually(func(g Gomega) {
			g.Expect(fooEvents(ctx, g, ns, "test")).To(ContainElement(And(
				HaveField("Type", corev1.EventTypeWarning),
				HaveField("Reason", "ErrResourceExists"),
				HaveField("Note", `Resource "test-deployment" already exists and is not managed by Foo`),
				// A second isomorphic event turns into a series: the pass was retried.
				HaveField("Series", HaveField("Count", BeNumerically(">=", 2))),
			)))
			foo := getFoo(g, "test")
			ready := meta.FindStatusCondition(foo.Status.Conditions, conditions.TypeReady)
			g.Expect(ready).To(HaveField("Reason", "ErrResourceExists"))
			g.Expect(foo.Status.ObservedGeneration).To(BeZero())
		}).Should(Succeed())
		after := getDeployment(Default, "test-deployment")
		Expect(after.ResourceVersion).To(Equal(dep.ResourceVersion), "the controller wrote to a Deployment it does not control")
		Expect(fooEvents(ctx, Default, ns, "test")).NotTo(ContainElement(HaveField("Reason", "Synced")))

		By("taking over the name once the other Deployment is gone")
		Expect(env.Client.Delete(ctx, after)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(metav1.IsControlledBy(getDeployment(g, "test-deployment"), foo)).To(BeTrue())
		}).Should(Succeed())
		expectSynced("test", 0)
	})

	It("follows its Deployment's status into availableReplicas and Ready", func() {
		createFoo("test", 2)
		startManager(ns)
		expectSynced("test", 0)

		dep := getDeployment(Default, "test-deployment")
		dep.Status = appsv1.DeploymentStatus{
			ObservedGeneration: dep.Generation, Replicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, UpdatedReplicas: 2,
			Conditions: []appsv1.DeploymentCondition{{
				Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
				LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}},
		}
		Expect(env.Client.Status().Update(ctx, dep)).To(Succeed())
		Eventually(func(g Gomega) {
			foo := getFoo(g, "test")
			g.Expect(foo.Status.AvailableReplicas).To(BeEquivalentTo(2))
			g.Expect(meta.IsStatusConditionTrue(foo.Status.Conditions, conditions.TypeReady)).To(BeTrue())
		}).Should(Succeed())
	})

	It("recreates its Deployment when someone deletes it", func() {
		createFoo("test", 1)
		startManager(ns)
		var first *appsv1.Deployment
		Eventually(func(g Gomega) { first = getDeployment(g, "test-deployment") }).Should(Succeed())

		Expect(env.Client.Delete(ctx, first)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(getDeployment(g, "test-deployment").UID).NotTo(Equal(first.UID))
		}).Should(Succeed())
	})

	It("watches only the Deployments Foos created, not every Deployment in the cluster", func() {
		createFoo("test", 1)
		other := newDeployment(createFoo("other", 1))
		other.Name, other.OwnerReferences, other.Labels = "unrelated", nil, nil
		Expect(env.Client.Create(ctx, other)).To(Succeed())
		mgr := startManager(ns)
		expectSynced("test", 0)

		var cached appsv1.DeploymentList
		Expect(mgr.GetCache().List(ctx, &cached, client.InNamespace(ns))).To(Succeed())
		var names []string
		for _, d := range cached.Items {
			names = append(names, d.Name)
		}
		Expect(names).To(ConsistOf("test-deployment", "other-deployment"))
		Expect(cached.Items).To(HaveEach(HaveField("Labels", HaveKeyWithValue(LabelOwned, "true"))))
	})

	It("labels a Deployment it controls that lacks the label, and then follows it", func() {
		foo := createFoo("test", 2)
		dep := newDeployment(foo)
		delete(dep.Labels, LabelOwned)
		dep.Spec.Replicas = ptr.To[int32](2)
		Expect(env.Client.Create(ctx, dep)).To(Succeed())
		startManager(ns)

		Eventually(func(g Gomega) {
			g.Expect(getDeployment(g, "test-deployment").Labels).To(HaveKeyWithValue(LabelOwned, "true"))
		}).Should(Succeed())
		expectSynced("test", 0)

		By("queueing the Foo on changes to that Deployment from then on")
		Eventually(func(g Gomega) {
			live := getDeployment(g, "test-deployment")
			live.Status = appsv1.DeploymentStatus{ObservedGeneration: live.Generation, Replicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
			g.Expect(env.Client.Status().Update(ctx, live)).To(Succeed())
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(getFoo(g, "test").Status.AvailableReplicas).To(BeEquivalentTo(2))
		}).Should(Succeed())
	})

	It("rejects a Foo without a valid deploymentName or with replicas outside 1-10 at admission", func() {
		for name, spec := range map[string]phalanksv1alpha1.FooSpec{
			"empty-name":   {DeploymentName: ""},
			"bad-name":     {DeploymentName: "Not_A_DNS_Name"},
			"zero":         {DeploymentName: "web", Replicas: ptr.To[int32](0)},
			"eleven":       {DeploymentName: "web", Replicas: ptr.To[int32](11)},
			"empty-image":  {DeploymentName: "web", Image: ""},
			"valid-bounds": {DeploymentName: "web", Replicas: ptr.To[int32](10)},
		} {
			foo := &phalanksv1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
			err := env.Client.Create(ctx, foo)
			switch name {
			case "valid-bounds", "empty-image":
				// An empty image is omitted and defaulted, not rejected.
				Expect(err).NotTo(HaveOccurred(), name)
			default:
				Expect(apierrors.IsInvalid(err)).To(BeTrue(), fmt.Sprintf("%s: %v", name, err))
			}
		}
		defaulted := getFoo(Default, "empty-image")
		Expect(defaulted.Spec.Image).To(Equal("nginx:latest"))
	})

	It("records an empty deploymentName that slipped past admission and does not retry it", func() {
		stored := createFoo("test", 1)
		mgr := newManager(ns)
		r := &reconciler{client: env.Client, recorder: mgr.GetEventRecorder(eventReporter), clock: clock.RealClock{}}

		// The schema rejects an empty name, so hand the reconciler the Foo as an older
		// stored object without the rule would read.
		invalid := stored.DeepCopy()
		invalid.Spec.DeploymentName = ""
		res, err := r.reconcileFoo(ctx, invalid)
		Expect(err).To(MatchError(reconcile.TerminalError(nil)), "an invalid spec must not be retried")
		Expect(res).To(BeZero())

		Eventually(func(g Gomega) {
			g.Expect(fooEvents(ctx, g, ns, "test")).To(ContainElement(And(
				HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", ReasonInvalidSpec))))
		}).Should(Succeed())
		foo := getFoo(Default, "test")
		Expect(meta.FindStatusCondition(foo.Status.Conditions, conditions.TypeReady)).To(HaveField("Reason", ReasonInvalidSpec))
		var deps appsv1.DeploymentList
		Expect(env.Client.List(ctx, &deps, client.InNamespace(ns))).To(Succeed())
		Expect(deps.Items).To(BeEmpty())
	})
})
