package storagebucket

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/conditions"
	"github.com/phalanks/phalanks-operator/internal/s3probe"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

// Reasons of True conditions and of conditions that were not checked.
const (
	reasonReachable     = "EndpointReachable"
	reasonAuthenticated = "CredentialsAccepted"
	reasonAnonymous     = "AnonymousAccess"
	reasonAvailable     = "BucketAvailable"
	reasonOwned         = "Owned"
	reasonReady         = "BucketReady"
	reasonNotChecked    = "NotChecked"
	// reasonCreating: the status records that this StorageBucket creates its bucket,
	// and the bucket is created on the next pass, at once.
	reasonCreating = "CreatingBucket"
)

// Event reasons beyond the condition reasons.
const (
	eventBucketCreated  = "BucketCreated"
	eventBucketAdopted  = "BucketAdopted"
	eventBucketDeleted  = "BucketDeleted"
	eventBucketRetained = "BucketRetained"
	eventBucketEmptying = "BucketEmptying"
)

// checkOrder is the order in which Ready summarises the checks.
var checkOrder = []taxonomy.Check{taxonomy.CheckReachable, taxonomy.CheckAuthenticated, taxonomy.CheckBucketAvailable, taxonomy.CheckManaged}

// manageResult is what the Manage step found out about ownership.
type manageResult struct {
	// owned is true when the bucket carries this StorageBucket's tag (after the step).
	owned bool
	// recordCreate is true when the bucket is missing: the status is to record that
	// this StorageBucket creates it before it is created.
	recordCreate bool
	// failure is why ownership could not be established (ErrResourceExists, or an
	// error from the endpoint).
	failure *taxonomy.Failure
	// fenced is why the step stopped before creating or tagging the bucket: this
	// replica must not act for the StorageBucket (see Reconciler.fence). The pass
	// then reports nothing.
	fenced error
	// region is the region the endpoint named for the bucket when the step found it
	// (the spec names none and the endpoint refused the first region); empty otherwise.
	region string
}

// checkInput is everything a pass learned that the conditions report.
type checkInput struct {
	depth     s3probe.Depth
	anonymous bool
	secure    bool
	host      string
	bucket    string
	// failure is the first failed check of the probe, or of the inputs (Secret, CA).
	failure *taxonomy.Failure
	// manage is nil under managementPolicy Observe.
	manage *manageResult
	// manageChecked is false when the Manage step did not run (inputs failed).
	manageChecked bool
	// readOnly says why a ReadWrite probe ran at List depth, when it did.
	readOnly *readOnlyReason
	// grandfathered is the notice of credentials read through a grandfathered reference.
	grandfathered string
}

// readOnlyReason is why a ReadWrite probe did not write a canary.
type readOnlyReason struct {
	reason, message string
}

// same reports whether two check inputs give the same conditions.
func (in checkInput) same(o checkInput) bool {
	return in.depth == o.depth && in.anonymous == o.anonymous && in.secure == o.secure && in.host == o.host &&
		in.bucket == o.bucket && in.manageChecked == o.manageChecked && sameFailure(in.failure, o.failure) &&
		sameManage(in.manage, o.manage) && samePointee(in.readOnly, o.readOnly) && in.grandfathered == o.grandfathered
}

func sameFailure(a, b *taxonomy.Failure) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Reason == b.Reason && a.Check == b.Check && a.Message == b.Message
}

func sameManage(a, b *manageResult) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.owned == b.owned && a.recordCreate == b.recordCreate && sameFailure(a.failure, b.failure) && a.fenced == nil && b.fenced == nil
}

func samePointee[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// heartbeatDue reports whether an unchanged status is to be written again, to refresh
// lastProbeTime.
func heartbeatDue(prev *phalanksv1beta1.StorageBucketStatus, probedAt time.Time, heartbeat time.Duration) bool {
	return prev.LastProbeTime == nil || probedAt.Sub(prev.LastProbeTime.Time) >= heartbeat
}

// checkConditions returns the conditions of every check the pass covers, in order:
// the checks before the failed one True, the failed one False with its reason, the
// ones after it Unknown (not checked); then SecretLabelMissing (True) when the
// credentials were read through a grandfathered reference, which leaves Ready alone.
func checkConditions(in checkInput) []metav1.Condition {
	var out []metav1.Condition
	failedAt := -1
	for i, check := range checkOrder {
		if !covers(in, check) {
			continue
		}
		if check == taxonomy.CheckManaged {
			out = append(out, managedCondition(in, failedAt >= 0))
			continue
		}
		switch {
		case failedAt >= 0:
			out = append(out, conditions.Unknown(string(check), reasonNotChecked,
				fmt.Sprintf("not checked: %s failed", checkOrder[failedAt])))
		case check == taxonomy.CheckBucketAvailable && in.failure == nil && in.manage != nil && in.manage.recordCreate:
			out = append(out, conditions.Unknown(string(check), reasonCreating,
				fmt.Sprintf("bucket %q does not exist yet; this StorageBucket creates it", in.bucket)))
		case in.failure != nil && in.failure.Check == check:
			failedAt = i
			out = append(out, conditions.False(string(check), string(in.failure.Reason), in.failure.Message))
		default:
			out = append(out, passedCondition(in, check))
		}
	}
	return append(out, grandfatheredCondition(in.grandfathered)...)
}

func covers(in checkInput, check taxonomy.Check) bool {
	switch check {
	case taxonomy.CheckManaged:
		return in.manage != nil
	case taxonomy.CheckReachable:
		return true
	}
	return in.depth != s3probe.DepthConnect
}

func passedCondition(in checkInput, check taxonomy.Check) metav1.Condition {
	switch check {
	case taxonomy.CheckReachable:
		how := "verified TLS"
		if !in.secure {
			how = "plain HTTP"
		}
		return conditions.True(string(check), reasonReachable, fmt.Sprintf("%s answered (%s)", in.host, how))
	case taxonomy.CheckAuthenticated:
		if in.anonymous {
			return conditions.True(string(check), reasonAnonymous, "the endpoint accepted anonymous requests")
		}
		return conditions.True(string(check), reasonAuthenticated, "the endpoint accepted the credentials")
	default:
		if in.readOnly != nil {
			return conditions.True(string(check), in.readOnly.reason, fmt.Sprintf("bucket %q passed the %s probe; %s", in.bucket, in.depth, in.readOnly.message))
		}
		return conditions.True(string(check), reasonAvailable, fmt.Sprintf("bucket %q passed the %s probe", in.bucket, in.depth))
	}
}

func managedCondition(in checkInput, probeFailed bool) metav1.Condition {
	const typ = phalanksv1beta1.ConditionManaged
	m := in.manage
	switch {
	case !in.manageChecked:
		return conditions.Unknown(typ, reasonNotChecked, "not checked: the StorageBucket's inputs are not usable or the endpoint is not answering")
	case m.recordCreate:
		return conditions.Unknown(typ, reasonCreating, fmt.Sprintf("bucket %q does not exist; recorded that this StorageBucket creates it, which it does next", in.bucket))
	case m.failure != nil && m.failure.Check == taxonomy.CheckManaged:
		return conditions.False(typ, string(m.failure.Reason), m.failure.Message)
	case m.failure != nil && probeFailed:
		return conditions.Unknown(typ, reasonNotChecked, "not checked: the probe failed")
	case m.failure != nil:
		return conditions.False(typ, string(m.failure.Reason), m.failure.Message)
	case m.owned:
		return conditions.True(typ, reasonOwned, fmt.Sprintf("bucket %q carries this StorageBucket's ownership tag", in.bucket))
	}
	return conditions.Unknown(typ, reasonNotChecked, "ownership not checked yet")
}

// readyCondition summarises the checks.
func readyCondition(checks []metav1.Condition) metav1.Condition {
	return conditions.Summarize(checks, reasonReady, "every check passed")
}

// statusInput is the newest observation of a bucket, as the in-memory state holds it.
type statusInput struct {
	generation int64
	checks     []metav1.Condition
	probedAt   time.Time
	duration   time.Duration
	// lastSuccess is when a probe last found the bucket Ready; zero if never.
	lastSuccess  time.Time
	failures     int32
	certNotAfter time.Time
	// createdBucket is the record that this StorageBucket creates its bucket, once made.
	createdBucket *phalanksv1beta1.CreatedBucket
	// region is the region found for a bucket whose spec names none; empty when the
	// spec names one.
	region string
}

// writeCause says why a status is written.
type writeCause string

const (
	writeNone      writeCause = ""
	writeChanged   writeCause = "changed"
	writeHeartbeat writeCause = "heartbeat"
)

// desiredStatus computes the status from the previous one and the newest observation.
// It reports writeChanged when something a user acts on differs (a condition's status,
// reason or message, observedGeneration, the certificate's expiry), writeHeartbeat
// when only the heartbeat is due, and writeNone otherwise; the volatile fields
// (lastProbeTime, lastProbeDuration, consecutiveFailures, lastSuccessTime) are
// refreshed only when the status is written anyway.
func desiredStatus(prev *phalanksv1beta1.StorageBucketStatus, in statusInput, heartbeat time.Duration) (phalanksv1beta1.StorageBucketStatus, writeCause) {
	next := *prev.DeepCopy()
	at := metav1.NewTime(in.probedAt)
	checks := append([]metav1.Condition(nil), in.checks...)
	checks = append(checks, readyCondition(in.checks))
	changed := conditions.Apply(&next.Conditions, in.generation, at, checks...)
	for _, typ := range []string{phalanksv1beta1.ConditionAuthenticated, phalanksv1beta1.ConditionBucketAvailable, phalanksv1beta1.ConditionManaged,
		phalanksv1beta1.ConditionSecretLabelMissing} {
		if meta.FindStatusCondition(checks, typ) == nil && conditions.Remove(&next.Conditions, typ) {
			changed = true
		}
	}
	if next.ObservedGeneration != in.generation {
		next.ObservedGeneration = in.generation
		changed = true
	}
	if !timeEqual(next.ServerCertificateNotAfter, in.certNotAfter) {
		next.ServerCertificateNotAfter = optionalTime(in.certNotAfter)
		changed = true
	}
	if c := in.createdBucket; c != nil && (next.CreatedBucket == nil || next.CreatedBucket.Endpoint != c.Endpoint || next.CreatedBucket.Region != c.Region) {
		next.CreatedBucket = c.DeepCopy()
		next.CreatedBucket.Time = metav1.NewTime(c.Time.Truncate(time.Second))
		changed = true
	}
	if next.Region != in.region {
		next.Region = in.region
		changed = true
	}
	var cause writeCause
	switch {
	case changed:
		cause = writeChanged
	case heartbeatDue(prev, in.probedAt, heartbeat):
		cause = writeHeartbeat
	default:
		return next, writeNone
	}
	next.LastProbeTime = &at
	next.LastProbeDuration = &metav1.Duration{Duration: in.duration.Round(time.Millisecond)}
	next.ConsecutiveFailures = in.failures
	next.LastSuccessTime = optionalTime(in.lastSuccess)
	return next, cause
}

// deletionStatus reports why a bucket cannot be deleted yet on the Managed condition
// and re-summarises Ready.
func deletionStatus(prev *phalanksv1beta1.StorageBucketStatus, generation int64, blocked metav1.Condition, now time.Time) (phalanksv1beta1.StorageBucketStatus, bool) {
	next := *prev.DeepCopy()
	var checks []metav1.Condition
	for _, check := range checkOrder {
		if c := meta.FindStatusCondition(next.Conditions, string(check)); c != nil {
			checks = append(checks, *c)
		}
	}
	if c := meta.FindStatusCondition(checks, blocked.Type); c != nil {
		*c = blocked
	} else {
		checks = append(checks, blocked)
	}
	all := append(checks, readyCondition(checks))
	changed := conditions.Apply(&next.Conditions, generation, metav1.NewTime(now), all...)
	return next, changed
}

// eventSpec is an event a status transition deserves.
type eventSpec struct {
	eventType, reason, action, note string
}

// transitionEvents returns the events for the changes from prev to next: Ready
// becoming True or False (or changing reason while False), Managed turning to
// ErrResourceExists, and SecretLabelMissing appearing. An Unknown Ready (a bucket being
// created) is no event.
func transitionEvents(prev, next []metav1.Condition) []eventSpec {
	var out []eventSpec
	before, after := meta.FindStatusCondition(prev, phalanksv1beta1.ConditionReady), meta.FindStatusCondition(next, phalanksv1beta1.ConditionReady)
	switch {
	case after == nil:
	case after.Status == metav1.ConditionTrue && (before == nil || before.Status != metav1.ConditionTrue):
		out = append(out, eventSpec{corev1.EventTypeNormal, reasonReady, "Probe", after.Message})
	case after.Status == metav1.ConditionFalse && (before == nil || before.Status != after.Status || before.Reason != after.Reason):
		out = append(out, eventSpec{corev1.EventTypeWarning, after.Reason, "Probe", after.Message})
	}
	mBefore, mAfter := meta.FindStatusCondition(prev, phalanksv1beta1.ConditionManaged), meta.FindStatusCondition(next, phalanksv1beta1.ConditionManaged)
	if mAfter != nil && mAfter.Reason == string(taxonomy.ReasonErrResourceExists) &&
		(mBefore == nil || mBefore.Reason != mAfter.Reason) && (after == nil || after.Reason != mAfter.Reason) {
		out = append(out, eventSpec{corev1.EventTypeWarning, mAfter.Reason, "Manage", mAfter.Message})
	}
	if g := meta.FindStatusCondition(next, phalanksv1beta1.ConditionSecretLabelMissing); g != nil &&
		meta.FindStatusCondition(prev, phalanksv1beta1.ConditionSecretLabelMissing) == nil {
		out = append(out, eventSpec{corev1.EventTypeWarning, eventSecretLabelMissing, "Probe", g.Message})
	}
	return out
}

func timeEqual(a *metav1.Time, b time.Time) bool {
	if a == nil || b.IsZero() {
		return a == nil && b.IsZero()
	}
	// The API server keeps seconds.
	return a.Unix() == b.Unix()
}

func optionalTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}
