// Package probing holds the boxcutter stand-in's probes: the shapes operator-controller
// builds from a ClusterObjectSet's progression probes. Every probe answers Unknown with
// types.ErrNotInThisBuild as its message (see package boxcutter).
package probing

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"pkg.package-operator.run/boxcutter/machinery/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Prober probes an object's state.
type Prober = types.Prober

// And requires every probe to pass.
type And []Prober

// Probe answers Unknown.
func (And) Probe(client.Object) types.ProbeResult { return types.NotInThisBuild() }

// ConditionProbe requires a condition of the given type to have the given status.
type ConditionProbe struct {
	Type   string
	Status string
}

// Probe answers Unknown.
func (*ConditionProbe) Probe(client.Object) types.ProbeResult { return types.NotInThisBuild() }

// FieldsEqualProbe requires two fields to hold the same value.
type FieldsEqualProbe struct {
	FieldA string
	FieldB string
}

// Probe answers Unknown.
func (*FieldsEqualProbe) Probe(client.Object) types.ProbeResult { return types.NotInThisBuild() }

// FieldValueProbe requires a field to hold a value.
type FieldValueProbe struct {
	FieldPath string
	Value     string
}

// Probe answers Unknown.
func (*FieldValueProbe) Probe(client.Object) types.ProbeResult { return types.NotInThisBuild() }

// GroupKindSelector applies Prober to objects of one group and kind.
type GroupKindSelector struct {
	GroupKind schema.GroupKind
	Prober    Prober
}

// Probe answers Unknown.
func (*GroupKindSelector) Probe(client.Object) types.ProbeResult { return types.NotInThisBuild() }

// LabelSelector applies Prober to objects whose labels match.
type LabelSelector struct {
	Selector labels.Selector
	Prober   Prober
}

// Probe answers Unknown.
func (*LabelSelector) Probe(client.Object) types.ProbeResult { return types.NotInThisBuild() }

// ObservedGenerationProbe applies Prober once the object's status is of its generation.
type ObservedGenerationProbe struct {
	Prober Prober
}

// Probe answers Unknown.
func (*ObservedGenerationProbe) Probe(client.Object) types.ProbeResult { return types.NotInThisBuild() }
