// Package conditions computes status conditions the way every phalanks controller
// reports them: a few named checks, and a Ready condition that summarises them, taking
// its reason and message from the first check that is not True.
package conditions

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TypeReady is the summary condition every kind carries.
const TypeReady = "Ready"

// True returns a True condition of the given type.
func True(condType, reason, message string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: metav1.ConditionTrue, Reason: reason, Message: message}
}

// False returns a False condition of the given type.
func False(condType, reason, message string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: metav1.ConditionFalse, Reason: reason, Message: message}
}

// Unknown returns an Unknown condition of the given type.
func Unknown(condType, reason, message string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: metav1.ConditionUnknown, Reason: reason, Message: message}
}

// Summarize returns the Ready condition for checks given in the order they build on each
// other: True when every check is True (with readyReason and readyMessage), otherwise
// the status, reason and message of the first check that is not True.
func Summarize(checks []metav1.Condition, readyReason, readyMessage string) metav1.Condition {
	for _, c := range checks {
		if c.Status != metav1.ConditionTrue {
			return metav1.Condition{Type: TypeReady, Status: c.Status, Reason: c.Reason, Message: c.Message}
		}
	}
	return True(TypeReady, readyReason, readyMessage)
}

// Apply sets each condition on list, stamped with generation, keeping the
// lastTransitionTime of conditions whose status did not change. It reports whether
// anything a reader would notice changed.
func Apply(list *[]metav1.Condition, generation int64, now metav1.Time, conds ...metav1.Condition) bool {
	changed := false
	for _, c := range conds {
		c.ObservedGeneration = generation
		c.LastTransitionTime = now
		if meta.SetStatusCondition(list, c) {
			changed = true
		}
	}
	return changed
}

// Remove deletes the condition of the given type and reports whether it was there.
func Remove(list *[]metav1.Condition, condType string) bool {
	return meta.RemoveStatusCondition(list, condType)
}
