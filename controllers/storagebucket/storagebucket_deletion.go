package storagebucket

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/conditions"
	"github.com/phalanks/phalanks-operator/internal/s3bucket"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

// reconcileFinalizer keeps the deletion finalizer exactly when the bucket is to be
// deleted with its StorageBucket. It reports whether it added the finalizer.
func (r *Reconciler) reconcileFinalizer(ctx context.Context, sb *phalanksv1beta1.StorageBucket) (added bool, err error) {
	want := wantsFinalizer(sb)
	if want == controllerutil.ContainsFinalizer(sb, phalanksv1beta1.FinalizerBucketDeletion) {
		return false, nil
	}
	if err := r.patchFinalizer(ctx, sb, want); err != nil {
		return false, err
	}
	return want, nil
}

// patchFinalizer adds or removes the deletion finalizer, on a copy of sb (which may be
// the cache's own object, see Reconcile) and under the optimistic lock.
func (r *Reconciler) patchFinalizer(ctx context.Context, sb *phalanksv1beta1.StorageBucket, add bool) error {
	if !r.owns(sb.UID) {
		return nil // another replica's now
	}
	next := sb.DeepCopy()
	if add {
		controllerutil.AddFinalizer(next, phalanksv1beta1.FinalizerBucketDeletion)
	} else {
		controllerutil.RemoveFinalizer(next, phalanksv1beta1.FinalizerBucketDeletion)
	}
	if err := r.client.Patch(ctx, next, client.MergeFromWithOptions(sb, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("update finalizer: %w", err)
	}
	return nil
}

func wantsFinalizer(sb *phalanksv1beta1.StorageBucket) bool {
	return sb.Spec.ManagementPolicy == phalanksv1beta1.ManagementManage && sb.Spec.DeletionPolicy == phalanksv1beta1.DeletionDelete
}

// deletionBudget bounds how many object versions ForceEmpty deletes per pass, and
// deletionTimeout how long a pass may take; an unfinished bucket continues at once.
const (
	deletionBudget  = 5000
	deletionTimeout = 2 * time.Minute
)

// reconcileDelete deletes the bucket of a StorageBucket that is being deleted, by its
// deletion policy, and releases the finalizer when it is done (or not needed any more).
//
// A deletion never waits for what cannot come back: when the credentials Secret (or the
// CA bundle) is gone and this process does not remember what it held — deleting a
// namespace deletes them together with the StorageBucket — the bucket is kept, a
// Warning says so, and the StorageBucket is released. A bucket that cannot be deleted
// yet (not empty under Fail, object lock, the endpoint down, credentials rejected)
// keeps the finalizer and is retried on schedule, except in a namespace being deleted:
// there it is kept once NamespaceDeletionTimeout has passed, so the namespace goes.
func (r *Reconciler) reconcileDelete(ctx context.Context, sb *phalanksv1beta1.StorageBucket) error {
	if !controllerutil.ContainsFinalizer(sb, phalanksv1beta1.FinalizerBucketDeletion) {
		return nil
	}
	// The cache may still hold a StorageBucket this replica released a moment ago (its
	// watch behind), whose bucket name a new StorageBucket may hold by now: every pass
	// confirms it with the API server before it reaches the bucket.
	switch current, err := r.current(ctx, sb); {
	case err != nil:
		return err
	case !current:
		r.forget(sb.UID)
		return nil
	}
	now := r.clock.Now()
	r.sched.Schedule(refOf(sb), nextDue(sb.UID, sb.Spec.HealthCheck.IntervalDuration(), now))
	bucket := sb.Spec.BucketName
	if !wantsFinalizer(sb) {
		r.event(sb, corev1.EventTypeNormal, eventBucketRetained, "Delete", fmt.Sprintf("kept bucket %q: deletionPolicy is %s", bucket, sb.Spec.DeletionPolicy))
		return r.releaseFinalizer(ctx, sb)
	}
	in, err := r.loadInputs(ctx, sb, true)
	if err != nil {
		return err
	}
	if in.failure != nil {
		switch in.failure.Reason {
		case taxonomy.ReasonSecretNotFound, taxonomy.ReasonCABundleNotFound:
			return r.retain(ctx, sb, fmt.Sprintf("kept bucket %q with its data although deletionPolicy is Delete: %s, so the bucket cannot be deleted", bucket, in.failure.Message))
		}
		return r.blockDeletion(ctx, sb, in.failure, now)
	}
	subject := subjectIn(in.host, bucket, in.endpoint.Region, deletionTimeout)
	conn, err := r.prober.Pool.Conn(in.endpoint)
	if err != nil {
		return r.blockDeletion(ctx, sb, taxonomy.Classify(err, subject), now)
	}
	dctx, cancel := context.WithTimeout(ctx, deletionTimeout)
	defer cancel()
	got, err := s3bucket.Delete(dctx, conn.Client, s3bucket.DeleteRequest{
		Bucket: bucket, UID: string(sb.UID), CreateRecorded: sb.Status.CreatedBucket.Records(sb.Spec),
		Strategy: sb.Spec.NonEmptyStrategy, Budget: deletionBudget, Fence: r.fence(sb, true),
	})
	if err != nil && (fenced(err) || stopped(ctx)) {
		// Gone, replaced or not ours any more (the slot given up, the ownership
		// lapsed): nothing to do or report here.
		logf.FromContext(ctx).V(1).Info("bucket deletion stopped", "bucket", bucket, "reason", err.Error())
		return nil
	}
	if err != nil {
		f := taxonomy.Classify(err, subject)
		logf.FromContext(ctx).Info("bucket deletion failed; retrying on schedule", "bucket", bucket, "error", f.Message)
		return r.blockDeletion(ctx, sb, f, now)
	}
	switch got.Outcome {
	case s3bucket.OutcomeDeleted:
		r.event(sb, corev1.EventTypeNormal, eventBucketDeleted, "Delete", deletedNote(bucket, got.Removed))
	case s3bucket.OutcomeGone:
		r.event(sb, corev1.EventTypeNormal, eventBucketDeleted, "Delete", fmt.Sprintf("bucket %q does not exist; nothing to delete", bucket))
	case s3bucket.OutcomeNotOurs:
		r.event(sb, corev1.EventTypeWarning, string(taxonomy.ReasonErrResourceExists), "Delete",
			fmt.Sprintf("left bucket %q in place: it does not carry this StorageBucket's ownership tag", bucket))
	case s3bucket.OutcomeLeftNonEmpty:
		r.event(sb, corev1.EventTypeWarning, string(taxonomy.ReasonBucketNotEmpty), "Delete",
			fmt.Sprintf("left bucket %q in place with its data: it is not empty and nonEmptyStrategy is DeleteIfEmpty", bucket))
	case s3bucket.OutcomeBlockedNonEmpty:
		return r.blockDeletion(ctx, sb, taxonomy.NewFailure(taxonomy.ReasonBucketNotEmpty, nil,
			"bucket %q still holds objects and nonEmptyStrategy is Fail; deletion waits until it is empty. Empty it, set nonEmptyStrategy to DeleteIfEmpty or ForceEmpty, or set deletionPolicy to Retain to keep it", bucket), now)
	case s3bucket.OutcomeBlockedObjectLock:
		return r.blockDeletion(ctx, sb, taxonomy.NewFailure(taxonomy.ReasonObjectLockEnabled, nil,
			"bucket %q has object lock enabled, so ForceEmpty will not delete its data; set deletionPolicy to Retain to keep it, or empty it yourself", bucket), now)
	case s3bucket.OutcomeEmptying:
		r.event(sb, corev1.EventTypeNormal, eventBucketEmptying, "Delete", fmt.Sprintf("deleted %d object versions from bucket %q; continuing", got.Removed, bucket))
		r.sched.TriggerNow(now, refOf(sb))
		return nil
	}
	return r.releaseFinalizer(ctx, sb)
}

func deletedNote(bucket string, removed int) string {
	if removed > 0 {
		return fmt.Sprintf("deleted bucket %q after deleting %d object versions and delete markers", bucket, removed)
	}
	return fmt.Sprintf("deleted bucket %q", bucket)
}

// blockDeletion reports on the Managed condition why the bucket is not deleted yet, or,
// in a namespace being deleted whose wait is over, keeps the bucket and lets go.
func (r *Reconciler) blockDeletion(ctx context.Context, sb *phalanksv1beta1.StorageBucket, f *taxonomy.Failure, now time.Time) error {
	terminating, err := r.namespaceTerminating(ctx, sb.Namespace)
	if err != nil {
		return err
	}
	if terminating {
		deadline := sb.DeletionTimestamp.Add(r.opts.NamespaceDeletionTimeout)
		if !now.Before(deadline) {
			return r.retain(ctx, sb, fmt.Sprintf("kept bucket %q with its data although deletionPolicy is Delete: namespace %s is being deleted "+
				"and the bucket could not be deleted within %s (%s: %s)", sb.Spec.BucketName, sb.Namespace, r.opts.NamespaceDeletionTimeout, f.Reason, f.Message))
		}
		if due, ok := r.sched.Due(sb.UID); !ok || deadline.Before(due) {
			r.sched.Schedule(refOf(sb), deadline)
		}
	}
	cond := conditions.False(phalanksv1beta1.ConditionManaged, string(f.Reason), "deletion blocked: "+f.Message)
	next, changed := deletionStatus(&sb.Status, sb.Generation, cond, now)
	if !changed {
		return nil
	}
	_, err = r.patchStatus(ctx, sb, next, string(writeChanged))
	return err
}

// namespaceTerminating reports whether the namespace is being deleted.
func (r *Reconciler) namespaceTerminating(ctx context.Context, name string) (bool, error) {
	ns := &corev1.Namespace{}
	if err := r.api.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("get Namespace: %w", err)
	}
	return !ns.DeletionTimestamp.IsZero(), nil
}

// retain lets a StorageBucket go without deleting its bucket, saying so in a Warning
// event and the log (an event cannot be recorded in a namespace being deleted).
func (r *Reconciler) retain(ctx context.Context, sb *phalanksv1beta1.StorageBucket, note string) error {
	logf.FromContext(ctx).Info("releasing the StorageBucket and keeping its bucket", "bucket", sb.Spec.BucketName, "why", note)
	r.event(sb, corev1.EventTypeWarning, eventBucketRetained, "Delete", note)
	return r.releaseFinalizer(ctx, sb)
}

// releaseFinalizer lets a deleted StorageBucket go; one already gone is fine.
func (r *Reconciler) releaseFinalizer(ctx context.Context, sb *phalanksv1beta1.StorageBucket) error {
	if err := r.patchFinalizer(ctx, sb, false); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
