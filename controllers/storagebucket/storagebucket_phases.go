package storagebucket

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/conditions"
	"github.com/phalanks/phalanks-operator/internal/s3bucket"
	"github.com/phalanks/phalanks-operator/internal/s3probe"
)

// bucketState is what this process remembers about a bucket between probes.
type bucketState struct {
	// generation and fingerprint are the spec and inputs the last probe used.
	generation  int64
	fingerprint string
	// ownedFor is the generation and fingerprint for which ownership was confirmed.
	ownedFor     string
	endpoint     string
	endpointDown bool
	obs          statusInput
}

func (st *bucketState) ownershipKey() string {
	return fmt.Sprintf("%d/%s", st.generation, st.fingerprint)
}

// probeCause says why a pass probes.
type probeCause string

const (
	causeNone     probeCause = ""
	causeResume   probeCause = "resume"
	causeNew      probeCause = "new"
	causeSpec     probeCause = "spec"
	causeInputs   probeCause = "inputs"
	causeSchedule probeCause = "schedule"
)

// decideProbe decides whether this pass probes. Only a bucket that is due, new, edited
// or whose inputs changed is probed; every other pass (the bucket's own status write,
// a resync, an unrelated event) is not.
func decideProbe(sb *phalanksv1beta1.StorageBucket, st *bucketState, fingerprint string, due time.Time, scheduled bool, now time.Time) probeCause {
	switch {
	case st == nil && scheduled:
		if now.Before(due) {
			return causeNone
		}
		return causeSchedule
	case st == nil && sb.Status.LastProbeTime != nil && sb.Status.ObservedGeneration == sb.Generation:
		return causeResume
	case st == nil:
		return causeNew
	case st.generation != sb.Generation:
		return causeSpec
	case st.fingerprint != fingerprint:
		return causeInputs
	case scheduled && !now.Before(due):
		return causeSchedule
	}
	return causeNone
}

func (r *Reconciler) state(key types.NamespacedName) *bucketState {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.states[key]; ok {
		cp := *st
		return &cp
	}
	return nil
}

// probe runs the Manage step (under managementPolicy Manage) and the probe, records
// the result in the state and the metrics, and schedules the next probe.
func (r *Reconciler) probe(ctx context.Context, sb *phalanksv1beta1.StorageBucket, in inputs, st *bucketState,
	cause probeCause, due, now time.Time) *bucketState {
	key := client.ObjectKeyFromObject(sb)
	if st == nil {
		st = seedState(sb)
	}
	if cause == causeSchedule {
		probeLateness.Observe(now.Sub(due).Seconds())
	}
	probesTotal.WithLabelValues(string(cause)).Inc()
	st.generation, st.fingerprint, st.endpoint = sb.Generation, in.fingerprint, in.key

	target := s3probe.Target{
		Endpoint:  in.endpoint,
		Bucket:    sb.Spec.BucketName,
		Depth:     s3probe.Depth(sb.Spec.HealthCheck.Depth),
		Timeout:   sb.Spec.HealthCheck.TimeoutDuration(),
		CanaryKey: phalanksv1beta1.CanaryPrefix + string(sb.UID),
	}
	check := checkInput{depth: target.Depth, anonymous: in.endpoint.Credentials == nil,
		secure: strings.HasPrefix(in.key, "https://"), host: in.host, bucket: target.Bucket}
	managed := sb.Spec.ManagementPolicy == phalanksv1beta1.ManagementManage
	if managed {
		check.manage = &manageResult{}
	}

	var res s3probe.Result
	switch {
	case in.failure != nil && in.failure.Check == s3probe.CheckReachable:
		// Without its CA bundle the endpoint cannot be verified: do not probe at all.
		res = s3probe.Result{Depth: target.Depth, Start: now, Failure: in.failure}
	case in.failure != nil:
		// Without credentials, still find out whether the endpoint is reachable.
		target.Depth = s3probe.DepthConnect
		res = r.prober.Probe(ctx, target)
		if res.Failure == nil {
			res.Failure = in.failure
		}
	default:
		if managed {
			check.manage, check.manageChecked = r.manage(ctx, sb, in, st), true
			if !check.manage.owned && target.Depth == s3probe.DepthReadWrite {
				// Never write a canary into a bucket that is not ours.
				target.Depth = s3probe.DepthList
			}
		}
		res = r.prober.Probe(ctx, target)
		if managed && st.ownedFor != "" && res.Failure != nil && res.Failure.Reason == s3probe.ReasonNoSuchBucket {
			// The bucket went away since ownership was confirmed: create it again.
			st.ownedFor = ""
			check.manage = r.manage(ctx, sb, in, st)
			res = r.prober.Probe(ctx, target)
		}
	}
	check.failure = res.Failure
	r.record(key, sb, st, res, checkConditions(check))
	r.sched.Schedule(key, nextDue(sb.UID, sb.Spec.HealthCheck.IntervalDuration(), now))
	return st
}

// seedState starts the state of a bucket this process has not probed yet, carrying
// over what the status says about earlier probes.
func seedState(sb *phalanksv1beta1.StorageBucket) *bucketState {
	st := &bucketState{}
	st.obs.failures = sb.Status.ConsecutiveFailures
	if t := sb.Status.LastSuccessTime; t != nil {
		st.obs.lastSuccess = t.Time
	}
	return st
}

// manage establishes ownership of the bucket: create it when missing, adopt it when
// asked, or find it is not ours. Confirmed ownership is remembered until the spec or
// the inputs change.
func (r *Reconciler) manage(ctx context.Context, sb *phalanksv1beta1.StorageBucket, in inputs, st *bucketState) *manageResult {
	if st.ownedFor == st.ownershipKey() {
		return &manageResult{owned: true}
	}
	subject := s3probe.Subject{Host: in.host, Bucket: sb.Spec.BucketName, Region: sb.Spec.Region, Timeout: sb.Spec.HealthCheck.TimeoutDuration()}
	conn, err := r.prober.Pool.Conn(in.endpoint)
	if err != nil {
		return &manageResult{failure: s3probe.Classify(err, subject)}
	}
	ctx, cancel := context.WithTimeout(ctx, sb.Spec.HealthCheck.TimeoutDuration())
	defer cancel()
	owner := s3bucket.Owner{UID: string(sb.UID), Name: sb.Namespace + "/" + sb.Name}
	got, err := s3bucket.Ensure(ctx, conn.Client, sb.Spec.BucketName, sb.Spec.Region, owner, sb.Annotations[phalanksv1beta1.AnnotationAdopt])
	if err != nil {
		f := s3probe.Classify(err, subject)
		if f.Check == s3probe.CheckBucketAvailable || f.Check == s3probe.CheckAuthenticated {
			f = &s3probe.Failure{Reason: f.Reason, Check: s3probe.CheckManaged, Message: "managing the bucket: " + f.Message, Region: f.Region}
		}
		return &manageResult{failure: f}
	}
	switch got.State {
	case s3bucket.StateCreated:
		r.event(sb, corev1.EventTypeNormal, eventBucketCreated, "Create", fmt.Sprintf("created bucket %q in region %q and tagged it as owned by this StorageBucket", sb.Spec.BucketName, sb.Spec.Region))
	case s3bucket.StateAdopted:
		r.event(sb, corev1.EventTypeNormal, eventBucketAdopted, "Adopt", fmt.Sprintf("adopted existing bucket %q as asked by annotation %s", sb.Spec.BucketName, phalanksv1beta1.AnnotationAdopt))
	case s3bucket.StateNotOurs:
		return &manageResult{failure: notOursFailure(sb.Spec.BucketName, got.OtherUID)}
	}
	st.ownedFor = st.ownershipKey()
	return &manageResult{owned: true}
}

func notOursFailure(bucket, otherUID string) *s3probe.Failure {
	why := fmt.Sprintf("it carries no %s tag; annotate the StorageBucket with %s: \"true\" to adopt it",
		s3bucket.TagOwnerUID, phalanksv1beta1.AnnotationAdopt)
	if otherUID != "" {
		why = fmt.Sprintf("its %s tag names StorageBucket UID %s; if that StorageBucket is gone, annotate this one with %s: %q to adopt it",
			s3bucket.TagOwnerUID, otherUID, phalanksv1beta1.AnnotationAdopt, otherUID)
	}
	return s3probe.NewFailure(s3probe.ReasonErrResourceExists, nil,
		"bucket %q already exists and is not managed by this StorageBucket (%s)", bucket, why)
}

// record stores a probe's result in the state and the metrics, and re-checks at once
// the other buckets of an endpoint that just came back.
func (r *Reconciler) record(key types.NamespacedName, sb *phalanksv1beta1.StorageBucket, st *bucketState, res s3probe.Result, checks []metav1.Condition) {
	ready := readyCondition(checks).Status == metav1.ConditionTrue
	st.obs.generation, st.obs.checks = sb.Generation, checks
	st.obs.probedAt, st.obs.duration, st.obs.certNotAfter = res.Start, res.Duration, res.CertNotAfter
	result := "success"
	if ready {
		st.obs.failures, st.obs.lastSuccess = 0, res.Start
		bucketUp.WithLabelValues(key.Namespace, key.Name).Set(1)
	} else {
		st.obs.failures++
		bucketUp.WithLabelValues(key.Namespace, key.Name).Set(0)
	}
	if res.Failure != nil {
		result = "failure"
		probeFailures.WithLabelValues(string(res.Failure.Reason)).Inc()
	}
	probeDuration.WithLabelValues(string(res.Depth), result).Observe(res.Duration.Seconds())

	down := res.Failure != nil && s3probe.EndpointDown(res.Failure.Reason)
	st.endpointDown = down
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states[key] = st
	if down {
		r.endpointsDown[st.endpoint] = true
		return
	}
	if answered(res.Failure) && r.endpointsDown[st.endpoint] {
		delete(r.endpointsDown, st.endpoint)
		var again []types.NamespacedName
		for k, other := range r.states {
			if other.endpoint == st.endpoint && other.endpointDown {
				again = append(again, k)
			}
		}
		r.sched.TriggerNow(r.clock.Now(), again...)
	}
}

// answered reports whether a probe result shows the endpoint answering: a success, or
// a failure that needed an answer (credentials, bucket, TLS certificate).
func answered(f *s3probe.Failure) bool {
	if f == nil {
		return true
	}
	switch f.Reason {
	case s3probe.ReasonCABundleNotFound, s3probe.ReasonInvalidCABundle, s3probe.ReasonUnknown:
		return false
	}
	return !s3probe.EndpointDown(f.Reason)
}

// writeStatus writes the status computed from the newest observation, when it changed
// or the heartbeat is due, and emits the events of its transitions.
func (r *Reconciler) writeStatus(ctx context.Context, sb *phalanksv1beta1.StorageBucket, st *bucketState) error {
	next, cause := desiredStatus(&sb.Status, st.obs, r.opts.StatusHeartbeat)
	if cause == writeNone {
		return nil
	}
	return r.patchStatus(ctx, sb, next, string(cause))
}

func (r *Reconciler) patchStatus(ctx context.Context, sb *phalanksv1beta1.StorageBucket, next phalanksv1beta1.StorageBucketStatus, cause string) error {
	before := sb
	sb = sb.DeepCopy() // sb may be the cache's own object (see Reconcile)
	sb.Status = next
	if err := r.client.Status().Patch(ctx, sb, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("patch StorageBucket status: %w", err)
	}
	statusWrites.WithLabelValues(cause).Inc()
	for _, e := range transitionEvents(before.Status.Conditions, next.Conditions) {
		r.event(sb, e.eventType, e.reason, e.action, e.note)
	}
	return nil
}

func (r *Reconciler) event(sb *phalanksv1beta1.StorageBucket, eventType, reason, action, note string) {
	r.recorder.Eventf(sb, nil, eventType, reason, action, "%s", note)
}

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
// A bucket that cannot be deleted yet keeps the finalizer and is retried on schedule.
func (r *Reconciler) reconcileDelete(ctx context.Context, sb *phalanksv1beta1.StorageBucket) error {
	key := client.ObjectKeyFromObject(sb)
	if !controllerutil.ContainsFinalizer(sb, phalanksv1beta1.FinalizerBucketDeletion) {
		return nil
	}
	now := r.clock.Now()
	r.sched.Schedule(key, nextDue(sb.UID, sb.Spec.HealthCheck.IntervalDuration(), now))
	if !wantsFinalizer(sb) {
		r.event(sb, corev1.EventTypeNormal, eventBucketRetained, "Delete", fmt.Sprintf("kept bucket %q: deletionPolicy is %s", sb.Spec.BucketName, sb.Spec.DeletionPolicy))
		return r.releaseFinalizer(ctx, sb)
	}
	in, err := r.loadInputs(ctx, sb)
	if err != nil {
		return err
	}
	if in.failure != nil {
		return r.blockDeletion(ctx, sb, in.failure, now)
	}
	conn, err := r.prober.Pool.Conn(in.endpoint)
	subject := s3probe.Subject{Host: in.host, Bucket: sb.Spec.BucketName, Region: sb.Spec.Region, Timeout: deletionTimeout}
	if err != nil {
		return r.blockDeletion(ctx, sb, s3probe.Classify(err, subject), now)
	}
	dctx, cancel := context.WithTimeout(ctx, deletionTimeout)
	defer cancel()
	got, err := s3bucket.Delete(dctx, conn.Client, sb.Spec.BucketName, string(sb.UID), sb.Spec.NonEmptyStrategy, deletionBudget)
	if err != nil {
		f := s3probe.Classify(err, subject)
		logf.FromContext(ctx).Info("bucket deletion failed; retrying on schedule", "bucket", sb.Spec.BucketName, "error", f.Message)
		return r.blockDeletion(ctx, sb, f, now)
	}
	bucket := sb.Spec.BucketName
	switch got.Outcome {
	case s3bucket.OutcomeDeleted:
		r.event(sb, corev1.EventTypeNormal, eventBucketDeleted, "Delete", deletedNote(bucket, got.Removed))
	case s3bucket.OutcomeGone:
		r.event(sb, corev1.EventTypeNormal, eventBucketDeleted, "Delete", fmt.Sprintf("bucket %q does not exist; nothing to delete", bucket))
	case s3bucket.OutcomeNotOurs:
		r.event(sb, corev1.EventTypeWarning, string(s3probe.ReasonErrResourceExists), "Delete",
			fmt.Sprintf("left bucket %q in place: it does not carry this StorageBucket's ownership tag", bucket))
	case s3bucket.OutcomeLeftNonEmpty:
		r.event(sb, corev1.EventTypeWarning, string(s3probe.ReasonBucketNotEmpty), "Delete",
			fmt.Sprintf("left bucket %q in place with its data: it is not empty and nonEmptyStrategy is DeleteIfEmpty", bucket))
	case s3bucket.OutcomeBlockedNonEmpty:
		return r.blockDeletion(ctx, sb, s3probe.NewFailure(s3probe.ReasonBucketNotEmpty, nil,
			"bucket %q still holds objects and nonEmptyStrategy is Fail; deletion waits until it is empty. Empty it, set nonEmptyStrategy to DeleteIfEmpty or ForceEmpty, or set deletionPolicy to Retain to keep it", bucket), now)
	case s3bucket.OutcomeBlockedObjectLock:
		return r.blockDeletion(ctx, sb, s3probe.NewFailure(s3probe.ReasonObjectLockEnabled, nil,
			"bucket %q has object lock enabled, so ForceEmpty will not delete its data; set deletionPolicy to Retain to keep it, or empty it yourself", bucket), now)
	case s3bucket.OutcomeEmptying:
		r.event(sb, corev1.EventTypeNormal, eventBucketEmptying, "Delete", fmt.Sprintf("deleted %d object versions from bucket %q; continuing", got.Removed, bucket))
		r.sched.TriggerNow(now, key)
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

// blockDeletion reports on the Managed condition why the bucket is not deleted yet.
func (r *Reconciler) blockDeletion(ctx context.Context, sb *phalanksv1beta1.StorageBucket, f *s3probe.Failure, now time.Time) error {
	cond := conditions.False(phalanksv1beta1.ConditionManaged, string(f.Reason), "deletion blocked: "+f.Message)
	next, changed := deletionStatus(&sb.Status, sb.Generation, cond, now)
	if !changed {
		return nil
	}
	return r.patchStatus(ctx, sb, next, string(writeChanged))
}

// releaseFinalizer lets a deleted StorageBucket go; one already gone is fine.
func (r *Reconciler) releaseFinalizer(ctx context.Context, sb *phalanksv1beta1.StorageBucket) error {
	if err := r.patchFinalizer(ctx, sb, false); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
