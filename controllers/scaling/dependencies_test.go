package scaling

import (
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/phalanks/phalanks-operator/internal/schedule"
)

func TestWakeAfterReadsKindsAsKubectlNamesThem(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Dependency
		err  string
	}{
		{in: "statefulset/db", want: []Dependency{{"StatefulSet", "db"}}},
		{in: " sts/db , Deploy/cache,deployments/queue ", want: []Dependency{{"StatefulSet", "db"}, {"Deployment", "cache"}, {"Deployment", "queue"}}},
		{in: "db", err: `"db" is not <kind>/<name>`},
		{in: "other-ns/statefulset/db", err: `is not <kind>/<name> of a workload in the same namespace`},
		{in: "daemonset/agent", err: `the kind "daemonset" is not deployment or statefulset`},
		{in: "statefulset/DB", err: `"DB" is not a valid name`},
		{in: "statefulset/db,", err: "has an empty entry"},
		{in: "", err: "has an empty entry"},
		{in: strings.Repeat("sts/db,", MaxWakeAfter) + "sts/db", err: "names 17 workloads (at most 16)"},
	} {
		got, err := WakeAfter(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("WakeAfter(%q) = %v, %v; want the error %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || !reflect.DeepEqual(got, tc.want)):
			t.Errorf("WakeAfter(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestWakeAfterTimeoutIsBounded(t *testing.T) {
	for in, want := range map[string]time.Duration{"5m": 5 * time.Minute, "90": 90 * time.Second, "12h": 12 * time.Hour} {
		if got, err := WakeAfterTimeout(in); err != nil || got != want {
			t.Errorf("WakeAfterTimeout(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "0s", "-1m", "12h1s", "soon"} {
		if got, err := WakeAfterTimeout(in); err == nil {
			t.Errorf("WakeAfterTimeout(%q) = %s; want an error", in, got)
		}
	}
}

func TestAWrongWakeAfterIsAProblemOfTheSchedule(t *testing.T) {
	layers := []layer{{annotations: map[string]string{AnnotationDowntime: "always", AnnotationWakeAfter: "sts/db", AnnotationWakeAfterTimeout: "1d"}}}
	if _, err := resolve(layers, schedule.Defaults{TimeZone: "UTC"}, false, time.Now()); err == nil || !strings.Contains(err.Error(), AnnotationWakeAfterTimeout) {
		t.Fatalf("resolve = %v; want an error about %s", err, AnnotationWakeAfterTimeout)
	}
	// The group is taken whole from the first layer that sets any of it: the object's
	// timeout does not combine with the Namespace's list.
	layers = []layer{
		{annotations: map[string]string{AnnotationDowntime: "always", AnnotationWakeAfterTimeout: "1m"}},
		{source: "namespace a", annotations: map[string]string{AnnotationWakeAfter: "sts/db"}},
	}
	c, err := resolve(layers, schedule.Defaults{TimeZone: "UTC"}, false, time.Now())
	if err != nil || len(c.wakeAfter) != 0 || c.wakeAfterTimeout != time.Minute {
		t.Fatalf("resolve = %v, %v, %s; want no dependencies and a 1m timeout", err, c.wakeAfter, c.wakeAfterTimeout)
	}
	layers[0].annotations = map[string]string{AnnotationDowntime: "always"}
	c, err = resolve(layers, schedule.Defaults{TimeZone: "UTC"}, false, time.Now())
	if err != nil || !reflect.DeepEqual(c.wakeAfter, []Dependency{{"StatefulSet", "db"}}) || c.wakeAfterTimeout != DefaultWakeAfterTimeout {
		t.Fatalf("resolve = %v, %v, %s; want the Namespace's StatefulSet/db and the default timeout", err, c.wakeAfter, c.wakeAfterTimeout)
	}
}

func TestADependencyIsReadyWhenItsReplicasAreAvailable(t *testing.T) {
	deployment := func(gen, observed int64, replicas, available int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen},
			Spec:   appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, AvailableReplicas: available}}
	}
	for _, tc := range []struct {
		obj  *appsv1.Deployment
		want string
	}{
		{deployment(3, 3, 2, 2), ""},
		{deployment(3, 3, 2, 3), ""},
		{deployment(3, 3, 2, 1), "1 of 2 replicas available"},
		// Just restored: its controller has not counted the new replicas yet.
		{deployment(4, 3, 2, 2), "its controller has not acted on its latest change yet"},
		{deployment(3, 3, 0, 0), "it is scaled to 0"},
	} {
		ok, why := dependencyReady(tc.obj)
		if ok != (tc.want == "") || why != tc.want {
			t.Errorf("%+v: ready %v, %q; want %q", tc.obj.Status, ok, why, tc.want)
		}
	}
	sts := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3)}, Status: appsv1.StatefulSetStatus{AvailableReplicas: 2}}
	if ok, why := dependencyReady(sts); ok || why != "2 of 3 replicas available" {
		t.Errorf("StatefulSet: ready %v, %q", ok, why)
	}
	sts.Status.AvailableReplicas = 3
	if ok, why := dependencyReady(sts); !ok {
		t.Errorf("StatefulSet: not ready: %s", why)
	}
}

func TestTheWaitingRestoresAreKeptUntilWrittenOrCalledOff(t *testing.T) {
	ds := newDependencies()
	db := dependencyKey{kind: "StatefulSet", namespace: "a", name: "db"}
	cache := dependencyKey{kind: "Deployment", namespace: "a", name: "cache"}
	web := waiterKey{kind: "Deployment", obj: types.NamespacedName{Namespace: "a", Name: "web"}}
	job := waiterKey{kind: "CronJob", obj: types.NamespacedName{Namespace: "a", Name: "report"}}
	t0 := time.Date(2026, 11, 30, 7, 30, 0, 0, time.UTC)

	if since, first := ds.hold(web, []dependencyKey{db, cache}, t0); !since.Equal(t0) || !first {
		t.Fatalf("first hold: %s, %v", since, first)
	}
	ds.hold(job, []dependencyKey{db}, t0.Add(time.Second))
	// Asked again later, it keeps the time its wait began, whatever it waits for now.
	if since, first := ds.hold(web, []dependencyKey{db}, t0.Add(time.Minute)); !since.Equal(t0) || first {
		t.Fatalf("second hold: %s, %v", since, first)
	}
	if ds.wanted(cache) {
		t.Error("cache is still wanted after web stopped naming it")
	}
	if !ds.wanted(db) {
		t.Error("db is not wanted")
	}
	if got := ds.waitersOf("Deployment", db); !reflect.DeepEqual(got, []reconcile.Request{{NamespacedName: web.obj}}) {
		t.Errorf("the Deployments that wait for db: %v", got)
	}
	if got := ds.waitersOf("CronJob", db); len(got) != 1 || got[0].NamespacedName != job.obj {
		t.Errorf("the CronJobs that wait for db: %v", got)
	}

	timedOut := []eventSpec{{warning: true, reason: ReasonDependencyTimeout}}
	ds.pass(web, timedOut)
	if events, ok := ds.passed(web); !ok || !reflect.DeepEqual(events, timedOut) {
		t.Errorf("passed(web) = %v, %v", events, ok)
	}
	if got := ds.waitersOf("Deployment", db); len(got) != 0 {
		t.Errorf("a restore that waits no more is still woken by db: %v", got)
	}
	ds.release(job)
	if ds.wanted(db) {
		t.Error("db is wanted after every restore that waited for it ended")
	}
	ds.release(web)
	if _, ok := ds.passed(web); ok || len(ds.waiting) != 0 || len(ds.byDependency) != 0 {
		t.Errorf("left behind: %v, %v", ds.waiting, ds.byDependency)
	}
}

func TestADependencyGoesBeforeEveryPriority(t *testing.T) {
	if restoreRank(-MaxRestorePriority, true) <= restoreRank(MaxRestorePriority, false) {
		t.Error("a wanted restore of the lowest priority does not go before an unwanted one of the highest")
	}
	if restoreRank(5, true) <= restoreRank(4, true) || restoreRank(7, false) != 7 {
		t.Error("priorities do not order the wanted restores among themselves, or change the others")
	}
}

// Only a scheduled restore waits for what wake-after names: one that an exclusion asks
// for (kubectl phalanks wake writes exclude-until) means now.
func TestOnlyAScheduledRestoreWaitsForItsDependencies(t *testing.T) {
	at := mustTime("2024-06-06T08:00:00Z")
	wl := map[string]string{AnnotationWakeAfter: "sts/db", AnnotationWakeAfterTimeout: "3m"}
	if d := decide(scaledDownOvernight(at, wl, nil)); d.state != stateUp || len(d.wakeAfter) != 1 || d.wakeAfterTimeout != 3*time.Minute {
		t.Errorf("at the uptime: state %q, wake-after %v for %s; want restored after StatefulSet/db, at most 3m", d.state, d.wakeAfter, d.wakeAfterTimeout)
	}
	wl[AnnotationExcludeUntil] = "2024-06-06T01:00:00Z" // woken at night, until one
	d := decide(scaledDownOvernight(mustTime("2024-06-06T00:30:00Z"), wl, nil))
	if d.state != stateExcluded || d.workload == nil || len(d.wakeAfter) != 0 {
		t.Errorf("woken by an exclusion: state %q, write %+v, wake-after %v; want restored at once", d.state, fmtWrite(d.workload), d.wakeAfter)
	}
}
