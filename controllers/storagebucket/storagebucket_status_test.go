package storagebucket

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/s3probe"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

func summary(conds []metav1.Condition) string {
	var parts []string
	for _, c := range conds {
		parts = append(parts, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return strings.Join(parts, " ")
}

func TestCheckConditions(t *testing.T) {
	refused := taxonomy.NewFailure(taxonomy.ReasonConnectionRefused, nil, "connection to h refused")
	denied := taxonomy.NewFailure(taxonomy.ReasonInvalidCredentials, nil, "bad key")
	missing := taxonomy.NewFailure(taxonomy.ReasonNoSuchBucket, nil, "no bucket")
	notOurs := notOursFailure("b", "")
	base := checkInput{depth: s3probe.DepthHeadBucket, secure: true, host: "h", bucket: "b"}
	with := func(f func(*checkInput)) checkInput { in := base; f(&in); return in }
	for name, tc := range map[string]struct {
		in   checkInput
		want string
	}{
		"a healthy bucket passes every check": {
			in:   base,
			want: "Reachable=True/EndpointReachable Authenticated=True/CredentialsAccepted BucketAvailable=True/BucketAvailable",
		},
		"anonymous access says so": {
			in:   with(func(in *checkInput) { in.anonymous = true }),
			want: "Reachable=True/EndpointReachable Authenticated=True/AnonymousAccess BucketAvailable=True/BucketAvailable",
		},
		"the Connect depth checks reachability only": {
			in:   with(func(in *checkInput) { in.depth = s3probe.DepthConnect }),
			want: "Reachable=True/EndpointReachable",
		},
		"checks after the failed one are not checked": {
			in:   with(func(in *checkInput) { in.failure = refused }),
			want: "Reachable=False/ConnectionRefused Authenticated=Unknown/NotChecked BucketAvailable=Unknown/NotChecked",
		},
		"checks before the failed one passed": {
			in:   with(func(in *checkInput) { in.failure = denied }),
			want: "Reachable=True/EndpointReachable Authenticated=False/InvalidCredentials BucketAvailable=Unknown/NotChecked",
		},
		"an owned bucket under Manage is Managed": {
			in:   with(func(in *checkInput) { in.manage, in.manageChecked = &manageResult{owned: true}, true }),
			want: "Reachable=True/EndpointReachable Authenticated=True/CredentialsAccepted BucketAvailable=True/BucketAvailable Managed=True/Owned",
		},
		"a bucket that is not ours is ErrResourceExists": {
			in:   with(func(in *checkInput) { in.manage, in.manageChecked = &manageResult{failure: notOurs}, true }),
			want: "Reachable=True/EndpointReachable Authenticated=True/CredentialsAccepted BucketAvailable=True/BucketAvailable Managed=False/ErrResourceExists",
		},
		"ownership of an unreachable endpoint is not checked": {
			in: with(func(in *checkInput) {
				in.failure, in.manage, in.manageChecked = refused, &manageResult{failure: refused}, true
			}),
			want: "Reachable=False/ConnectionRefused Authenticated=Unknown/NotChecked BucketAvailable=Unknown/NotChecked Managed=Unknown/NotChecked",
		},
		"a bucket that could not be created reports why on Managed": {
			in: with(func(in *checkInput) {
				in.failure = missing
				in.manage, in.manageChecked = &manageResult{failure: &taxonomy.Failure{Reason: taxonomy.ReasonAccessDenied, Check: taxonomy.CheckManaged, Message: "managing the bucket: denied"}}, true
			}),
			want: "Reachable=True/EndpointReachable Authenticated=True/CredentialsAccepted BucketAvailable=False/NoSuchBucket Managed=False/AccessDenied",
		},
		"a missing bucket whose creation is being recorded is Unknown, not a failure": {
			in:   with(func(in *checkInput) { in.manage, in.manageChecked = &manageResult{recordCreate: true}, true }),
			want: "Reachable=True/EndpointReachable Authenticated=True/CredentialsAccepted BucketAvailable=Unknown/CreatingBucket Managed=Unknown/CreatingBucket",
		},
		"a ReadWrite probe held at List by object lock says so": {
			in: with(func(in *checkInput) {
				in.depth, in.readOnly = s3probe.DepthList, &readOnlyReason{reasonObjectLockReadOnly, "object lock is enabled"}
			}),
			want: "Reachable=True/EndpointReachable Authenticated=True/CredentialsAccepted BucketAvailable=True/ObjectLockReadOnly",
		},
		"unusable inputs leave ownership unchecked": {
			in: with(func(in *checkInput) {
				in.failure, in.manage = taxonomy.NewFailure(taxonomy.ReasonSecretNotFound, nil, "no secret"), &manageResult{}
			}),
			want: "Reachable=True/EndpointReachable Authenticated=False/SecretNotFound BucketAvailable=Unknown/NotChecked Managed=Unknown/NotChecked",
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := summary(checkConditions(tc.in)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func healthyInput(at time.Time) statusInput {
	checks := checkConditions(checkInput{depth: s3probe.DepthHeadBucket, secure: true, host: "h", bucket: "b"})
	return statusInput{generation: 1, checks: checks, probedAt: at, duration: 3 * time.Millisecond, lastSuccess: at,
		certNotAfter: t0.Add(90 * 24 * time.Hour)}
}

func failingInput(at time.Time, f *taxonomy.Failure, failures int32) statusInput {
	in := healthyInput(at)
	in.checks = checkConditions(checkInput{depth: s3probe.DepthHeadBucket, secure: true, host: "h", bucket: "b", failure: f})
	in.failures, in.lastSuccess = failures, t0
	return in
}

func TestDesiredStatus(t *testing.T) {
	const heartbeat = time.Hour
	written, _ := desiredStatus(&phalanksv1beta1.StorageBucketStatus{}, healthyInput(t0), heartbeat)
	refused := taxonomy.NewFailure(taxonomy.ReasonConnectionRefused, nil, "connection to h refused")
	for name, tc := range map[string]struct {
		prev phalanksv1beta1.StorageBucketStatus
		in   statusInput
		want writeCause
	}{
		"the first probe is written": {
			prev: phalanksv1beta1.StorageBucketStatus{}, in: healthyInput(t0), want: writeChanged,
		},
		"an unchanged probe within the heartbeat is not written": {
			prev: written, in: healthyInput(t0.Add(30 * time.Second)), want: writeNone,
		},
		"an unchanged probe with only a new latency is not written": {
			prev: written, in: func() statusInput { in := healthyInput(t0.Add(time.Minute)); in.duration = time.Second; return in }(), want: writeNone,
		},
		"an unchanged probe after the heartbeat is written": {
			prev: written, in: healthyInput(t0.Add(heartbeat)), want: writeHeartbeat,
		},
		"a failure is written": {
			prev: written, in: failingInput(t0.Add(30*time.Second), refused, 1), want: writeChanged,
		},
		"the same failure again is not written, though consecutiveFailures grew": {
			prev: func() phalanksv1beta1.StorageBucketStatus {
				s, _ := desiredStatus(&written, failingInput(t0.Add(30*time.Second), refused, 1), heartbeat)
				return s
			}(),
			in: failingInput(t0.Add(60*time.Second), refused, 2), want: writeNone,
		},
		"a new generation is written": {
			prev: written, in: func() statusInput { in := healthyInput(t0.Add(time.Minute)); in.generation = 2; return in }(), want: writeChanged,
		},
		"a renewed server certificate is written": {
			prev: written, in: func() statusInput {
				in := healthyInput(t0.Add(time.Minute))
				in.certNotAfter = t0.Add(180 * 24 * time.Hour)
				return in
			}(), want: writeChanged,
		},
		"switching to the Connect depth drops the deeper conditions": {
			prev: written, in: func() statusInput {
				in := healthyInput(t0.Add(time.Minute))
				in.checks = checkConditions(checkInput{depth: s3probe.DepthConnect, secure: true, host: "h", bucket: "b"})
				return in
			}(), want: writeChanged,
		},
	} {
		t.Run(name, func(t *testing.T) {
			next, got := desiredStatus(&tc.prev, tc.in, heartbeat)
			if got != tc.want {
				t.Fatalf("write cause %q, want %q (conditions %s)", got, tc.want, summary(next.Conditions))
			}
			if got == writeNone {
				return
			}
			if next.LastProbeTime == nil || !next.LastProbeTime.Equal(&metav1.Time{Time: tc.in.probedAt}) {
				t.Errorf("lastProbeTime = %v, want %v", next.LastProbeTime, tc.in.probedAt)
			}
			if next.ConsecutiveFailures != tc.in.failures || next.ObservedGeneration != tc.in.generation {
				t.Errorf("consecutiveFailures %d observedGeneration %d, want %d and %d",
					next.ConsecutiveFailures, next.ObservedGeneration, tc.in.failures, tc.in.generation)
			}
			for _, c := range next.Conditions {
				if c.ObservedGeneration != tc.in.generation {
					t.Errorf("condition %s has observedGeneration %d", c.Type, c.ObservedGeneration)
				}
			}
			if len(next.Conditions) != len(tc.in.checks)+1 {
				t.Errorf("conditions %s, want the checks and Ready", summary(next.Conditions))
			}
		})
	}
}

func TestReadyKeepsItsTransitionTimeWhileUnchanged(t *testing.T) {
	first, _ := desiredStatus(&phalanksv1beta1.StorageBucketStatus{}, healthyInput(t0), time.Hour)
	later, _ := desiredStatus(&first, healthyInput(t0.Add(2*time.Hour)), time.Hour)
	ready := meta.FindStatusCondition(later.Conditions, phalanksv1beta1.ConditionReady)
	if ready == nil || !ready.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready lastTransitionTime = %v, want %v", ready, t0)
	}
}

func TestSteadyStateWritesAtMostOnePerHundredProbes(t *testing.T) {
	status, _ := desiredStatus(&phalanksv1beta1.StorageBucketStatus{}, healthyInput(t0), time.Hour)
	writes, probes := 0, 0
	for at := t0.Add(30 * time.Second); at.Before(t0.Add(24 * time.Hour)); at = at.Add(30 * time.Second) {
		probes++
		next, cause := desiredStatus(&status, healthyInput(at), time.Hour)
		if cause != writeNone {
			writes++
			status = next
		}
	}
	if ratio := float64(writes) / float64(probes); ratio > 0.01 {
		t.Errorf("%d writes for %d probes = %.4f per probe, want at most 0.01", writes, probes, ratio)
	}
}

func TestTransitionEvents(t *testing.T) {
	ready := healthyInput(t0)
	readyStatus, _ := desiredStatus(&phalanksv1beta1.StorageBucketStatus{}, ready, time.Hour)
	refused := taxonomy.NewFailure(taxonomy.ReasonConnectionRefused, nil, "refused")
	timeout := taxonomy.NewFailure(taxonomy.ReasonTimeout, nil, "timeout")
	downStatus, _ := desiredStatus(&readyStatus, failingInput(t0.Add(time.Minute), refused, 1), time.Hour)
	timeoutStatus, _ := desiredStatus(&downStatus, failingInput(t0.Add(2*time.Minute), timeout, 2), time.Hour)
	backStatus, _ := desiredStatus(&downStatus, healthyInput(t0.Add(3*time.Minute)), time.Hour)
	notOurs := healthyInput(t0)
	notOurs.checks = checkConditions(checkInput{depth: s3probe.DepthHeadBucket, bucket: "b",
		manage: &manageResult{failure: notOursFailure("b", "")}, manageChecked: true})
	notOursStatus, _ := desiredStatus(&phalanksv1beta1.StorageBucketStatus{}, notOurs, time.Hour)
	creating := healthyInput(t0)
	creating.checks = checkConditions(checkInput{depth: s3probe.DepthHeadBucket, bucket: "b",
		manage: &manageResult{recordCreate: true}, manageChecked: true})
	creatingStatus, _ := desiredStatus(&phalanksv1beta1.StorageBucketStatus{}, creating, time.Hour)

	for name, tc := range map[string]struct {
		prev, next []metav1.Condition
		want       string
	}{
		"becoming Ready is a Normal event":                         {prev: nil, next: readyStatus.Conditions, want: "Normal/BucketReady"},
		"losing Ready is a Warning with the reason":                {prev: readyStatus.Conditions, next: downStatus.Conditions, want: "Warning/ConnectionRefused"},
		"a new failure reason is a Warning":                        {prev: downStatus.Conditions, next: timeoutStatus.Conditions, want: "Warning/Timeout"},
		"the same failure again is no event":                       {prev: downStatus.Conditions, next: downStatus.Conditions, want: ""},
		"staying Ready is no event":                                {prev: readyStatus.Conditions, next: readyStatus.Conditions, want: ""},
		"recovering is a Normal event":                             {prev: downStatus.Conditions, next: backStatus.Conditions, want: "Normal/BucketReady"},
		"a bucket that is not ours is one ErrResourceExists event": {prev: nil, next: notOursStatus.Conditions, want: "Warning/ErrResourceExists"},
		"a bucket being created is no event":                       {prev: nil, next: creatingStatus.Conditions, want: ""},
		"a created bucket becoming Ready is a Normal event":        {prev: creatingStatus.Conditions, next: readyStatus.Conditions, want: "Normal/BucketReady"},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, e := range transitionEvents(tc.prev, tc.next) {
				got = append(got, e.eventType+"/"+e.reason)
			}
			if strings.Join(got, ",") != tc.want {
				t.Errorf("events %v, want %q", got, tc.want)
			}
		})
	}
}

func TestDeletionStatusReportsTheBlockOnManagedAndReady(t *testing.T) {
	in := healthyInput(t0)
	in.checks = checkConditions(checkInput{depth: s3probe.DepthHeadBucket, bucket: "b", manage: &manageResult{owned: true}, manageChecked: true})
	prev, _ := desiredStatus(&phalanksv1beta1.StorageBucketStatus{}, in, time.Hour)
	blocked := metav1.Condition{Type: phalanksv1beta1.ConditionManaged, Status: metav1.ConditionFalse, Reason: "BucketNotEmpty", Message: "deletion blocked"}
	next, changed := deletionStatus(&prev, 1, blocked, t0.Add(time.Minute))
	ready := meta.FindStatusCondition(next.Conditions, phalanksv1beta1.ConditionReady)
	if !changed || ready.Status != metav1.ConditionFalse || ready.Reason != "BucketNotEmpty" {
		t.Errorf("changed=%v Ready=%+v; want Ready False BucketNotEmpty", changed, ready)
	}
	if _, again := deletionStatus(&next, 1, blocked, t0.Add(2*time.Minute)); again {
		t.Error("the same block again is a change")
	}
}

func TestDesiredStatusKeepsTheCreationRecord(t *testing.T) {
	in := healthyInput(t0)
	in.createdBucket = &phalanksv1beta1.CreatedBucket{Endpoint: "https://s3.example.com", Region: "eu-west-1", Time: metav1.NewTime(t0.Add(500 * time.Millisecond))}
	recorded, cause := desiredStatus(&phalanksv1beta1.StorageBucketStatus{}, in, time.Hour)
	if cause != writeChanged || recorded.CreatedBucket == nil || !recorded.CreatedBucket.Time.Equal(&metav1.Time{Time: t0}) {
		t.Fatalf("cause %s, createdBucket %+v; want the record written, to the second", cause, recorded.CreatedBucket)
	}
	later := healthyInput(t0.Add(time.Minute))
	kept, cause := desiredStatus(&recorded, later, time.Hour)
	if cause != writeNone || kept.CreatedBucket == nil {
		t.Errorf("an observation without the record: cause %s, createdBucket %+v; want it kept and nothing written", cause, kept.CreatedBucket)
	}
}

// A pass that learned what the last one did reuses its conditions (a healthy bucket's
// steady state), and only then: two check inputs are "the same" exactly when they make
// the same conditions.
func TestAnUnchangedPassReusesItsConditionsAndOnlyThen(t *testing.T) {
	failure := func(r taxonomy.Reason, msg string) *taxonomy.Failure { return taxonomy.NewFailure(r, nil, "%s", msg) }
	base := checkInput{depth: s3probe.DepthHeadBucket, secure: true, host: "h", bucket: "b"}
	with := func(f func(*checkInput)) checkInput { in := base; f(&in); return in }
	inputs := []checkInput{
		base,
		with(func(in *checkInput) { in.anonymous = true }),
		with(func(in *checkInput) { in.secure = false }),
		with(func(in *checkInput) { in.host = "other" }),
		with(func(in *checkInput) { in.bucket = "other" }),
		with(func(in *checkInput) { in.depth = s3probe.DepthReadWrite }),
		with(func(in *checkInput) { in.failure = failure(taxonomy.ReasonConnectionRefused, "refused") }),
		with(func(in *checkInput) { in.failure = failure(taxonomy.ReasonConnectionRefused, "refused again") }),
		with(func(in *checkInput) { in.failure = failure(taxonomy.ReasonTimeout, "refused") }),
		with(func(in *checkInput) { in.manage, in.manageChecked = &manageResult{owned: true}, true }),
		with(func(in *checkInput) { in.manage, in.manageChecked = &manageResult{recordCreate: true}, true }),
		with(func(in *checkInput) { in.manage, in.manageChecked = &manageResult{owned: true}, false }),
		with(func(in *checkInput) {
			in.manage, in.manageChecked = &manageResult{failure: notOursFailure("b", "")}, true
		}),
		with(func(in *checkInput) { in.readOnly = &readOnlyReason{reasonObjectLockReadOnly, "locked"} }),
		with(func(in *checkInput) { in.readOnly = &readOnlyReason{reasonObjectLockNotVerified, "unknown"} }),
	}
	render := func(in checkInput) string { return fmt.Sprintf("%+v", checkConditions(in)) }
	for i, a := range inputs {
		// An equal input made afresh (new pointers, as every pass makes them).
		again := a
		if a.failure != nil {
			f := *a.failure
			again.failure = &f
		}
		if a.manage != nil {
			m := *a.manage
			again.manage = &m
		}
		if a.readOnly != nil {
			r := *a.readOnly
			again.readOnly = &r
		}
		st := &bucketState{}
		first := st.conditionsFor(a)
		second := st.conditionsFor(again)
		if &first[0] != &second[0] || st.checksVersion != 1 {
			t.Errorf("input %d: an equal pass rebuilt its conditions (version %d)", i, st.checksVersion)
		}
		for j, b := range inputs {
			if i != j && a.same(b) && render(a) != render(b) {
				t.Errorf("inputs %d and %d count as the same but make different conditions:\n%s\n%s", i, j, render(a), render(b))
			}
			if i != j && !a.same(b) && render(a) == render(b) {
				t.Logf("inputs %d and %d make the same conditions but count as different (a rebuild, harmless)", i, j)
			}
		}
		if changed := st.conditionsFor(inputs[(i+1)%len(inputs)]); render(inputs[(i+1)%len(inputs)]) != fmt.Sprintf("%+v", changed) {
			t.Errorf("input %d: a changed pass kept the old conditions", i)
		}
	}
}
