package scaling

import (
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/phalanks/phalanks-operator/internal/schedule"
)

// state is where a workload stands; metrics count workloads by state.
type state string

const (
	stateUnmanaged state = "" // no schedule applies and nothing is saved: not tracked
	stateUp        state = "up"
	stateDown      state = "down"
	stateOverride  state = "override"
	stateGrace     state = "grace"
	stateExcluded  state = "excluded"
	stateOwned     state = "owned"
	stateInvalid   state = "invalid"
)

// Event reasons.
const (
	ReasonScaleDown           = "ScaleDown"
	ReasonScaleUp             = "ScaleUp"
	ReasonManualOverride      = "ManualOverride"
	ReasonInvalidSchedule     = "InvalidSchedule"
	ReasonControlledByOwner   = "ControlledByOwner"
	ReasonGracePeriod         = "GracePeriod"
	ReasonAmbiguousAutoscaler = "AmbiguousAutoscaler"
)

// Scale actions, for the metrics.
const (
	actionScaleDown  = "scale_down"
	actionScaleUp    = "scale_up"
	actionHPALower   = "hpa_min_lowered"
	actionHPARestore = "hpa_min_restored"
)

// workloadView is what a decision needs to know about a Deployment or StatefulSet.
type workloadView struct {
	kind        string
	replicas    int32
	annotations map[string]string
	created     time.Time
	controller  *metav1.OwnerReference
}

// hpaView is what a decision needs to know about a HorizontalPodAutoscaler that
// targets the workload.
type hpaView struct {
	name        string
	minReplicas int32
	annotations map[string]string
	// uid and resourceVersion are what the decision was made on; the apply carries them.
	uid             types.UID
	resourceVersion string
}

// inputs is everything a decision is made from.
type inputs struct {
	now       time.Time
	workload  workloadView
	namespace string
	// namespaceAnnotations give defaults.
	namespaceAnnotations map[string]string
	hpas                 []hpaView
	defaults             schedule.Defaults
	grace                time.Duration
}

// workloadWrite is the operator's part of a workload: spec.replicas, always (so that
// server-side apply never drops the field it owns), and its annotations.
type workloadWrite struct {
	replicas int32
	original *int32
	next     time.Time
}

// hpaWrite is the operator's part of a HorizontalPodAutoscaler.
type hpaWrite struct {
	name            string
	uid             types.UID
	resourceVersion string
	minReplicas     int32
	originalMin     *int32
	next            time.Time
}

type eventSpec struct {
	warning bool
	reason  string
	action  string
	note    string
}

// decision is what to do about a workload, computed without side effects.
type decision struct {
	state    state
	workload *workloadWrite
	hpa      *hpaWrite
	events   []eventSpec
	actions  []string
	// requeueAt is when to decide again; zero when only a change to the objects can
	// change the decision.
	requeueAt time.Time
	// saved is the replica count the operator holds for a later restore.
	saved int32
}

// decide computes what to do. Downtime scales down and saves the count; uptime (or
// exclusion, or a removed schedule) restores it; a manual change during downtime is
// kept until the next transition; an autoscaler is paused or lowered, never fought.
func decide(in inputs) decision {
	w := in.workload
	saved, hasSaved, savedErr := savedCount(w.annotations, AnnotationOriginalReplicas)
	if !inScope(w.annotations) && !namespaceInScope(in.namespaceAnnotations) {
		return decision{state: stateUnmanaged}
	}
	if owner := w.controller; owner != nil {
		return decision{state: stateOwned, events: []eventSpec{{
			reason: ReasonControlledByOwner, action: "Skip",
			note: fmt.Sprintf("not scaled: controlled by %s %s, which sets its replicas; schedule that instead", owner.Kind, owner.Name),
		}}}
	}
	cfg, err := resolve(w.annotations, in.namespaceAnnotations, in.namespace, in.defaults)
	if err == nil {
		err = savedErr
	}
	if err != nil {
		return decision{state: stateInvalid, events: []eventSpec{{
			warning: true, reason: ReasonInvalidSchedule, action: "Validate", note: "not scaled: " + err.Error(),
		}}}
	}

	hpa, restoreHPA, err := autoscaler(in.hpas)
	if err != nil {
		return decision{state: stateInvalid, events: []eventSpec{{
			warning: true, reason: ReasonAmbiguousAutoscaler, action: "Validate", note: "not scaled: " + err.Error(),
		}}}
	}
	if !cfg.scheduled() {
		d := decision{state: stateUnmanaged}
		restore(&d, w, saved, hasSaved, restoreHPA, time.Time{}, "no schedule applies any more")
		return d
	}
	next := cfg.nextTransition(in.now)
	if cfg.excluded(in.now) {
		d := decision{state: stateExcluded}
		if !cfg.exclude {
			d.requeueAt = cfg.excludeUntil
		}
		restore(&d, w, saved, hasSaved, restoreHPA, time.Time{}, "excluded from scheduled scaling")
		return d
	}
	if !cfg.inDowntime(in.now) {
		d := decision{state: stateUp, requeueAt: next}
		if hasSaved && cfg.uptimeReplicas != nil {
			saved = *cfg.uptimeReplicas
		}
		restore(&d, w, saved, hasSaved, restoreHPA, next, "uptime"+until(next))
		return d
	}
	return downtime(in, cfg, next, saved, hasSaved, hpa, restoreHPA)
}

// downtime decides for a workload in downtime.
func downtime(in inputs, cfg config, next time.Time, saved int32, hasSaved bool, hpa, restoreHPA *hpaView) decision {
	w := in.workload
	target := cfg.downtimeReplicas
	d := decision{state: stateDown, requeueAt: next, saved: saved}
	if !hasSaved && restoreHPA == nil {
		if graceEnd := w.created.Add(in.grace); in.now.Before(graceEnd) {
			d.state, d.requeueAt = stateGrace, earliest(graceEnd, next)
			d.events = []eventSpec{{reason: ReasonGracePeriod, action: "Skip", note: fmt.Sprintf(
				"in downtime, but created less than %s ago; scaling down at %s at the earliest", in.grace, stamp(graceEnd))}}
			return d
		}
	}

	// A non-zero downtime count with an autoscaler goes through the autoscaler: it
	// would undo a change to the replicas, but follows a lower minReplicas.
	if target > 0 && !hasSaved && (hpa != nil || restoreHPA != nil) {
		if hpa != nil && hpa.minReplicas > target {
			original := hpa.minReplicas
			d.hpa = &hpaWrite{name: hpa.name, uid: hpa.uid, resourceVersion: hpa.resourceVersion, minReplicas: target, originalMin: &original, next: next}
			d.actions = append(d.actions, actionHPALower)
			d.events = append(d.events, eventSpec{reason: ReasonScaleDown, action: "Scale", note: fmt.Sprintf(
				"lowered minReplicas of HorizontalPodAutoscaler %s from %d to %d for the downtime%s",
				hpa.name, original, target, until(next))})
		}
		return d
	}

	switch {
	case !hasSaved && w.replicas <= target:
		// Nothing to save: the workload already runs no more than the downtime count.
		d.saved = 0
	case !hasSaved:
		original := w.replicas
		d.saved = original
		d.workload = &workloadWrite{replicas: target, original: &original, next: next}
		d.actions = append(d.actions, actionScaleDown)
		d.events = append(d.events, eventSpec{reason: ReasonScaleDown, action: "Scale", note: fmt.Sprintf(
			"scaled down from %d to %d replicas for the downtime%s; %d will be restored", original, target, until(next), original)})
	case w.replicas == target:
		if stamp(next) != w.annotations[AnnotationNextTransition] {
			// The schedule changed under a scaled-down workload: keep the record current.
			d.workload = &workloadWrite{replicas: target, original: &saved, next: next}
		}
	case withinActedPeriod(w.annotations, in.now):
		d.state = stateOverride
		d.events = append(d.events, eventSpec{reason: ReasonManualOverride, action: "Skip", note: fmt.Sprintf(
			"replicas changed to %d during the downtime: kept until the next transition%s, then %d are restored",
			w.replicas, at(next), saved)})
	default:
		// A manual change from an earlier downtime period: this one starts over.
		d.workload = &workloadWrite{replicas: target, original: &saved, next: next}
		d.actions = append(d.actions, actionScaleDown)
		d.events = append(d.events, eventSpec{reason: ReasonScaleDown, action: "Scale", note: fmt.Sprintf(
			"scaled down from %d to %d replicas for the downtime%s; the saved %d will be restored",
			w.replicas, target, until(next), saved)})
	}
	return d
}

// restore scales a workload back up (to count) if the operator saved a count, and
// gives an autoscaler back its minReplicas if the operator lowered it.
func restore(d *decision, w workloadView, count int32, hasSaved bool, hpa *hpaView, next time.Time, why string) {
	if hasSaved {
		d.workload = &workloadWrite{replicas: count, next: next}
		d.actions = append(d.actions, actionScaleUp)
		d.events = append(d.events, eventSpec{reason: ReasonScaleUp, action: "Scale", note: fmt.Sprintf(
			"restored %d replicas (from %d): %s", count, w.replicas, why)})
	}
	if hpa != nil {
		original, _, _ := savedCount(hpa.annotations, AnnotationOriginalMinReplicas)
		d.hpa = &hpaWrite{name: hpa.name, uid: hpa.uid, resourceVersion: hpa.resourceVersion, minReplicas: original, next: next}
		d.actions = append(d.actions, actionHPARestore)
		d.events = append(d.events, eventSpec{reason: ReasonScaleUp, action: "Scale", note: fmt.Sprintf(
			"restored minReplicas %d of HorizontalPodAutoscaler %s: %s", original, hpa.name, why)})
	}
}

// autoscaler picks the HorizontalPodAutoscaler that targets the workload (nil if none)
// and reports whether the operator lowered its minReplicas (restore is then that HPA).
func autoscaler(hpas []hpaView) (hpa, restore *hpaView, err error) {
	switch len(hpas) {
	case 0:
		return nil, nil, nil
	case 1:
	default:
		return nil, nil, fmt.Errorf("%d HorizontalPodAutoscalers target this workload, so no replica count would hold", len(hpas))
	}
	h := &hpas[0]
	if _, ok, err := savedCount(h.annotations, AnnotationOriginalMinReplicas); err != nil {
		return nil, nil, fmt.Errorf("HorizontalPodAutoscaler %s: %w", h.name, err)
	} else if ok {
		return h, h, nil
	}
	return h, nil, nil
}

// withinActedPeriod reports whether the transition the operator recorded when it last
// acted is still ahead: then a difference from the downtime count is a manual change
// made since, which is kept until that transition.
func withinActedPeriod(annotations map[string]string, now time.Time) bool {
	t, err := time.Parse(time.RFC3339, annotations[AnnotationNextTransition])
	return err == nil && now.Before(t)
}

// stamp formats a transition time as the next-transition annotation holds it.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func until(t time.Time) string {
	if t.IsZero() {
		return " (no end scheduled)"
	}
	return " until " + stamp(t)
}

func at(t time.Time) string {
	if t.IsZero() {
		return " (none scheduled)"
	}
	return " at " + stamp(t)
}

// requeueAfter converts a decision's requeue time into a delay; zero means none.
func requeueAfter(at, now time.Time) time.Duration {
	if at.IsZero() {
		return 0
	}
	return max(at.Sub(now), minRequeue)
}

// minRequeue keeps a boundary that has just passed (clock skew, rounding) from
// producing a zero delay, which would mean no requeue at all.
const minRequeue = 10 * time.Millisecond

// annotationsFor returns the annotations the operator owns on a workload after write.
func (w *workloadWrite) annotationsFor() map[string]string {
	a := map[string]string{}
	if w.original != nil {
		a[AnnotationOriginalReplicas] = strconv.Itoa(int(*w.original))
	}
	if !w.next.IsZero() {
		a[AnnotationNextTransition] = stamp(w.next)
	}
	return a
}

// annotationsFor returns the annotations the operator owns on an autoscaler after write.
func (h *hpaWrite) annotationsFor() map[string]string {
	a := map[string]string{}
	if h.originalMin != nil {
		a[AnnotationOriginalMinReplicas] = strconv.Itoa(int(*h.originalMin))
	}
	if !h.next.IsZero() {
		a[AnnotationNextTransition] = stamp(h.next)
	}
	return a
}
