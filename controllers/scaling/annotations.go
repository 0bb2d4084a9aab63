package scaling

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/phalanks/phalanks-operator/internal/schedule"
)

// Annotations on the objects the operator scales and (as defaults) on Namespaces.
const (
	annotationPrefix = "phalanks.io/"

	// AnnotationUptime is the schedule during which the workload runs.
	AnnotationUptime = annotationPrefix + "uptime"
	// AnnotationDowntime is the schedule during which it is scaled down; it wins where
	// it overlaps the uptime.
	AnnotationDowntime = annotationPrefix + "downtime"
	// AnnotationDowntimeReplicas is the replica count during downtime (default 0).
	AnnotationDowntimeReplicas = annotationPrefix + "downtime-replicas"
	// AnnotationUptimeReplicas, if set, is restored at scale up instead of the saved count.
	AnnotationUptimeReplicas = annotationPrefix + "uptime-replicas"
	// AnnotationExclude is a schedule (true, false, always, a window...) during which the
	// workload is kept out of scheduled scaling.
	AnnotationExclude = annotationPrefix + "exclude"
	// AnnotationExcludeUntil keeps the workload out of scheduled scaling until an RFC 3339 time.
	AnnotationExcludeUntil = annotationPrefix + "exclude-until"
	// AnnotationForceUptime is a schedule (or true) during which the workload runs,
	// whatever uptime and downtime say.
	AnnotationForceUptime = annotationPrefix + "force-uptime"
	// AnnotationForceDowntime is a schedule (or true) during which the workload is scaled
	// down, whatever uptime and downtime say. force-uptime wins where both apply.
	AnnotationForceDowntime = annotationPrefix + "force-downtime"
	// AnnotationGracePeriod is how long a new workload runs before its first scale-down:
	// a duration such as 30m, or whole seconds. It replaces --scaling-grace-period.
	AnnotationGracePeriod = annotationPrefix + "grace-period"
	// AnnotationWakeLead is how long before its uptime begins a workload is restored, so
	// that it is running when the uptime starts: a duration such as 15m, or whole
	// seconds. It replaces --scaling-wake-lead.
	AnnotationWakeLead = annotationPrefix + "wake-lead"
	// AnnotationDryRun "true" records what would be done for the workload and writes
	// nothing (as --scaling-dry-run does for all of them).
	AnnotationDryRun = annotationPrefix + "dry-run"
	// AnnotationRestorePriority orders the restores that wait for their turn under
	// --scaling-restore-rate: an integer from -1000 to 1000, higher first, 0 by default;
	// those of one priority go in the order they fell due.
	AnnotationRestorePriority = annotationPrefix + "restore-priority"
	// AnnotationWakeAfter names workloads in the same namespace that must be Ready before
	// the workload is restored: "statefulset/db" or "statefulset/db, deployment/cache".
	AnnotationWakeAfter = annotationPrefix + "wake-after"
	// AnnotationWakeAfterTimeout is how long a restore waits for the workloads
	// AnnotationWakeAfter names before it goes ahead anyway: 10m by default, at most 12h.
	AnnotationWakeAfterTimeout = annotationPrefix + "wake-after-timeout"

	// AnnotationOriginalReplicas is written by the operator: the count to restore (for
	// kinds that run or stop, 1: it ran).
	AnnotationOriginalReplicas = annotationPrefix + "original-replicas"
	// AnnotationOriginalMinReplicas is written by the operator on a HorizontalPodAutoscaler
	// whose minReplicas it lowered for the workload it targets: the value to restore.
	AnnotationOriginalMinReplicas = annotationPrefix + "original-min-replicas"
	// AnnotationNextTransition is written by the operator when it acts: the RFC 3339
	// time of the next scheduled change.
	AnnotationNextTransition = annotationPrefix + "next-transition"
	// AnnotationScaledDownAt is written by the operator with original-replicas on a
	// workload with a replica count: the RFC 3339 time it was scaled down.
	AnnotationScaledDownAt = annotationPrefix + "scaled-down-at"
	// AnnotationPodRequests is written by the operator with original-replicas on a
	// Deployment or StatefulSet: the CPU and memory one pod of its template requested at
	// the scale-down, such as "cpu=250m,memory=256Mi", which the savings are counted from.
	AnnotationPodRequests = annotationPrefix + "pod-requests"
)

// The annotations come in groups. Each group is taken whole from the first place that
// sets any key of it: the object, then (for a ScaledObject) the workload it scales, then
// its Namespace, then the operator's defaults. A schedule is therefore never half the
// workload's and half the Namespace's.
var (
	scheduleGroup  = []string{AnnotationUptime, AnnotationDowntime, AnnotationDowntimeReplicas, AnnotationUptimeReplicas}
	exclusionGroup = []string{AnnotationExclude, AnnotationExcludeUntil}
	forceGroup     = []string{AnnotationForceUptime, AnnotationForceDowntime}
	graceGroup     = []string{AnnotationGracePeriod}
	wakeLeadGroup  = []string{AnnotationWakeLead}
	dryRunGroup    = []string{AnnotationDryRun}
	priorityGroup  = []string{AnnotationRestorePriority}
	wakeAfterGroup = []string{AnnotationWakeAfter, AnnotationWakeAfterTimeout}
	// userKeys are every key a user sets.
	userKeys = concat(scheduleGroup, exclusionGroup, forceGroup, graceGroup, wakeLeadGroup, dryRunGroup, priorityGroup, wakeAfterGroup)
)

func concat(groups ...[]string) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// inScope reports whether annotations mention scheduled scaling at all.
func inScope(annotations map[string]string) bool {
	for k := range annotations {
		if strings.HasPrefix(k, annotationPrefix) && k != AnnotationNextTransition {
			return true
		}
	}
	return false
}

// namespaceInScope reports whether a Namespace's annotations give defaults.
func namespaceInScope(annotations map[string]string) bool { return hasAny(annotations, userKeys) }

// ownSchedule reports whether an object sets a schedule of its own.
func ownSchedule(annotations map[string]string) bool { return hasAny(annotations, scheduleGroup) }

func hasAny(annotations map[string]string, keys []string) bool {
	for _, k := range keys {
		if _, ok := annotations[k]; ok {
			return true
		}
	}
	return false
}

// pickKeys returns the annotations of the groups given.
func pickKeys(annotations map[string]string, groups ...[]string) map[string]string {
	var out map[string]string
	for _, g := range groups {
		for _, k := range g {
			if v, ok := annotations[k]; ok {
				if out == nil {
					out = map[string]string{}
				}
				out[k] = v
			}
		}
	}
	return out
}

// layer is one place annotations are read from, in order of precedence.
type layer struct {
	// source names it in messages: empty for the object itself, "namespace team-a",
	// "Deployment web" (the workload a ScaledObject scales), "operator defaults".
	source      string
	annotations map[string]string
	// resource is, for the layer of the workload a ScaledObject scales, that workload's
	// <plural>.<group>.
	resource string
}

func (l layer) prefix() string {
	if l.source == "" {
		return ""
	}
	return l.source + " "
}

// config is an object's resolved scheduling configuration.
type config struct {
	uptime, downtime   *schedule.Schedule
	forceUp, forceDown *schedule.Schedule
	exclude            *schedule.Schedule
	excludeUntil       time.Time
	downtimeReplicas   int32
	uptimeReplicas     *int32
	grace              *time.Duration
	wakeLead           *time.Duration
	dryRun             bool
	// priority is the restore priority (AnnotationRestorePriority).
	priority int
	// wakeAfter are the workloads a restore waits for (AnnotationWakeAfter), at most
	// wakeAfterTimeout.
	wakeAfter        []Dependency
	wakeAfterTimeout time.Duration
	// from names where the schedule came from, for messages.
	from string
	// warnings say how schedule elements the strict grammar rejects were read.
	warnings []string
	// budget bounds the work of the decision's searches for transitions (see
	// decisionBudget).
	budget *schedule.Budget
}

// maxTransitionSteps bounds the search for the next change of the schedules together;
// each step is a change of one of them, so real schedules need a handful.
const maxTransitionSteps = 1000

// decisionBudget bounds the work of one decision's searches for transitions, in
// schedule elements evaluated (schedule.Budget): a few hundred microseconds however its
// schedules are written. Schedules of ordinary shape (working hours, holidays, in a
// zone or two) need a few hundred units and are followed exactly; one that would need
// more is followed as far as the budget goes, and the object is woken there to go on:
// its next-transition is then that instant, before the real transition.
const decisionBudget = 10000

// next is s.Next within the decision's budget.
func (c *config) next(s *schedule.Schedule, t time.Time) time.Time {
	return s.NextWithin(t, c.budget)
}

func (c *config) scheduled() bool {
	return c.uptime != nil || c.downtime != nil || c.forceUp != nil || c.forceDown != nil
}

// inDowntime: force-uptime wins, then force-downtime; of the rest, downtime wins over
// uptime, and outside an uptime schedule is downtime.
func (c *config) inDowntime(t time.Time) bool {
	switch {
	case c.forceUp.Contains(t):
		return false
	case c.forceDown.Contains(t):
		return true
	}
	return c.downtime.Contains(t) || (c.uptime != nil && !c.uptime.Contains(t))
}

func (c *config) excluded(t time.Time) bool { return c.exclude.Contains(t) || t.Before(c.excludeUntil) }

// nextExclusionChange is when excluded may change next; zero if never.
func (c *config) nextExclusionChange(t time.Time) time.Time {
	var until time.Time
	if c.excludeUntil.After(t) {
		until = c.excludeUntil
	}
	return earliest(c.next(c.exclude, t), until)
}

// nextTimedChange is when a force or exclusion schedule next changes, whether or not
// that changes the decision: a timed group that runs its course then may hand over to
// the group of the layer under it (see over), which the schedules here cannot show.
func (c *config) nextTimedChange(t time.Time) time.Time {
	return earliest(earliest(c.next(c.forceUp, t), c.next(c.forceDown, t)), c.nextExclusionChange(t))
}

// nextTransition returns the first instant after t at which inDowntime changes, or
// zero if it never does. The candidates are the schedules' changes; one that another
// schedule masks is skipped. When the decision's budget runs out first, it returns the
// furthest instant reached, at which nothing changes: the object is decided again
// there.
func (c *config) nextTransition(t time.Time) time.Time {
	// A force that holds from now on settles it for good.
	forever := func(s *schedule.Schedule) bool { return s.Contains(t) && c.next(s, t).IsZero() }
	never := func(s *schedule.Schedule) bool { return !s.Contains(t) && c.next(s, t).IsZero() }
	if forever(c.forceUp) || (never(c.forceUp) && forever(c.forceDown)) {
		return time.Time{}
	}
	down := c.inDowntime(t)
	x := t
	for range maxTransitionSteps {
		u := earliest(earliest(c.next(c.uptime, x), c.next(c.downtime, x)), earliest(c.next(c.forceUp, x), c.next(c.forceDown, x)))
		if u.IsZero() || c.inDowntime(u) != down || c.budget.Spent() {
			return u
		}
		x = u
	}
	return x
}

func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	default:
		return b
	}
}

// resolver reads one object's configuration from its layers, collecting every problem.
type resolver struct {
	defaults schedule.Defaults
	problems []string
	warnings []string
	// budget is the decision's (see decisionBudget).
	budget *schedule.Budget
}

func (r *resolver) fail(l layer, key, reason string) {
	r.problems = append(r.problems, l.prefix()+key+": "+reason)
}

// schedule parses a schedule annotation; "false" and "never" give nil, which contains
// nothing and never changes.
func (r *resolver) schedule(l layer, key string) *schedule.Schedule {
	spec, ok := l.annotations[key]
	if !ok {
		return nil
	}
	if negative(spec) {
		return nil
	}
	s, err := schedule.Parse(spec, r.defaults)
	if err != nil {
		r.fail(l, key, err.Error())
		return nil
	}
	for _, w := range s.Warnings() {
		r.warnings = append(r.warnings, l.prefix()+key+": "+w)
	}
	return s
}

// negative reports whether a schedule annotation says "false" or "never" (any case),
// without copying a schedule of a thousand elements to find out.
func negative(spec string) bool {
	spec = strings.TrimSpace(spec)
	return strings.EqualFold(spec, "false") || strings.EqualFold(spec, "never")
}

// pick returns the first layer that sets any key of group.
func pick(layers []layer, group []string) (layer, bool) {
	return pickLive(layers, group, func(layer) bool { return false })
}

// pickLive returns the first layer that sets any key of group and whose group has not
// run its course.
func pickLive(layers []layer, group []string, over func(layer) bool) (layer, bool) {
	for _, l := range layers {
		if hasAny(l.annotations, group) && !over(l) {
			return l, true
		}
	}
	return layer{}, false
}

// over reports whether a layer's timed group has run its course at now: every key of
// it that is set is an exclude-until that has passed, or a schedule that will contain
// no instant from now on (an until, or an absolute range, that ended). Such a group
// (kubectl phalanks wake and sleep leave these behind) no longer hides the group of the
// layers under it. "false" and "never" are not over: they say no, for good. A value
// that does not parse is not over either, so that it is reported.
func (r *resolver) over(l layer, group []string, now time.Time) bool {
	for _, key := range group {
		v, ok := l.annotations[key]
		if !ok {
			continue
		}
		if key == AnnotationExcludeUntil {
			t, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
			if err != nil || now.Before(t) {
				return false
			}
			continue
		}
		if negative(v) {
			return false
		}
		s, err := schedule.Parse(v, r.defaults)
		if err != nil || s.Contains(now) || !s.NextWithin(now, r.budget).IsZero() {
			return false
		}
	}
	return true
}

// resolve reads the configuration from layers (the object's own first), group by group.
// With ownScheduleOnly, the schedule group comes from the object alone. It validates
// everything it reads and reports every problem. A timed group that has run its course
// at now is passed over (see over).
func resolve(layers []layer, d schedule.Defaults, ownScheduleOnly bool, now time.Time) (config, error) {
	c := config{budget: schedule.NewBudget(decisionBudget)}
	r := &resolver{defaults: d, budget: c.budget}

	scheduleLayers := layers
	if ownScheduleOnly && len(layers) > 0 {
		scheduleLayers = layers[:1]
	}
	if l, ok := pick(scheduleLayers, scheduleGroup); ok {
		c.from = l.source
		if c.from == "" {
			c.from = "the object"
		}
		c.uptime = r.schedule(l, AnnotationUptime)
		c.downtime = r.schedule(l, AnnotationDowntime)
		if v, ok := l.annotations[AnnotationDowntimeReplicas]; ok {
			n, err := replicaCount(v)
			if err != nil {
				r.fail(l, AnnotationDowntimeReplicas, err.Error())
			}
			c.downtimeReplicas = n
		}
		if v, ok := l.annotations[AnnotationUptimeReplicas]; ok {
			n, err := replicaCount(v)
			if err != nil {
				r.fail(l, AnnotationUptimeReplicas, err.Error())
			}
			c.uptimeReplicas = &n
		}
		if !hasAny(l.annotations, []string{AnnotationUptime, AnnotationDowntime}) {
			r.fail(l, "annotations", "replica counts are set but neither "+AnnotationUptime+" nor "+AnnotationDowntime+
				"; scheduling annotations replace those of the namespace and the operator's defaults as a group")
		}
	}
	if l, ok := pickLive(layers, exclusionGroup, func(l layer) bool { return r.over(l, exclusionGroup, now) }); ok {
		c.exclude = r.schedule(l, AnnotationExclude)
		if v, ok := l.annotations[AnnotationExcludeUntil]; ok {
			t, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
			if err != nil {
				r.fail(l, AnnotationExcludeUntil, strconv.Quote(v)+" is not an RFC 3339 time such as 2024-11-01T08:00:00+01:00")
			}
			c.excludeUntil = t
		}
	}
	if l, ok := pickLive(layers, forceGroup, func(l layer) bool { return r.over(l, forceGroup, now) }); ok {
		c.forceUp = r.schedule(l, AnnotationForceUptime)
		c.forceDown = r.schedule(l, AnnotationForceDowntime)
	}
	if l, ok := pick(layers, graceGroup); ok {
		g, err := gracePeriod(l.annotations[AnnotationGracePeriod])
		if err != nil {
			r.fail(l, AnnotationGracePeriod, err.Error())
		}
		c.grace = &g
	}
	if l, ok := pick(layers, wakeLeadGroup); ok {
		lead, err := WakeLead(l.annotations[AnnotationWakeLead])
		if err != nil {
			r.fail(l, AnnotationWakeLead, err.Error())
		}
		c.wakeLead = &lead
	}
	if l, ok := pick(layers, dryRunGroup); ok {
		switch v := l.annotations[AnnotationDryRun]; strings.ToLower(strings.TrimSpace(v)) {
		case "true":
			c.dryRun = true
		case "false":
		default:
			r.fail(l, AnnotationDryRun, strconv.Quote(v)+" must be true or false")
		}
	}
	if l, ok := pick(layers, priorityGroup); ok {
		p, err := RestorePriority(l.annotations[AnnotationRestorePriority])
		if err != nil {
			r.fail(l, AnnotationRestorePriority, err.Error())
		}
		c.priority = p
	}
	if l, ok := pick(layers, wakeAfterGroup); ok {
		c.wakeAfterTimeout = DefaultWakeAfterTimeout
		if v, ok := l.annotations[AnnotationWakeAfter]; ok {
			deps, err := WakeAfter(v)
			if err != nil {
				r.fail(l, AnnotationWakeAfter, err.Error())
			}
			c.wakeAfter = deps
		}
		if v, ok := l.annotations[AnnotationWakeAfterTimeout]; ok {
			d, err := WakeAfterTimeout(v)
			if err != nil {
				r.fail(l, AnnotationWakeAfterTimeout, err.Error())
			}
			c.wakeAfterTimeout = d
		}
	}
	c.warnings = r.warnings
	if n := c.size(); n > schedule.MaxElements {
		r.problems = append(r.problems, fmt.Sprintf("its schedules have %d elements together, those of the holiday calendars they name included "+
			"(at most %d per object)", n, schedule.MaxElements))
	}
	if len(r.problems) > 0 {
		return config{}, errors.New(strings.Join(r.problems, "; "))
	}
	return c, nil
}

// size is the number of schedule elements a decision sees: those of every schedule it
// follows, the holiday calendars they name included.
func (c *config) size() int {
	n := 0
	for _, s := range []*schedule.Schedule{c.uptime, c.downtime, c.forceUp, c.forceDown, c.exclude} {
		n += s.Size()
	}
	return n
}

// MaxRestorePriority bounds AnnotationRestorePriority both ways.
const MaxRestorePriority = 1000

// RestorePriority parses AnnotationRestorePriority: an integer from -1000 to 1000.
func RestorePriority(v string) (int, error) {
	p, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || p < -MaxRestorePriority || p > MaxRestorePriority {
		return 0, fmt.Errorf("%s is not an integer from %d to %d", strconv.Quote(v), -MaxRestorePriority, MaxRestorePriority)
	}
	return p, nil
}

// gracePeriod parses a duration such as 30m, or whole seconds as kube-downscaler takes
// them.
func gracePeriod(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration such as 30m or 1h30m, or whole seconds", v)
	}
	return d, nil
}

// MaxWakeLead bounds the wake lead: a workload that needs longer to start is woken by
// an uptime that begins earlier.
const MaxWakeLead = 12 * time.Hour

// WakeLead parses a wake lead: a duration such as 15m or whole seconds, at most
// MaxWakeLead.
func WakeLead(v string) (time.Duration, error) {
	d, err := gracePeriod(v)
	if err != nil {
		return 0, err
	}
	if d > MaxWakeLead {
		return 0, fmt.Errorf("%q is longer than %s", strings.TrimSpace(v), "12h")
	}
	return d, nil
}

// replicaCount parses a non-negative replica count.
func replicaCount(v string) (int32, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a replica count (a whole number, 0 or more)", v)
	}
	return int32(n), nil
}

// savedCount reads an operator-written count; absent is (0, false, nil).
func savedCount(annotations map[string]string, key string) (int32, bool, error) {
	v, ok := annotations[key]
	if !ok {
		return 0, false, nil
	}
	n, err := replicaCount(v)
	if err != nil {
		return 0, true, fmt.Errorf("%s: %w; fix or remove it", key, err)
	}
	return n, true, nil
}
