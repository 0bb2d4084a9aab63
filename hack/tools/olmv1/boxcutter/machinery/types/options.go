package types

import "sigs.k8s.io/controller-runtime/pkg/client"

// RevisionReconcileOption is an option of a revision's reconciliation. Options carry no
// behaviour here: the engine they would configure does not run.
type RevisionReconcileOption interface {
	ApplyToRevisionReconcileOptions()
}

// RevisionTeardownOption is an option of a revision's teardown.
type RevisionTeardownOption interface {
	ApplyToRevisionTeardownOptions()
}

// ObjectReconcileOption is an option of one object's reconciliation.
type ObjectReconcileOption interface {
	RevisionReconcileOption
	ApplyToObjectReconcileOptions()
}

// option is every option's value: its name, for messages.
type option string

func (option) ApplyToRevisionReconcileOptions() {}
func (option) ApplyToObjectReconcileOptions()   {}

// WithCollisionProtection names how an object already on the cluster may be taken over
// ("Prevent", "IfNoController", "None").
type WithCollisionProtection string

// ApplyToRevisionReconcileOptions makes it a revision option.
func (WithCollisionProtection) ApplyToRevisionReconcileOptions() {}

// ApplyToObjectReconcileOptions makes it an object option.
func (WithCollisionProtection) ApplyToObjectReconcileOptions() {}

// WithSiblingOwners treats objects owned by the siblings as the revision's own.
func WithSiblingOwners(_ []client.Object) RevisionReconcileOption { return option("WithSiblingOwners") }

// WithProbe registers a probe of the given type.
func WithProbe(_ string, _ Prober) RevisionReconcileOption { return option("WithProbe") }

// WithAggregatePhaseReconcileErrors reports every object's error of a phase at once.
func WithAggregatePhaseReconcileErrors() RevisionReconcileOption {
	return option("WithAggregatePhaseReconcileErrors")
}

// WithObjectReconcileOptions applies options to one object only.
func WithObjectReconcileOptions(_ client.Object, _ ...ObjectReconcileOption) RevisionReconcileOption {
	return option("WithObjectReconcileOptions")
}
