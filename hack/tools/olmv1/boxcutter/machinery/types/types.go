// Package types holds the revision, phase, option and probe types of the boxcutter
// stand-in: values that operator-controller builds and hands to a revision engine that,
// in this build, refuses to run (see package boxcutter).
package types

import (
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrNotInThisBuild is returned by every revision engine call and owner strategy.
var ErrNotInThisBuild = errors.New("boxcutter is not in this build: pkg.package-operator.run/boxcutter is replaced by a " +
	"compile-only stand-in (hack/tools/olmv1/boxcutter); keep operator-controller's BoxcutterRuntime feature gate off")

// Phase is a named list of objects rolled out together.
type Phase interface {
	GetName() string
	GetObjects() []client.Object
}

// NewPhase returns a phase of objects.
func NewPhase(name string, objects []client.Object) Phase {
	return &phase{name: name, objects: objects}
}

type phase struct {
	name    string
	objects []client.Object
}

func (p *phase) GetName() string             { return p.name }
func (p *phase) GetObjects() []client.Object { return p.objects }

// Revision is a named, numbered list of phases.
type Revision interface {
	GetName() string
	GetRevisionNumber() int64
	GetPhases() []Phase
}

// RevisionBuilder is a Revision under construction.
type RevisionBuilder interface {
	Revision
}

// OwnerStrategy sets and reads the owner of the objects a revision manages.
type OwnerStrategy interface {
	SetControllerReference(owner, obj metav1.Object) error
}

// NewRevisionWithOwner returns a revision of phases owned by owner.
func NewRevisionWithOwner(name string, number int64, phases []Phase, _ client.Object, _ OwnerStrategy) RevisionBuilder {
	return &revision{name: name, number: number, phases: phases}
}

type revision struct {
	name   string
	number int64
	phases []Phase
}

func (r *revision) GetName() string          { return r.name }
func (r *revision) GetRevisionNumber() int64 { return r.number }
func (r *revision) GetPhases() []Phase       { return r.phases }
