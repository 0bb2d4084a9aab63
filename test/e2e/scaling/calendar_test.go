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
	g := expect(t)
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
// down at once), moves the holiday (both come back), breaks it and deletes it during a
// holiday (both come back, with the warning: a schedule that cannot be read counts as
// none), and has a tenant's calendar of the same name shadow it only once the
// Namespace says so.
func TestAHolidayCalendarIsSharedAndAChangeRedecidesEveryWorkloadThatUsesIt(t *testing.T) {
	g := expect(t)
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
	both := func(a, b int32, why string) {
		t.Helper()
		g.Eventually(replicas(webA)).WithTimeout(timeout).Should(BeEquivalentTo(a), why)
		g.Eventually(replicas(webB)).WithTimeout(timeout).Should(BeEquivalentTo(b), why)
	}

	for _, w := range []*appsv1.Deployment{webA, webB} {
		g.Eventually(notes(w, scaling.ReasonInvalidSchedule)).WithTimeout(timeout).Should(ContainElement(ContainSubstring(
			`phalanks.io/downtime: element 1 "holidays:company": unknown holiday calendar "company": no ConfigMap "company" labelled ` +
				scaling.LabelHolidayCalendar + `=true in namespace ` + w.Namespace + ` or ` + ops)))
	}
	// An unlabelled ConfigMap of that name is no calendar.
	calendar(t, teamA, "company", map[string]string{"today": rangeAround()}, false)

	cal := calendar(t, ops, "company", map[string]string{"today": rangeAround()}, true)
	both(0, 0, "a holiday now")

	update := func(data map[string]string) {
		g.Eventually(func(g Gomega) error {
			cm := live(cal)(g)
			cm.Data = data
			return admin.Update(ctx, cm)
		}).WithTimeout(timeout).Should(Succeed())
	}
	update(map[string]string{"tomorrow": rangeLater()})
	both(2, 3, "the holiday moved to tomorrow")

	update(map[string]string{"today": rangeAround()})
	both(0, 0, "a holiday now again")
	update(map[string]string{"today": rangeAround(), "typo": "2026-12-31 until new year"})
	both(2, 3, "a calendar that cannot be read counts as none: nothing stays down on it")
	g.Eventually(notes(webB, scaling.ReasonInvalidSchedule)).WithTimeout(timeout).Should(ContainElement(ContainSubstring(
		`holiday calendar "company" is invalid: "typo": element 1`)))

	update(map[string]string{"today": rangeAround()})
	both(0, 0, "fixed")
	g.Expect(admin.Delete(ctx, cal)).To(Succeed())
	both(2, 3, "a deleted calendar counts as none")
	g.Eventually(notes(webA, scaling.ReasonScaleUp)).WithTimeout(timeout).Should(ContainElement(ContainSubstring(
		"its schedule cannot be read, which counts as no schedule")))

	// A tenant may create a labelled ConfigMap in its namespace, but it does not decide
	// when the workloads there sleep instead of the shared calendar ...
	cal = calendar(t, ops, "company", map[string]string{"today": rangeAround()}, true)
	calendar(t, teamB, "company", nil, true)
	both(0, 0, "the shared calendar holds, whatever a tenant's ConfigMap says")
	// ... until the Namespace, which only those who may change Namespaces annotate, says so.
	kubectl(t, "", "annotate", "namespace", teamB, scaling.AnnotationShadowCalendars+"=company")
	g.Eventually(replicas(webB)).WithTimeout(timeout).Should(BeEquivalentTo(3), "team B's own, empty, calendar shadows the shared one")
	g.Consistently(replicas(webA)).WithTimeout(3*time.Second).Should(BeEquivalentTo(0), "team A still uses the shared calendar")
}

// TestAHolidayCalendarOfWholeDaysIsReadInEachTeamsZone shares one calendar of whole
// days between two teams whose schedules read it in their own zones, Kiritimati
// (UTC+14) and Pago Pago (UTC−11): 25 hours apart, so their dates always differ. The
// calendar lists today and tomorrow as Kiritimati counts them, which in Pago Pago is
// still one or two days before: the team in Kiritimati sleeps, the one in Pago Pago
// does not. Then the calendar moves the holiday to a yearly day months away, and the
// team in Kiritimati comes back.
func TestAHolidayCalendarOfWholeDaysIsReadInEachTeamsZone(t *testing.T) {
	g := expect(t)
	ctx := context.Background()
	ops := newNamespace(t, nil)
	east, west := newNamespace(t, nil), newNamespace(t, nil)
	startOperator(t, scaling.Options{CalendarNamespace: ops})
	kiritimati, err := time.LoadLocation("Pacific/Kiritimati")
	g.Expect(err).NotTo(HaveOccurred())
	today := time.Now().In(kiritimati)
	days := today.Format(time.DateOnly) + ".." + today.AddDate(0, 0, 1).Format(time.DateOnly)
	cal := calendar(t, ops, "company", map[string]string{"today": days}, true)

	webEast := newDeployment(t, east, "web", 2, map[string]string{scaling.AnnotationDowntime: "holidays:company Pacific/Kiritimati"})
	webWest := newDeployment(t, west, "web", 3, map[string]string{scaling.AnnotationDowntime: "holidays:company Pacific/Pago_Pago"})
	replicas := func(d *appsv1.Deployment) func(Gomega) int32 {
		return func(g Gomega) int32 { return ptr.Deref(live(d)(g).Spec.Replicas, -1) }
	}
	g.Eventually(replicas(webEast)).WithTimeout(timeout).Should(BeEquivalentTo(0), "today is a holiday in Kiritimati")
	g.Consistently(replicas(webWest)).WithTimeout(3*time.Second).Should(BeEquivalentTo(3), "and not yet in Pago Pago")

	later := today.AddDate(0, 0, 100)
	if later.Month() == time.February && later.Day() == 29 {
		later = later.AddDate(0, 0, 1)
	}
	g.Eventually(func(g Gomega) error {
		cm := live(cal)(g)
		cm.Data = map[string]string{"later": later.Format("*-01-02")}
		return admin.Update(ctx, cm)
	}).WithTimeout(timeout).Should(Succeed())
	g.Eventually(replicas(webEast)).WithTimeout(timeout).Should(BeEquivalentTo(2), "the holiday moved months away")
	g.Expect(replicas(webWest)(g)).To(BeEquivalentTo(3))
}
