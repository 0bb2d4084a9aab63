package storagebucket

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

// writeStatus writes the status computed from the newest observation, when it changed
// or the heartbeat is due, and emits the events of its transitions. Once the status
// records that this StorageBucket creates its bucket, the bucket is created at once.
//
// A pass that learned nothing new, on a StorageBucket whose status was found to show
// that already, with no heartbeat due, does not compute the status at all: that is the
// steady state of a healthy bucket, almost every probe.
func (r *Reconciler) writeStatus(ctx context.Context, sb *phalanksv1beta1.StorageBucket, st *bucketState) error {
	shown, heartbeat := st.shownKey(sb), r.statusHeartbeat()
	if st.shown == shown && !heartbeatDue(&sb.Status, st.obs.probedAt, heartbeat) {
		return nil
	}
	next, cause := desiredStatus(&sb.Status, st.obs, heartbeat)
	if cause == writeNone && st.shown != shown {
		st.shown = shown
		r.mem.store(sb.UID, st)
	}
	if cause != writeNone {
		written, err := r.patchStatus(ctx, sb, next, string(cause))
		if err != nil || !written {
			return err
		}
	}
	if next.CreatedBucket.Records(sb.Spec) && st.createRecordedFor != placement(sb) {
		st.createRecordedFor = placement(sb)
		r.mem.store(sb.UID, st)
		r.sched.TriggerNow(r.clock.Now(), refOf(sb))
	}
	return nil
}

// conflictRetryDelay is how soon a status write that lost a race is tried again: long
// enough for the informer to catch up with the write that won.
const conflictRetryDelay = time.Second

// patchStatus writes the status under the optimistic lock, so that a pass never writes
// what it saw of one object onto another (a StorageBucket deleted and created again
// under the same name) or over a newer write. A write that loses that race is not
// written (false); the memory keeps the observation, and the bucket is dispatched again
// shortly to write it on the newest object.
func (r *Reconciler) patchStatus(ctx context.Context, sb *phalanksv1beta1.StorageBucket, next phalanksv1beta1.StorageBucketStatus, cause string) (bool, error) {
	if !r.owns(sb.UID) {
		return false, nil // another replica's now
	}
	before := sb
	sb = sb.DeepCopy() // sb may be the cache's own object (see Reconcile)
	sb.Status = next
	if err := r.client.Status().Patch(ctx, sb, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			r.sched.Schedule(refOf(sb), r.clock.Now().Add(conflictRetryDelay))
			return false, nil
		}
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("patch StorageBucket status: %w", err)
	}
	statusWrites.WithLabelValues(cause).Inc()
	for _, e := range transitionEvents(before.Status.Conditions, next.Conditions) {
		r.event(sb, e.eventType, e.reason, e.action, e.note)
	}
	return true, nil
}

func (r *Reconciler) event(sb *phalanksv1beta1.StorageBucket, eventType, reason, action, note string) {
	r.recorder.Eventf(sb, nil, eventType, reason, action, "%s", note)
}
