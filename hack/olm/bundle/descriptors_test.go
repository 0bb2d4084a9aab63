package bundle_test

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
)

func TestDescriptorsFollowTheCSVMarkers(t *testing.T) {
	kinds, err := bundle.LoadKindDescriptions(filepath.Join("testdata", "fixture"))
	if err != nil {
		t.Fatal(err)
	}
	widget, ok := kinds[schema.GroupVersionKind{Group: "fixtures.example.com", Version: "v1", Kind: "Widget"}]
	if !ok {
		t.Fatalf("no Widget among %v", kinds)
	}
	want := bundle.KindDescription{
		DisplayName: "Fixture Widget",
		Description: "Widget is a fixture kind.",
		Resources: []operatorsv1alpha1.APIResourceReference{
			{Kind: "Service", Version: "v1"},
			{Kind: "Deployment", Version: "v1", Name: "widget-deployment"},
		},
		SpecDescriptors: []operatorsv1alpha1.SpecDescriptor{
			// order=1 first, then by path; the inline struct's field has no prefix, the
			// list element's child gets "[0]", unmarked and json:"-" fields are left out.
			{Path: "size", DisplayName: "Size", Description: "size of the widget.\n\nA second paragraph."},
			{Path: "limits.maxSize", DisplayName: "Maximum size", Description: "maxSize in bytes."},
			{Path: "owner", DisplayName: "Owner", Description: "owner of the widget."},
			{Path: "ports", DisplayName: "Ports", Description: "ports to expose."},
			{Path: "ports[0].number", DisplayName: "Number", Description: "number of the port.", XDescriptors: []string{"urn:alm:descriptor:com.tectonic.ui:number"}},
		},
		StatusDescriptors: []operatorsv1alpha1.StatusDescriptor{
			{Path: "conditions", DisplayName: "Conditions", Description: "conditions of the widget.", XDescriptors: []string{"urn:alm:descriptor:io.kubernetes.conditions"}},
		},
	}
	if diff := cmp.Diff(want, widget); diff != "" {
		t.Errorf("Widget description (-want +got):\n%s", diff)
	}
	if _, ok := kinds[schema.GroupVersionKind{Group: "fixtures.example.com", Version: "v1", Kind: "WidgetList"}]; ok {
		t.Error("WidgetList has no spec and must not be described as a kind")
	}
	proxy := kinds[schema.GroupVersionKind{Group: "fixtures.example.com", Version: "v1", Kind: "HTTPSProxy"}]
	if proxy.DisplayName != "HTTPS Proxy" {
		t.Errorf("HTTPSProxy display name = %q, want the Go name in words", proxy.DisplayName)
	}
}

func TestDescriptorsOfTheProjectAPI(t *testing.T) {
	kinds, err := bundle.LoadKindDescriptions(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	sb, ok := kinds[schema.GroupVersionKind{Group: "phalanks.io", Version: "v1beta1", Kind: "StorageBucket"}]
	if !ok {
		t.Fatalf("no StorageBucket v1beta1 among %v", kinds)
	}
	paths := map[string]bool{}
	for _, d := range sb.SpecDescriptors {
		paths[d.Path] = true
	}
	for _, p := range []string{"bucketName", "endpoint", "healthCheck", "healthCheck.interval", "healthCheck.depth"} {
		if !paths[p] {
			t.Errorf("StorageBucket has no spec descriptor %s; have %v", p, paths)
		}
	}
	if len(sb.Resources) == 0 || len(sb.StatusDescriptors) == 0 {
		t.Errorf("StorageBucket lacks resources or status descriptors: %+v", sb)
	}
}
