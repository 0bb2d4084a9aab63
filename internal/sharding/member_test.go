package sharding

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/phalanks/phalanks-operator/internal/clockoffset"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/tcpproxy"
)

// The ring tests' timing: API calls on a loaded 2-core machine take up to a few
// hundred milliseconds, and each may take one renew period.
const (
	testLease = 3 * time.Second
	testRenew = 500 * time.Millisecond
	// slack is scheduling and API latency on a loaded machine on top of a bound.
	slack = 2 * time.Second
)

// ring runs members against a real API server and checks, every few milliseconds,
// that no slot is worked on by two members at once: live ones, and those killed or
// stalled, which keep working until their ownership lapses.
type ring struct {
	t   *testing.T
	env *envtest.Env
	ns  string

	mu      sync.Mutex
	members map[string]*running
	// violation is the first instant two members worked on one slot.
	violation string
	samples   int
	stop      chan struct{}
	stopped   chan struct{}
}

// running is one member and how it ended.
type running struct {
	m     *Member
	stop  context.CancelFunc
	done  chan struct{}
	proxy *tcpproxy.Proxy
	// gone is set when the member left or was killed; stoppedAt is when it was asked
	// to leave, or when its ownership lapsed after a kill.
	gone      bool
	stoppedAt time.Time
	// startedAt is when it joined.
	startedAt time.Time
}

func newRing(t *testing.T, env *envtest.Env, ns string) *ring {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	r := &ring{t: t, env: env, ns: ns, members: map[string]*running{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	go r.sample()
	t.Cleanup(func() {
		close(r.stop)
		<-r.stopped
		for _, id := range r.live() {
			r.leave(id)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.violation != "" {
			t.Errorf("two members worked on one slot at once: %s", r.violation)
		}
	})
	return r
}

// join starts a member with its own clock, optionally through a TCP proxy to the API
// server (to stall its connection later).
func (r *ring) join(id string, clk clock.WithTickerAndDelayedExecution, viaProxy bool) *running {
	r.t.Helper()
	cfg := rest.CopyConfig(r.env.Config)
	run := &running{done: make(chan struct{}), startedAt: time.Now()}
	if viaProxy {
		u, err := parseHost(cfg.Host)
		if err != nil {
			r.t.Fatal(err)
		}
		run.proxy = tcpproxy.StartForTest(r.t, u)
		cfg.Host = "https://" + run.proxy.Addr
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	run.m = &Member{Leases: cs.CoordinationV1(), Namespace: r.ns, Ring: "test", Identity: id,
		LeaseDuration: testLease, RenewPeriod: testRenew, Clock: clk, Log: testr.New(r.t).WithName(id)}
	ctx, cancel := context.WithCancel(context.Background())
	run.stop = cancel
	go func() { _ = run.m.Start(ctx); close(run.done) }()
	r.mu.Lock()
	r.members[id] = run
	r.mu.Unlock()
	return run
}

func parseHost(host string) (string, error) {
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("API server host %q is not a URL with a host", host)
	}
	return u.Host, nil
}

// leave stops a member gracefully.
func (r *ring) leave(id string) {
	r.mu.Lock()
	run := r.members[id]
	r.mu.Unlock()
	at := time.Now()
	run.stop()
	<-run.done
	r.mu.Lock()
	run.gone, run.stoppedAt = true, at
	r.mu.Unlock()
}

// kill stops a member without leaving, as SIGKILL would: it stops renewing, its Lease
// stays, and (unlike a dead process) it keeps saying it works on its slots until its
// ownership lapses, which is what a process stuck on its API connection does.
func (r *ring) kill(id string) {
	r.mu.Lock()
	run := r.members[id]
	r.mu.Unlock()
	run.m.mu.Lock()
	run.m.abandon = true
	run.m.mu.Unlock()
	run.stop()
	<-run.done
	r.mu.Lock()
	run.gone, run.stoppedAt = true, run.m.ValidUntil()
	r.mu.Unlock()
}

// live returns the members that were neither stopped nor killed, sorted.
func (r *ring) live() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, run := range r.members {
		if !run.gone {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

func (r *ring) get(id string) *running {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.members[id]
}

// converged reports whether every member in ids works on exactly its share among ids.
func (r *ring) converged(ids []string) error {
	want := Assign(ids)
	for _, id := range ids {
		if owned, _ := r.get(id).m.Owned(); owned != want[id] {
			return fmt.Errorf("%s works on %q, not its share %q among %v", id, owned, want[id], ids)
		}
	}
	return nil
}

// awaitConvergence polls converged on the live members until limit and returns how
// long it took.
func (r *ring) awaitConvergence(limit time.Duration, what string) time.Duration {
	r.t.Helper()
	start := time.Now()
	for {
		err := r.converged(r.live())
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			r.t.Fatalf("%s: no convergence after %s: %v", what, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sample checks that no two members work on one slot, until the ring's test ends.
func (r *ring) sample() {
	defer close(r.stopped)
	for {
		select {
		case <-r.stop:
			return
		case <-time.After(2 * time.Millisecond):
		}
		r.mu.Lock()
		runs := make(map[string]*running, len(r.members))
		for id, run := range r.members {
			runs[id] = run
		}
		r.mu.Unlock()
		var union Set
		holder := map[int]string{}
		for id, run := range runs {
			owned, _ := run.m.Owned()
			r.mu.Lock()
			first := r.violation == ""
			r.mu.Unlock()
			if both := union & owned; both != 0 && first {
				for slot := range Slots {
					if both.Has(slot) {
						r.mu.Lock()
						r.violation = fmt.Sprintf("slot %d by %s and %s at %s", slot, holder[slot], id, time.Now().Format("15:04:05.000"))
						r.mu.Unlock()
						break
					}
				}
			}
			for slot := range Slots {
				if owned.Has(slot) {
					holder[slot] = id
				}
			}
			union |= owned
		}
		r.mu.Lock()
		r.samples++
		r.mu.Unlock()
	}
}

// A randomised ring: members join, leave gracefully, and die (stop renewing without
// deleting their Lease, and keep believing they own their slots until their
// ownership lapses), against a real API server. No slot is ever worked on by two
// members at one instant, during changes as well as after them; after every change
// the ring converges within the lease duration and three renew periods; and a slot
// taken over from a member that went carries a window that reaches back to when that
// member stopped, so nothing it missed is missed for good.
func TestRandomJoinsLeavesAndKillsNeverPutTwoMembersOnASlot(t *testing.T) {
	env := startAPIServer(t, false)
	r := newRing(t, env, "ring")
	real := clock.RealClock{}
	next := 0
	join := func() string {
		next++
		id := fmt.Sprintf("member-%d", next)
		r.join(id, real, false)
		return id
	}
	join()
	join()
	r.awaitConvergence(10*time.Second, "the first two members")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)) //nolint:gosec // G404: a random test schedule, not a secret
	worst := time.Duration(0)
	for step := range 10 {
		stepStart := time.Now()
		live := r.live()
		before := Assign(live)
		var what, gone string
		switch op := rng.IntN(4); {
		case len(live) <= 1 || op < 2 && len(live) < 5:
			what = "join " + join()
		case op == 2:
			gone = live[rng.IntN(len(live))]
			r.leave(gone)
			what = "leave " + gone
		default:
			gone = live[rng.IntN(len(live))]
			r.kill(gone)
			what = "kill " + gone
		}
		took := r.awaitConvergence(testLease+3*testRenew+slack, fmt.Sprintf("step %d (%s)", step, what))
		worst = max(worst, took)
		if gone != "" {
			stopped := r.get(gone).stoppedAt
			for _, id := range r.live() {
				owned, _ := r.get(id).m.Owned()
				for slot := range Slots {
					if !owned.Has(slot) || !before[gone].Has(slot) {
						continue
					}
					g := r.get(id).m.Gained(slot)
					if g.Window == 0 || g.At.Add(-g.Window).After(stopped) {
						t.Errorf("step %d (%s): %s took slot %d over at %s with window %s, which does not reach back to %s, when %s stopped",
							step, what, id, slot, g.At.Format("15:04:05.000"), g.Window, stopped.Format("15:04:05.000"), gone)
					}
					// The window reaches back to a read or a change this member saw, never
					// before it joined (but for the margin the previous owner waits after
					// its work ended); with healthy reads, no further than a takeover
					// takes. A member whose reads failed for a while (a loaded machine)
					// reaches back over the gap, as it must.
					if bound := g.At.Sub(r.get(id).startedAt) + 2*testRenew + testLease/5; g.Window > bound {
						t.Errorf("step %d (%s): %s took slot %d over with window %s, reaching back before it joined (%s)", step, what, id, slot, g.Window, bound)
					}
					if nominal := g.At.Sub(stepStart) + testLease + 6*testRenew + testLease/5 + slack; g.Window > nominal {
						t.Logf("step %d (%s): %s took slot %d over with window %s, beyond a takeover with healthy reads (%s): its reads failed for a while", step, what, id, slot, g.Window, nominal)
					}
				}
			}
		}
		t.Logf("step %d: %s, %d members, converged in %s", step, what, len(r.live()), took.Round(time.Millisecond))
	}
	r.mu.Lock()
	samples := r.samples
	r.mu.Unlock()
	t.Logf("slowest convergence %s (lease %s, renew %s); %d exclusion samples", worst.Round(time.Millisecond), testLease, testRenew, samples)
}

// A member whose connection to the API server stalls (a TCP proxy between it and the
// API server stops every byte, as a hung HTTP/2 connection does) stops working on its
// slots when its ownership lapses on its own clock, before the others take them over;
// when the connection recovers it rejoins.
func TestAStalledMemberStopsBeforeTheOthersTakeItsSlots(t *testing.T) {
	env := startAPIServer(t, false)
	r := newRing(t, env, "stall")
	real := clock.RealClock{}
	r.join("a", real, false)
	stalled := r.join("b", real, true)
	r.join("c", real, false)
	r.awaitConvergence(15*time.Second, "three members")
	before, _ := stalled.m.Owned()

	stalled.proxy.Stall()
	at := time.Now()
	deadline := stalled.m.ValidUntil()
	for {
		owned, _ := stalled.m.Owned()
		if owned == 0 {
			break
		}
		if time.Since(at) > testLease+slack {
			t.Fatalf("the stalled member still works on %q %s after its connection stalled", owned, time.Since(at))
		}
		time.Sleep(5 * time.Millisecond)
	}
	stoppedAfter := time.Since(at)
	if time.Now().After(deadline.Add(slack)) {
		t.Errorf("the stalled member stopped at %s, later than its ownership's end %s", time.Now().Format("15:04:05.000"), deadline.Format("15:04:05.000"))
	}
	start := time.Now()
	for r.converged([]string{"a", "c"}) != nil {
		if time.Since(start) > testLease+3*testRenew+slack {
			t.Fatalf("the others did not take the stalled member's slots %q: %v", before, r.converged([]string{"a", "c"}))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the stalled member stopped %s after the stall; the others held its %d slots %s after the stall",
		stoppedAfter.Round(time.Millisecond), before.Len(), time.Since(at).Round(time.Millisecond))

	stalled.proxy.Resume()
	r.awaitConvergence(testLease+3*testRenew+2*slack, "after the stall")
}

// Clock skew changes nothing: liveness is judged by the changes each member sees on
// its own clock, never by another member's renew time. A member whose clock runs 15 s
// ahead does not take the slots of live members on its first look at the ring, and the
// Lease of a member whose clock is 5 minutes behind is not deleted as stale by the
// others, old or new.
func TestSkewedClocksNeitherTakeNorLoseLeases(t *testing.T) {
	env := startAPIServer(t, false)
	r := newRing(t, env, "skew")
	real := clock.RealClock{}
	r.join("a", real, false)
	r.join("b", real, false)
	r.awaitConvergence(15*time.Second, "two members")
	r.join("ahead", clockoffset.Clock{Offset: 15 * time.Second}, false)
	r.awaitConvergence(testLease+3*testRenew+slack, "with a member 15 s ahead")
	behind := r.join("behind", clockoffset.Clock{Offset: -5 * time.Minute}, false)
	r.awaitConvergence(testLease+3*testRenew+slack, "with a member 5 min behind")
	r.join("d", real, false)
	r.awaitConvergence(testLease+3*testRenew+slack, "with a new member after the skewed ones")
	// Some more renew periods: every member keeps its Lease and its share.
	cs := kubernetes.NewForConfigOrDie(env.Config)
	for range 8 {
		time.Sleep(testRenew)
		if _, err := cs.CoordinationV1().Leases("skew").Get(t.Context(), behind.m.LeaseName(), metav1.GetOptions{}); err != nil {
			t.Fatalf("the Lease of the member 5 min behind: %v", err)
		}
		if err := r.converged(r.live()); err != nil {
			t.Fatal(err)
		}
	}
}

// A Lease publishes the lease duration in whole seconds. The others count a member out
// that long after they saw its Lease change, and the member works until its ownership
// ends a margin before its own, exact, lease duration: the published duration must never
// be shorter (2.9 s published as 2 s let the others start 0.3 s before the member
// stopped; a sub-second one was published as 0, which readers took for no duration).
func TestTheLeaseDurationIsNeverPublishedShorter(t *testing.T) {
	env := startAPIServer(t, false)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	const ns = "durations"
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, lease := range []time.Duration{2900 * time.Millisecond, 600 * time.Millisecond, 3 * time.Second, 15*time.Second + time.Millisecond} {
		m := &Member{Leases: cs.CoordinationV1(), Namespace: ns, Ring: "test", Identity: "m-" + strconv.FormatInt(lease.Milliseconds(), 10),
			LeaseDuration: lease, RenewPeriod: lease / 3, Log: testr.New(t)}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { _ = m.Start(ctx); close(done) }()
		var got *coordinationv1.Lease
		for deadline := time.Now().Add(30 * time.Second); got == nil; {
			if l, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), m.LeaseName(), metav1.GetOptions{}); err == nil {
				got = l
			} else if time.Now().After(deadline) {
				t.Fatalf("lease %s: no Lease within 30s: %v", lease, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		<-done
		published := time.Duration(*got.Spec.LeaseDurationSeconds) * time.Second
		if published < lease || published >= lease+time.Second {
			t.Errorf("lease duration %s published as %ds; want the whole seconds at or above it", lease, *got.Spec.LeaseDurationSeconds)
		}
	}
}
