package manifests_test

import (
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// OLM v1 refuses to upgrade a CRD whose new schema removes or changes a default that
// a version both serve had ("default value removed", its CRD upgrade safety
// preflight), and the ClusterExtension then stays on the old release. Every default of
// every released CRD (hack/olm/releases) must stand, with the same value, in the head's
// bundle for each version both serve.
func TestNoReleasedDefaultIsRemovedOrChanged(t *testing.T) {
	head := map[string]*unstructured.Unstructured{}
	for _, o := range objects(t, "bundle/manifests/*.yaml") {
		if o.GetKind() == "CustomResourceDefinition" {
			head[o.GetName()] = o
		}
	}
	checked := 0
	for _, released := range objects(t, filepath.Join("hack", "olm", "releases", "*", "manifests", "*.yaml")) {
		if released.GetKind() != "CustomResourceDefinition" {
			continue
		}
		now, ok := head[released.GetName()]
		if !ok {
			t.Errorf("CRD %s of a release is not in the bundle", released.GetName())
			continue
		}
		nowSchemas := versionSchemas(now)
		for version, schema := range versionSchemas(released) {
			nowSchema, served := nowSchemas[version]
			if !served {
				continue
			}
			was, is := map[string]any{}, map[string]any{}
			defaults(schema, "", was)
			defaults(nowSchema, "", is)
			for _, path := range sortedKeys(was) {
				checked++
				if v, ok := is[path]; !ok {
					t.Errorf("%s %s: %s: the default %v a release has is removed", released.GetName(), version, path, was[path])
				} else if !reflect.DeepEqual(v, was[path]) {
					t.Errorf("%s %s: %s: the default %v a release has is now %v", released.GetName(), version, path, was[path], v)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no default of a released CRD checked: the release manifests moved?")
	}
}

// versionSchemas returns each version's openAPIV3Schema.
func versionSchemas(crd *unstructured.Unstructured) map[string]map[string]any {
	out := map[string]map[string]any{}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		v, _ := v.(map[string]any)
		name, _ := v["name"].(string)
		schema, _, _ := unstructured.NestedMap(v, "schema", "openAPIV3Schema")
		out[name] = schema
	}
	return out
}

// defaults records, by path, every default in schema and below it.
func defaults(schema map[string]any, path string, out map[string]any) {
	if d, ok := schema["default"]; ok {
		out[path] = d
	}
	if props, ok := schema["properties"].(map[string]any); ok {
		for name, p := range props {
			if p, ok := p.(map[string]any); ok {
				defaults(p, path+"."+name, out)
			}
		}
	}
	if items, ok := schema["items"].(map[string]any); ok {
		defaults(items, path+"[]", out)
	}
	if extra, ok := schema["additionalProperties"].(map[string]any); ok {
		defaults(extra, path+"{}", out)
	}
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
