package upgrade_test

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/phalanks/phalanks-operator/hack/olm/upgrade"
)

func crdWith(stored []string, versions ...string) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = "widgets.example.com"
	for _, v := range versions {
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v, Served: true})
	}
	crd.Status.StoredVersions = stored
	return crd
}

func TestStoredVersionsKept(t *testing.T) {
	for _, tc := range []struct {
		name    string
		live    *apiextensionsv1.CustomResourceDefinition
		next    *apiextensionsv1.CustomResourceDefinition
		wantErr bool
	}{
		{"keeping the only stored version passes", crdWith([]string{"v1"}, "v1"), crdWith(nil, "v1", "v2"), false},
		{"a stored version may stop being served but must stay listed", crdWith([]string{"v1", "v2"}, "v1", "v2"), crdWith(nil, "v1", "v2"), false},
		{"dropping a stored version fails", crdWith([]string{"v1", "v2"}, "v1", "v2"), crdWith(nil, "v2"), true},
		{"dropping a version nothing was stored in passes", crdWith([]string{"v2"}, "v1", "v2"), crdWith(nil, "v2"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := upgrade.StoredVersionsKept(tc.live, tc.next)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

func TestValidateAgainstANewSchema(t *testing.T) {
	crd := crdWith(nil, "v1")
	crd.Spec.Versions[0].Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {Type: "object", Required: []string{"size"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"size": {Type: "integer", Maximum: ptr(10.0)},
			}},
		},
	}}
	v, err := upgrade.SchemaValidator(crd, "v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		spec    map[string]any
		wantErr bool
	}{
		{"an object within the schema is valid", map[string]any{"size": int64(3)}, false},
		{"a value over the new maximum is invalid", map[string]any{"size": int64(11)}, true},
		{"a missing newly required field is invalid", map[string]any{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "spec": tc.spec}}
			err := upgrade.Validate(v, obj)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
