package foo

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
)

func testFoo(replicas *int32, image string) *phalanksv1alpha1.Foo {
	return &phalanksv1alpha1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: "test", Namespace: "default", UID: types.UID("foo-uid"), Generation: 3},
		Spec:       phalanksv1alpha1.FooSpec{DeploymentName: "test-deployment", Replicas: replicas, Image: image},
	}
}

func TestNewDeployment(t *testing.T) {
	for name, tc := range map[string]struct {
		foo      *phalanksv1alpha1.Foo
		replicas *int32
		image    string
	}{
		"carries the Foo's replicas and image":                            {testFoo(ptr.To[int32](4), "nginx:1.27"), ptr.To[int32](4), "nginx:1.27"},
		"leaves replicas unset for the API default when the Foo has none": {testFoo(nil, "nginx:latest"), nil, "nginx:latest"},
		"runs nginx:latest when the image is empty":                       {testFoo(ptr.To[int32](1), ""), ptr.To[int32](1), "nginx:latest"},
	} {
		t.Run(name, func(t *testing.T) {
			dep := newDeployment(tc.foo)
			if dep.Name != "test-deployment" || dep.Namespace != "default" {
				t.Errorf("deployment is %s/%s, want default/test-deployment", dep.Namespace, dep.Name)
			}
			if !metav1.IsControlledBy(dep, tc.foo) {
				t.Errorf("deployment is not controlled by the Foo: %+v", dep.OwnerReferences)
			}
			ref := metav1.GetControllerOf(dep)
			if ref.APIVersion != "phalanks.io/v1alpha1" || ref.Kind != "Foo" || ref.Name != "test" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
				t.Errorf("controller reference %+v, want phalanks.io/v1alpha1 Foo test blocking owner deletion", ref)
			}
			wantLabels := map[string]string{"app": "nginx", "controller": "test"}
			if !apiequality.Semantic.DeepEqual(dep.Spec.Selector.MatchLabels, wantLabels) ||
				!apiequality.Semantic.DeepEqual(dep.Spec.Template.Labels, wantLabels) {
				t.Errorf("selector %v and pod labels %v, want %v", dep.Spec.Selector.MatchLabels, dep.Spec.Template.Labels, wantLabels)
			}
			if !apiequality.Semantic.DeepEqual(dep.Spec.Replicas, tc.replicas) {
				t.Errorf("replicas %v, want %v", ptr.Deref(dep.Spec.Replicas, -1), ptr.Deref(tc.replicas, -1))
			}
			want := []corev1.Container{{Name: "nginx", Image: tc.image}}
			if !apiequality.Semantic.DeepEqual(dep.Spec.Template.Spec.Containers, want) {
				t.Errorf("containers %+v, want %+v", dep.Spec.Template.Spec.Containers, want)
			}
			if tc.foo.Spec.Replicas != nil && dep.Spec.Replicas == tc.foo.Spec.Replicas {
				t.Error("the Deployment shares the Foo's replicas pointer")
			}
		})
	}
}

func TestWithFooSpec(t *testing.T) {
	existing := func(replicas int32, containers ...corev1.Container) *appsv1.Deployment {
		dep := newDeployment(testFoo(ptr.To(replicas), "nginx:latest"))
		if len(containers) > 0 {
			dep.Spec.Template.Spec.Containers = containers
		}
		return dep
	}
	sidecar := corev1.Container{Name: "sidecar", Image: "busybox"}
	for name, tc := range map[string]struct {
		dep         *appsv1.Deployment
		foo         *phalanksv1alpha1.Foo
		wantChanged bool
		replicas    int32
		containers  []corev1.Container
	}{
		"changes nothing when replicas and image match": {
			existing(2), testFoo(ptr.To[int32](2), "nginx:latest"), false, 2,
			[]corev1.Container{{Name: "nginx", Image: "nginx:latest"}},
		},
		"sets the Foo's replicas when they differ": {
			existing(1), testFoo(ptr.To[int32](2), "nginx:latest"), true, 2,
			[]corev1.Container{{Name: "nginx", Image: "nginx:latest"}},
		},
		"keeps the Deployment's replicas when the Foo sets none": {
			existing(3), testFoo(nil, "nginx:latest"), false, 3,
			[]corev1.Container{{Name: "nginx", Image: "nginx:latest"}},
		},
		"sets the Foo's image on the nginx container and leaves other containers alone": {
			existing(1, corev1.Container{Name: "nginx", Image: "nginx:1.25"}, sidecar), testFoo(ptr.To[int32](1), "nginx:1.27"), true, 1,
			[]corev1.Container{{Name: "nginx", Image: "nginx:1.27"}, sidecar},
		},
		"labels a Deployment of the Foo that lacks the owned label": {
			func() *appsv1.Deployment { d := existing(2); d.Labels = nil; return d }(), testFoo(ptr.To[int32](2), "nginx:latest"), true, 2,
			[]corev1.Container{{Name: "nginx", Image: "nginx:latest"}},
		},
		"adds no container when the nginx container was renamed": {
			existing(1, corev1.Container{Name: "web", Image: "nginx:1.25"}), testFoo(ptr.To[int32](1), "nginx:1.27"), false, 1,
			[]corev1.Container{{Name: "web", Image: "nginx:1.25"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			before := tc.dep.DeepCopy()
			got, changed := withFooSpec(tc.dep, tc.foo)
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if ptr.Deref(got.Spec.Replicas, -1) != tc.replicas {
				t.Errorf("replicas %d, want %d", ptr.Deref(got.Spec.Replicas, -1), tc.replicas)
			}
			if !apiequality.Semantic.DeepEqual(got.Spec.Template.Spec.Containers, tc.containers) {
				t.Errorf("containers %+v, want %+v", got.Spec.Template.Spec.Containers, tc.containers)
			}
			if got.Labels[LabelOwned] != "true" {
				t.Errorf("labels %v, want %s=true", got.Labels, LabelOwned)
			}
			if !apiequality.Semantic.DeepEqual(tc.dep, before) {
				t.Error("withFooSpec modified the Deployment it was given")
			}
		})
	}
}

func TestValidateSpecRejectsAnEmptyDeploymentName(t *testing.T) {
	if err := validateSpec(&phalanksv1alpha1.FooSpec{}); err == nil {
		t.Error("an empty deploymentName was accepted")
	}
	if err := validateSpec(&phalanksv1alpha1.FooSpec{DeploymentName: "web"}); err != nil {
		t.Errorf("a valid spec was rejected: %v", err)
	}
}

// restrictedLevel judges a pod template with the Pod Security admission plugin's own
// checks at the restricted level's newest version.
func restrictedLevel(t *testing.T, tmpl *corev1.PodTemplateSpec) policy.AggregateCheckResult {
	t.Helper()
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}
	return policy.AggregateCheckResults(evaluator.EvaluatePod(restricted, &tmpl.ObjectMeta, &tmpl.Spec))
}

func restrictedFoo(replicas int32, image string) *phalanksv1alpha1.Foo {
	foo := testFoo(ptr.To(replicas), image)
	foo.Spec.PodSecurity = phalanksv1alpha1.FooPodSecurityRestricted
	return foo
}

// A Foo with podSecurity Restricted gets pods the restricted level admits; one without
// gets sample-controller's pods, which the level refuses.
func TestNewDeploymentMeetsTheRestrictedLevelWhenAsked(t *testing.T) {
	dep := newDeployment(restrictedFoo(2, "nginxinc/nginx-unprivileged:1.30-alpine"))
	if r := restrictedLevel(t, &dep.Spec.Template); !r.Allowed {
		t.Errorf("the restricted level refuses the pods of a Foo with podSecurity Restricted: %s", r.ForbiddenDetail())
	}
	if c := dep.Spec.Template.Spec.Containers; len(c) != 1 || c[0].Name != "nginx" || c[0].Image != "nginxinc/nginx-unprivileged:1.30-alpine" {
		t.Errorf("containers %+v, want the one nginx container with the Foo's image", c)
	}
	plain := newDeployment(testFoo(ptr.To[int32](2), "nginx:latest"))
	if r := restrictedLevel(t, &plain.Spec.Template); r.Allowed {
		t.Error("the restricted level admits the pods of a Foo without podSecurity: the check cannot tell the two apart")
	}
	if plain.Spec.Template.Spec.SecurityContext != nil || plain.Spec.Template.Spec.Containers[0].SecurityContext != nil {
		t.Errorf("a Foo without podSecurity got security settings: %+v", plain.Spec.Template.Spec)
	}
}

func TestWithFooSpecRestrictsAnExistingDeployment(t *testing.T) {
	sidecar := corev1.Container{Name: "sidecar", Image: "busybox"}
	existing := newDeployment(testFoo(ptr.To[int32](2), "nginx:latest"))
	existing.Spec.Template.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](101)}
	existing.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
		Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN", "NET_BIND_SERVICE"}},
	}
	existing.Spec.Template.Spec.Containers = append(existing.Spec.Template.Spec.Containers, sidecar)
	before := existing.DeepCopy()

	got, changed := withFooSpec(existing, restrictedFoo(2, "nginx:latest"))
	if !changed {
		t.Fatal("turning podSecurity Restricted on changed nothing")
	}
	pod := got.Spec.Template.Spec
	if ptr.Deref(pod.SecurityContext.RunAsUser, 0) != 101 {
		t.Errorf("the pod's runAsUser %v was not kept", pod.SecurityContext.RunAsUser)
	}
	if c := pod.Containers[0].SecurityContext.Capabilities; !slices.Equal(c.Add, []corev1.Capability{"NET_BIND_SERVICE"}) || !slices.Equal(c.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities %+v, want NET_BIND_SERVICE added back alone and ALL dropped", c)
	}
	if !apiequality.Semantic.DeepEqual(pod.Containers[1], sidecar) {
		t.Errorf("the sidecar was changed: %+v", pod.Containers[1])
	}
	// The sidecar is not ours: the level refuses it until its owner restricts it. Ours
	// alone must pass.
	ours := got.Spec.Template.DeepCopy()
	ours.Spec.Containers = ours.Spec.Containers[:1]
	if r := restrictedLevel(t, ours); !r.Allowed {
		t.Errorf("the restricted level refuses the patched pods: %s", r.ForbiddenDetail())
	}
	if !apiequality.Semantic.DeepEqual(existing, before) {
		t.Error("withFooSpec modified the Deployment it was given")
	}

	if _, changed := withFooSpec(got, restrictedFoo(2, "nginx:latest")); changed {
		t.Error("a Deployment that already meets the level is patched again")
	}
	unset, changed := withFooSpec(got, testFoo(ptr.To[int32](2), "nginx:latest"))
	if changed || !apiequality.Semantic.DeepEqual(unset.Spec.Template.Spec, got.Spec.Template.Spec) {
		t.Error("removing podSecurity changed the pods' security settings")
	}
}

func TestWithFooSpecSetsTheResourcesTheFooNames(t *testing.T) {
	q := resource.MustParse
	foo := testFoo(ptr.To[int32](1), "nginx:latest")
	foo.Spec.Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: q("10m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: q("64Mi")},
	}
	created := newDeployment(foo)
	if got := created.Spec.Template.Spec.Containers[0].Resources; !apiequality.Semantic.DeepEqual(got, *foo.Spec.Resources) {
		t.Errorf("a new Deployment's container has resources %+v, want %+v", got, *foo.Spec.Resources)
	}

	// What the Foo does not name stays (a request an admission plugin or a LimitRange
	// defaulted, say), and an equal quantity written differently is equal.
	existing := newDeployment(testFoo(ptr.To[int32](1), "nginx:latest"))
	existing.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: q("0.01"), corev1.ResourceMemory: q("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: q("64Mi")},
	}
	if _, changed := withFooSpec(existing, foo); changed {
		t.Error("a container that has every quantity the Foo names is patched")
	}

	existing.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = q("1")
	got, changed := withFooSpec(existing, foo)
	if !changed {
		t.Fatal("a CPU request other than the Foo's was left")
	}
	res := got.Spec.Template.Spec.Containers[0].Resources
	if res.Requests.Cpu().Cmp(q("10m")) != 0 || res.Requests.Memory().Cmp(q("64Mi")) != 0 {
		t.Errorf("requests %v, want the Foo's CPU and the memory request kept", res.Requests)
	}
	if existing.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().Cmp(q("1")) != 0 {
		t.Error("withFooSpec modified the Deployment it was given")
	}

	foo.Spec.Resources = nil
	if _, changed := withFooSpec(existing, foo); changed {
		t.Error("a Foo without resources changed the container's")
	}
}
