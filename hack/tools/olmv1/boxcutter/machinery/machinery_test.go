package machinery_test

import (
	"context"
	"errors"
	"testing"

	"pkg.package-operator.run/boxcutter"
	"pkg.package-operator.run/boxcutter/machinery"
	"pkg.package-operator.run/boxcutter/ownerhandling"
	"pkg.package-operator.run/boxcutter/probing"
	"pkg.package-operator.run/boxcutter/validation"
)

// The engine operator-controller's BoxcutterRuntime would run refuses every revision.
func TestTheRevisionEngineIsNotInThisBuild(t *testing.T) {
	engine := machinery.NewRevisionEngine(
		machinery.NewPhaseEngine(machinery.NewObjectEngine(nil, nil, nil, machinery.NewComparator(nil, nil, ""), "", "", "", nil),
			validation.NewClusterPhaseValidator(nil, nil)),
		validation.NewRevisionValidator(), nil)
	rev := boxcutter.NewRevisionWithOwner("rev", 1, []boxcutter.Phase{boxcutter.NewPhase("deploy", nil)}, nil, ownerhandling.NewNative(nil))
	if _, err := engine.Reconcile(context.Background(), rev, boxcutter.WithAggregatePhaseReconcileErrors()); !errors.Is(err, boxcutter.ErrNotInThisBuild) {
		t.Errorf("Reconcile: %v, want ErrNotInThisBuild", err)
	}
	if _, err := engine.Teardown(context.Background(), rev); !errors.Is(err, boxcutter.ErrNotInThisBuild) {
		t.Errorf("Teardown: %v, want ErrNotInThisBuild", err)
	}
	if got := (probing.And{}).Probe(nil); got.Status != "Unknown" {
		t.Errorf("a probe answered %q, want Unknown", got.Status)
	}
}
