package foo

import (
	"context"
	"errors"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
)

const (
	// containerName is the Deployment's one container, named as sample-controller names it.
	containerName = "nginx"
	// defaultImage is the image when the spec has none (the CRD defaults it too).
	defaultImage = "nginx:latest"
	// appLabel is the value of the app label on the Deployment's selector and pods.
	appLabel = "nginx"

	// LabelOwned marks the Deployments Foos create, so the controller's watch can hold
	// those alone (see CacheByObject).
	LabelOwned      = "phalanks.io/foo-deployment"
	labelOwnedValue = "true"
)

// notControlledError reports a Deployment of the Foo's deploymentName that the Foo does
// not control. Its message is sample-controller's.
type notControlledError struct{ name string }

func (e *notControlledError) Error() string { return fmt.Sprintf(MessageResourceExists, e.name) }

// validateSpec rejects what the schema should already have rejected at admission, for
// Foos stored before the schema had the rule.
func validateSpec(spec *phalanksv1alpha1.FooSpec) error {
	if spec.DeploymentName == "" {
		return errors.New("spec.deploymentName is empty: set the name of the Deployment this Foo owns")
	}
	return nil
}

// ensureDeployment returns the Foo's Deployment after creating it when it is missing, or
// updating its replicas, image and LabelOwned when they differ from the Foo's. A
// Deployment of that name that the Foo does not control is left alone and reported as a
// notControlledError.
//
// The cache holds only Deployments that carry LabelOwned, so a miss there is a missing
// Deployment, one of another owner, or one of ours without the label (created by an
// older release, or the label removed by hand). The create tells them apart: when the
// name is taken, the Deployment is read from the API server.
func (r *reconciler) ensureDeployment(ctx context.Context, foo *phalanksv1alpha1.Foo) (*appsv1.Deployment, error) {
	key := types.NamespacedName{Namespace: foo.Namespace, Name: foo.Spec.DeploymentName}
	dep := &appsv1.Deployment{}
	err := r.client.Get(ctx, key, dep)
	switch {
	case apierrors.IsNotFound(err):
		created := newDeployment(foo)
		err := r.client.Create(ctx, created, fieldOwner)
		if err == nil {
			return created, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create deployment: %w", err)
		}
		if err := r.apiReader.Get(ctx, key, dep); err != nil {
			// Gone again in the meantime: the retry creates it.
			return nil, fmt.Errorf("get deployment: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("get deployment: %w", err)
	}
	if !metav1.IsControlledBy(dep, foo) {
		return nil, &notControlledError{name: dep.Name}
	}
	updated, changed := withFooSpec(dep, foo)
	if !changed {
		return dep, nil
	}
	// A strategic merge patch carries only the replicas, our container's image and our
	// label, so fields other actors set (annotations, other containers) survive; the
	// optimistic lock turns a decision made on a stale cache into a conflict and a retry.
	patch := client.StrategicMergeFrom(dep, client.MergeFromWithOptimisticLock{})
	if err := r.client.Patch(ctx, updated, patch, fieldOwner); err != nil {
		return nil, fmt.Errorf("update deployment: %w", err)
	}
	return updated, nil
}

// newDeployment builds the Deployment for a Foo as sample-controller does: named
// spec.deploymentName, controlled by the Foo, labelled app=nginx and controller=<foo>,
// one nginx container, and the Foo's replicas (unset leaves the API default of 1); with
// podSecurity Restricted, its pods meet that level; with resources, the container has
// them.
func newDeployment(foo *phalanksv1alpha1.Foo) *appsv1.Deployment {
	labels := map[string]string{
		"app":        appLabel,
		"controller": foo.Name,
	}
	var replicas *int32
	if foo.Spec.Replicas != nil {
		replicas = ptr.To(*foo.Spec.Replicas)
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:      foo.Spec.DeploymentName,
			Namespace: foo.Namespace,
			Labels:    map[string]string{LabelOwned: labelOwnedValue},
			OwnerReferences: []metav1.OwnerReference{
				*metav1.NewControllerRef(foo, phalanksv1alpha1.GroupVersion.WithKind("Foo")),
			},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: containerName, Image: imageOf(foo)}},
				},
			},
		},
	}
	if foo.Spec.PodSecurity == phalanksv1alpha1.FooPodSecurityRestricted {
		restrict(&dep.Spec.Template.Spec)
	}
	withResources(&dep.Spec.Template.Spec, foo.Spec.Resources)
	return dep
}

// withResources gives pod's nginx container every request and limit want names, when
// the Foo has resources, and reports whether that changed it. Others stay: the API server
// defaults a missing request to its limit, and removing that would be rewritten at once.
func withResources(pod *corev1.PodSpec, want *corev1.ResourceRequirements) bool {
	if want == nil {
		return false
	}
	changed := false
	for i := range pod.Containers {
		c := &pod.Containers[i]
		if c.Name != containerName {
			continue
		}
		if mergeQuantities(&c.Resources.Requests, want.Requests) {
			changed = true
		}
		if mergeQuantities(&c.Resources.Limits, want.Limits) {
			changed = true
		}
		if len(want.Claims) > 0 && !apiequality.Semantic.DeepEqual(c.Resources.Claims, want.Claims) {
			c.Resources.Claims = slices.Clone(want.Claims)
			changed = true
		}
	}
	return changed
}

// mergeQuantities sets every quantity of want in have and reports whether one differed.
func mergeQuantities(have *corev1.ResourceList, want corev1.ResourceList) bool {
	changed := false
	for name, q := range want {
		if cur, ok := (*have)[name]; ok && cur.Cmp(q) == 0 {
			continue
		}
		if *have == nil {
			*have = corev1.ResourceList{}
		}
		(*have)[name] = q.DeepCopy()
		changed = true
	}
	return changed
}

// restrict gives pod and its nginx container what the restricted Pod Security level
// requires and reports whether it changed anything: runAsNonRoot and the RuntimeDefault
// seccomp profile on the pod, no privilege escalation and every capability dropped on
// the container, which may add back NET_BIND_SERVICE alone. It keeps the rest of what is
// there (a user id, other containers), so a patch of its result touches only these
// fields.
func restrict(pod *corev1.PodSpec) bool {
	changed := false
	if pod.SecurityContext == nil {
		pod.SecurityContext = &corev1.PodSecurityContext{}
	}
	psc := pod.SecurityContext
	if !ptr.Deref(psc.RunAsNonRoot, false) {
		psc.RunAsNonRoot = ptr.To(true)
		changed = true
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		psc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
		changed = true
	}
	for i := range pod.Containers {
		c := &pod.Containers[i]
		if c.Name != containerName {
			continue
		}
		if c.SecurityContext == nil {
			c.SecurityContext = &corev1.SecurityContext{}
		}
		sc := c.SecurityContext
		if ptr.Deref(sc.AllowPrivilegeEscalation, true) {
			sc.AllowPrivilegeEscalation = ptr.To(false)
			changed = true
		}
		if sc.Capabilities == nil {
			sc.Capabilities = &corev1.Capabilities{}
		}
		if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			sc.Capabilities.Drop = []corev1.Capability{"ALL"}
			changed = true
		}
		if add := slices.DeleteFunc(slices.Clone(sc.Capabilities.Add), func(c corev1.Capability) bool {
			return c != "NET_BIND_SERVICE"
		}); len(add) != len(sc.Capabilities.Add) {
			sc.Capabilities.Add = add
			changed = true
		}
	}
	return changed
}

// withFooSpec returns a copy of dep with the Foo's replicas (when the Foo sets them),
// image and resources (on our container, when it is still there and the Foo sets
// them), LabelOwned and, with podSecurity Restricted, the restricted level's settings,
// and whether anything changed. Removing
// podSecurity loosens nothing: the settings stay until the Deployment is re-created.
func withFooSpec(dep *appsv1.Deployment, foo *phalanksv1alpha1.Foo) (*appsv1.Deployment, bool) {
	out := dep.DeepCopy()
	changed := false
	if out.Labels[LabelOwned] != labelOwnedValue {
		if out.Labels == nil {
			out.Labels = map[string]string{}
		}
		out.Labels[LabelOwned] = labelOwnedValue
		changed = true
	}
	if want := foo.Spec.Replicas; want != nil && ptr.Deref(out.Spec.Replicas, 1) != *want {
		out.Spec.Replicas = ptr.To(*want)
		changed = true
	}
	for i := range out.Spec.Template.Spec.Containers {
		c := &out.Spec.Template.Spec.Containers[i]
		if c.Name == containerName && c.Image != imageOf(foo) {
			c.Image = imageOf(foo)
			changed = true
		}
	}
	if foo.Spec.PodSecurity == phalanksv1alpha1.FooPodSecurityRestricted && restrict(&out.Spec.Template.Spec) {
		changed = true
	}
	if withResources(&out.Spec.Template.Spec, foo.Spec.Resources) {
		changed = true
	}
	return out, changed
}

func imageOf(foo *phalanksv1alpha1.Foo) string {
	if foo.Spec.Image == "" {
		return defaultImage
	}
	return foo.Spec.Image
}
