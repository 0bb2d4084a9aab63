package storagebucket

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/s3probe"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

const notice = "Secret \"creds\" lacks the label ..."

func grandfatheredInput(at time.Time, f *taxonomy.Failure) statusInput {
	in := healthyInput(at)
	in.checks = checkConditions(checkInput{depth: s3probe.DepthHeadBucket, secure: true, host: "h", bucket: "b", failure: f, grandfathered: notice})
	return in
}

func TestAGrandfatheredReferenceIsReadyWithANotice(t *testing.T) {
	status, cause := desiredStatus(&phalanksv1beta1.StorageBucketStatus{}, grandfatheredInput(t0, nil), time.Hour)
	if cause != writeChanged {
		t.Fatalf("write cause %q", cause)
	}
	if got, want := summary(status.Conditions),
		"Reachable=True/EndpointReachable Authenticated=True/CredentialsAccepted BucketAvailable=True/BucketAvailable "+
			"SecretLabelMissing=True/Grandfathered Ready=True/BucketReady"; got != want {
		t.Errorf("conditions %s, want %s", got, want)
	}
	if c := meta.FindStatusCondition(status.Conditions, phalanksv1beta1.ConditionSecretLabelMissing); c == nil || c.Message != notice {
		t.Errorf("SecretLabelMissing = %v, want the notice as its message", c)
	}

	refused := taxonomy.NewFailure(taxonomy.ReasonConnectionRefused, nil, "refused")
	failing, _ := desiredStatus(&status, grandfatheredInput(t0.Add(time.Minute), refused), time.Hour)
	if ready := meta.FindStatusCondition(failing.Conditions, phalanksv1beta1.ConditionReady); ready.Reason != string(taxonomy.ReasonConnectionRefused) {
		t.Errorf("Ready = %s, want the probe's failure: the notice is not a check", ready.Reason)
	}
	if meta.FindStatusCondition(failing.Conditions, phalanksv1beta1.ConditionSecretLabelMissing) == nil {
		t.Error("the notice went while the reference is still read without the label")
	}

	labelled, cause := desiredStatus(&status, healthyInput(t0.Add(2*time.Minute)), time.Hour)
	if cause != writeChanged || meta.FindStatusCondition(labelled.Conditions, phalanksv1beta1.ConditionSecretLabelMissing) != nil {
		t.Errorf("once the Secret is labelled the notice goes (write cause %q, conditions %s)", cause, summary(labelled.Conditions))
	}
	ready := meta.FindStatusCondition(labelled.Conditions, phalanksv1beta1.ConditionReady)
	if !ready.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready moved at %v: labelling the Secret is no transition", ready.LastTransitionTime)
	}
}

func TestTheNoticeIsOneWarningEvent(t *testing.T) {
	plain, _ := desiredStatus(&phalanksv1beta1.StorageBucketStatus{}, healthyInput(t0), time.Hour)
	first, _ := desiredStatus(&phalanksv1beta1.StorageBucketStatus{}, grandfatheredInput(t0, nil), time.Hour)
	upgraded, _ := desiredStatus(&plain, grandfatheredInput(t0.Add(time.Minute), nil), time.Hour)
	for name, tc := range map[string]struct {
		prev, next []metav1.Condition
		want       string
	}{
		"a first pass through a grandfathered reference":  {prev: nil, next: first.Conditions, want: "Normal/BucketReady,Warning/SecretLabelMissing"},
		"a Ready bucket whose reference is grandfathered": {prev: plain.Conditions, next: upgraded.Conditions, want: "Warning/SecretLabelMissing"},
		"the next pass":                 {prev: upgraded.Conditions, next: upgraded.Conditions, want: ""},
		"the Secret labelled meanwhile": {prev: upgraded.Conditions, next: plain.Conditions, want: ""},
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

func TestAPassWithAnotherNoticeBuildsItsConditionsAgain(t *testing.T) {
	st := &bucketState{}
	base := checkInput{depth: s3probe.DepthHeadBucket, secure: true, host: "h", bucket: "b"}
	plain := st.conditionsFor(base)
	with := base
	with.grandfathered = notice
	if got := st.conditionsFor(with); len(got) != len(plain)+1 {
		t.Errorf("a pass that read the credentials through a grandfathered reference reused %s", summary(got))
	}
}
