package sharding

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	testclock "k8s.io/utils/clock/testing"

	"github.com/phalanks/phalanks-operator/test/harness/apiproxy"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
)

// An API server that refuses writes and serves reads (API priority and fairness
// answering Lease updates 429, a failing etcd) keeps a member from renewing while it
// still reads the ring. Its ownership then lapses on time: the work on every slot, the
// cleanup of a slot it gave up included, is cancelled at the instant the ownership
// ends, although a slot's work is still draining (it used to wait, a renew period late,
// for a lock the drain held). And a slot whose work was stopped stays claimed until
// that work ended and a safety margin passed, also across the lapse (a lapse used to
// drop the draining claims, and the next write withdrew them while the work ran).
func TestALapseStopsEveryWorkOnTimeAndKeepsItsSlotsClaimedUntilItEnded(t *testing.T) {
	env := startAPIServer(t, false)
	for name, refusal := range map[string]apiproxy.Action{
		// Retried by client-go until the call's deadline: every renewal takes a period.
		"429 Too Many Requests": apiproxy.TooManyRequests,
		// Failed at once: the member spends its rounds draining.
		"500 Internal Server Error": apiproxy.InternalError,
	} {
		t.Run(name, func(t *testing.T) { lapseWithWorkDraining(t, env, refusal) })
	}
}

func lapseWithWorkDraining(t *testing.T, env *envtest.Env, refusal apiproxy.Action) {
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ns := fmt.Sprintf("lapse-%d", refusal.Status)
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	api := apiproxy.StartForTest(t, env.Config)
	const lease, renew = 3 * time.Second, time.Second
	margin := lease / 5
	var mu sync.Mutex
	cleanups := map[int]context.Context{}
	m := &Member{Leases: kubernetes.NewForConfigOrDie(api.Config()).CoordinationV1(), Namespace: ns, Ring: "test", Identity: "m",
		LeaseDuration: lease, RenewPeriod: renew, Log: testr.New(t).WithName("m"),
		WorkContext: func(slot int, ctx, cleanup context.Context) context.Context {
			mu.Lock()
			cleanups[slot] = cleanup
			mu.Unlock()
			return ctx
		}}
	stopM := run(t, m)
	defer stopM()
	await(t, 15*time.Second, "m works on every slot", func() bool { owned, _ := m.Owned(); return owned == All })

	share := Assign([]string{"m", "n"})
	keep, give := first(share["m"]), first(share["n"])
	keepCtx, ok1 := m.Begin(keep)
	giveCtx, ok2 := m.Begin(give)
	if !ok1 || !ok2 {
		t.Fatal("m could not begin work on its slots")
	}
	mu.Lock()
	giveCleanup := cleanups[give]
	mu.Unlock()

	By := func(what string) { t.Logf("%s: %s", time.Now().Format("15:04:05.000"), what) }
	By("n joins: m gives slot " + Set(1<<uint(give)).String() + " up while work on it runs")
	n := &Member{Leases: cs.CoordinationV1(), Namespace: ns, Ring: "test", Identity: "n",
		LeaseDuration: lease, RenewPeriod: renew, Log: testr.New(t).WithName("n")}
	stopN := run(t, n)
	defer stopN()
	await(t, 15*time.Second, "m gives the slot up", func() bool { return giveCtx.Err() != nil })
	if giveCleanup.Err() != nil {
		t.Fatal("giving a slot up ended its cleanup: a canary being deleted would stay behind")
	}
	for end := time.Now().Add(2 * renew); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if n.Owns(give) {
			t.Fatal("n started on the slot while m's work on it ran")
		}
	}

	By(fmt.Sprintf("Lease updates of m are answered %d; its reads go through", refusal.Status))
	api.Set(func(r *http.Request) apiproxy.Action {
		if resource, name := apiproxy.Resource(r); r.Method == http.MethodPut && resource == "leases" && name == m.LeaseName() {
			return refusal
		}
		return apiproxy.Action{}
	})
	await(t, 2*lease, "m's work stops", func() bool { return keepCtx.Err() != nil && giveCleanup.Err() != nil })
	stopped, validUntil := time.Now(), m.ValidUntil()
	late := stopped.Sub(validUntil)
	t.Logf("m's work stopped %s after its ownership ended", late.Round(time.Millisecond))
	if late > 200*time.Millisecond || late < 0 {
		t.Errorf("m's work stopped %s after its ownership ended at %s; want within 200ms", late, validUntil.Format("15:04:05.000"))
	}

	By("the API server takes m's writes again: m's slots whose work runs stay claimed")
	api.Set(nil)
	leases := cs.CoordinationV1().Leases(ns)
	before, err := leases.Get(t.Context(), m.LeaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	await(t, 3*renew, "m renews", func() bool {
		l, err := leases.Get(t.Context(), m.LeaseName(), metav1.GetOptions{})
		return err == nil && l.ResourceVersion != before.ResourceVersion
	})
	for end := time.Now().Add(2 * renew); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if claims := claimsOfLease(t, leases, m.LeaseName()); !claims.Has(keep) || !claims.Has(give) {
			t.Fatalf("m's Lease claims %q while its work on slots %d and %d runs", claims, keep, give)
		}
	}

	By("the work ends: the slot n works on is withdrawn a margin later")
	ended := time.Now()
	m.End(keep)
	m.End(give)
	for claimsOfLease(t, leases, m.LeaseName()).Has(give) {
		if time.Since(ended) > margin+2*renew+slack {
			t.Fatalf("m still claims slot %d %s after its work ended", give, time.Since(ended))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if withdrawn := time.Since(ended); withdrawn < margin {
		t.Errorf("m withdrew slot %d %s after its work ended, before the margin (%s)", give, withdrawn, margin)
	}
}

// run starts a member until the returned function is called.
func run(t *testing.T, m *Member) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Start(ctx); close(done) }()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

func await(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
	}
}

func first(s Set) int {
	for slot := range Slots {
		if s.Has(slot) {
			return slot
		}
	}
	return -1
}

func claimsOfLease(t *testing.T, leases interface {
	Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
}, name string) Set {
	t.Helper()
	l, err := leases.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSet(l.Annotations[ClaimsAnnotation])
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Go measures durations on the monotonic clock, which stops while the machine is
// suspended (a VM suspended or restored from a snapshot, a laptop asleep): resumed, the
// member's ownership would seem to hold for what was left of it when it was suspended,
// although the others, whose clocks ran, took its slots long ago. The wall clock runs
// on (the kernel sets it on resume): a member whose wall clock jumped past its
// ownership's end stops at its first look at the clock, before any new work begins.
func TestASuspendedMemberStopsWhenItResumes(t *testing.T) {
	env := startAPIServer(t, false)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	const ns = "suspend"
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wall := testclock.NewFakePassiveClock(time.Now())
	const lease = 3 * time.Second
	m := &Member{Leases: cs.CoordinationV1(), Namespace: ns, Ring: "test", Identity: "m",
		LeaseDuration: lease, RenewPeriod: time.Second, WallClock: wall, Log: testr.New(t)}
	stop := run(t, m)
	defer stop()
	await(t, 15*time.Second, "m works on every slot", func() bool { owned, _ := m.Owned(); return owned == All })
	ctx, ok := m.Begin(0)
	if !ok {
		t.Fatal("m could not begin work on slot 0")
	}
	defer m.End(0)

	// Suspended for a lease duration: the wall clock is set on, the monotonic one is not.
	wall.SetTime(wall.Now().Add(lease))
	if m.Owns(0) {
		t.Error("m still owns its slots after a suspend longer than its lease")
	}
	if _, ok := m.Begin(1); ok {
		t.Error("m began new work after a suspend longer than its lease")
	}
	if ctx.Err() == nil {
		t.Error("m's running work was not stopped at its first look at the clock after the suspend")
	}
}
