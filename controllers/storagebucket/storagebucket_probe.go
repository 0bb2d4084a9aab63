package storagebucket

import (
	"context"
	"errors"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/s3bucket"
	"github.com/phalanks/phalanks-operator/internal/s3probe"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

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
func decideProbe(sb *phalanksv1beta1.StorageBucket, st *bucketState, inputs fingerprint, due time.Time, scheduled bool, now time.Time) probeCause {
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
	case st.fingerprint != inputs:
		return causeInputs
	case scheduled && !now.Before(due):
		return causeSchedule
	}
	return causeNone
}

// probeTimeout is the bucket's probe timeout, capped for objects stored before the
// schema capped it.
func probeTimeout(sb *phalanksv1beta1.StorageBucket) time.Duration {
	return min(sb.Spec.HealthCheck.TimeoutDuration(), phalanksv1beta1.MaxProbeTimeout)
}

// passBudget bounds a probing pass: the Manage step and the probe take at most one
// timeout each, and deleting a canary gets the rest, so a pass never holds a worker
// longer than three timeouts (three minutes at most).
func passBudget(timeout time.Duration) time.Duration { return 3 * timeout }

// probe runs one probing pass of a bucket within its pass budget: it lets the
// endpoint's circuit breaker decide whether the bucket is probed or marked, runs the
// Manage step (under managementPolicy Manage) and the probe, records the result in the
// state and the metrics, and schedules the next probe.
func (r *Reconciler) probe(ctx context.Context, sb *phalanksv1beta1.StorageBucket, in inputs, st *bucketState,
	cause probeCause, due, now time.Time) *bucketState {
	if st == nil {
		st = seedState(sb)
	}
	if cause == causeSchedule {
		probeLateness.Observe(now.Sub(due).Seconds())
	}
	st.key, st.generation, st.fingerprint, st.endpoint, st.inputs = refOf(sb).Key, sb.Generation, in.fingerprint, in.key, in
	timeout := probeTimeout(sb)
	target := s3probe.Target{
		Endpoint:       in.endpoint,
		Bucket:         sb.Spec.BucketName,
		Depth:          s3probe.Depth(sb.Spec.HealthCheck.Depth),
		Timeout:        timeout,
		DiscoverRegion: in.discoverRegion,
	}
	if target.Depth == s3probe.DepthReadWrite {
		target.CanaryKey = phalanksv1beta1.CanaryPrefix + string(sb.UID)
	}
	check := checkInput{depth: target.Depth, anonymous: in.endpoint.Credentials == nil,
		secure: strings.HasPrefix(in.key, "https://"), host: in.host, bucket: target.Bucket, grandfathered: in.grandfathered}
	managed := sb.Spec.ManagementPolicy == phalanksv1beta1.ManagementManage
	if managed {
		check.manage = &manageResult{}
	}
	if managed || target.Depth == s3probe.DepthReadWrite {
		// More than one S3 call (managing, checking object lock, a canary): the pass
		// budget bounds them together. A single probe is bounded by its own timeout.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, passBudget(timeout))
		defer cancel()
	}

	var res s3probe.Result
	unverifiable := in.failure != nil && in.failure.Check == taxonomy.CheckReachable
	admitted, down := true, (*taxonomy.Failure)(nil)
	if !unverifiable {
		admitted, down = r.mem.admit(in.key, sb.UID, now, passBudget(timeout))
	}
	marked := !admitted
	switch {
	case unverifiable:
		// Without its CA bundle the endpoint cannot be verified: do not probe at all.
		res = s3probe.Result{Depth: target.Depth, Start: now, Failure: in.failure}
	case marked:
		// The endpoint does not answer and another bucket is finding out whether it
		// does again: take its answer rather than a worker for a whole timeout.
		endpointDownMarks.Inc()
		res = s3probe.Result{Depth: target.Depth, Start: now, Failure: markedDown(down)}
	case in.failure != nil:
		// Without credentials, still find out whether the endpoint is reachable.
		target.Depth = s3probe.DepthConnect
		if res = r.run(ctx, sb, st, target, cause); res.Failure == nil {
			res.Failure = in.failure
		}
		if stopped(ctx) {
			return r.stopPass(ctx, sb, "the pass was stopped", now)
		}
	default:
		if managed {
			check.manage, check.manageChecked = r.manage(ctx, sb, in, st, timeout), true
			if check.manage.fenced != nil {
				return r.stopPass(ctx, sb, check.manage.fenced.Error(), now)
			}
			if found := check.manage.region; found != "" {
				// Probe, and check object lock, in the region the endpoint named.
				in.endpoint.Region, target.Region = found, found
				st.inputs.endpoint.Region = found
			}
			if stopped(ctx) {
				return r.stopPass(ctx, sb, "the pass was stopped", now)
			}
			if !check.manage.owned && target.Depth == s3probe.DepthReadWrite {
				// Never write a canary into a bucket that is not ours.
				target.Depth = s3probe.DepthList
			}
		}
		if target.Depth == s3probe.DepthReadWrite {
			target.Depth, check.readOnly = r.canaryDepth(ctx, sb, in, st, timeout)
			if stopped(ctx) {
				return r.stopPass(ctx, sb, "the pass was stopped", now)
			}
		}
		check.depth = target.Depth
		if check.manage != nil && check.manage.recordCreate {
			// The bucket is missing: record its creation first (this pass's status
			// write) and create it on the next pass, at once. Nothing to probe yet.
			res = s3probe.Result{Depth: target.Depth, Start: now}
			break
		}
		res = r.run(ctx, sb, st, target, cause)
		if stopped(ctx) {
			return r.stopPass(ctx, sb, "the pass was stopped", now)
		}
		if managed && st.ownedFor != nil && res.Failure != nil && res.Failure.Reason == taxonomy.ReasonNoSuchBucket {
			// The bucket went away since ownership was confirmed: create it again.
			st.ownedFor = nil
			check.manage = r.manage(ctx, sb, in, st, timeout)
			if check.manage.fenced != nil {
				return r.stopPass(ctx, sb, check.manage.fenced.Error(), now)
			}
			res = r.run(ctx, sb, st, target, cause)
			if stopped(ctx) {
				return r.stopPass(ctx, sb, "the pass was stopped", now)
			}
		}
	}
	check.failure = res.Failure
	if check.manage != nil && check.manage.recordCreate {
		st.obs.createdBucket = &phalanksv1beta1.CreatedBucket{Endpoint: sb.Spec.Endpoint, Region: in.endpoint.Region, Time: metav1.NewTime(now)}
	}
	st.obs.region = foundRegion(sb, check.manage, res)
	r.record(sb, st, res, st.conditionsFor(check), !marked)
	r.sched.Schedule(refOf(sb), nextDue(sb.UID, sb.Spec.HealthCheck.IntervalDuration(), now))
	if r.inputsChanged(ctx, sb, in) {
		// Probed with what a referenced object held before it changed: probe again at
		// once (the change's own trigger may have come before the line above).
		r.sched.TriggerNow(r.clock.Now(), refOf(sb))
	}
	return st
}

// foundRegion is what status.region shows after a pass: for a bucket whose spec names
// no region, the region the endpoint accepted this pass's requests signed for (the
// probe's, else the one the Manage step was told), or, when the pass learned nothing
// about it, the one known before; empty when the spec names one.
func foundRegion(sb *phalanksv1beta1.StorageBucket, manage *manageResult, res s3probe.Result) string {
	switch {
	case sb.Spec.Region != "":
		return ""
	case res.Region != "":
		return res.Region
	case manage != nil && manage.region != "":
		return manage.region
	}
	return sb.Status.Region
}

// stopPass ends a pass that must not report: the fence stopped it before it changed
// the bucket (this replica must not act for the StorageBucket), or the pass itself was
// stopped (its shard slot was given up, or the process is shutting down), which makes
// whatever the probe found meaningless. Nothing is recorded or written, and the bucket
// stays on its schedule (a StorageBucket that is gone is forgotten with its deletion
// event; a slot given up, by the handover).
func (r *Reconciler) stopPass(ctx context.Context, sb *phalanksv1beta1.StorageBucket, why string, now time.Time) *bucketState {
	logf.FromContext(ctx).V(1).Info("pass stopped without a result", "reason", why)
	r.sched.Schedule(refOf(sb), nextDue(sb.UID, sb.Spec.HealthCheck.IntervalDuration(), now))
	return nil
}

// stopped reports whether a pass's context was canceled from outside (its slot given
// up, the ownership lapsed, shutdown), rather than having reached its own budget.
func stopped(ctx context.Context) bool { return errors.Is(ctx.Err(), context.Canceled) }

// run probes the target and reports the result to the endpoint's circuit breaker,
// re-checking at once the other buckets of an endpoint that answers again.
func (r *Reconciler) run(ctx context.Context, sb *phalanksv1beta1.StorageBucket, st *bucketState, target s3probe.Target, cause probeCause) s3probe.Result {
	probeCounter(cause).Inc()
	res := r.prober.Probe(ctx, target)
	if stopped(ctx) {
		return res // not the endpoint's doing: the breaker hears nothing of it
	}
	if res.Failure != nil && res.Failure.Reason == taxonomy.ReasonObjectLockEnabled && target.Depth == s3probe.DepthReadWrite {
		// Object lock kept the canary (enabled after the check, or undetectable): no
		// canary again for this bucket.
		st.lockCheckedFor, st.objectLock = st.ownershipKey(), true
	}
	again := r.mem.report(st.endpoint, sb.UID, res.Failure, r.clock.Now(), sb.Spec.HealthCheck.IntervalDuration())
	r.sched.TriggerNow(r.clock.Now(), again...)
	return res
}

// markedDown is the result of a bucket marked with its endpoint's: the same reason and
// message as the probe that found the endpoint down.
func markedDown(down *taxonomy.Failure) *taxonomy.Failure {
	f := *down
	f.Message += " (the endpoint is not answering; while it does not, one bucket at a time probes it)"
	return &f
}

// Why a ReadWrite probe ran at List depth instead; reasons of a True BucketAvailable.
const (
	reasonObjectLockReadOnly    = "ObjectLockReadOnly"
	reasonObjectLockNotVerified = "ObjectLockNotVerified"
)

// canaryDepth returns the depth for a ReadWrite probe: ReadWrite, unless the bucket has
// object lock (or whether it has cannot be told), since a canary in such a bucket could
// not be deleted: then List, and why. Object lock is checked once per spec and inputs.
func (r *Reconciler) canaryDepth(ctx context.Context, sb *phalanksv1beta1.StorageBucket, in inputs, st *bucketState,
	timeout time.Duration) (s3probe.Depth, *readOnlyReason) {
	if !st.confirmedFor(st.lockCheckedFor) {
		conn, err := r.prober.Pool.Conn(in.endpoint)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			st.objectLock, err = s3bucket.ObjectLockEnabled(cctx, conn.Client, sb.Spec.BucketName)
			cancel()
		}
		if err != nil {
			f := taxonomy.Classify(err, subjectIn(in.host, sb.Spec.BucketName, in.endpoint.Region, timeout))
			var failure *taxonomy.Failure
			if errors.As(err, &failure) || taxonomy.EndpointDown(f.Reason) {
				// The endpoint did not answer: the probe will tell.
				return s3probe.DepthList, nil
			}
			return s3probe.DepthList, &readOnlyReason{reasonObjectLockNotVerified,
				"could not read the bucket's object lock configuration (" + string(f.Reason) + "), so it cannot be sure a canary " +
					"object could be deleted again; grant s3:GetBucketObjectLockConfiguration to probe ReadWrite"}
		}
		st.lockCheckedFor = st.ownershipKey()
	}
	if st.objectLock {
		return s3probe.DepthList, &readOnlyReason{reasonObjectLockReadOnly,
			"object lock is enabled on the bucket, so a canary object could not be deleted again; it is probed with List instead of ReadWrite"}
	}
	return s3probe.DepthReadWrite, nil
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

// record stores a pass's result in the state, the memory and the metrics (the probe
// metrics only when the pass probed, rather than marked the bucket with its endpoint's
// result).
func (r *Reconciler) record(sb *phalanksv1beta1.StorageBucket, st *bucketState, res s3probe.Result, checks []metav1.Condition, probed bool) {
	ready := readyCondition(checks).Status == metav1.ConditionTrue
	st.obs.generation, st.obs.checks = sb.Generation, checks
	st.obs.probedAt, st.obs.duration, st.obs.certNotAfter = res.Start, res.Duration, res.CertNotAfter
	if ready {
		st.obs.failures, st.obs.lastSuccess = 0, res.Start
	} else {
		st.obs.failures++
	}
	st.probed, st.ready = true, ready
	if probed {
		if res.Failure != nil {
			probeFailures.WithLabelValues(string(res.Failure.Reason)).Inc()
		}
		durationObserver(res.Depth, res.Failure != nil).Observe(res.Duration.Seconds())
	}
	st.endpointDown = res.Failure != nil && taxonomy.EndpointDown(res.Failure.Reason)
	r.mem.store(sb.UID, st)
}
