package storagebucket_test

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/sharding"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
)

var _ = DescribeTable("Three managers sharing the StorageBuckets",
	func(serverSide bool) { threeReplicas(serverSide) },
	// Each replica holds every StorageBucket and filters with the slot function.
	Entry("probe every bucket from exactly one replica; the others probe a killed replica's buckets within the lease duration and one interval (client-side filtering)", false),
	// The API server serves each replica only its share (KEP-5866).
	Entry("with the API server's ShardedListAndWatch: each replica holds only its share", true),
)

func threeReplicas(serverSide bool) {
	{
		ctx := context.Background()
		if serverSide {
			known, err := envtest.KnowsFeatureGate("ShardedListAndWatch")
			Expect(err).NotTo(HaveOccurred())
			if !known {
				Skip("this Kubernetes version has no ShardedListAndWatch gate; the client-side filtering entry covers it")
			}
		}
		p := startPlatform(map[string]bool{"ShardedListAndWatch": serverSide})
		c, s3, path := p.c, p.s3, p.kubeconfig
		const buckets = 24
		names := map[string]bool{}
		for i := range buckets {
			sb := storageBucket("team", fmt.Sprintf("sb-%02d", i), fmt.Sprintf("shard-bucket-%02d", i), s3)
			Expect(c.Create(ctx, sb)).To(Succeed())
			names[sb.Name] = true
		}
		const lease, renew, interval = 4 * time.Second, 500 * time.Millisecond, 5 * time.Second
		flags := []string{"--leader-elect", "--leader-elect-namespace", "phalanks-system",
			"--storagebucket-shard-lease-duration", lease.String(), "--storagebucket-shard-renew-period", renew.String(),
			// Every probe writes lastProbeTime, so the spec sees each probe in the status.
			"--storagebucket-status-heartbeat", "1s"}
		gaps := watchProbeGaps(c, "team")
		managers := []*manager{
			startManager("replica-a", path, flags...), startManager("replica-b", path, flags...),
			startManager("replica-c", path, flags...),
		}

		By("converging on one owner per bucket, and staying there")
		// Until every replica joined and the slots settled, a bucket handed over is held
		// by nobody until its new owner's first probe: the ring first, then the owners.
		Eventually(func() error { return ringSettled(c, len(managers)) }).
			WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		Eventually(func() error { return exactlyOneOwner(managers, names) }).
			WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		for range 10 {
			Expect(exactlyOneOwner(managers, names)).To(Succeed())
			time.Sleep(500 * time.Millisecond)
		}
		for _, m := range managers {
			held := m.sum("phalanks_storagebucket_cached")
			if serverSide {
				Expect(held).To(BeNumerically("==", len(m.owned())), "%s holds other replicas' StorageBuckets", m.proc.Name)
			} else {
				Expect(held).To(BeNumerically("==", buckets))
			}
		}

		By("killing one replica: the others probe its buckets within the lease duration and one interval")
		victim := managers[0]
		orphans := victim.owned()
		Expect(orphans).NotTo(BeEmpty())
		victim.proc.Kill()
		killed := time.Now()
		survivors := managers[1:]
		Eventually(func() error { return exactlyOneOwner(survivors, names) }).
			WithTimeout(lease + interval + 10*time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		tookOver := time.Since(killed)
		for _, m := range survivors {
			GinkgoWriter.Printf("%s: %v probes on taking a bucket over, %v slots\n", m.proc.Name,
				m.sum("phalanks_storagebucket_probes_total", `cause="resume"`), m.sum("phalanks_storagebucket_shard_slots"))
		}
		GinkgoWriter.Printf("the survivors probed the %d buckets of the killed replica %s after the kill (lease %s, renew %s, interval %s)\n",
			len(orphans), tookOver.Round(10*time.Millisecond), lease, renew, interval)
		// The survivors saw the last renewal up to one renew period after it was made and
		// count the Lease out a lease duration later, at their next reread; an orphan whose
		// due instant fell in that window is probed at once, the others at their next one.
		// With server-side sharding the orphans reach a survivor's cache within its watch
		// (sharding.Narrowed hands the slots over without a relist, which client-go would
		// delay by a back-off that grows with every relist), so the bound is the same.
		// A second on top covers the metrics polling on a loaded machine.
		Expect(tookOver).To(BeNumerically("<=", lease+interval+time.Second))

		By("starting it again: about a third of the slots move to it")
		back := startManager("replica-a2", path, flags...)
		managers = append(survivors, back)
		Eventually(func(g Gomega) {
			// Bounded load: ceil(64/3) = 22 slots at most, so at least 64 - 2·22 = 20.
			g.Expect(back.sum("phalanks_storagebucket_shard_slots")).To(BeNumerically("~", float64(sharding.Slots)/3, 1.4))
			g.Expect(back.owned()).NotTo(BeEmpty())
			g.Expect(exactlyOneOwner(managers, names)).To(Succeed())
		}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		GinkgoWriter.Printf("the restarted replica holds %d of %d buckets\n", len(back.owned()), buckets)
		for range 10 {
			Expect(exactlyOneOwner(managers, names)).To(Succeed())
			time.Sleep(500 * time.Millisecond)
		}

		By("never leaving a bucket unprobed longer than one interval plus the takeover")
		worst := gaps.stop()
		GinkgoWriter.Printf("longest time between two probes of a bucket: %s (%s); killed at %s\n", worst, gaps.where, killed.Format(time.TimeOnly))
		// A replica killed just before a bucket's due instant leaves it unprobed for that
		// interval plus the takeover: the lease duration and up to two renew periods. The
		// slack: the probe and lastProbeTime's one-second resolution.
		Expect(worst).To(BeNumerically("<=", interval+lease+2*renew+3*time.Second))
		var all string
		for _, m := range append(managers, victim) {
			all += m.log()
		}
		Expect(all).NotTo(ContainSubstring("forbidden"))
		expectNoSecrets(all, s3.SecretKey, s3.AccessKey)
	}
}

var upSeries = regexp.MustCompile(`^phalanks_storagebucket_up\{.*storagebucket="([^"]+)"`)

// owned returns the StorageBuckets this manager holds: those it has probed and not let
// go, as its phalanks_storagebucket_up series show.
func (m *manager) owned() map[string]bool {
	GinkgoHelper()
	samples, err := m.scrape()
	Expect(err).NotTo(HaveOccurred(), "scrape %s", m.proc.Name)
	out := map[string]bool{}
	for k := range samples {
		if s := upSeries.FindStringSubmatch(k); s != nil {
			out[s[1]] = true
		}
	}
	return out
}

// ringSettled checks that the StorageBucket ring has n members and each works on
// exactly the slots sharding.Assign gives it among them, with no slot it claims
// besides (none pending, none draining): no slot will change hands any more.
func ringSettled(c client.Client, n int) error {
	leases := &coordinationv1.LeaseList{}
	if err := c.List(context.Background(), leases, client.InNamespace("phalanks-system"),
		client.MatchingLabels{sharding.RingLabel: "phalanks-storagebuckets"}); err != nil {
		return err
	}
	var members []string
	slots := map[string]string{}
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity == nil {
			continue
		}
		id := *l.Spec.HolderIdentity
		members = append(members, id)
		if works, claims := l.Annotations[sharding.SlotsAnnotation], l.Annotations[sharding.ClaimsAnnotation]; works != claims {
			return fmt.Errorf("%s works on %s and claims %s", id, works, claims)
		}
		slots[id] = l.Annotations[sharding.SlotsAnnotation]
	}
	if len(members) != n {
		return fmt.Errorf("%d members in the ring, want %d", len(members), n)
	}
	for id, want := range sharding.Assign(members) {
		if slots[id] != want.String() {
			return fmt.Errorf("%s works on %s, its share is %s", id, slots[id], want)
		}
	}
	return nil
}

// exactlyOneOwner checks that each bucket is held by exactly one of the managers.
func exactlyOneOwner(managers []*manager, names map[string]bool) error {
	owner := map[string]string{}
	for _, m := range managers {
		for name := range m.owned() {
			if other, ok := owner[name]; ok {
				return fmt.Errorf("%s is held by %s and %s", name, other, m.proc.Name)
			}
			owner[name] = m.proc.Name
		}
	}
	for name := range names {
		if _, ok := owner[name]; !ok {
			return fmt.Errorf("%s is held by no replica", name)
		}
	}
	if len(owner) != len(names) {
		return fmt.Errorf("%d buckets held, %d exist", len(owner), len(names))
	}
	return nil
}

// probeGaps follows every StorageBucket's lastProbeTime and keeps the longest time
// between two probes of one bucket, counting from its first probe.
type probeGaps struct {
	mu    sync.Mutex
	last  map[string]time.Time
	worst time.Duration
	// where says which bucket had the longest gap, and when it ended.
	where string
	done  chan struct{}
	ended chan struct{}
}

func watchProbeGaps(c client.Client, ns string) *probeGaps {
	g := &probeGaps{last: map[string]time.Time{}, done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(g.ended)
		for {
			list := &phalanksv1beta1.StorageBucketList{}
			if err := c.List(context.Background(), list, client.InNamespace(ns)); err == nil {
				g.observe(list.Items)
			}
			select {
			case <-g.done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return g
}

func (g *probeGaps) observe(items []phalanksv1beta1.StorageBucket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, sb := range items {
		if sb.Status.LastProbeTime == nil {
			continue
		}
		at := sb.Status.LastProbeTime.Time
		if prev, ok := g.last[sb.Name]; ok && at.After(prev) && at.Sub(prev) > g.worst {
			g.worst, g.where = at.Sub(prev), fmt.Sprintf("%s, probed at %s after %s", sb.Name, at.Format(time.TimeOnly), prev.Format(time.TimeOnly))
		}
		g.last[sb.Name] = at
	}
}

// stop ends the watch and returns the longest gap, including the time since each
// bucket's last probe.
func (g *probeGaps) stop() time.Duration {
	close(g.done)
	<-g.ended
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, at := range g.last {
		if time.Since(at) > g.worst {
			g.worst, g.where = time.Since(at), name+", not probed since "+at.Format(time.TimeOnly)
		}
	}
	return g.worst
}
