package scaling

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/phalanks/phalanks-operator/internal/schedule"
)

// Annotations on Deployments, StatefulSets and (as defaults) Namespaces.
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
	// AnnotationExclude "true" keeps the workload out of scheduled scaling.
	AnnotationExclude = annotationPrefix + "exclude"
	// AnnotationExcludeUntil keeps the workload out of scheduled scaling until an RFC 3339 time.
	AnnotationExcludeUntil = annotationPrefix + "exclude-until"

	// AnnotationOriginalReplicas is written by the operator: the count to restore.
	AnnotationOriginalReplicas = annotationPrefix + "original-replicas"
	// AnnotationOriginalMinReplicas is written by the operator on a HorizontalPodAutoscaler
	// whose minReplicas it lowered: the value to restore.
	AnnotationOriginalMinReplicas = annotationPrefix + "original-min-replicas"
	// AnnotationNextTransition is written by the operator when it acts: the RFC 3339
	// time of the next scheduled change.
	AnnotationNextTransition = annotationPrefix + "next-transition"
)

// The annotations that decide a workload's schedule, and those that exclude it. A
// workload that sets any annotation of a group takes none of that group from its
// Namespace, so a schedule is never half the workload's and half the Namespace's.
var (
	scheduleGroup  = []string{AnnotationUptime, AnnotationDowntime, AnnotationDowntimeReplicas, AnnotationUptimeReplicas}
	exclusionGroup = []string{AnnotationExclude, AnnotationExcludeUntil}
)

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
func namespaceInScope(annotations map[string]string) bool {
	return hasAny(annotations, scheduleGroup) || hasAny(annotations, exclusionGroup)
}

func hasAny(annotations map[string]string, keys []string) bool {
	for _, k := range keys {
		if _, ok := annotations[k]; ok {
			return true
		}
	}
	return false
}

// config is a workload's resolved scheduling configuration.
type config struct {
	uptime, downtime *schedule.Schedule
	downtimeReplicas int32
	uptimeReplicas   *int32
	exclude          bool
	excludeUntil     time.Time
	// from names where the schedule came from, for messages.
	from string
}

// maxTransitionSteps bounds the search for the next change of uptime and downtime
// together; each step is a change of one of them, so real schedules need a handful.
const maxTransitionSteps = 1000

func (c *config) scheduled() bool { return c.uptime != nil || c.downtime != nil }

// inDowntime: downtime wins over uptime, and outside an uptime schedule is downtime.
func (c *config) inDowntime(t time.Time) bool {
	return c.downtime.Contains(t) || (c.uptime != nil && !c.uptime.Contains(t))
}

func (c *config) excluded(t time.Time) bool { return c.exclude || t.Before(c.excludeUntil) }

// nextTransition returns the first instant after t at which inDowntime changes, or
// zero if it never does. Each schedule's Next is exact, so the candidates are their
// changes; one that the other schedule masks is skipped.
func (c *config) nextTransition(t time.Time) time.Time {
	down := c.inDowntime(t)
	x := t
	for range maxTransitionSteps {
		u := earliest(c.uptime.Next(x), c.downtime.Next(x))
		if u.IsZero() || c.inDowntime(u) != down {
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

// resolve reads the workload's annotations, falling back group by group to its
// Namespace's. It validates everything it reads and reports every problem.
func resolve(workload, namespace map[string]string, namespaceName string, d schedule.Defaults) (config, error) {
	var c config
	var problems []string
	fail := func(source, key, reason string) {
		problems = append(problems, source+key+": "+reason)
	}

	sched, source := workload, ""
	if !hasAny(workload, scheduleGroup) {
		sched, source = namespace, "namespace "+namespaceName+" "
	}
	c.from = strings.TrimSpace(source)
	if c.from == "" {
		c.from = "workload"
	}
	for _, a := range []struct {
		key    string
		target **schedule.Schedule
	}{{AnnotationUptime, &c.uptime}, {AnnotationDowntime, &c.downtime}} {
		spec, ok := sched[a.key]
		if !ok {
			continue
		}
		s, err := schedule.Parse(spec, d)
		if err != nil {
			fail(source, a.key, err.Error())
			continue
		}
		*a.target = s
	}
	if v, ok := sched[AnnotationDowntimeReplicas]; ok {
		n, err := replicaCount(v)
		if err != nil {
			fail(source, AnnotationDowntimeReplicas, err.Error())
		}
		c.downtimeReplicas = n
	}
	if v, ok := sched[AnnotationUptimeReplicas]; ok {
		n, err := replicaCount(v)
		if err != nil {
			fail(source, AnnotationUptimeReplicas, err.Error())
		}
		c.uptimeReplicas = &n
	}
	_, hasUp := sched[AnnotationUptime]
	_, hasDown := sched[AnnotationDowntime]
	if hasAny(sched, scheduleGroup) && !hasUp && !hasDown {
		fail(source, "annotations", "replica counts are set but neither "+AnnotationUptime+" nor "+AnnotationDowntime+
			"; a workload's scheduling annotations replace its namespace's as a group")
	}

	excl, source := workload, ""
	if !hasAny(workload, exclusionGroup) {
		excl, source = namespace, "namespace "+namespaceName+" "
	}
	if v, ok := excl[AnnotationExclude]; ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true":
			c.exclude = true
		case "false":
		default:
			fail(source, AnnotationExclude, strconv.Quote(v)+" must be true or false")
		}
	}
	if v, ok := excl[AnnotationExcludeUntil]; ok {
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
		if err != nil {
			fail(source, AnnotationExcludeUntil, strconv.Quote(v)+" is not an RFC 3339 time such as 2024-11-01T08:00:00+01:00")
		}
		c.excludeUntil = t
	}
	if len(problems) > 0 {
		return config{}, errors.New(strings.Join(problems, "; "))
	}
	return c, nil
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
