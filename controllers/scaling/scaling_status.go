package scaling

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	stateDelegated state = "delegated"
	stateBlocked   state = "blocked"
	stateInvalid   state = "invalid"
)

// states lists the states the gauges report, in order.
var states = []state{stateUp, stateDown, stateOverride, stateGrace, stateExcluded, stateOwned, stateDelegated, stateBlocked, stateInvalid}

// Event reasons.
const (
	ReasonScaleDown           = "ScaleDown"
	ReasonScaleUp             = "ScaleUp"
	ReasonManualOverride      = "ManualOverride"
	ReasonInvalidSchedule     = "InvalidSchedule"
	ReasonControlledByOwner   = "ControlledByOwner"
	ReasonGracePeriod         = "GracePeriod"
	ReasonAmbiguousAutoscaler = "AmbiguousAutoscaler"
	// ReasonAutoscalerNotWritable: the workload's autoscaler belongs to another
	// controller or has a schedule of its own, and the downtime would need to change it.
	ReasonAutoscalerNotWritable = "AutoscalerNotWritable"
	// ReasonScaledThroughAutoscaler: a KEDA ScaledObject scales the workload, and the
	// schedule pauses the ScaledObject instead of scaling the workload.
	ReasonScaledThroughAutoscaler = "ScaledThroughAutoscaler"
	// ReasonScheduleReadAsPeers: an element the strict grammar rejects was read as
	// kube-downscaler or GoKubeDownscaler read it.
	ReasonScheduleReadAsPeers = "ScheduleReadAsPeers"
	// ReasonBudgetKept: a PodDisruptionBudget some of whose workloads are scaled down is
	// not relaxed, because another is not, or because it also selects pods of something
	// the operator did not scale down.
	ReasonBudgetKept = "BudgetKept"
	// ReasonSystemCritical: the workload's pods run at system-node-critical or
	// system-cluster-critical priority, and it is never scaled.
	ReasonSystemCritical = "SystemCritical"
)

// Scale actions, for the metrics.
const (
	actionScaleDown  = "scale_down"
	actionScaleUp    = "scale_up"
	actionHPALower   = "hpa_min_lowered"
	actionHPARestore = "hpa_min_restored"
)

// kedaGroup is KEDA's API group; a ScaledObject of it controls the HPAs KEDA creates.
const kedaGroup = "keda.sh"

// traits is what the decision needs to know about a kind.
type traits struct {
	name string
	// onOff kinds run or are stopped: their level is 1 or 0, and downtime stops them
	// whatever downtime-replicas says. Others have a replica count.
	onOff bool
	// floor is the lowest count a downtime may set (an HPA's minReplicas is at least 1).
	floor int32
	// ownScheduleOnly: only the object's own annotations give its schedule.
	ownScheduleOnly bool
	// stopped and running describe the two levels of an onOff kind in messages.
	stopped, running string
}

// workloadView is what a decision needs to know about the object it decides.
type workloadView struct {
	// level is the replica count, or for onOff kinds 1 (running) or 0 (stopped).
	level       int32
	annotations map[string]string
	created     time.Time
	controller  *metav1.OwnerReference
	// podRequests is what one pod of its template requests now (Deployments and
	// StatefulSets).
	podRequests string
	// maxReplicas caps the level a restore writes, for an autoscaler scheduled in its own
	// right (its level is minReplicas); 0 for other kinds.
	maxReplicas int32
	// priorityClass is the priority class of its pods, from its pod template.
	priorityClass string
}

// hpaView is what a decision needs to know about a HorizontalPodAutoscaler that
// targets the workload.
type hpaView struct {
	name        string
	minReplicas int32
	// maxReplicas caps a minReplicas the operator restores: someone may have lowered it
	// during the downtime, and the API server rejects a minimum above the maximum.
	maxReplicas int32
	annotations map[string]string
	controller  *metav1.OwnerReference
	// scheduled: the HPA has a schedule of its own (or holds what one saved), so it
	// is decided as an object of its own and never written for its target.
	scheduled bool
	// uid and resourceVersion are what the decision was made on; the apply carries them.
	uid             types.UID
	resourceVersion string
}

// writable reports whether the operator may change the HPA for its target.
func (h *hpaView) writable() bool { return h.controller == nil && !h.scheduled }

// inputs is everything a decision is made from.
type inputs struct {
	now      time.Time
	kind     traits
	workload workloadView
	// layers give the annotations after the object's own: its target workload (for a
	// ScaledObject), its Namespace, the operator's defaults.
	layers []layer
	// namespaceExcluded: the operator's flags keep the Namespace out of scheduled scaling.
	namespaceExcluded bool
	hpas              []hpaView
	// delegate names a KEDA ScaledObject that scales the workload; the schedule pauses
	// it instead.
	delegate string
	defaults schedule.Defaults
	grace    time.Duration
	wakeLead time.Duration
	dryRun   bool
	// levelField names the field that holds the level (spec.replicas), and levelWriter
	// is the field manager that last wrote it, when a manual change was looked up.
	levelField  string
	levelWriter *levelWriter
}

func (in *inputs) allLayers() []layer {
	return append([]layer{{annotations: in.workload.annotations}}, in.layers...)
}

// managed reports whether scheduled scaling concerns the object at all.
func (in *inputs) managed() bool {
	if in.kind.ownScheduleOnly {
		_, saved := in.workload.annotations[AnnotationOriginalReplicas]
		return ownSchedule(in.workload.annotations) || saved
	}
	if inScope(in.workload.annotations) || in.lowersAutoscaler() {
		return true
	}
	for _, l := range in.layers {
		if namespaceInScope(l.annotations) {
			return true
		}
	}
	return false
}

// lowersAutoscaler reports whether the operator holds the minReplicas of an autoscaler
// of the workload lowered: then it has something to restore, even once the workload's
// schedule is gone.
func (in *inputs) lowersAutoscaler() bool {
	for _, h := range in.hpas {
		if _, saved := h.annotations[AnnotationOriginalMinReplicas]; saved && h.writable() {
			return true
		}
	}
	return false
}

// workloadWrite is the operator's part of a workload: its level, always (so that
// server-side apply never drops the field it owns), and its annotations.
type workloadWrite struct {
	level    int32
	original *int32
	next     time.Time
	// from is the level the decision read; a write that leaves it needs no scaling.
	from int32
	// pausedReplicas is the count a paused ScaledObject holds its target at.
	pausedReplicas int32
	// since and podRequests are the downtime record kept with original (see savings).
	since       time.Time
	podRequests string
}

// hpaWrite is the operator's part of a HorizontalPodAutoscaler.
type hpaWrite struct {
	name            string
	uid             types.UID
	resourceVersion string
	// annotations are the autoscaler's as the decision read them.
	annotations map[string]string
	minReplicas int32
	originalMin *int32
	next        time.Time
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
	// dryRun: record the decision, write nothing.
	dryRun bool
	// priority orders a restore that waits for its turn (AnnotationRestorePriority).
	priority int
	// wakeAfter are the workloads a restore waits for, at most wakeAfterTimeout.
	wakeAfter        []Dependency
	wakeAfterTimeout time.Duration
	// savings is what the workload saves once the decision is carried out.
	savings savings
	// next is the next scheduled transition (for an excluded object: when its exclusion
	// may end); from names where its schedule came from.
	next time.Time
	from string
}

// decide computes what to do. Downtime scales down and saves the count; uptime (or
// exclusion, or a removed schedule) restores it; a manual change during downtime is
// kept until the next transition; an autoscaler is paused or lowered, never fought.
func decide(in inputs) decision {
	d := decideState(in)
	d.dryRun = d.dryRun || in.dryRun
	d.savings = savingsOf(in, d)
	return d
}

func decideState(in inputs) decision {
	w := in.workload
	saved, hasSaved, savedErr := savedCount(w.annotations, AnnotationOriginalReplicas)
	if !in.managed() {
		return decision{state: stateUnmanaged}
	}
	if owner := w.controller; owner != nil {
		return decision{state: stateOwned, events: []eventSpec{{
			reason: ReasonControlledByOwner, action: "Skip",
			note: fmt.Sprintf("not scaled: controlled by %s %s, which sets its replicas; schedule that instead", owner.Kind, owner.Name),
		}}}
	}
	// Wherever the operator stops scheduling an object, it gives back what it holds: the
	// saved count (if it can read it) and the minReplicas of an autoscaler it lowered.
	hasSaved = hasSaved && savedErr == nil
	_, lowered, _ := autoscaler(in.hpas)
	if in.delegate != "" {
		d := decision{state: stateDelegated, events: []eventSpec{{
			reason: ReasonScaledThroughAutoscaler, action: "Skip",
			note: fmt.Sprintf("scaled through KEDA ScaledObject %s, which the schedule pauses (autoscaling.keda.sh/paused-replicas); the replicas are KEDA's", in.delegate),
		}}}
		restore(&d, in.kind, w, saved, hasSaved, lowered, time.Time{}, "KEDA ScaledObject "+in.delegate+" scales it now")
		return d
	}
	if in.namespaceExcluded {
		d := decision{state: stateExcluded}
		restore(&d, in.kind, w, saved, hasSaved, lowered, time.Time{}, "its namespace is excluded from scheduled scaling")
		return d
	}
	if slices.Contains(criticalPriorityClasses, w.priorityClass) {
		why := "its pods run at priority class " + w.priorityClass + ", which keeps nodes and the cluster running"
		d := decision{state: stateExcluded, events: []eventSpec{{reason: ReasonSystemCritical, action: "Skip", note: "never scaled: " + why}}}
		restore(&d, in.kind, w, saved, hasSaved, lowered, time.Time{}, why)
		return d
	}
	cfg, err := resolve(in.allLayers(), in.defaults, in.kind.ownScheduleOnly, in.now)
	if err == nil {
		err = savedErr
	}
	if err != nil {
		// A schedule that cannot be read (a calendar deleted or broken since, a typo)
		// counts as none: what the operator scaled down comes back, and nothing is
		// scaled down on it.
		d := decision{state: stateInvalid, events: []eventSpec{{
			warning: true, reason: ReasonInvalidSchedule, action: "Validate", note: "not scaled: " + err.Error(),
		}}}
		restore(&d, in.kind, w, saved, hasSaved, lowered, time.Time{}, "its schedule cannot be read, which counts as no schedule")
		return d
	}
	var warnings []eventSpec
	if len(cfg.warnings) > 0 {
		warnings = []eventSpec{{warning: true, reason: ReasonScheduleReadAsPeers, action: "Validate",
			note: "schedule read as the peers read it: " + strings.Join(cfg.warnings, "; ")}}
	}
	d := decideConfigured(in, cfg, saved, hasSaved)
	if !d.requeueAt.IsZero() || d.state != stateUnmanaged {
		d.requeueAt = earliest(d.requeueAt, cfg.nextTimedChange(in.now))
	}
	d.events = append(warnings, d.events...)
	d.dryRun = cfg.dryRun
	d.priority = cfg.priority
	if d.state == stateUp {
		// Only a scheduled restore waits: one that an exclusion asks for (kubectl phalanks
		// wake) means now.
		d.wakeAfter, d.wakeAfterTimeout = cfg.wakeAfter, cfg.wakeAfterTimeout
	}
	d.from = cfg.from
	return d
}

// decideConfigured decides for a valid configuration.
func decideConfigured(in inputs, cfg config, saved int32, hasSaved bool) decision {
	w := in.workload
	hpa, restoreHPA, err := autoscaler(in.hpas)
	if err != nil {
		return decision{state: stateInvalid, events: []eventSpec{{
			warning: true, reason: ReasonAmbiguousAutoscaler, action: "Validate", note: "not scaled: " + err.Error(),
		}}}
	}
	if hpa != nil && controlledByKEDA(hpa.controller) {
		return decision{state: stateBlocked, events: []eventSpec{{
			warning: true, reason: ReasonAutoscalerNotWritable, action: "Skip", note: fmt.Sprintf(
				"not scaled: HorizontalPodAutoscaler %s belongs to KEDA ScaledObject %s, which would undo any change; "+
					"enable scaledobjects.keda.sh in --scaling-resources so that the schedule pauses the ScaledObject", hpa.name, hpa.controller.Name),
		}}}
	}
	if !cfg.scheduled() {
		d := decision{state: stateUnmanaged}
		restore(&d, in.kind, w, saved, hasSaved, restoreHPA, time.Time{}, "no schedule applies any more")
		return d
	}
	if cfg.excluded(in.now) {
		d := decision{state: stateExcluded, requeueAt: cfg.nextExclusionChange(in.now), next: cfg.nextExclusionChange(in.now)}
		restore(&d, in.kind, w, saved, hasSaved, restoreHPA, time.Time{}, "excluded from scheduled scaling")
		return d
	}
	next := cfg.nextTransition(in.now)
	lead := in.wakeLead
	if cfg.wakeLead != nil {
		lead = *cfg.wakeLead
	}
	down, why := cfg.inDowntime(in.now), ""
	// next is the uptime's start unless the search for it ran out of budget first.
	if down && lead > 0 && !next.IsZero() && !cfg.inDowntime(next) {
		if next.Sub(in.now) <= lead {
			// The uptime begins within the wake lead: the workload is restored now, so
			// that it runs when the uptime starts; it stays up through that uptime.
			down, why = false, fmt.Sprintf("wake lead %s before the uptime at %s; ", lead, stamp(next))
			next = cfg.nextTransition(next)
		} else {
			next = next.Add(-lead)
		}
	}
	if !down {
		d := decision{state: stateUp, requeueAt: next, next: next}
		if hasSaved && cfg.uptimeReplicas != nil && !in.kind.onOff {
			saved = *cfg.uptimeReplicas
		}
		restore(&d, in.kind, w, saved, hasSaved, restoreHPA, next, why+"uptime"+until(next))
		return d
	}
	grace := in.grace
	if cfg.grace != nil {
		grace = *cfg.grace
	}
	return downtime(in, cfg, grace, next, saved, hasSaved, hpa, restoreHPA)
}

// controlledByKEDA reports whether a controller reference is a KEDA ScaledObject's.
func controlledByKEDA(ref *metav1.OwnerReference) bool {
	if ref == nil || ref.Kind != "ScaledObject" {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == kedaGroup
}

// downtimeLevel is the level a downtime sets: 0 for kinds that stop, else the
// downtime count, at least the kind's floor.
func downtimeLevel(k traits, cfg config) int32 {
	if k.onOff {
		return 0
	}
	return max(cfg.downtimeReplicas, k.floor)
}

// downtime decides for a workload in downtime.
func downtime(in inputs, cfg config, grace time.Duration, next time.Time, saved int32, hasSaved bool, hpa, restoreHPA *hpaView) decision {
	w := in.workload
	k := in.kind
	target := downtimeLevel(k, cfg)
	d := decision{state: stateDown, requeueAt: next, next: next, saved: saved}
	if !hasSaved && restoreHPA == nil {
		if graceEnd := w.created.Add(grace); in.now.Before(graceEnd) {
			d.state, d.requeueAt = stateGrace, earliest(graceEnd, next)
			d.events = []eventSpec{{reason: ReasonGracePeriod, action: "Skip", note: fmt.Sprintf(
				"in downtime, but created less than %s ago; scaling down at %s at the earliest", grace, stamp(graceEnd))}}
			return d
		}
	}

	// A non-zero downtime count with an autoscaler goes through the autoscaler: it
	// would undo a change to the replicas, but follows a lower minReplicas.
	if target > 0 && !hasSaved && (hpa != nil || restoreHPA != nil) {
		if hpa != nil && !hpa.writable() {
			return blockedByAutoscaler(hpa)
		}
		if hpa != nil && hpa.minReplicas > target {
			original := hpa.minReplicas
			d.hpa = &hpaWrite{name: hpa.name, uid: hpa.uid, resourceVersion: hpa.resourceVersion, annotations: hpa.annotations,
				minReplicas: target, originalMin: &original, next: next}
			d.actions = append(d.actions, actionHPALower)
			d.events = append(d.events, eventSpec{reason: ReasonScaleDown, action: "Scale", note: fmt.Sprintf(
				"lowered minReplicas of HorizontalPodAutoscaler %s from %d to %d for the downtime%s",
				hpa.name, original, target, until(next))})
		}
		return d
	}

	since, requests := downtimeRecord(in)
	write := func(original int32) *workloadWrite {
		return &workloadWrite{level: target, original: &original, next: next, from: w.level, pausedReplicas: cfg.downtimeReplicas,
			since: since, podRequests: requests}
	}
	switch {
	case !hasSaved && w.level <= target:
		// Nothing to save: the workload already runs no more than the downtime count
		// (or, for a kind that stops, is stopped already, and stays so after the downtime).
		d.saved = 0
	case !hasSaved:
		original := w.level
		d.saved = original
		d.workload = write(original)
		d.actions = append(d.actions, actionScaleDown)
		d.events = append(d.events, eventSpec{reason: ReasonScaleDown, action: "Scale", note: scaleDownNote(k, original, target, next)})
	case w.level == target:
		if stamp(next) != w.annotations[AnnotationNextTransition] {
			// The schedule changed under a scaled-down workload: keep the record current.
			d.workload = write(saved)
		}
	case withinActedPeriod(w.annotations, in.now):
		d.state = stateOverride
		d.events = append(d.events, eventSpec{reason: ReasonManualOverride, action: "Skip", note: overrideNote(k, w.level, saved, next)})
		if in.levelWriter != nil {
			if e, ok := gitOpsNote(k, *in.levelWriter, in.levelField); ok {
				d.events = append(d.events, e)
			}
		}
	default:
		// A manual change from an earlier downtime period (or a scale-down that was
		// recorded but not finished): this one starts over.
		d.workload = write(saved)
		d.actions = append(d.actions, actionScaleDown)
		note := fmt.Sprintf("scaled down from %d to %d replicas for the downtime%s; the saved %d will be restored",
			w.level, target, until(next), saved)
		if k.onOff {
			note = scaleDownNote(k, 1, 0, next)
		}
		d.events = append(d.events, eventSpec{reason: ReasonScaleDown, action: "Scale", note: note})
	}
	return d
}

func blockedByAutoscaler(hpa *hpaView) decision {
	why := "has a schedule of its own, which sets its minReplicas"
	if hpa.controller != nil {
		why = fmt.Sprintf("is controlled by %s %s, which would undo a change to it", hpa.controller.Kind, hpa.controller.Name)
	}
	return decision{state: stateBlocked, events: []eventSpec{{
		warning: true, reason: ReasonAutoscalerNotWritable, action: "Skip", note: fmt.Sprintf(
			"not scaled: a non-zero downtime count goes through the autoscaler, but HorizontalPodAutoscaler %s %s; "+
				"use downtime-replicas 0 (the autoscaler pauses at zero) or schedule the autoscaler's owner", hpa.name, why),
	}}}
}

func scaleDownNote(k traits, from, to int32, next time.Time) string {
	if k.onOff {
		return fmt.Sprintf("%s for the downtime%s; it will be %s again", k.stopped, until(next), k.running)
	}
	return fmt.Sprintf("scaled down from %d to %d replicas for the downtime%s; %d will be restored", from, to, until(next), from)
}

func overrideNote(k traits, level, saved int32, next time.Time) string {
	if k.onOff {
		return fmt.Sprintf("%s again during the downtime: kept until the next transition%s", k.running, at(next))
	}
	return fmt.Sprintf("replicas changed to %d during the downtime: kept until the next transition%s, then %d are restored",
		level, at(next), saved)
}

// restore scales a workload back up (to count) if the operator saved a count, and
// gives an autoscaler back its minReplicas if the operator lowered it.
func restore(d *decision, k traits, w workloadView, count int32, hasSaved bool, hpa *hpaView, next time.Time, why string) {
	if hasSaved {
		if k.onOff {
			count = min(count, 1)
		}
		note := fmt.Sprintf("restored %d replicas (from %d): %s", count, w.level, why)
		if w.maxReplicas > 0 {
			var what string
			count, what = capMinReplicas(count, w.maxReplicas)
			note = fmt.Sprintf("restored minReplicas from %d to %s: %s", w.level, what, why)
		}
		d.workload = &workloadWrite{level: count, next: next, from: w.level}
		d.actions = append(d.actions, actionScaleUp)
		if k.onOff {
			note = fmt.Sprintf("%s again: %s", k.running, why)
			if count == 0 {
				note = fmt.Sprintf("left %s, as it was before the downtime: %s", k.stopped, why)
			}
		}
		d.events = append(d.events, eventSpec{reason: ReasonScaleUp, action: "Scale", note: note})
	}
	if hpa != nil {
		original, _, _ := savedCount(hpa.annotations, AnnotationOriginalMinReplicas)
		restored, note := capMinReplicas(original, hpa.maxReplicas)
		d.hpa = &hpaWrite{name: hpa.name, uid: hpa.uid, resourceVersion: hpa.resourceVersion, annotations: hpa.annotations,
			minReplicas: restored, next: next}
		d.actions = append(d.actions, actionHPARestore)
		d.events = append(d.events, eventSpec{reason: ReasonScaleUp, action: "Scale", note: fmt.Sprintf(
			"restored minReplicas %s of HorizontalPodAutoscaler %s: %s", note, hpa.name, why)})
	}
}

// capMinReplicas caps a saved minReplicas at the autoscaler's maxReplicas as it is now
// (lowered during the downtime, say): the API server rejects a minimum above the
// maximum, so an uncapped restore would fail every time and leave the minimum lowered
// for good. It returns the value to write and how to name it in a note.
func capMinReplicas(saved, maxReplicas int32) (int32, string) {
	if maxReplicas > 0 && saved > maxReplicas {
		return maxReplicas, fmt.Sprintf("%d (the saved %d, capped at maxReplicas %d)", maxReplicas, saved, maxReplicas)
	}
	return saved, strconv.Itoa(int(saved))
}

// autoscaler picks the HorizontalPodAutoscaler that targets the workload (nil if none)
// and reports whether the operator lowered its minReplicas (restore is then that HPA).
// An HPA the operator may not write is never restored.
func autoscaler(hpas []hpaView) (hpa, restore *hpaView, err error) {
	switch len(hpas) {
	case 0:
		return nil, nil, nil
	case 1:
	default:
		return nil, nil, fmt.Errorf("%d HorizontalPodAutoscalers target this workload, so no replica count would hold", len(hpas))
	}
	h := &hpas[0]
	if !h.writable() {
		return h, nil, nil
	}
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

// annotationsFor returns the annotations the operator owns on a workload after write.
func (w *workloadWrite) annotationsFor() map[string]string {
	a := map[string]string{}
	if w.original != nil {
		a[AnnotationOriginalReplicas] = strconv.Itoa(int(*w.original))
		if !w.since.IsZero() {
			a[AnnotationScaledDownAt] = stamp(w.since)
		}
		if w.podRequests != "" {
			a[AnnotationPodRequests] = w.podRequests
		}
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
