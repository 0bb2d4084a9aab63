package scaling_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
)

var widgetGVK = schema.GroupVersionKind{Group: "scaling.e2e.phalanks.io", Version: "v1", Kind: "Widget"}

func newWidget(t *testing.T, ns, name string, replicas int64, annotations map[string]string) *unstructured.Unstructured {
	t.Helper()
	w := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": replicas}}}
	w.SetGroupVersionKind(widgetGVK)
	w.SetNamespace(ns)
	w.SetName(name)
	w.SetAnnotations(annotations)
	expect(t).Expect(admin.Create(context.Background(), w)).To(Succeed())
	return w
}

func widgetReplicas(w *unstructured.Unstructured) func(Gomega) int64 {
	return func(g Gomega) int64 {
		n, _, err := unstructured.NestedInt64(live(w)(g).Object, "spec", "replicas")
		g.Expect(err).NotTo(HaveOccurred())
		return n
	}
}

// TestAKindWithAScaleSubresourceIsScaledThroughIt names a custom resource in
// --scaling-resources before its CRD exists. The operator sets it up when the CRD
// appears and scales its objects through /scale, with nothing but the RBAC that
// docs/scheduled-scaling.md tells a user to grant, and restores the count after the
// downtime. A count recorded without the scale that should follow it (an operator
// stopped between the two requests) is completed, not mistaken for a manual change.
func TestAKindWithAScaleSubresourceIsScaledThroughIt(t *testing.T) {
	g := expect(t)
	ctx := context.Background()
	grant := &rbacv1.ClusterRole{}
	g.Expect(readYAML(filepath.Join("testdata", "widgets-rbac.yaml"), grant)).To(Succeed())
	g.Expect(bind(ctx, grant)).To(Succeed())
	startOperator(t, scaling.Options{Resources: append(slices.Clone(scaling.DefaultResources), "widgets.scaling.e2e.phalanks.io")})

	widgets, err := crds.Load(filepath.Join("testdata"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(crds.Install(ctx, admin, widgets, nil)).To(Succeed())

	ns := newNamespace(t, nil)
	spec, next := downtimeForAnHour()
	w := newWidget(t, ns, "shop", 3, map[string]string{scaling.AnnotationDowntime: spec})
	half := newWidget(t, ns, "half-done", 5, map[string]string{scaling.AnnotationDowntime: spec, scaling.AnnotationOriginalReplicas: "5"})

	g.Eventually(widgetReplicas(w)).WithTimeout(timeout).Should(BeEquivalentTo(0))
	g.Eventually(annotations(w)).WithTimeout(timeout).Should(And(
		HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "3"), HaveKeyWithValue(scaling.AnnotationNextTransition, next)))
	for _, f := range live(w)(g).GetManagedFields() {
		if f.Manager == scaling.FieldManager && f.Operation == metav1.ManagedFieldsOperationApply {
			g.Expect(f.FieldsV1.GetRawString()).NotTo(ContainSubstring(`"f:spec"`), "the count goes through /scale, never into the object's apply")
		}
	}
	g.Eventually(notes(w, scaling.ReasonScaleDown)).WithTimeout(timeout).Should(ContainElement(ContainSubstring("scaled down from 3 to 0 replicas")))

	g.Eventually(widgetReplicas(half)).WithTimeout(timeout).Should(BeEquivalentTo(0))
	g.Eventually(annotations(half)).WithTimeout(timeout).Should(And(
		HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "5"), HaveKeyWithValue(scaling.AnnotationNextTransition, next)))

	annotate(g, w, map[string]string{scaling.AnnotationDowntime: ""})
	g.Eventually(widgetReplicas(w)).WithTimeout(timeout).Should(BeEquivalentTo(3))
	g.Eventually(annotations(w)).WithTimeout(timeout).Should(And(
		Not(HaveKey(scaling.AnnotationOriginalReplicas)), Not(HaveKey(scaling.AnnotationNextTransition))))
}
