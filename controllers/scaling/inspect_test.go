package scaling

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestAnObjectIsShownAsTheOperatorDecidesIt covers what kubectl phalanks status prints of
// an object, from the decision the operator makes on the same inputs: the state, the
// saved count, the next transition, whether the operator has yet to act, what the
// object saves and the sentence saying why.
func TestAnObjectIsShownAsTheOperatorDecidesIt(t *testing.T) {
	const work = "Mon-Fri 08:00-18:00 UTC"
	// Wednesday evening, after working hours.
	night := mustTime("2024-06-05T20:00:00Z")
	day := mustTime("2024-06-05T10:00:00Z")
	nextMorning := mustTime("2024-06-06T08:00:00Z")
	evening := mustTime("2024-06-05T18:00:00Z")
	longAgo := mustTime("2024-01-01T00:00:00Z")
	heldDown := map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-06T08:00:00Z",
		AnnotationScaledDownAt: "2024-06-05T18:00:00Z", AnnotationPodRequests: "cpu=250m,memory=128Mi"}

	cases := []struct {
		name     string
		kind     traits
		now      time.Time
		level    int32
		created  time.Time
		own      map[string]string
		layers   []layer
		hpas     []hpaView
		excluded bool
		owner    *metav1.OwnerReference
		// want; shown false for an object status does not list.
		shown bool
		want  Status
	}{
		{
			name: "a workload held down shows its saved count, the next transition and what it saves",
			kind: deployments.traits, now: night, level: 0, own: heldDown, shown: true,
			want: Status{State: "down", Level: 0, Saved: ptr.To[int32](3), Next: nextMorning,
				Why:          "downtime (schedule of the object); 3 to restore",
				ReplicasDown: 3, CPUMilli: 250, MemoryBytes: 128 << 20, DownSince: evening},
		},
		{
			name: "a workload the operator has yet to scale down is pending and saves nothing yet",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: work}, shown: true,
			want: Status{State: "down", Level: 3, Next: nextMorning, Pending: true,
				Why: "downtime (schedule of the object); the operator has yet to scale it down"},
		},
		{
			name: "a workload scaled by hand during its downtime is an override until the next transition",
			kind: deployments.traits, now: night, level: 2,
			own:   map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-06T08:00:00Z"},
			shown: true,
			want: Status{State: "override", Level: 2, Saved: ptr.To[int32](3), Next: nextMorning, ReplicasDown: 1, DownSince: night,
				Why: "replicas changed to 2 during the downtime: kept until the next transition at 2024-06-06T08:00:00Z, then 3 are restored"},
		},
		{
			name: "a new workload in its downtime is in its grace period, and says until when",
			kind: deployments.traits, now: night, level: 3, created: night.Add(-5 * time.Minute), own: map[string]string{AnnotationUptime: work},
			shown: true,
			want: Status{State: "grace", Level: 3, Next: nextMorning,
				Why: "in downtime, but created less than 15m0s ago; scaling down at 2024-06-05T20:10:00Z at the earliest"},
		},
		{
			name: "an exclusion shows when it ends as the next transition",
			kind: deployments.traits, now: night, level: 3,
			own:   map[string]string{AnnotationUptime: work, AnnotationExcludeUntil: "2024-06-05T22:00:00Z"},
			shown: true,
			want:  Status{State: "excluded", Level: 3, Next: mustTime("2024-06-05T22:00:00Z"), Why: "excluded (exclude or exclude-until)"},
		},
		{
			name: "a namespace the operator's flags exclude is named as the reason",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: work}, excluded: true,
			shown: true,
			want:  Status{State: "excluded", Level: 3, Why: "its namespace is excluded from scheduled scaling by the operator's flags"},
		},
		{
			name: "an excluded workload still held down is pending its restore",
			kind: deployments.traits, now: night, level: 0, own: heldDown, excluded: true,
			shown: true,
			want: Status{State: "excluded", Level: 0, Saved: ptr.To[int32](3), Pending: true,
				Why: "the operator has yet to restore it: restored 3 replicas (from 0): its namespace is excluded from scheduled scaling"},
		},
		{
			name: "a workload in its uptime shows when the uptime ends",
			kind: deployments.traits, now: day, level: 3, own: map[string]string{AnnotationUptime: work}, shown: true,
			want: Status{State: "up", Level: 3, Next: evening, Why: "uptime (schedule of the object)"},
		},
		{
			name: "a schedule taken from the namespace is named so",
			kind: statefulSets.traits, now: day, level: 2,
			layers: []layer{{source: "namespace team", annotations: map[string]string{AnnotationUptime: work}}},
			shown:  true,
			want:   Status{State: "up", Level: 2, Next: evening, Why: "uptime (schedule of namespace team)"},
		},
		{
			name: "a workload whose schedule was removed while it was down shows as up, pending its restore",
			kind: deployments.traits, now: day, level: 0, own: map[string]string{AnnotationOriginalReplicas: "3"}, shown: true,
			want: Status{State: "up", Level: 0, Saved: ptr.To[int32](3), Pending: true,
				Why: "the operator has yet to restore it: restored 3 replicas (from 0): no schedule applies any more"},
		},
		{
			name: "a workload that only mentions a dry run, with no schedule and nothing saved, is not shown",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationDryRun: "true"},
		},
		{
			name: "a workload another controller sets the replicas of is shown as owned",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: work},
			owner: &metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "App", Name: "web", Controller: ptr.To(true)},
			shown: true,
			want:  Status{State: "owned", Level: 3, Why: "not scaled: controlled by App web, which sets its replicas; schedule that instead"},
		},
		{
			name: "an invalid schedule is shown with the error",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: "Mon-Fri 8:00-18:00 UTC"}, shown: true,
			want: Status{State: "invalid", Level: 3,
				Why: `not scaled: phalanks.io/uptime: element 1 "Mon-Fri 8:00-18:00 UTC": start "8:00" is not HH:MM with two digits each`},
		},
		{
			name: "a suspended CronJob's downtime says it is suspended",
			kind: cronJobs.traits, now: night, level: 0,
			own:   map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "1", AnnotationNextTransition: "2024-06-06T08:00:00Z"},
			shown: true,
			want: Status{State: "down", Level: 0, Saved: ptr.To[int32](1), Next: nextMorning,
				Why: "downtime (schedule of the object); suspended (spec.suspend: true)"},
		},
		{
			name: "a workload whose autoscaler the operator has yet to lower is pending",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "1"},
			hpas:  []hpaView{{name: "web", minReplicas: 3, maxReplicas: 5}},
			shown: true,
			want: Status{State: "down", Level: 3, Next: nextMorning, Pending: true,
				Why: "downtime (schedule of the object); the operator has yet to lower its autoscaler's minReplicas"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			created := c.created
			if created.IsZero() {
				created = longAgo
			}
			in := inputs{
				now: c.now, kind: c.kind,
				workload: workloadView{level: c.level, annotations: c.own, created: created, controller: c.owner},
				layers:   c.layers, hpas: c.hpas, namespaceExcluded: c.excluded, grace: 15 * time.Minute,
			}
			got, shown := statusOf(types.NamespacedName{Namespace: "team", Name: "web"}, in, decide(in))
			if shown != c.shown {
				t.Fatalf("shown = %v, want %v (%+v)", shown, c.shown, got)
			}
			if !shown {
				return
			}
			want := c.want
			want.Kind, want.Namespace, want.Name = c.kind.name, "team", "web"
			if got.Saved == nil != (want.Saved == nil) || got.Saved != nil && *got.Saved != *want.Saved {
				t.Errorf("saved = %v, want %v", ptr.Deref(got.Saved, -1), ptr.Deref(want.Saved, -1))
			}
			got.Saved, want.Saved = nil, nil
			if !got.Next.Equal(want.Next) || !got.DownSince.Equal(want.DownSince) {
				t.Errorf("next = %s, down since %s; want %s, %s", got.Next, got.DownSince, want.Next, want.DownSince)
			}
			got.Next, want.Next, got.DownSince, want.DownSince = time.Time{}, time.Time{}, time.Time{}, time.Time{}
			if got != want {
				t.Errorf("status\n got %+v\nwant %+v", got, want)
			}
		})
	}
}
