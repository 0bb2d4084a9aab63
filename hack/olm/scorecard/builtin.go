// Package scorecard runs operator-sdk's six built-in scorecard tests (the basic and olm
// suites of the scorecard-test image) on a bundle directory, offline. The image cannot
// run here; each check follows the logic that image applies, including where it is
// lenient (basic-check-spec passes a CR without spec with a suggestion), so a pass here
// means a pass there.
package scorecard

import (
	"fmt"
	"sort"
	"strings"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apivalidation "github.com/operator-framework/api/pkg/validation"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/validate"
)

// The built-in tests, by the names the scorecard configuration runs them under.
const (
	BasicCheckSpec        = "basic-check-spec"
	OLMBundleValidation   = "olm-bundle-validation"
	OLMCRDsHaveValidation = "olm-crds-have-validation"
	OLMCRDsHaveResources  = "olm-crds-have-resources"
	OLMSpecDescriptors    = "olm-spec-descriptors"
	OLMStatusDescriptors  = "olm-status-descriptors"
)

// Builtin lists the built-in tests in the order the scorecard configuration runs them.
var Builtin = []string{BasicCheckSpec, OLMBundleValidation, OLMCRDsHaveValidation, OLMCRDsHaveResources, OLMSpecDescriptors, OLMStatusDescriptors}

// Run runs the named built-in test on the bundle directory dir (holding manifests/ and
// metadata/), as the scorecard-test image does on the bundle mounted at /bundle.
func Run(name, dir string) scapiv1alpha3.TestResult {
	r := scapiv1alpha3.TestResult{Name: name, State: scapiv1alpha3.PassState, Errors: []string{}, Suggestions: []string{}}
	if name == OLMBundleValidation {
		return bundleValidation(r, dir)
	}
	b, err := apimanifests.GetBundleFromDir(dir)
	if err != nil {
		r.State = scapiv1alpha3.ErrorState
		r.Errors = append(r.Errors, fmt.Sprintf("load bundle: %v", err))
		return r
	}
	switch name {
	case BasicCheckSpec:
		return checkSpec(r, b)
	case OLMCRDsHaveValidation:
		return crdsHaveValidation(r, b)
	case OLMCRDsHaveResources:
		return crdsHaveResources(r, b)
	case OLMSpecDescriptors:
		return specDescriptors(r, b)
	case OLMStatusDescriptors:
		return statusDescriptors(r, b)
	}
	r.State = scapiv1alpha3.FailState
	r.Errors = append(r.Errors, fmt.Sprintf("unknown test %q; valid tests: %s", name, strings.Join(Builtin, ", ")))
	return r
}

func fail(r *scapiv1alpha3.TestResult, state scapiv1alpha3.State, format string, args ...any) {
	r.State = state
	r.Errors = append(r.Errors, fmt.Sprintf(format, args...))
}

// examples parses the CSV's alm-examples; a CSV without them has no examples.
func examples(b *apimanifests.Bundle) ([]*unstructured.Unstructured, error) {
	return bundle.ALMExamples(b.CSV)
}

// checkSpec: every example has a spec. The scorecard-test image reports a missing spec
// as a suggestion on a passing result, and only fails when alm-examples do not parse.
func checkSpec(r scapiv1alpha3.TestResult, b *apimanifests.Bundle) scapiv1alpha3.TestResult {
	crs, err := examples(b)
	if err != nil {
		fail(&r, scapiv1alpha3.FailState, "%v", err)
		return r
	}
	for _, cr := range crs {
		if cr.Object["spec"] == nil {
			r.Suggestions = append(r.Suggestions, fmt.Sprintf("spec missing from %s", cr.GetName()))
			break
		}
	}
	return r
}

// bundleValidation: the bundle format validator, then the default validators (CSV, CRDs,
// bundle); their warnings become suggestions.
func bundleValidation(r scapiv1alpha3.TestResult, dir string) scapiv1alpha3.TestResult {
	for _, e := range validate.Format(dir) {
		fail(&r, scapiv1alpha3.FailState, "%s", e)
	}
	b, err := apimanifests.GetBundleFromDir(dir)
	if err != nil {
		fail(&r, scapiv1alpha3.FailState, "load bundle: %v", err)
		return r
	}
	objs := []any{b, b.CSV}
	for _, crd := range b.V1CRDs {
		objs = append(objs, crd)
	}
	for _, res := range apivalidation.DefaultBundleValidators.Validate(objs...) {
		for _, e := range res.Errors {
			fail(&r, scapiv1alpha3.FailState, "%s", e.Error())
		}
		for _, w := range res.Warnings {
			r.Suggestions = append(r.Suggestions, w.Error())
		}
	}
	return r
}

// crdsHaveValidation: for each example, every top-level spec and status key exists in the
// schema of the CRD version with the example's kind and version.
func crdsHaveValidation(r scapiv1alpha3.TestResult, b *apimanifests.Bundle) scapiv1alpha3.TestResult {
	crs, err := examples(b)
	if err != nil {
		fail(&r, scapiv1alpha3.ErrorState, "%v", err)
		return r
	}
	r.Log += fmt.Sprintf("Loaded %d Custom Resources from alm-examples\n", len(crs))
	for _, cr := range crs {
		gvk := cr.GroupVersionKind()
		for _, crd := range b.V1CRDs {
			if !sameKind(gvk.Kind, crd.Spec.Names.Kind) {
				continue
			}
			for _, v := range crd.Spec.Versions {
				if !strings.EqualFold(v.Name, gvk.Version) {
					continue
				}
				if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
					r.Suggestions = append(r.Suggestions, fmt.Sprintf("Add CRD validation for %s/%s", crd.Spec.Names.Kind, v.Name))
					continue
				}
				missing := append(unknownKeys(cr.Object["spec"], v.Schema.OpenAPIV3Schema, "spec"),
					unknownKeys(cr.Object["status"], v.Schema.OpenAPIV3Schema, "status")...)
				for _, key := range missing {
					r.Suggestions = append(r.Suggestions, fmt.Sprintf("Add CRD validation for %s in %s/%s", key, gvk.Kind, gvk.Version))
				}
				if len(missing) > 0 {
					r.State = scapiv1alpha3.FailState
					return r
				}
			}
		}
	}
	return r
}

// unknownKeys returns the keys of an example's spec or status block that the schema does
// not declare under that block.
func unknownKeys(block any, schema *apiextensionsv1.JSONSchemaProps, part string) []string {
	m, ok := block.(map[string]any)
	if !ok {
		return nil
	}
	props := schema.Properties[part].Properties
	var out []string
	for _, key := range sortedKeys(m) {
		if _, ok := props[key]; !ok {
			out = append(out, fmt.Sprintf("%s field `%s`", part, key))
		}
	}
	return out
}

// sameKind compares kinds case-insensitively and singular to singular, as the
// scorecard does with a REST mapper's singularizer.
func sameKind(a, b string) bool {
	var mapper meta.DefaultRESTMapper
	singular := func(k string) string {
		s, err := mapper.ResourceSingularizer(k)
		if err != nil {
			return k
		}
		return s
	}
	return strings.EqualFold(singular(a), singular(b))
}

// crdsHaveResources: every owned CRD lists the resources it creates or uses.
func crdsHaveResources(r scapiv1alpha3.TestResult, b *apimanifests.Bundle) scapiv1alpha3.TestResult {
	r.Log += fmt.Sprintf("Loaded ClusterServiceVersion: %s\n", b.CSV.GetName())
	for _, owned := range b.CSV.Spec.CustomResourceDefinitions.Owned {
		if len(owned.Resources) == 0 {
			fail(&r, scapiv1alpha3.FailState, "Owned CRDs do not have resources specified")
			return r
		}
	}
	return r
}

// ownedFor finds the owned CRD description of an example's kind and version.
func ownedFor(cr unstructured.Unstructured, csv *operatorsv1alpha1.ClusterServiceVersion) *operatorsv1alpha1.CRDDescription {
	gvk := cr.GroupVersionKind()
	for i, owned := range csv.Spec.CustomResourceDefinitions.Owned {
		if owned.Kind == gvk.Kind && owned.Version == gvk.Version {
			return &csv.Spec.CustomResourceDefinitions.Owned[i]
		}
	}
	return nil
}

// specDescriptors: every top-level spec key of every example has a spec descriptor with
// that path on the owned CRD of the example's kind and version.
func specDescriptors(r scapiv1alpha3.TestResult, b *apimanifests.Bundle) scapiv1alpha3.TestResult {
	crs, err := examples(b)
	if err != nil {
		fail(&r, scapiv1alpha3.ErrorState, "%v", err)
		return r
	}
	for _, cr := range crs {
		spec, ok := cr.Object["spec"].(map[string]any)
		if !ok {
			r.State = scapiv1alpha3.FailState
			continue
		}
		owned := ownedFor(*cr, b.CSV)
		if owned == nil {
			fail(&r, scapiv1alpha3.FailState, "Failed to find an owned CRD for CR %s with GVK %s", cr.GetName(), cr.GroupVersionKind())
			continue
		}
		described := map[string]bool{}
		for _, d := range owned.SpecDescriptors {
			described[d.Path] = true
		}
		for _, key := range sortedKeys(spec) {
			if !described[key] {
				fail(&r, scapiv1alpha3.FailState, "%s does not have a spec descriptor", key)
				r.Suggestions = append(r.Suggestions, fmt.Sprintf("Add a spec descriptor for %s", key))
			}
		}
	}
	return r
}

// statusDescriptors: an example that carries a status needs status descriptors on its
// owned CRD; one without a status gets a suggestion.
func statusDescriptors(r scapiv1alpha3.TestResult, b *apimanifests.Bundle) scapiv1alpha3.TestResult {
	crs, err := examples(b)
	if err != nil {
		fail(&r, scapiv1alpha3.ErrorState, "%v", err)
		return r
	}
	for _, cr := range crs {
		owned := ownedFor(*cr, b.CSV)
		if owned == nil {
			fail(&r, scapiv1alpha3.FailState, "Failed to find an owned CRD for CR %s with GVK %s", cr.GetName(), cr.GroupVersionKind())
			continue
		}
		status, _ := cr.Object["status"].(map[string]any)
		if len(status) == 0 {
			r.Suggestions = append(r.Suggestions, fmt.Sprintf("%s does not have status spec", owned.Name))
			continue
		}
		if len(owned.StatusDescriptors) == 0 {
			fail(&r, scapiv1alpha3.FailState, "%s does not have a status descriptor", owned.Name)
		}
	}
	return r
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
