package olmv1_test

import (
	"fmt"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// installerUser is the documented installer service account, as the authorizer knows it.
const installerUser = "system:serviceaccount:" + installNamespace + ":phalanks-installer"

// installerObjects are the kinds docs/install-olm.md gives for the installer service account.
var installerObjects = []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// installedObjects lists every object OLM v1 installed for the ClusterExtension: of every
// listable kind the API server serves, the objects with OLM v1's owner label that the
// ClusterExtension owns (the label also travels to objects made from them, such as a
// Service's EndpointSlices and a Certificate's CertificateRequests).
func installedObjects() []unstructured.Unstructured {
	GinkgoHelper()
	lists, err := cs.Discovery().ServerPreferredResources()
	check(err)
	var out []unstructured.Unstructured
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		check(err)
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gv.WithKind(r.Kind + "List"))
			Expect(k8s.List(ctx, list, client.MatchingLabels{"olm.operatorframework.io/owner-name": extension})).To(Succeed(), "list %s", r.Name)
			for _, o := range list.Items {
				if !slices.ContainsFunc(o.GetOwnerReferences(), func(ref metav1.OwnerReference) bool {
					return ref.Kind == "ClusterExtension" && ref.Name == extension
				}) {
					continue
				}
				o.SetAnnotations(map[string]string{"resource": r.Name})
				out = append(out, o)
			}
		}
	}
	return out
}

// allowed asks the authorizer whether the installer may do attrs.
func allowed(attrs authorizationv1.ResourceAttributes) bool {
	GinkgoHelper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: installerUser, ResourceAttributes: &attrs}}
	Expect(k8s.Create(ctx, sar)).To(Succeed())
	return sar.Status.Allowed
}

// expectInstallerCovers checks the documented installer RBAC against what OLM v1
// installed: the installer may manage every installed object, and holds every permission
// the installed roles grant (without which Kubernetes' escalation check refuses to let it
// create them).
func expectInstallerCovers() {
	GinkgoHelper()
	objs := installedObjects()
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	GinkgoWriter.Printf("OLM v1 installed, by kind: %v\n", kinds)
	for _, kind := range []string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Deployment", "Service", "PodDisruptionBudget", "Certificate", "Issuer"} {
		Expect(kinds).To(HaveKey(kind), "OLM v1 installs a %s", kind)
	}
	var missing []string
	for _, o := range objs {
		gv, _ := schema.ParseGroupVersion(o.GetAPIVersion())
		resource := o.GetAnnotations()["resource"]
		for _, verb := range []string{"get", "update", "patch", "delete"} {
			if !allowed(authorizationv1.ResourceAttributes{Namespace: o.GetNamespace(), Verb: verb, Group: gv.Group, Resource: resource, Name: o.GetName()}) {
				missing = append(missing, fmt.Sprintf("%s %s %s/%s", verb, resource, o.GetNamespace(), o.GetName()))
			}
		}
		for _, verb := range []string{"create", "list", "watch"} {
			if !allowed(authorizationv1.ResourceAttributes{Namespace: o.GetNamespace(), Verb: verb, Group: gv.Group, Resource: resource}) {
				missing = append(missing, fmt.Sprintf("%s %s in %q", verb, resource, o.GetNamespace()))
			}
		}
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		var rules []rbacv1.PolicyRule
		raw, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range raw {
			var rule rbacv1.PolicyRule
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(r.(map[string]any), &rule)).To(Succeed())
			rules = append(rules, rule)
		}
		for _, rule := range rules {
			missing = append(missing, notGranted(rule, o.GetNamespace(), o.GetKind()+" "+o.GetName())...)
		}
	}
	Expect(missing).To(BeEmpty(), "the installer RBAC of docs/install-olm.md does not allow")
}

// notGranted lists what of rule the installer may not do, in namespace ("" for a
// ClusterRole's rule, which holds cluster-wide).
func notGranted(rule rbacv1.PolicyRule, namespace, from string) []string {
	GinkgoHelper()
	var out []string
	for _, url := range rule.NonResourceURLs {
		for _, verb := range rule.Verbs {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: installerUser,
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: url, Verb: verb}}}
			Expect(k8s.Create(ctx, sar)).To(Succeed())
			if !sar.Status.Allowed {
				out = append(out, fmt.Sprintf("%s %s (granted by %s)", verb, url, from))
			}
		}
	}
	names := rule.ResourceNames
	if len(names) == 0 {
		names = []string{""}
	}
	for _, group := range rule.APIGroups {
		for _, resource := range rule.Resources {
			sub := ""
			if r, s, ok := strings.Cut(resource, "/"); ok {
				resource, sub = r, s
			}
			for _, verb := range rule.Verbs {
				for _, name := range names {
					if !allowed(authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: group, Resource: resource, Subresource: sub, Name: name}) {
						out = append(out, fmt.Sprintf("%s %s/%s %q in %q (granted by %s)", verb, group, resource+"/"+sub, name, namespace, from))
					}
				}
			}
		}
	}
	return out
}
