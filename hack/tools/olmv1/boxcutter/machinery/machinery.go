// Package machinery holds the boxcutter stand-in's revision, phase and object engines:
// they can be built, and every Reconcile and Teardown returns types.ErrNotInThisBuild
// (see package boxcutter).
package machinery

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"pkg.package-operator.run/boxcutter/machinery/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Action is what reconciling an object did.
type Action string

// ActionCollision means the object exists and belongs to someone else.
const ActionCollision Action = "Collision"

// Object is an object a revision manages.
type Object interface {
	client.Object
}

// ObjectResult is the outcome of reconciling one object.
type ObjectResult interface {
	Action() Action
	Object() Object
	ProbeResults() types.ProbeResultContainer
	String() string
}

// PhaseResult is the outcome of reconciling one phase.
type PhaseResult interface {
	GetValidationError() error
	GetObjects() []ObjectResult
	IsComplete() bool
}

// RevisionResult is the outcome of reconciling a revision.
type RevisionResult interface {
	GetValidationError() error
	GetPhases() []PhaseResult
	InTransition() bool
	IsComplete() bool
	String() string
}

// RevisionTeardownResult is the outcome of tearing a revision down.
type RevisionTeardownResult interface {
	IsComplete() bool
}

// Comparator compares desired and actual objects.
type Comparator struct{}

// NewComparator returns a comparator.
func NewComparator(_ discovery.OpenAPIV3SchemaInterface, _ *runtime.Scheme, _ string) *Comparator {
	return &Comparator{}
}

// ObjectEngine reconciles single objects.
type ObjectEngine struct{}

// NewObjectEngine returns an object engine.
func NewObjectEngine(_ *runtime.Scheme, _ client.Reader, _ client.Writer, _ *Comparator,
	_, _, _ string, _ client.Reader,
) *ObjectEngine {
	return &ObjectEngine{}
}

// PhaseValidator checks a phase before it is reconciled.
type PhaseValidator interface {
	ValidatePhase(ctx context.Context, phase types.Phase) error
}

// RevisionValidator checks a revision before it is reconciled.
type RevisionValidator interface {
	ValidateRevision(rev types.Revision) error
}

// PhaseEngine reconciles phases.
type PhaseEngine struct{}

// NewPhaseEngine returns a phase engine.
func NewPhaseEngine(_ *ObjectEngine, _ PhaseValidator) *PhaseEngine { return &PhaseEngine{} }

// RevisionEngine reconciles and tears down revisions; in this build it refuses to.
type RevisionEngine struct{}

// NewRevisionEngine returns a revision engine.
func NewRevisionEngine(_ *PhaseEngine, _ RevisionValidator, _ client.Writer) *RevisionEngine {
	return &RevisionEngine{}
}

// Reconcile returns types.ErrNotInThisBuild.
func (*RevisionEngine) Reconcile(context.Context, types.Revision, ...types.RevisionReconcileOption) (RevisionResult, error) {
	return nil, types.ErrNotInThisBuild
}

// Teardown returns types.ErrNotInThisBuild.
func (*RevisionEngine) Teardown(context.Context, types.Revision, ...types.RevisionTeardownOption) (RevisionTeardownResult, error) {
	return nil, types.ErrNotInThisBuild
}
