package conditions_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/phalanks/phalanks-operator/internal/conditions"
)

func TestSummarize(t *testing.T) {
	reach := conditions.True("Reachable", "Connected", "")
	auth := conditions.True("Authenticated", "CredentialsAccepted", "")
	for name, tc := range map[string]struct {
		checks     []metav1.Condition
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		"every check true makes Ready true with the ready reason": {
			checks: []metav1.Condition{reach, auth}, wantStatus: metav1.ConditionTrue, wantReason: "Healthy",
		},
		"the first false check gives Ready its reason": {
			checks: []metav1.Condition{reach, conditions.False("Authenticated", "AccessDenied", "403"),
				conditions.False("BucketAvailable", "NoSuchBucket", "")},
			wantStatus: metav1.ConditionFalse, wantReason: "AccessDenied",
		},
		"an unknown check before a false one makes Ready unknown": {
			checks: []metav1.Condition{conditions.Unknown("Reachable", "NotProbed", ""),
				conditions.False("Authenticated", "AccessDenied", "")},
			wantStatus: metav1.ConditionUnknown, wantReason: "NotProbed",
		},
		"no checks at all is ready": {
			checks: nil, wantStatus: metav1.ConditionTrue, wantReason: "Healthy",
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := conditions.Summarize(tc.checks, "Healthy", "all checks passed")
			if got.Type != conditions.TypeReady || got.Status != tc.wantStatus || got.Reason != tc.wantReason {
				t.Errorf("got %s=%s reason %s, want Ready=%s reason %s", got.Type, got.Status, got.Reason, tc.wantStatus, tc.wantReason)
			}
		})
	}
}

func TestApplyReportsOnlyRealChanges(t *testing.T) {
	var list []metav1.Condition
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))

	if !conditions.Apply(&list, 1, t0, conditions.True("Ready", "Healthy", "ok")) {
		t.Fatal("adding a condition is a change")
	}
	if conditions.Apply(&list, 1, t1, conditions.True("Ready", "Healthy", "ok")) {
		t.Error("the same condition at a later time is not a change")
	}
	if !list[0].LastTransitionTime.Equal(&t0) {
		t.Errorf("lastTransitionTime moved to %v without a transition", list[0].LastTransitionTime)
	}
	if !conditions.Apply(&list, 2, t1, conditions.True("Ready", "Healthy", "ok")) {
		t.Error("a new observed generation is a change")
	}
	if !conditions.Apply(&list, 2, t1, conditions.False("Ready", "AccessDenied", "403")) {
		t.Error("a status flip is a change")
	}
	if !list[0].LastTransitionTime.Equal(&t1) {
		t.Errorf("lastTransitionTime = %v, want %v after a flip", list[0].LastTransitionTime, t1)
	}
	if !conditions.Remove(&list, "Ready") || len(list) != 0 {
		t.Error("Remove did not remove the condition")
	}
}
