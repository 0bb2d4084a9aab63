package scaling

import (
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/phalanks/phalanks-operator/internal/schedule"
)

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestDecide(t *testing.T) {
	// Wednesday 2024-06-05: working hours Mon-Fri 08:00-18:00 UTC.
	const work = "Mon-Fri 08:00-18:00 UTC"
	night := mustTime("2024-06-05T20:00:00Z")
	day := mustTime("2024-06-05T10:00:00Z")
	longAgo := mustTime("2024-01-01T00:00:00Z")
	nextMorning := mustTime("2024-06-06T08:00:00Z")
	evening := mustTime("2024-06-05T18:00:00Z")

	type want struct {
		state     state
		write     *workloadWrite
		hpa       *hpaWrite
		reasons   []string
		note      string // a substring of the first event's note
		requeueAt time.Time
	}
	cases := []struct {
		name       string
		now        time.Time
		replicas   int32
		created    time.Time
		wl, ns     map[string]string
		controller *metav1.OwnerReference
		hpas       []hpaView
		defaults   schedule.Defaults
		want       want
	}{
		{
			name: "a workload without scheduling annotations in a namespace without them is not managed",
			now:  night, replicas: 3, wl: map[string]string{"other": "x"},
			want: want{state: stateUnmanaged},
		},
		{
			name: "outside the uptime a workload is scaled down and its count saved",
			now:  night, replicas: 3, wl: map[string]string{AnnotationUptime: work},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: nextMorning},
				reasons: []string{ReasonScaleDown}, note: "from 3 to 0", requeueAt: nextMorning},
		},
		{
			name: "inside the uptime nothing is written and the next transition is the evening",
			now:  day, replicas: 3, wl: map[string]string{AnnotationUptime: work},
			want: want{state: stateUp, requeueAt: evening},
		},
		{
			name: "at the uptime the saved count is restored and the record removed",
			now:  day, replicas: 0, wl: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "3"},
			want: want{state: stateUp, write: &workloadWrite{level: 3, next: evening},
				reasons: []string{ReasonScaleUp}, note: "restored 3 replicas", requeueAt: evening},
		},
		{
			name: "uptime-replicas replaces the saved count at the restore",
			now:  day, replicas: 0, wl: map[string]string{AnnotationUptime: work, AnnotationUptimeReplicas: "5", AnnotationOriginalReplicas: "3"},
			want: want{state: stateUp, write: &workloadWrite{level: 5, next: evening}, reasons: []string{ReasonScaleUp}, requeueAt: evening},
		},
		{
			name: "downtime wins where it overlaps the uptime",
			now:  day, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationDowntime: "2024-06-05T00:00:00Z-2024-06-06T00:00:00Z"},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: nextMorning},
				reasons: []string{ReasonScaleDown}, requeueAt: nextMorning},
		},
		{
			name: "downtime-replicas sets the downtime count",
			now:  night, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "1"},
			want: want{state: stateDown, write: &workloadWrite{level: 1, original: ptr.To[int32](3), next: nextMorning},
				reasons: []string{ReasonScaleDown}, requeueAt: nextMorning},
		},
		{
			name: "a workload already at or below the downtime count is left as it is",
			now:  night, replicas: 1, wl: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "2"},
			want: want{state: stateDown, requeueAt: nextMorning},
		},
		{
			name: "a scaled-down workload at its downtime count needs nothing",
			now:  night, replicas: 0, wl: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-06T08:00:00Z"},
			want: want{state: stateDown, requeueAt: nextMorning},
		},
		{
			name: "a scaled-down workload whose schedule changed gets its next transition refreshed, silently",
			now:  night, replicas: 0, wl: map[string]string{AnnotationUptime: "Mon-Fri 09:00-18:00 UTC", AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-06T08:00:00Z"},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: mustTime("2024-06-06T09:00:00Z")},
				requeueAt: mustTime("2024-06-06T09:00:00Z")},
		},
		{
			name: "a manual scale during downtime is kept until the next transition",
			now:  night, replicas: 2, wl: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-06T08:00:00Z"},
			want: want{state: stateOverride, reasons: []string{ReasonManualOverride}, note: "changed to 2", requeueAt: nextMorning},
		},
		{
			name: "a manual scale from an earlier downtime is scaled down again, keeping the saved count",
			now:  night, replicas: 2, wl: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-04T08:00:00Z"},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: nextMorning},
				reasons: []string{ReasonScaleDown}, note: "the saved 3", requeueAt: nextMorning},
		},
		{
			name: "a new workload gets the grace period before its first scale-down",
			now:  night, replicas: 3, created: night.Add(-5 * time.Minute), wl: map[string]string{AnnotationUptime: work},
			want: want{state: stateGrace, reasons: []string{ReasonGracePeriod}, requeueAt: night.Add(10 * time.Minute)},
		},
		{
			name: "the grace period does not delay a workload that is already scaled down",
			now:  night, replicas: 0, created: night.Add(-5 * time.Minute), wl: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-06T08:00:00Z"},
			want: want{state: stateDown, requeueAt: nextMorning},
		},
		{
			name: "exclude keeps a workload up and restores a saved count",
			now:  night, replicas: 0, wl: map[string]string{AnnotationUptime: work, AnnotationExclude: "true", AnnotationOriginalReplicas: "3"},
			want: want{state: stateExcluded, write: &workloadWrite{level: 3}, reasons: []string{ReasonScaleUp}, note: "excluded"},
		},
		{
			name: "exclude-until in the future excludes until then",
			now:  night, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationExcludeUntil: "2024-06-05T22:00:00Z"},
			want: want{state: stateExcluded, requeueAt: mustTime("2024-06-05T22:00:00Z")},
		},
		{
			name: "an expired exclude-until no longer excludes",
			now:  night, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationExcludeUntil: "2024-06-05T19:00:00Z"},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: nextMorning}, reasons: []string{ReasonScaleDown}, requeueAt: nextMorning},
		},
		{
			name: "namespace annotations are the defaults",
			now:  night, replicas: 3, ns: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "1"},
			want: want{state: stateDown, write: &workloadWrite{level: 1, original: ptr.To[int32](3), next: nextMorning}, reasons: []string{ReasonScaleDown}, requeueAt: nextMorning},
		},
		{
			name: "a workload's schedule replaces the namespace's as a whole, downtime-replicas included",
			now:  night, replicas: 3, wl: map[string]string{AnnotationDowntime: "Mon-Sun 19:00-20:30 UTC"}, ns: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "1"},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: mustTime("2024-06-05T20:30:00Z")}, reasons: []string{ReasonScaleDown},
				requeueAt: mustTime("2024-06-05T20:30:00Z")},
		},
		{
			name: "a workload's exclusion applies on top of its namespace's schedule",
			now:  night, replicas: 3, wl: map[string]string{AnnotationExclude: "true"}, ns: map[string]string{AnnotationUptime: work},
			want: want{state: stateExcluded},
		},
		{
			name: "a namespace exclusion is overridden by the workload's exclude=false",
			now:  night, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationExclude: "false"}, ns: map[string]string{AnnotationExclude: "true"},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: nextMorning}, reasons: []string{ReasonScaleDown}, requeueAt: nextMorning},
		},
		{
			name: "removing the schedule restores the saved count and drops the records",
			now:  night, replicas: 0, wl: map[string]string{AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-06T08:00:00Z"},
			want: want{state: stateUnmanaged, write: &workloadWrite{level: 3}, reasons: []string{ReasonScaleUp}, note: "no schedule applies"},
		},
		{
			name: "a default week frame and zone complete a short schedule",
			now:  night, replicas: 3, wl: map[string]string{AnnotationUptime: "08:00-18:00"}, defaults: schedule.Defaults{TimeZone: "UTC", Weekdays: "Mon-Fri"},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: nextMorning}, reasons: []string{ReasonScaleDown}, requeueAt: nextMorning},
		},
		{
			name: "a workload controlled by another controller is left alone, with the reason",
			now:  night, replicas: 3, ns: map[string]string{AnnotationUptime: work},
			controller: &metav1.OwnerReference{Kind: "Foo", Name: "example", Controller: ptr.To(true)},
			want:       want{state: stateOwned, reasons: []string{ReasonControlledByOwner}, note: "controlled by Foo example"},
		},
		{
			name: "a malformed schedule names the element and the reason and scales nothing",
			now:  night, replicas: 3, wl: map[string]string{AnnotationDowntime: "Mon-Fri 8:00-18:00 UTC"},
			want: want{state: stateInvalid, reasons: []string{ReasonInvalidSchedule}, note: `phalanks.io/downtime: element 1 "Mon-Fri 8:00-18:00 UTC": start "8:00" is not HH:MM with two digits each`},
		},
		{
			name: "a malformed namespace default names the namespace",
			now:  night, replicas: 3, ns: map[string]string{AnnotationUptime: "Mon-Fri 08:00-18:00 Nowhere"},
			want: want{state: stateInvalid, reasons: []string{ReasonInvalidSchedule}, note: "namespace team-a phalanks.io/uptime"},
		},
		{
			name: "a malformed replica count is invalid",
			now:  night, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "-1"},
			want: want{state: stateInvalid, reasons: []string{ReasonInvalidSchedule}, note: "downtime-replicas"},
		},
		{
			name: "replica counts without a schedule are invalid, not silently the namespace's",
			now:  night, replicas: 3, wl: map[string]string{AnnotationDowntimeReplicas: "1"}, ns: map[string]string{AnnotationUptime: work},
			want: want{state: stateInvalid, reasons: []string{ReasonInvalidSchedule}, note: "neither"},
		},
		{
			name: "a malformed saved count is invalid rather than guessed",
			now:  day, replicas: 0, wl: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "three"},
			want: want{state: stateInvalid, reasons: []string{ReasonInvalidSchedule}, note: "original-replicas"},
		},
		{
			name: "with an autoscaler a non-zero downtime count lowers its minReplicas instead of the replicas",
			now:  night, replicas: 4, wl: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "1"},
			hpas: []hpaView{{name: "web", minReplicas: 3}},
			want: want{state: stateDown, hpa: &hpaWrite{name: "web", minReplicas: 1, originalMin: ptr.To[int32](3), next: nextMorning},
				reasons: []string{ReasonScaleDown}, note: "minReplicas of HorizontalPodAutoscaler web from 3 to 1", requeueAt: nextMorning},
		},
		{
			name: "an autoscaler already allowing the downtime count is left alone",
			now:  night, replicas: 4, wl: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "2"},
			hpas: []hpaView{{name: "web", minReplicas: 1}},
			want: want{state: stateDown, requeueAt: nextMorning},
		},
		{
			name: "with an autoscaler a zero downtime count scales the workload to zero, which pauses the autoscaler",
			now:  night, replicas: 4, wl: map[string]string{AnnotationUptime: work},
			hpas: []hpaView{{name: "web", minReplicas: 3}},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](4), next: nextMorning}, reasons: []string{ReasonScaleDown}, requeueAt: nextMorning},
		},
		{
			name: "at the uptime a lowered autoscaler gets its minReplicas back",
			now:  day, replicas: 1, wl: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "1"},
			hpas: []hpaView{{name: "web", minReplicas: 1, annotations: map[string]string{AnnotationOriginalMinReplicas: "3"}}},
			want: want{state: stateUp, hpa: &hpaWrite{name: "web", minReplicas: 3, next: evening}, reasons: []string{ReasonScaleUp}, requeueAt: evening},
		},
		{
			name: "a lowered autoscaler gets its minReplicas back when the workload's schedule is removed",
			now:  night, replicas: 1, wl: map[string]string{},
			hpas: []hpaView{{name: "web", minReplicas: 1, annotations: map[string]string{AnnotationOriginalMinReplicas: "3"}}},
			want: want{state: stateUnmanaged, hpa: &hpaWrite{name: "web", minReplicas: 3}, reasons: []string{ReasonScaleUp}, note: "no schedule applies any more"},
		},
		{
			name: "a saved minReplicas is capped at a maxReplicas lowered during the downtime, so the restore can succeed",
			now:  day, replicas: 1, wl: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "1"},
			hpas: []hpaView{{name: "web", minReplicas: 1, maxReplicas: 2, annotations: map[string]string{AnnotationOriginalMinReplicas: "3"}}},
			want: want{state: stateUp, hpa: &hpaWrite{name: "web", minReplicas: 2, next: evening}, reasons: []string{ReasonScaleUp},
				note: "restored minReplicas 2 (the saved 3, capped at maxReplicas 2) of HorizontalPodAutoscaler web", requeueAt: evening},
		},
		{
			name: "an exclude-until that has passed no longer hides its namespace's exclusion",
			now:  night, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationExcludeUntil: "2024-06-05T19:00:00Z"},
			ns:   map[string]string{AnnotationExclude: "true"},
			want: want{state: stateExcluded},
		},
		{
			name: "a timed force-downtime holds a workload down in its uptime and wakes it when it ends",
			now:  day, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationForceDowntime: "until 2024-06-05T11:00:00Z"},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: mustTime("2024-06-05T11:00:00Z")},
				reasons: []string{ReasonScaleDown}, requeueAt: mustTime("2024-06-05T11:00:00Z")},
		},
		{
			name: "a force-downtime that has ended hands back to its namespace's force-uptime",
			now:  night, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationForceDowntime: "until 2024-06-05T11:00:00Z"},
			ns:   map[string]string{AnnotationForceUptime: "true"},
			want: want{state: stateUp},
		},
		{
			name: "a timed force-downtime wakes the workload at its end even when the state stays, for the group under it",
			now:  night, replicas: 0, wl: map[string]string{AnnotationUptime: work, AnnotationForceDowntime: "until 2024-06-05T21:00:00Z",
				AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-06T08:00:00Z"},
			want: want{state: stateDown, requeueAt: mustTime("2024-06-05T21:00:00Z")},
		},
		{
			name: "force-uptime false on a workload still overrides its namespace's force-uptime",
			now:  night, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationForceUptime: "false"},
			ns: map[string]string{AnnotationForceUptime: "true"},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: nextMorning},
				reasons: []string{ReasonScaleDown}, requeueAt: nextMorning},
		},
		{
			name: "within the wake lead of the uptime the saved count is restored, and the next transition is the evening",
			now:  mustTime("2024-06-06T07:45:00Z"), replicas: 0,
			wl: map[string]string{AnnotationUptime: work, AnnotationWakeLead: "20m", AnnotationOriginalReplicas: "3"},
			want: want{state: stateUp, write: &workloadWrite{level: 3, next: mustTime("2024-06-06T18:00:00Z")},
				reasons: []string{ReasonScaleUp}, note: "wake lead 20m0s before the uptime at 2024-06-06T08:00:00Z", requeueAt: mustTime("2024-06-06T18:00:00Z")},
		},
		{
			name: "at exactly the wake lead before the uptime the workload is restored",
			now:  mustTime("2024-06-06T07:40:00Z"), replicas: 0,
			wl: map[string]string{AnnotationUptime: work, AnnotationWakeLead: "1200", AnnotationOriginalReplicas: "3"},
			want: want{state: stateUp, write: &workloadWrite{level: 3, next: mustTime("2024-06-06T18:00:00Z")},
				reasons: []string{ReasonScaleUp}, requeueAt: mustTime("2024-06-06T18:00:00Z")},
		},
		{
			name: "before the wake lead the workload stays down, woken at the lead before the uptime",
			now:  mustTime("2024-06-06T07:39:59Z"), replicas: 0,
			wl:   map[string]string{AnnotationUptime: work, AnnotationWakeLead: "20m", AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-06T07:40:00Z"},
			want: want{state: stateDown, requeueAt: mustTime("2024-06-06T07:40:00Z")},
		},
		{
			name: "the wake lead does not move the scale-down: at the evening it is scaled down, until the lead before the morning",
			now:  evening, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationWakeLead: "20m"},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: mustTime("2024-06-06T07:40:00Z")},
				reasons: []string{ReasonScaleDown}, requeueAt: mustTime("2024-06-06T07:40:00Z")},
		},
		{
			name: "a downtime shorter than the wake lead is never applied",
			now:  mustTime("2024-06-05T12:00:00Z"), replicas: 3,
			wl:   map[string]string{AnnotationUptime: work, AnnotationDowntime: "2024-06-05T12:00:00Z-2024-06-05T12:30:00Z", AnnotationWakeLead: "1h"},
			want: want{state: stateUp, requeueAt: evening},
		},
		{
			name: "the Namespace's wake lead applies to the workload's own schedule",
			now:  mustTime("2024-06-06T07:45:00Z"), replicas: 0,
			wl: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "3"},
			ns: map[string]string{AnnotationWakeLead: "30m"},
			want: want{state: stateUp, write: &workloadWrite{level: 3, next: mustTime("2024-06-06T18:00:00Z")},
				reasons: []string{ReasonScaleUp}, requeueAt: mustTime("2024-06-06T18:00:00Z")},
		},
		{
			name: "a wake lead longer than 12h is refused, and nothing is scaled on it",
			now:  night, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationWakeLead: "13h"},
			want: want{state: stateInvalid, reasons: []string{ReasonInvalidSchedule}, note: `phalanks.io/wake-lead: "13h" is longer than 12h`},
		},
		{
			name: "a wake lead that is no duration is refused",
			now:  night, replicas: 3, wl: map[string]string{AnnotationUptime: work, AnnotationWakeLead: "soon"},
			want: want{state: stateInvalid, reasons: []string{ReasonInvalidSchedule}, note: "is not a duration"},
		},
		{
			name: "two autoscalers on one workload are reported, not guessed between",
			now:  night, replicas: 4, wl: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "1"},
			hpas: []hpaView{{name: "a", minReplicas: 3}, {name: "b", minReplicas: 3}},
			want: want{state: stateInvalid, reasons: []string{ReasonAmbiguousAutoscaler}},
		},
		{
			name: "the next transition skips a change of one schedule that the other masks",
			now:  mustTime("2024-12-20T20:00:00Z"), replicas: 3,
			wl: map[string]string{AnnotationUptime: work, AnnotationDowntime: "2024-12-23T00:00:00Z-2024-12-27T00:00:00Z"},
			want: want{state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: mustTime("2024-12-27T08:00:00Z")},
				reasons: []string{ReasonScaleDown}, requeueAt: mustTime("2024-12-27T08:00:00Z")},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			created := c.created
			if created.IsZero() {
				created = longAgo
			}
			d := decide(inputs{
				now:  c.now,
				kind: deployments.traits,
				workload: workloadView{level: c.replicas, annotations: c.wl,
					created: created, controller: c.controller},
				layers: []layer{{source: "namespace team-a", annotations: c.ns}}, hpas: c.hpas,
				defaults: c.defaults, grace: 15 * time.Minute,
			})
			if d.state != c.want.state {
				t.Errorf("state = %q, want %q", d.state, c.want.state)
			}
			if !sameWorkloadWrite(d.workload, c.want.write) {
				t.Errorf("workload write = %+v, want %+v", fmtWrite(d.workload), fmtWrite(c.want.write))
			}
			if !sameHPAWrite(d.hpa, c.want.hpa) {
				t.Errorf("autoscaler write = %+v, want %+v", d.hpa, c.want.hpa)
			}
			var reasons []string
			for _, e := range d.events {
				reasons = append(reasons, e.reason)
			}
			if strings.Join(reasons, ",") != strings.Join(c.want.reasons, ",") {
				t.Errorf("event reasons = %v, want %v", reasons, c.want.reasons)
			}
			if c.want.note != "" && (len(d.events) == 0 || !strings.Contains(d.events[0].note, c.want.note)) {
				t.Errorf("events %+v do not say %q", d.events, c.want.note)
			}
			if !d.requeueAt.Equal(c.want.requeueAt) {
				t.Errorf("requeue at %s, want %s", d.requeueAt, c.want.requeueAt)
			}
		})
	}
}

// scaledDownOvernight is the decision's inputs at now for a Deployment with working hours
// that was scaled down from 3, with more annotations on it and on its Namespace.
func scaledDownOvernight(now time.Time, wl, ns map[string]string) inputs {
	a := map[string]string{AnnotationUptime: "Mon-Fri 08:00-18:00 UTC", AnnotationOriginalReplicas: "3"}
	maps.Copy(a, wl)
	return inputs{
		now:      now,
		kind:     deployments.traits,
		workload: workloadView{level: 0, annotations: a, created: mustTime("2024-01-01T00:00:00Z")},
		layers:   []layer{{source: "namespace team-a", annotations: ns}},
	}
}

// --scaling-wake-lead applies where no annotation sets a lead, and an annotation of 0
// turns it off for its object.
func TestTheWakeLeadFlagIsTheDefault(t *testing.T) {
	decideWith := func(annotations map[string]string) decision {
		in := scaledDownOvernight(mustTime("2024-06-06T07:45:00Z"), annotations, nil)
		in.wakeLead = 30 * time.Minute
		return decide(in)
	}
	if d := decideWith(nil); d.state != stateUp || d.workload == nil || d.workload.level != 3 {
		t.Errorf("with the flag's lead of 30m, 15 minutes before the uptime: state %q, write %+v; want restored", d.state, fmtWrite(d.workload))
	}
	if d := decideWith(map[string]string{AnnotationWakeLead: "0"}); d.state != stateDown || (d.workload != nil && d.workload.level != 0) {
		t.Errorf("with wake-lead 0 on the object: state %q, write %+v; want left down", d.state, fmtWrite(d.workload))
	}
}

// The restore priority comes from the workload, else its Namespace; a bad one is
// refused like any other annotation, and nothing is scaled on it.
func TestTheRestorePriorityIsTheWorkloadsOrItsNamespaces(t *testing.T) {
	decideWith := func(wl, ns map[string]string) decision {
		return decide(scaledDownOvernight(mustTime("2024-06-06T08:00:00Z"), wl, ns))
	}
	for _, c := range []struct {
		wl, ns map[string]string
		want   int
	}{
		{nil, nil, 0},
		{map[string]string{AnnotationRestorePriority: "100"}, nil, 100},
		{nil, map[string]string{AnnotationRestorePriority: "-5"}, -5},
		{map[string]string{AnnotationRestorePriority: " 7 "}, map[string]string{AnnotationRestorePriority: "1000"}, 7},
	} {
		if d := decideWith(c.wl, c.ns); d.state != stateUp || d.priority != c.want {
			t.Errorf("workload %v, namespace %v: state %q, priority %d; want restored at %d", c.wl, c.ns, d.state, d.priority, c.want)
		}
	}
	for _, bad := range []string{"high", "1001", "-1001", "1.5", ""} {
		d := decideWith(map[string]string{AnnotationRestorePriority: bad}, nil)
		if d.state != stateInvalid || len(d.events) == 0 || !strings.Contains(d.events[0].note, "is not an integer from -1000 to 1000") {
			t.Errorf("restore-priority %q: state %q, events %+v; want refused", bad, d.state, d.events)
		}
	}
}

func sameWorkloadWrite(a, b *workloadWrite) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.level == b.level && ptr.Equal(a.original, b.original) && a.next.Equal(b.next)
}

func sameHPAWrite(a, b *hpaWrite) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.name == b.name && a.minReplicas == b.minReplicas && ptr.Equal(a.originalMin, b.originalMin) && a.next.Equal(b.next)
}

func fmtWrite(w *workloadWrite) any {
	if w == nil {
		return nil
	}
	return map[string]any{"level": w.level, "annotations": w.annotationsFor()}
}

func TestFlagDefaultsAreValidatedAtStart(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		want string
	}{
		{"an unknown zone", Options{TimeZone: "Mars/Olympus"}, "--scaling-time-zone"},
		{"a misspelt week frame", Options{Weekdays: "Mon-Fry"}, "--scaling-weekdays"},
		{"a default uptime that does not parse", Options{DefaultUptime: "Mon-Fri 8:00-18:00 UTC"}, "--default-uptime"},
		{"a default downtime that does not parse", Options{DefaultDowntime: "sometimes"}, "--default-downtime"},
		{"default downtime replicas without a default schedule", Options{DefaultDowntimeReplicas: 1}, "needs --default-uptime or --default-downtime"},
		{"negative default downtime replicas", Options{DefaultDowntime: "always", DefaultDowntimeReplicas: -1}, "--default-downtime-replicas"},
		{"a namespace selector that does not parse", Options{ExcludeNamespaceSelector: "env in (a"}, "--scaling-exclude-namespace-selector"},
		{"a wake lead longer than 12h", Options{WakeLead: 13 * time.Hour}, "--scaling-wake-lead: 13h0m0s is not between 0 and 12h"},
		{"a negative wake lead", Options{WakeLead: -time.Minute}, "--scaling-wake-lead"},
		{"a negative restore rate", Options{RestoreRate: -1}, "--scaling-restore-rate: -1 is not between 0 and 1000"},
		{"a restore rate of NaN", Options{RestoreRate: math.NaN()}, "--scaling-restore-rate"},
	} {
		if _, err := c.o.newPolicy(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %s", c.name, err, c.want)
		}
	}
	if p, err := (&Options{TimeZone: "Europe/Berlin", Weekdays: "Mon-Fri"}).newPolicy(); err != nil || p.scheduleDefaults.TimeZone != "Europe/Berlin" {
		t.Errorf("valid defaults: %+v, %v", p, err)
	}
}

func TestKubeSystemAndTheOperatorsNamespaceAreExcludedByDefault(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "phalanks-system")
	p, err := (&Options{}).newPolicy()
	if err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[string]bool{"kube-system": true, "phalanks-system": true, "default": false, "team-a": false} {
		if got := p.excluded(ns, nil); got != want {
			t.Errorf("namespace %s excluded = %v, want %v", ns, got, want)
		}
	}
	if p.excluded("team-a", map[string]string{"environment": "production"}) {
		t.Error("with no selector, labels exclude nothing")
	}
}
