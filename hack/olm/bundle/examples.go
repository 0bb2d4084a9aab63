package bundle

import (
	"encoding/json"
	"fmt"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ALMExamplesAnnotation holds a CSV's example custom resources, as a JSON list.
const ALMExamplesAnnotation = "alm-examples"

// ALMExamples parses a CSV's alm-examples; a CSV without them has none.
func ALMExamples(csv *operatorsv1alpha1.ClusterServiceVersion) ([]*unstructured.Unstructured, error) {
	raw := csv.GetAnnotations()[ALMExamplesAnnotation]
	if raw == "" {
		return nil, nil
	}
	var objs []map[string]any
	if err := json.Unmarshal([]byte(raw), &objs); err != nil {
		return nil, fmt.Errorf("parse %s: %w", ALMExamplesAnnotation, err)
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		out = append(out, &unstructured.Unstructured{Object: o})
	}
	return out, nil
}
