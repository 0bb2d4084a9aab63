package foo

import (
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	"github.com/phalanks/phalanks-operator/internal/conditions"
)

// Event reasons and messages; Synced and ErrResourceExists are sample-controller's.
const (
	// ReasonSynced is the reason of the Normal event recorded after every successful pass.
	ReasonSynced = "Synced"
	// MessageResourceSynced is the message of the Synced event.
	MessageResourceSynced = "Foo synced successfully"
	// ReasonResourceExists is the reason of the Warning event recorded when a Deployment
	// of the Foo's deploymentName exists and the Foo does not control it.
	ReasonResourceExists = "ErrResourceExists"
	// MessageResourceExists is the message of the ErrResourceExists event; %q is the
	// Deployment's name.
	MessageResourceExists = "Resource %q already exists and is not managed by Foo"
	// ReasonInvalidSpec is the reason of the Warning event recorded for a spec the
	// controller cannot act on.
	ReasonInvalidSpec = "InvalidSpec"

	// actionSync is the action of every event: the controller's pass over a Foo.
	actionSync = "Sync"
)

// Ready's reasons besides the events' reasons (ErrResourceExists, InvalidSpec).
const (
	// ReasonAvailable says the Deployment is synced and reports Available.
	ReasonAvailable = "Available"
	// ReasonUnavailable says the Deployment has not reported Available (yet).
	ReasonUnavailable = "Unavailable"
	// ReasonNotSynced says availability is unknown because the Deployment is not synced.
	ReasonNotSynced = "DeploymentNotSynced"
)

// The checks Ready summarises, in the order they build on each other. Only Ready is
// stored: a Foo's status is written after every Deployment change, so it stays small.
const (
	// checkSynced passes when the Deployment exists, the Foo controls it and it has the
	// Foo's replicas and image.
	checkSynced = "DeploymentSynced"
	// checkAvailable passes when the Deployment reports Available.
	checkAvailable = "DeploymentAvailable"
)

// observation is what one pass learned about the Foo's Deployment: the synced Deployment,
// or why there is none.
type observation struct {
	deployment    *appsv1.Deployment
	notControlled *notControlledError
	invalidSpec   error
}

// concluded reports whether the pass learned anything to report; a pass cut short by an
// API error did not, and leaves the status as it is.
func (o observation) concluded() bool {
	return o.deployment != nil || o.notControlled != nil || o.invalidSpec != nil
}

// computeStatus returns the Foo's status for what the pass observed, and whether it
// differs from the Foo's current status. availableReplicas and observedGeneration move
// only when the Deployment is synced; Ready always describes the pass.
func computeStatus(foo *phalanksv1alpha1.Foo, obs observation, now time.Time) (phalanksv1alpha1.FooStatus, bool) {
	status := *foo.Status.DeepCopy()
	synced, available := deploymentChecks(foo, obs)
	ready := conditions.Summarize([]metav1.Condition{synced, available}, ReasonAvailable,
		fmt.Sprintf("Deployment %q is synced and available", foo.Spec.DeploymentName))
	changed := conditions.Apply(&status.Conditions, foo.Generation, metav1.NewTime(now), ready)
	if obs.deployment != nil {
		status.AvailableReplicas = obs.deployment.Status.AvailableReplicas
		status.ObservedGeneration = foo.Generation
	}
	changed = changed || status.AvailableReplicas != foo.Status.AvailableReplicas ||
		status.ObservedGeneration != foo.Status.ObservedGeneration
	return status, changed
}

// deploymentChecks returns the synced and available checks.
func deploymentChecks(foo *phalanksv1alpha1.Foo, obs observation) (synced, available metav1.Condition) {
	notSynced := conditions.Unknown(checkAvailable, ReasonNotSynced, "the Deployment is not synced")
	switch {
	case obs.invalidSpec != nil:
		return conditions.False(checkSynced, ReasonInvalidSpec, obs.invalidSpec.Error()), notSynced
	case obs.notControlled != nil:
		return conditions.False(checkSynced, ReasonResourceExists, obs.notControlled.Error()), notSynced
	case obs.deployment == nil:
		return conditions.Unknown(checkSynced, ReasonNotSynced, "the Deployment has not been read"), notSynced
	}
	dep := obs.deployment
	synced = conditions.True(checkSynced, ReasonSynced,
		fmt.Sprintf("Deployment %q has the Foo's replicas and image", dep.Name))
	counts := fmt.Sprintf("%d of %d replicas available", dep.Status.AvailableReplicas, ptr.Deref(dep.Spec.Replicas, 1))
	for _, c := range dep.Status.Conditions {
		if c.Type != appsv1.DeploymentAvailable {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return synced, conditions.True(checkAvailable, ReasonAvailable, counts)
		}
		// The Deployment's reason goes into the message: any string is a valid message,
		// not every string is a valid condition reason.
		return synced, conditions.False(checkAvailable, ReasonUnavailable,
			fmt.Sprintf("%s; the Deployment reports %s: %s", counts, c.Reason, c.Message))
	}
	return synced, conditions.False(checkAvailable, ReasonUnavailable,
		counts+"; the Deployment has not reported availability yet")
}

// statusPatch is a JSON merge patch that sets the whole status block.
func statusPatch(status phalanksv1alpha1.FooStatus) ([]byte, error) {
	data, err := json.Marshal(struct {
		Status phalanksv1alpha1.FooStatus `json:"status"`
	}{status})
	if err != nil {
		return nil, fmt.Errorf("encode status: %w", err)
	}
	return data, nil
}
