// Package validation holds the boxcutter stand-in's phase and revision validators, which
// refuse every phase and revision with types.ErrNotInThisBuild (see package boxcutter).
package validation

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"pkg.package-operator.run/boxcutter/machinery/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PhaseValidator checks a phase before it is reconciled.
type PhaseValidator struct{}

// NewClusterPhaseValidator returns a validator of cluster-wide phases.
func NewClusterPhaseValidator(_ meta.RESTMapper, _ client.Writer) *PhaseValidator {
	return &PhaseValidator{}
}

// ValidatePhase returns types.ErrNotInThisBuild.
func (*PhaseValidator) ValidatePhase(context.Context, types.Phase) error {
	return types.ErrNotInThisBuild
}

// RevisionValidator checks a revision before it is reconciled.
type RevisionValidator struct{}

// NewRevisionValidator returns a revision validator.
func NewRevisionValidator() *RevisionValidator { return &RevisionValidator{} }

// ValidateRevision returns types.ErrNotInThisBuild.
func (*RevisionValidator) ValidateRevision(types.Revision) error { return types.ErrNotInThisBuild }
