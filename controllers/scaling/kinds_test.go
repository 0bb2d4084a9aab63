package scaling

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/internal/schedule"
)

// noCalendars knows no holiday calendar.
type noCalendars struct{}

func (noCalendars) Calendar(name string) (*schedule.Schedule, error) {
	return nil, errors.New("unknown holiday calendar " + name)
}

// TestDecideForEveryKind covers what differs between kinds and the policy around the
// shared decision: kinds that stop rather than count, floors, schedules taken from
// elsewhere, autoscalers the operator may not write, and the flags' exclusions.
func TestDecideForEveryKind(t *testing.T) {
	const work = "Mon-Fri 08:00-18:00 UTC"
	night := mustTime("2024-06-05T20:00:00Z")
	day := mustTime("2024-06-05T10:00:00Z")
	nextMorning := mustTime("2024-06-06T08:00:00Z")
	keda := &metav1.OwnerReference{APIVersion: "keda.sh/v1alpha1", Kind: "ScaledObject", Name: "web", Controller: ptr.To(true)}
	other := &metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Autoscaler", Name: "web", Controller: ptr.To(true)}
	cases := []struct {
		name        string
		kind        traits
		now         time.Time
		level       int32
		maxReplicas int32
		created     time.Time
		own         map[string]string
		layers      []layer
		hpas        []hpaView
		delegate    string
		excluded    bool
		priority    string
		// want
		state     state
		write     *workloadWrite
		hpaMin    int32 // the minReplicas written to the autoscaler; 0 for none
		paused    int32
		reasons   string
		note      string
		requeueAt time.Time
		dryRun    bool
	}{
		{
			name: "a running CronJob is suspended for the downtime, whatever downtime-replicas says",
			kind: cronJobs.traits, now: night, level: 1, own: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "3"},
			state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](1), next: nextMorning},
			reasons: ReasonScaleDown, note: "suspended (spec.suspend: true) for the downtime until 2024-06-06T08:00:00Z", requeueAt: nextMorning,
		},
		{
			name: "a CronJob the user suspended is left as it is: nothing to restore",
			kind: cronJobs.traits, now: night, level: 0, own: map[string]string{AnnotationUptime: work},
			state: stateDown, requeueAt: nextMorning,
		},
		{
			name: "a suspended CronJob runs again at the uptime",
			kind: cronJobs.traits, now: day, level: 0, own: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "1"},
			state: stateUp, write: &workloadWrite{level: 1, next: mustTime("2024-06-05T18:00:00Z")},
			reasons: ReasonScaleUp, note: "not suspended (spec.suspend: false) again", requeueAt: mustTime("2024-06-05T18:00:00Z"),
		},
		{
			name: "a DaemonSet unsuspended by hand during its downtime is kept so until the transition",
			kind: daemonSets.traits, now: night, level: 1,
			own:   map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "1", AnnotationNextTransition: "2024-06-06T08:00:00Z"},
			state: stateOverride, reasons: ReasonManualOverride, note: "on its nodes", requeueAt: nextMorning,
		},
		{
			name: "an HPA's minReplicas stops at 1",
			kind: horizontalPodAutoscalers.traits, now: night, level: 4, own: map[string]string{AnnotationUptime: work},
			state: stateDown, write: &workloadWrite{level: 1, original: ptr.To[int32](4), next: nextMorning}, reasons: ReasonScaleDown, requeueAt: nextMorning,
		},
		{
			name: "an HPA's saved minReplicas comes back at the uptime",
			kind: horizontalPodAutoscalers.traits, now: day, level: 1, maxReplicas: 5, own: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "4"},
			state: stateUp, write: &workloadWrite{level: 4, next: mustTime("2024-06-05T18:00:00Z")}, reasons: ReasonScaleUp,
			note: "restored minReplicas from 1 to 4: uptime", requeueAt: mustTime("2024-06-05T18:00:00Z"),
		},
		{
			name: "an HPA's saved minReplicas comes back capped at a maxReplicas lowered during the downtime, and the event says so",
			kind: horizontalPodAutoscalers.traits, now: day, level: 1, maxReplicas: 2, own: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "4"},
			state: stateUp, write: &workloadWrite{level: 2, next: mustTime("2024-06-05T18:00:00Z")}, reasons: ReasonScaleUp,
			note: "restored minReplicas from 1 to 2 (the saved 4, capped at maxReplicas 2): uptime", requeueAt: mustTime("2024-06-05T18:00:00Z"),
		},
		{
			name: "an HPA's uptime-replicas is capped at its maxReplicas too",
			kind: horizontalPodAutoscalers.traits, now: day, level: 1, maxReplicas: 5,
			own:   map[string]string{AnnotationUptime: work, AnnotationUptimeReplicas: "8", AnnotationOriginalReplicas: "4"},
			state: stateUp, write: &workloadWrite{level: 5, next: mustTime("2024-06-05T18:00:00Z")}, reasons: ReasonScaleUp,
			note: "restored minReplicas from 1 to 5", requeueAt: mustTime("2024-06-05T18:00:00Z"),
		},
		{
			name: "an HPA without a schedule of its own is left to the workload it targets",
			kind: horizontalPodAutoscalers.traits, now: night, level: 4, layers: []layer{{source: "namespace a", annotations: map[string]string{AnnotationUptime: work}}},
			state: stateUnmanaged,
		},
		{
			name: "a ScaledObject takes the schedule of the workload it scales, and pauses at its downtime count",
			kind: scaledObjectKind(nil).traits, now: night, level: 1,
			layers: []layer{{source: "Deployment web", annotations: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "2"}}},
			state:  stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](1), next: nextMorning}, paused: 2,
			reasons: ReasonScaleDown, requeueAt: nextMorning,
		},
		{
			name: "a workload a ScaledObject scales is left to it, and what was saved is restored",
			kind: deployments.traits, now: night, level: 0, own: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "3"}, delegate: "web",
			state: stateDelegated, write: &workloadWrite{level: 3}, reasons: ReasonScaledThroughAutoscaler + "," + ReasonScaleUp,
		},
		{
			name: "an HPA that KEDA controls blocks the workload, whatever the count",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: work},
			hpas:  []hpaView{{name: "keda-hpa-web", minReplicas: 2, controller: keda}},
			state: stateBlocked, reasons: ReasonAutoscalerNotWritable, note: "enable scaledobjects.keda.sh",
		},
		{
			name: "an HPA another controller owns blocks a non-zero downtime count",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "1"},
			hpas:  []hpaView{{name: "web", minReplicas: 2, controller: other}},
			state: stateBlocked, reasons: ReasonAutoscalerNotWritable, note: "is controlled by Autoscaler web",
		},
		{
			name: "an HPA another controller owns still lets a zero downtime count scale the workload",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: work},
			hpas:  []hpaView{{name: "web", minReplicas: 2, controller: other}},
			state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: nextMorning}, reasons: ReasonScaleDown, requeueAt: nextMorning,
		},
		{
			name: "an HPA with its own schedule blocks a non-zero downtime count",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "1"},
			hpas:  []hpaView{{name: "web", minReplicas: 2, scheduled: true}},
			state: stateBlocked, reasons: ReasonAutoscalerNotWritable, note: "has a schedule of its own",
		},
		{
			name: "an excluded namespace restores what was saved",
			kind: deployments.traits, now: night, level: 0, own: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "3"}, excluded: true,
			state: stateExcluded, write: &workloadWrite{level: 3}, reasons: ReasonScaleUp, note: "its namespace is excluded",
		},
		{
			name: "an excluded namespace gives an autoscaler the operator lowered its minReplicas back",
			kind: deployments.traits, now: night, level: 4, own: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "1"}, excluded: true,
			hpas:  []hpaView{{name: "web", minReplicas: 1, maxReplicas: 10, annotations: map[string]string{AnnotationOriginalMinReplicas: "3"}}},
			state: stateExcluded, hpaMin: 3, reasons: ReasonScaleUp, note: "restored minReplicas 3 of HorizontalPodAutoscaler web: its namespace is excluded",
		},
		{
			name: "a workload whose pods run at system-node-critical is never scaled down, whatever its annotations say",
			kind: daemonSets.traits, now: night, level: 1, own: map[string]string{AnnotationUptime: work, AnnotationForceDowntime: "true"}, priority: "system-node-critical",
			state: stateExcluded, reasons: ReasonSystemCritical, note: "never scaled: its pods run at priority class system-node-critical",
		},
		{
			name: "a system-cluster-critical workload scaled down before is restored",
			kind: deployments.traits, now: night, level: 0, own: map[string]string{AnnotationUptime: work, AnnotationOriginalReplicas: "2"}, priority: "system-cluster-critical",
			state: stateExcluded, write: &workloadWrite{level: 2}, reasons: ReasonSystemCritical + "," + ReasonScaleUp,
		},
		{
			name: "another priority class is scaled as usual",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: work}, priority: "high-priority",
			state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: nextMorning}, reasons: ReasonScaleDown, requeueAt: nextMorning,
		},
		{
			name: "a schedule that cannot be read any more restores what was scaled down, with the warning",
			kind: deployments.traits, now: night, level: 0,
			own:   map[string]string{AnnotationUptime: work, AnnotationDowntime: "holidays:gone", AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-06T08:00:00Z"},
			state: stateInvalid, write: &workloadWrite{level: 3}, reasons: ReasonInvalidSchedule + "," + ReasonScaleUp, note: `element 1 "holidays:gone"`,
		},
		{
			name: "a schedule that cannot be read gives a lowered autoscaler its minReplicas back",
			kind: deployments.traits, now: night, level: 4, own: map[string]string{AnnotationUptime: "Mon-Fry 08:00-18:00 UTC", AnnotationDowntimeReplicas: "1"},
			hpas:  []hpaView{{name: "web", minReplicas: 1, maxReplicas: 10, annotations: map[string]string{AnnotationOriginalMinReplicas: "3"}}},
			state: stateInvalid, hpaMin: 3, reasons: ReasonInvalidSchedule + "," + ReasonScaleUp,
		},
		{
			name: "a schedule that cannot be read never scales down",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: work, AnnotationDowntime: "holidays:gone"},
			state: stateInvalid, reasons: ReasonInvalidSchedule,
		},
		{
			name: "schedules that see more than a thousand elements together are rejected",
			kind: deployments.traits, now: night, level: 3,
			own:   map[string]string{AnnotationUptime: strings.Repeat("Mon 08:00-09:00 UTC, ", 600) + work, AnnotationDowntime: strings.Repeat("never, ", 500) + "never"},
			state: stateInvalid, reasons: ReasonInvalidSchedule, note: "its schedules have 1102 elements together, those of the holiday calendars they name included (at most 1000 per object)",
		},
		{
			name: "force-downtime true scales down in working hours, with no end",
			kind: deployments.traits, now: day, level: 3, own: map[string]string{AnnotationUptime: work, AnnotationForceDowntime: "true"},
			state: stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3)}, reasons: ReasonScaleDown, note: "(no end scheduled)",
		},
		{
			name: "force-uptime wins over force-downtime",
			kind: deployments.traits, now: night, level: 3,
			own:    map[string]string{AnnotationUptime: work, AnnotationForceUptime: "true"},
			layers: []layer{{source: "namespace a", annotations: map[string]string{AnnotationForceDowntime: "true"}}},
			state:  stateUp,
		},
		{
			name: "a namespace's force-downtime applies to its workloads",
			kind: deployments.traits, now: day, level: 3, own: map[string]string{AnnotationUptime: work},
			layers: []layer{{source: "namespace a", annotations: map[string]string{AnnotationForceDowntime: "Wed 09:00-12:00 UTC"}}},
			state:  stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: mustTime("2024-06-05T12:00:00Z")},
			reasons: ReasonScaleDown, requeueAt: mustTime("2024-06-05T12:00:00Z"),
		},
		{
			name: "a workload's grace-period replaces the operator's",
			kind: deployments.traits, now: night, level: 3, created: night.Add(-30 * time.Minute),
			own:   map[string]string{AnnotationUptime: work, AnnotationGracePeriod: "1h"},
			state: stateGrace, reasons: ReasonGracePeriod, requeueAt: night.Add(30 * time.Minute),
		},
		{
			name: "a malformed grace-period is invalid",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: work, AnnotationGracePeriod: "soon"},
			state: stateInvalid, reasons: ReasonInvalidSchedule, note: "grace-period",
		},
		{
			name: "dry-run on the namespace decides but marks the decision unwritten",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationUptime: work},
			layers: []layer{{source: "namespace a", annotations: map[string]string{AnnotationDryRun: "true"}}},
			state:  stateDown, write: &workloadWrite{level: 0, original: ptr.To[int32](3), next: nextMorning}, reasons: ReasonScaleDown, requeueAt: nextMorning, dryRun: true,
		},
		{
			name: "the operator's defaults schedule a workload that neither it nor its namespace schedules",
			kind: statefulSets.traits, now: night, level: 2,
			layers: []layer{{source: "namespace a"}, {source: "the operator's defaults", annotations: map[string]string{AnnotationUptime: work, AnnotationDowntimeReplicas: "1"}}},
			state:  stateDown, write: &workloadWrite{level: 1, original: ptr.To[int32](2), next: nextMorning}, reasons: ReasonScaleDown, requeueAt: nextMorning,
		},
		{
			name: "a schedule the peers read differently is followed with their meaning and a warning",
			kind: deployments.traits, now: night, level: 3, own: map[string]string{AnnotationDowntime: "Mon-Sun 19:00-19:00 UTC"},
			state: stateUp, reasons: ReasonScheduleReadAsPeers, note: "never matches",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			created := c.created
			if created.IsZero() {
				created = mustTime("2024-01-01T00:00:00Z")
			}
			d := decide(inputs{
				now: c.now, kind: c.kind,
				workload: workloadView{level: c.level, maxReplicas: c.maxReplicas, annotations: c.own, created: created, priorityClass: c.priority},
				layers:   c.layers, hpas: c.hpas, delegate: c.delegate, namespaceExcluded: c.excluded,
				grace: 15 * time.Minute, defaults: schedule.Defaults{Calendars: noCalendars{}},
			})
			if d.state != c.state {
				t.Errorf("state = %q, want %q", d.state, c.state)
			}
			if !sameWorkloadWrite(d.workload, c.write) {
				t.Errorf("write = %+v, want %+v", fmtWrite(d.workload), fmtWrite(c.write))
			}
			var hpaMin int32
			if d.hpa != nil {
				hpaMin = d.hpa.minReplicas
			}
			if hpaMin != c.hpaMin {
				t.Errorf("autoscaler write %+v, want minReplicas %d", d.hpa, c.hpaMin)
			}
			if c.paused != 0 && d.workload != nil && d.workload.pausedReplicas != c.paused {
				t.Errorf("paused replicas = %d, want %d", d.workload.pausedReplicas, c.paused)
			}
			var reasons []string
			for _, e := range d.events {
				reasons = append(reasons, e.reason)
			}
			if strings.Join(reasons, ",") != c.reasons {
				t.Errorf("event reasons = %v, want %s", reasons, c.reasons)
			}
			if c.note != "" && (len(d.events) == 0 || !strings.Contains(d.events[0].note, c.note)) {
				t.Errorf("events %+v do not say %q", d.events, c.note)
			}
			if !d.requeueAt.Equal(c.requeueAt) {
				t.Errorf("requeue at %s, want %s", d.requeueAt, c.requeueAt)
			}
			if d.dryRun != c.dryRun {
				t.Errorf("dry run = %v, want %v", d.dryRun, c.dryRun)
			}
		})
	}
}

func TestDecidePDB(t *testing.T) {
	two, half := intstr.FromInt32(2), intstr.FromString("50%")
	down := func(name string) coveredWorkload {
		return coveredWorkload{kind: "Deployment", name: name, uid: types.UID(name + "-uid"), level: 1, annotations: map[string]string{
			AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-06T08:00:00Z"}}
	}
	up := coveredWorkload{kind: "Deployment", name: "api", uid: "api-uid", level: 3}
	// The forged decoy: no pods, replicas 0, original-replicas 1, and the database's labels.
	decoy := coveredWorkload{kind: "Deployment", name: "decoy", uid: "decoy-uid", level: 0, annotations: map[string]string{
		AnnotationOriginalReplicas: "1", AnnotationForceDowntime: "true"}}
	podOf := func(name string, owner podOwner) selectedPod { return selectedPod{name: name, owner: owner} }
	webPod := podOf("web-1", podOwner{kind: "Deployment", name: "web", uid: "web-uid"})
	dbPod := podOf("db-0", podOwner{kind: "StatefulSet", name: "db", uid: "db-uid"})
	relaxedMin := map[string]string{AnnotationOriginalMinAvailable: "2", AnnotationNextTransition: "2024-06-06T08:00:00Z"}
	cases := []struct {
		name    string
		in      pdbInputs
		state   state
		min     *intstr.IntOrString
		max     *intstr.IntOrString
		saved   map[string]string
		next    string
		reasons string
	}{
		{"relaxes minAvailable while its workload is scaled down", pdbInputs{pdb: pdbView{minAvailable: &two}, covered: []coveredWorkload{down("web")}},
			stateDown, &relaxedMinAvailable, nil, map[string]string{AnnotationOriginalMinAvailable: "2"}, "2024-06-06T08:00:00Z", ReasonScaleDown},
		{"relaxes maxUnavailable, percentages included", pdbInputs{pdb: pdbView{maxUnavailable: &half}, covered: []coveredWorkload{down("web")}},
			stateDown, nil, &relaxedMaxUnavailable, map[string]string{AnnotationOriginalMaxUnavailable: "50%"}, "2024-06-06T08:00:00Z", ReasonScaleDown},
		{"is not relaxed while one of its workloads runs, and says so", pdbInputs{pdb: pdbView{minAvailable: &two}, covered: []coveredWorkload{down("web"), up}},
			stateUp, nil, nil, nil, "", ReasonBudgetKept},
		{"is left alone, silently, while none of its workloads is scaled down", pdbInputs{pdb: pdbView{minAvailable: &two}, covered: []coveredWorkload{up},
			pods: []selectedPod{podOf("api-1", podOwner{kind: "Deployment", name: "api", uid: "api-uid"})}},
			stateUp, nil, nil, nil, "", ""},
		{"selecting no workload, it is none of the operator's business", pdbInputs{pdb: pdbView{minAvailable: &two}},
			stateUnmanaged, nil, nil, nil, "", ""},
		{"is restored exactly when its workload comes back", pdbInputs{pdb: pdbView{minAvailable: &relaxedMinAvailable, annotations: relaxedMin}, covered: []coveredWorkload{up}},
			stateUp, &two, nil, nil, "", ReasonScaleUp},
		{"is restored when excluded", pdbInputs{pdb: pdbView{minAvailable: &relaxedMinAvailable, annotations: relaxedMin}, covered: []coveredWorkload{down("web")}, excluded: true},
			stateUp, &two, nil, nil, "", ReasonScaleUp},
		{"stays relaxed, silently, while nothing changes", pdbInputs{pdb: pdbView{minAvailable: &relaxedMinAvailable, annotations: relaxedMin}, covered: []coveredWorkload{down("web")}},
			stateDown, nil, nil, nil, "", ""},
		{"is relaxed while the pods it selects belong to its scaled-down workload",
			pdbInputs{pdb: pdbView{minAvailable: &two}, covered: []coveredWorkload{down("web")}, pods: []selectedPod{webPod}},
			stateDown, &relaxedMinAvailable, nil, map[string]string{AnnotationOriginalMinAvailable: "2"}, "2024-06-06T08:00:00Z", ReasonScaleDown},
		{"a decoy with forged annotations and another workload's labels cannot relax a budget that protects that workload's pods",
			pdbInputs{pdb: pdbView{minAvailable: &two}, covered: []coveredWorkload{decoy}, pods: []selectedPod{dbPod}},
			stateUp, nil, nil, nil, "", ReasonBudgetKept},
		{"pods of a bare ReplicaSet, a Rollout or an operator keep it",
			pdbInputs{pdb: pdbView{minAvailable: &two}, covered: []coveredWorkload{down("web")}, pods: []selectedPod{webPod,
				podOf("a", podOwner{kind: "ReplicaSet", name: "db", uid: "rs"}), podOf("b", podOwner{kind: "Rollout.argoproj.io", name: "db"}),
				podOf("c", podOwner{kind: "Cluster.postgresql.cnpg.io", name: "db"}), podOf("d", podOwner{})}},
			stateUp, nil, nil, nil, "", ReasonBudgetKept},
		{"a pod whose controller has the workload's name but another UID is someone else's",
			pdbInputs{pdb: pdbView{minAvailable: &two}, covered: []coveredWorkload{down("web")},
				pods: []selectedPod{podOf("web-1", podOwner{kind: "Deployment", name: "web", uid: "older"})}},
			stateUp, nil, nil, nil, "", ReasonBudgetKept},
		{"a relaxed budget is restored as soon as it selects a pod of something else",
			pdbInputs{pdb: pdbView{minAvailable: &relaxedMinAvailable, annotations: relaxedMin}, covered: []coveredWorkload{down("web")}, pods: []selectedPod{webPod, dbPod}},
			stateUp, &two, nil, nil, "", ReasonScaleUp},
		{"is never written when another controller owns it", pdbInputs{pdb: pdbView{minAvailable: &two, controller: &metav1.OwnerReference{Kind: "Operator", Name: "db"}}, covered: []coveredWorkload{down("web")}},
			stateOwned, nil, nil, nil, "", ReasonControlledByOwner},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, w, events := decidePDB(c.in)
			if st != c.state {
				t.Errorf("state = %q, want %q", st, c.state)
			}
			var reasons []string
			for _, e := range events {
				reasons = append(reasons, e.reason)
			}
			if strings.Join(reasons, ",") != c.reasons {
				t.Errorf("reasons %v, want %q", reasons, c.reasons)
			}
			if (w == nil) != (c.min == nil && c.max == nil) {
				t.Fatalf("write %+v, want minAvailable %v maxUnavailable %v", w, c.min, c.max)
			}
			if w == nil {
				return
			}
			if !ptr.Equal(w.minAvailable, c.min) || !ptr.Equal(w.maxUnavailable, c.max) {
				t.Errorf("write minAvailable %v maxUnavailable %v, want %v %v", w.minAvailable, w.maxUnavailable, c.min, c.max)
			}
			a := w.annotationsFor()
			for k, v := range c.saved {
				if a[k] != v {
					t.Errorf("annotation %s = %q, want %q", k, a[k], v)
				}
			}
			if a[AnnotationNextTransition] != c.next {
				t.Errorf("next-transition %q, want %q", a[AnnotationNextTransition], c.next)
			}
		})
	}
}

func TestADaemonSetGetsItsSelectorAsItIsNowWithoutTheOperatorsKey(t *testing.T) {
	key := NodeSelectorScaledDown
	cases := []struct {
		name           string
		current, saved map[string]string
		down           bool
		want           map[string]string
	}{
		{"a downtime adds the key to the selector as it is", map[string]string{"disk": "ssd"}, nil, true,
			map[string]string{"disk": "ssd", key: "true"}},
		{"a downtime of a DaemonSet with no selector gives it one of the key alone", nil, nil, true, map[string]string{key: "true"}},
		{"the restore removes the key, nothing else", map[string]string{"disk": "ssd", key: "true"}, map[string]string{"disk": "ssd"}, false,
			map[string]string{"disk": "ssd"}},
		{"a change made during the downtime survives the restore", map[string]string{"disk": "nvme", key: "true"}, map[string]string{"disk": "ssd"}, false,
			map[string]string{"disk": "nvme"}},
		{"a key added during the downtime survives, one removed stays removed", map[string]string{"zone": "a", key: "true"},
			map[string]string{"disk": "ssd"}, false, map[string]string{"zone": "a"}},
		{"a DaemonSet that had no selector gets none back", map[string]string{key: "true"}, map[string]string{}, false, nil},
		{"a key of the same name the DaemonSet had itself comes back with its value", map[string]string{"disk": "ssd", key: "true"},
			map[string]string{"disk": "ssd", key: "no"}, false, map[string]string{"disk": "ssd", key: "no"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := nodeSelectorFor(c.current, c.saved, c.down); !maps.Equal(got, c.want) || (got == nil) != (c.want == nil) {
				t.Errorf("nodeSelectorFor = %v, want %v", got, c.want)
			}
		})
	}
}

// TestABudgetSwitchedToTheOtherFieldDuringTheDowntimeKeepsTheSwitch: the API server
// takes minAvailable or maxUnavailable, never both. A budget that someone switched from
// the field the operator relaxed to the other one is the user's: its restore, and a
// refresh of its record, write neither field (the restore used to apply the saved field
// next to the new one, which the API server refused at every retry).
func TestABudgetSwitchedToTheOtherFieldDuringTheDowntimeKeepsTheSwitch(t *testing.T) {
	one, three := intstr.FromInt32(1), intstr.FromInt32(3)
	back := coveredWorkload{kind: "Deployment", name: "web", uid: "web-uid", level: 3}
	down := coveredWorkload{kind: "Deployment", name: "web", uid: "web-uid", level: 0, annotations: map[string]string{
		AnnotationOriginalReplicas: "3", AnnotationNextTransition: "2024-06-07T08:00:00Z"}}
	cases := []struct {
		name    string
		in      pdbInputs
		state   state
		keeps   map[string]string
		note    string
		reasons string
	}{
		{"relaxed minAvailable, switched to maxUnavailable, is restored without minAvailable",
			pdbInputs{pdb: pdbView{maxUnavailable: &one, annotations: map[string]string{AnnotationOriginalMinAvailable: "2", AnnotationNextTransition: "2024-06-06T08:00:00Z"}},
				covered: []coveredWorkload{back}},
			stateUp, nil, "kept maxUnavailable 1, to which it was switched during the downtime (minAvailable 2 is not restored)", ReasonScaleUp},
		{"relaxed maxUnavailable, switched to minAvailable, is restored without maxUnavailable",
			pdbInputs{pdb: pdbView{minAvailable: &three, annotations: map[string]string{AnnotationOriginalMaxUnavailable: "50%", AnnotationNextTransition: "2024-06-06T08:00:00Z"}},
				covered: []coveredWorkload{back}},
			stateUp, nil, "kept minAvailable 3", ReasonScaleUp},
		{"a switched budget whose workloads' schedule changed keeps its record, and the new field stays the user's",
			pdbInputs{pdb: pdbView{maxUnavailable: &one, annotations: map[string]string{AnnotationOriginalMinAvailable: "2", AnnotationNextTransition: "2024-06-06T08:00:00Z"}},
				covered: []coveredWorkload{down}},
			stateDown, map[string]string{AnnotationOriginalMinAvailable: "2", AnnotationNextTransition: "2024-06-07T08:00:00Z"}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, w, events := decidePDB(c.in)
			if st != c.state {
				t.Errorf("state = %q, want %q", st, c.state)
			}
			if w == nil {
				t.Fatal("no write")
			}
			if w.minAvailable != nil || w.maxUnavailable != nil {
				t.Errorf("writes minAvailable %v, maxUnavailable %v; want neither", w.minAvailable, w.maxUnavailable)
			}
			if a := w.annotationsFor(); !maps.Equal(a, c.keeps) && (len(a) > 0 || len(c.keeps) > 0) {
				t.Errorf("annotations %v, want %v", a, c.keeps)
			}
			var reasons []string
			for _, e := range events {
				reasons = append(reasons, e.reason)
				if c.note != "" && !strings.Contains(e.note, c.note) {
					t.Errorf("note %q does not say %q", e.note, c.note)
				}
			}
			if strings.Join(reasons, ",") != c.reasons {
				t.Errorf("reasons %v, want %q", reasons, c.reasons)
			}
		})
	}
}

// The scaling cache's slim Deployments and StatefulSets keep what decisions read: the
// pod requests the savings record (as one string, not a ResourceList) and whether they
// are Ready (for wake-after), and no containers.
func TestSlimWorkloadsKeepTheirRequestsAndReadiness(t *testing.T) {
	template := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "app", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}},
		{Name: "proxy", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("150m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}},
	}}}
	whole := []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 2}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Template: template},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 2, AvailableReplicas: 2, ReadyReplicas: 2, Replicas: 2}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Generation: 2}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), Template: template},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, AvailableReplicas: 2, ReadyReplicas: 2, Replicas: 2}},
	}
	for i, k := range []*kind{deployments, statefulSets} {
		out, err := k.transform(whole[i])
		if err != nil {
			t.Fatal(err)
		}
		slim := out.(client.Object)
		if got, want := templateRequests(slim), templateRequests(whole[i]); got != want || want != "cpu=250m,memory=256Mi" {
			t.Errorf("%s: the slim copy requests %q, the object %q; want cpu=250m,memory=256Mi", k.name, got, want)
		}
		if ready, why := dependencyReady(slim); !ready {
			t.Errorf("%s: the slim copy is not Ready: %s", k.name, why)
		}
	}
	if d := must(deployments.transform(whole[0])).(*appsv1.Deployment); len(d.Spec.Template.Spec.Containers) != 0 {
		t.Errorf("the slim Deployment keeps %d containers", len(d.Spec.Template.Spec.Containers))
	}
}

func must(v any, err error) any {
	if err != nil {
		panic(err)
	}
	return v
}
