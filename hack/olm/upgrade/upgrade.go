// Package upgrade checks a CRD upgrade by the rules OLM's catalog operator applies before
// it replaces a CRD that is already on a cluster: no version listed in the old CRD's
// status.storedVersions may disappear from the new CRD, and every existing object must
// validate against the new schema of each version that stays served.
package upgrade

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StoredVersionsKept fails when the new CRD drops a version the cluster has stored
// objects in (listed in the live CRD's status.storedVersions): those objects would no
// longer be readable.
func StoredVersionsKept(live, next *apiextensionsv1.CustomResourceDefinition) error {
	inNext := map[string]bool{}
	for _, v := range next.Spec.Versions {
		inNext[v.Name] = true
	}
	var errs []error
	for _, stored := range live.Status.StoredVersions {
		if !inNext[stored] {
			errs = append(errs, fmt.Errorf("CRD %s: the new CRD drops version %s, which status.storedVersions lists", live.Name, stored))
		}
	}
	return errors.Join(errs...)
}

// ExistingObjectsValid reads every object of the CRD in each version served by both the
// live and the new CRD (the API server converts them), and validates it against the new
// CRD's schema for that version.
func ExistingObjectsValid(ctx context.Context, c client.Reader, live, next *apiextensionsv1.CustomResourceDefinition) error {
	servedLive := map[string]bool{}
	for _, v := range live.Spec.Versions {
		servedLive[v.Name] = v.Served
	}
	var errs []error
	for _, v := range next.Spec.Versions {
		if !v.Served || !servedLive[v.Name] {
			continue
		}
		validator, err := schemaValidator(v.Schema)
		if err != nil {
			return fmt.Errorf("CRD %s %s: %w", next.Name, v.Name, err)
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: next.Spec.Group, Version: v.Name, Kind: next.Spec.Names.ListKind})
		if err := c.List(ctx, list); err != nil {
			return fmt.Errorf("list %s as %s: %w", next.Spec.Names.Plural, v.Name, err)
		}
		for _, obj := range list.Items {
			if err := Validate(validator, &obj); err != nil {
				errs = append(errs, fmt.Errorf("%s %s/%s does not validate against the new %s schema: %w",
					next.Spec.Names.Kind, obj.GetNamespace(), obj.GetName(), v.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Validator validates objects against one version's schema.
type Validator = validation.SchemaValidator

func schemaValidator(s *apiextensionsv1.CustomResourceValidation) (Validator, error) {
	internal := &apiextensions.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(s, internal, nil); err != nil {
		return nil, err
	}
	v, _, err := validation.NewSchemaValidator(internal.OpenAPIV3Schema)
	return v, err
}

// SchemaValidator returns the validator of a CRD version's schema.
func SchemaValidator(crd *apiextensionsv1.CustomResourceDefinition, version string) (Validator, error) {
	for _, v := range crd.Spec.Versions {
		if v.Name == version {
			return schemaValidator(v.Schema)
		}
	}
	return nil, fmt.Errorf("CRD %s has no version %s", crd.Name, version)
}

// Validate checks an object against a schema validator, as the API server's OpenAPI
// validation does (without CEL rules, as OLM's check does).
func Validate(v Validator, obj *unstructured.Unstructured) error {
	return validation.ValidateCustomResource(field.NewPath(""), obj.UnstructuredContent(), v).ToAggregate()
}
