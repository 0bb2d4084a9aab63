// Package boxcutter stands in for pkg.package-operator.run/boxcutter in the OLM v1 tool
// set (hack/tools/olmv1): operator-controller v1.11.0 imports it, and the Go module proxy
// this project builds from refuses every version of it, so operator-controller would not
// build at all.
//
// operator-controller uses boxcutter in two ways:
//
//   - Its alpha BoxcutterRuntime (the ClusterObjectSet controller and its revision
//     engine), off by default and off in upstream's standard manifest
//     (--feature-gates=BoxcutterRuntime=false). For that path this module only compiles:
//     the packages boxcutter, machinery, machinery/types, ownerhandling, probing and
//     validation provide the names operator-controller uses, and every engine call returns
//     ErrNotInThisBuild. The gate must stay off.
//   - Package managedcache, whose TrackingCache operator-controller runs whatever the gate
//     says: the default Helm applier watches the objects it installed through it and
//     re-applies them when they drift, and the ClusterExtension controller takes those
//     watch events from it. That package is a working implementation (see its comment).
//
// Only the names operator-controller v1.11.0 uses exist here; a newer operator-controller
// that uses more fails to compile against it, which is the signal to look again.
package boxcutter

import (
	"pkg.package-operator.run/boxcutter/machinery/types"
)

// ErrNotInThisBuild is what every revision engine call returns.
var ErrNotInThisBuild = types.ErrNotInThisBuild

// Revision is a named, numbered list of phases.
type Revision = types.Revision

// RevisionBuilder is a Revision under construction.
type RevisionBuilder = types.RevisionBuilder

// Phase is a named list of objects.
type Phase = types.Phase

// RevisionReconcileOption is an option of a revision's reconciliation.
type RevisionReconcileOption = types.RevisionReconcileOption

// WithCollisionProtection names how an object already on the cluster may be taken over.
type WithCollisionProtection = types.WithCollisionProtection

// ProgressProbeType is the probe that gates progress from one phase to the next.
const ProgressProbeType = types.ProgressProbeType

// Constructors and options, as boxcutter names them.
var (
	NewRevisionWithOwner              = types.NewRevisionWithOwner
	NewPhase                          = types.NewPhase
	WithSiblingOwners                 = types.WithSiblingOwners
	WithProbe                         = types.WithProbe
	WithAggregatePhaseReconcileErrors = types.WithAggregatePhaseReconcileErrors
	WithObjectReconcileOptions        = types.WithObjectReconcileOptions
)
