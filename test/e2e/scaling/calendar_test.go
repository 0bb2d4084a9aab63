package scaling_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

// calendar creates (or with an existing one, updates) a holiday calendar.
func calendar(t *testing.T, ns, name string, data map[string]string, labelled bool) *corev1.ConfigMap {
	t.Helper()
	g := NewWithT(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	if labelled {
		cm.Labels = map[string]string{scaling.LabelHolidayCalendar: "true"}
	}
	g.Expect(admin.Create(context.Background(), cm)).To(Succeed())
	return cm
}

// rangeAround is an absolute range from a minute ago for an hour; rangeLater one that
// starts in a day.
func rangeAround() string {
	start := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	return start.Format(time.RFC3339) + "-" + start.Add(time.Hour).Format(time.RFC3339)
}

func rangeLater() string {
	start := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	return start.Format(time.RFC3339) + "-" + start.Add(time.Hour).Format(time.RFC3339)
}

// TestAHolidayCalendarIsSharedAndAChangeRedecidesEveryWorkloadThatUsesIt names a
// calendar in two namespaces' workloads before it exists (an InvalidSchedule warning
// names it), creates it in the operator's namespace with a holiday now (both scale
// down at once), moves the holiday (both come back), breaks it (the warning names the
// calendar and the entry), and shadows it in one namespace.
func TestAHolidayCalendarIsSharedAndAChangeRedecidesEveryWorkloadThatUsesIt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ops := newNamespace(t, nil)
	teamA, teamB := newNamespace(t, nil), newNamespace(t, nil)
	startOperator(t, scaling.Options{CalendarNamespace: ops})
	holidays := map[string]string{scaling.AnnotationDowntime: "holidays:company"}
	webA := newDeployment(t, teamA, "web", 2, holidays)
	webB := newDeployment(t, teamB, "web", 3, holidays)
	replicas := func(d *appsv1.Deployment) func(Gomega) int32 {
		return func(g Gomega) int32 { return ptr.Deref(live(d)(g).Spec.Replicas, -1) }
	}

	for _, w := range []*appsv1.Deployment{webA, webB} {
		g.Eventually(notes(w, scaling.ReasonInvalidSchedule)).WithTimeout(timeout).Should(ContainElement(ContainSubstring(
			`phalanks.io/downtime: element 1 "holidays:company": unknown holiday calendar "company": no ConfigMap "company" labelled ` +
				scaling.LabelHolidayCalendar + `=true in namespace ` + w.Namespace + ` or ` + ops)))
	}
	// An unlabelled ConfigMap of that name is no calendar.
	calendar(t, teamA, "company", map[string]string{"today": rangeAround()}, false)

	cal := calendar(t, ops, "company", map[string]string{"today": rangeAround()}, true)
	g.Eventually(replicas(webA)).WithTimeout(timeout).Should(BeEquivalentTo(0))
	g.Eventually(replicas(webB)).WithTimeout(timeout).Should(BeEquivalentTo(0))

	update := func(data map[string]string) {
		g.Eventually(func(g Gomega) error {
			cm := live(cal)(g)
			cm.Data = data
			return admin.Update(ctx, cm)
		}).WithTimeout(timeout).Should(Succeed())
	}
	update(map[string]string{"tomorrow": rangeLater()})
	g.Eventually(replicas(webA)).WithTimeout(timeout).Should(BeEquivalentTo(2))
	g.Eventually(replicas(webB)).WithTimeout(timeout).Should(BeEquivalentTo(3))

	update(map[string]string{"typo": "2026-12-31 until new year"})
	g.Eventually(notes(webB, scaling.ReasonInvalidSchedule)).WithTimeout(timeout).Should(ContainElement(ContainSubstring(
		`holiday calendar "company" is invalid: "typo": element 1`)))

	// A calendar in the workload's own namespace shadows the shared one.
	calendar(t, teamB, "company", nil, true)
	update(map[string]string{"today": rangeAround()})
	g.Eventually(replicas(webA)).WithTimeout(timeout).Should(BeEquivalentTo(0), "team A uses the shared calendar")
	g.Consistently(replicas(webB)).WithTimeout(5*time.Second).WithPolling(time.Second).Should(BeEquivalentTo(3),
		"team B's own, empty, calendar shadows it")
}
