package storagebucket_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/clockoffset"
	"github.com/phalanks/phalanks-operator/internal/s3bucket"
)

// The chaos suite: three managers share ReadWrite and HeadBucket buckets on MinIO
// while one of them at a time has its API connection stalled for two lease durations,
// is restarted with its clock about 20 s or 10 min ahead or behind (off the probe grid:
// not a multiple of the interval), or is killed (SIGKILL) or stopped (SIGTERM) and
// started again, and StorageBuckets are deleted and created again under the same names
// throughout. Every second, and at the end, the invariants hold:
//
//   - no bucket exists that no StorageBucket owns (none orphaned);
//   - no StorageBucket's bucket is deleted while the StorageBucket lives;
//   - no two replicas work on one bucket at the same instant;
//   - no false canary failure: no canary read answered NoSuchKey, no Ready condition
//     ever says CanaryMismatch or an unclassified error, and no Ready flap;
//   - every bucket is probed within the documented bound.
//
// The first faults are one of each kind with each clock offset, and they all run
// however long that takes; then faults are drawn at random until the duration ends.
// `make test` runs it for PHALANKS_CHAOS_DURATION's default (75 s of faults); `make
// chaos` for 10 minutes. PHALANKS_CHAOS_SEED replays a fault schedule.
var _ = Describe("Chaos", Label("chaos"), func() {
	It("keeps every invariant while managers stall, run with skewed clocks, die, and StorageBuckets come and go", func() {
		duration := 75 * time.Second
		if v := os.Getenv("PHALANKS_CHAOS_DURATION"); v != "" {
			var err error
			duration, err = time.ParseDuration(v)
			Expect(err).NotTo(HaveOccurred())
		}
		seed := uint64(time.Now().UnixNano())
		if v := os.Getenv("PHALANKS_CHAOS_SEED"); v != "" {
			var err error
			seed, err = strconv.ParseUint(v, 10, 64)
			Expect(err).NotTo(HaveOccurred())
		}
		GinkgoWriter.Printf("chaos for %s, seed %d (PHALANKS_CHAOS_SEED replays it)\n", duration, seed)

		p := startPlatform(nil)
		ch := &chaos{p: p, s3log: startS3Log(p.s3), lives: map[string][]*incarnation{},
			// One generator per goroutine: faults and churn draw independently.
			rng:      rand.New(rand.NewPCG(seed, 24)), //nolint:gosec // G404: a test schedule, not a secret
			churnRng: rand.New(rand.NewPCG(seed, 25)), //nolint:gosec // G404: a test schedule, not a secret
		}
		for i := range 8 {
			ch.create(fmt.Sprintf("rw-%02d", i), phalanksv1beta1.ProbeReadWrite)
			ch.create(fmt.Sprintf("hb-%02d", i), phalanksv1beta1.ProbeHeadBucket)
		}
		for i := range ch.replicas {
			ch.start(i, 0)
		}
		everyReady(p.c, ch.names(), 2*time.Minute)
		flaps := watchReady(p.c)

		ctx, cancel := context.WithTimeout(context.Background(), duration)
		defer cancel()
		// Churn and checks go on until the last fault ended, which may be after ctx.
		running, stop := context.WithCancel(context.Background())
		checked := make(chan error, 1)
		go func() { defer GinkgoRecover(); checked <- ch.checkEverySecond(running) }()
		churned := make(chan error, 1)
		go func() { defer GinkgoRecover(); churned <- ch.churn(running) }()
		applied := ch.faults(ctx)
		stop()
		Expect(<-churned).To(Succeed())
		Expect(<-checked).To(Succeed())
		Expect(applied).To(ContainElements(chaosFirstFaults), "every kind of fault and every clock offset ran")

		By("after the faults: every replica back, every StorageBucket Ready, every invariant")
		for i, m := range ch.replicas {
			if !m.proc.Running() {
				ch.start(i, 0)
			}
			m.api.Resume()
		}
		everyReady(p.c, ch.names(), 2*time.Minute)
		Eventually(func() error { return exactlyOneOwner(ch.replicas[:], ch.names()) }).
			WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		Expect(ch.check(time.Now())).To(Succeed())
		Expect(flaps.stop()).To(BeEmpty())
		GinkgoWriter.Printf("faults: %s\n", strings.Join(ch.log, "; "))
		GinkgoWriter.Printf("%d S3 requests, longest time between two probes of a bucket %s (bound %s)\n",
			len(ch.s3log.snapshot()), ch.worstGap.Round(10*time.Millisecond), chaosGapBound)
	})
})

// The chaos suite's ring and probe timing.
const (
	chaosLease    = 4 * time.Second
	chaosRenew    = time.Second
	chaosInterval = 5 * time.Second
	// chaosGapBound is the documented bound on the time between two probes of one
	// bucket under these faults (docs/storagebucket.md, "Fault model"): an interval,
	// plus a takeover after a crash or a stall (a lease and two renew periods), plus a
	// lease for a replica that starts while a crashed one's Lease still looks live to
	// it, plus two renew periods to take the slots; plus one interval for a handover
	// between replicas whose clocks differ by an offset off the probe grid (each probes
	// on its own clock's grid); and a few seconds of a loaded machine.
	chaosGapBound = 2*chaosInterval + 2*chaosLease + 4*chaosRenew + 3*time.Second
)

// The faults every run applies first, in this order: one of each kind, and a restart
// with each clock offset. The offsets are not multiples of chaosInterval, so a bucket
// handed between replicas whose clocks differ changes grid.
var (
	chaosOffsets     = []time.Duration{20*time.Second + 700*time.Millisecond, -10*time.Minute - 2300*time.Millisecond, -20*time.Second - 300*time.Millisecond, 10*time.Minute + 1900*time.Millisecond}
	chaosFirstFaults = []string{"stall", "skew " + chaosOffsets[0].String(), "kill", "skew " + chaosOffsets[1].String(), "term",
		"skew " + chaosOffsets[2].String(), "skew " + chaosOffsets[3].String()}
)

// chaos is the state of one chaos run.
type chaos struct {
	p     *platform
	s3log *s3Log
	// rng draws the faults, churnRng the StorageBuckets to delete.
	rng, churnRng *rand.Rand
	replicas      [3]*manager
	started       int

	mu sync.Mutex
	// lives are the incarnations of each StorageBucket name, oldest first.
	lives    map[string][]*incarnation
	depths   map[string]phalanksv1beta1.ProbeDepth
	suspects map[string]time.Time // orphan suspects: bucket → first seen
	worstGap time.Duration
	log      []string
}

// incarnation is one StorageBucket object of a name, from its creation to the
// request to delete it.
type incarnation struct {
	uid             types.UID
	created         time.Time
	deleteRequested time.Time
}

func (ch *chaos) note(format string, args ...any) {
	line := time.Now().Format("15:04:05.000 ") + fmt.Sprintf(format, args...)
	GinkgoWriter.Println(line)
	ch.mu.Lock()
	ch.log = append(ch.log, line)
	ch.mu.Unlock()
}

// create creates the StorageBucket name (its bucket has its name) and records it.
func (ch *chaos) create(name string, depth phalanksv1beta1.ProbeDepth) {
	GinkgoHelper()
	sb := bucketAt(ch.p.s3, ch.s3log.URL(), name, depth, true)
	// Probes that a loaded machine slows down are not faults of this suite.
	sb.Spec.HealthCheck.Timeout = &metav1.Duration{Duration: 4 * time.Second}
	at := time.Now()
	Expect(ch.p.c.Create(context.Background(), sb)).To(Succeed())
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.depths == nil {
		ch.depths = map[string]phalanksv1beta1.ProbeDepth{}
	}
	ch.depths[name] = depth
	ch.lives[name] = append(ch.lives[name], &incarnation{uid: sb.UID, created: at})
}

// names returns the StorageBucket names.
func (ch *chaos) names() map[string]bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	out := map[string]bool{}
	for name := range ch.lives {
		out[name] = true
	}
	return out
}

// start runs replica i (again), its API connection through a proxy, its clock off by
// offset.
func (ch *chaos) start(i int, offset time.Duration) {
	GinkgoHelper()
	ch.started++
	spec := managerSpec{name: fmt.Sprintf("r%d-%d", i, ch.started), kubeconfig: ch.p.kubeconfig,
		flags: ringFlags(chaosLease, chaosRenew), viaProxy: true}
	if offset != 0 {
		spec.env = []string{clockoffset.EnvVar + "=" + offset.String()}
	}
	m := startManagerWith(spec)
	ch.s3log.track(m)
	ch.replicas[i] = m
}

// faults injects one fault after another: first chaosFirstFaults, all of them, then
// faults drawn at random until ctx ends. It returns the faults it applied.
func (ch *chaos) faults(ctx context.Context) []string {
	GinkgoHelper()
	kinds := []string{"stall", "skew", "kill", "term"}
	var applied []string
	skews := 0
	for n := 0; n < len(chaosFirstFaults) || ctx.Err() == nil; n++ {
		kind := kinds[ch.rng.IntN(len(kinds))]
		if n < len(chaosFirstFaults) {
			kind, _, _ = strings.Cut(chaosFirstFaults[n], " ")
		}
		i := ch.rng.IntN(len(ch.replicas))
		m := ch.replicas[i]
		fault := kind
		switch kind {
		case "stall":
			ch.note("stall %s's API connection for %s", m.proc.Name, 2*chaosLease)
			m.api.Stall()
			time.Sleep(2 * chaosLease)
			m.api.Resume()
		case "skew":
			offset := chaosOffsets[skews%len(chaosOffsets)]
			skews++
			fault += " " + offset.String()
			ch.note("restart %s with its clock %s off", m.proc.Name, offset)
			Expect(m.proc.Stop(30 * time.Second)).To(Succeed())
			ch.s3log.untrack(m)
			ch.start(i, offset)
		case "kill":
			ch.note("SIGKILL %s, start it again", m.proc.Name)
			m.proc.Kill()
			ch.s3log.untrack(m)
			sleepCtx(ctx, time.Duration(ch.rng.IntN(2000))*time.Millisecond)
			ch.start(i, 0)
		case "term":
			ch.note("SIGTERM %s, start it again", m.proc.Name)
			Expect(m.proc.Stop(30 * time.Second)).To(Succeed())
			ch.s3log.untrack(m)
			ch.start(i, 0)
		}
		applied = append(applied, fault)
		pause := 2*time.Second + time.Duration(ch.rng.IntN(4000))*time.Millisecond
		if n+1 < len(chaosFirstFaults) {
			time.Sleep(pause)
		} else {
			sleepCtx(ctx, pause)
		}
	}
	return applied
}

// churn deletes a StorageBucket, waits for it to go (its bucket deleted by its owner),
// and creates it again under the same name, until ctx ends.
func (ch *chaos) churn(ctx context.Context) error {
	names := sortedNames(ch.names())
	for ctx.Err() == nil {
		name := names[ch.churnRng.IntN(len(names))]
		sb := &phalanksv1beta1.StorageBucket{}
		if err := ch.p.c.Get(context.Background(), client.ObjectKey{Namespace: "team", Name: name}, sb); err != nil {
			return err
		}
		ch.mu.Lock()
		lives := ch.lives[name]
		lives[len(lives)-1].deleteRequested = time.Now()
		depth := ch.depths[name]
		ch.mu.Unlock()
		if err := ch.p.c.Delete(context.Background(), sb); err != nil {
			return err
		}
		ch.note("delete StorageBucket %s (%s)", name, sb.UID)
		// Deletion waits for the bucket's owner, which a fault may have taken away for a
		// takeover's time.
		deadline := time.Now().Add(2 * chaosGapBound)
		for {
			err := ch.p.c.Get(context.Background(), client.ObjectKeyFromObject(sb), &phalanksv1beta1.StorageBucket{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("StorageBucket %s was not deleted within %s", name, 2*chaosGapBound)
			}
			time.Sleep(200 * time.Millisecond)
		}
		ch.create(name, depth)
		ch.note("created StorageBucket %s again", name)
		sleepCtx(ctx, time.Second+time.Duration(ch.churnRng.IntN(2000))*time.Millisecond)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// checkEverySecond checks the invariants every second until ctx ends.
func (ch *chaos) checkEverySecond(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
		if err := ch.check(time.Now()); err != nil {
			return err
		}
	}
}

// check checks every invariant at now.
func (ch *chaos) check(now time.Time) error {
	exchanges := ch.s3log.snapshot()
	if err := overlaps(exchanges); err != nil {
		return fmt.Errorf("two replicas at once: %w", err)
	}
	if err := ch.deletedWhileAlive(exchanges); err != nil {
		return err
	}
	if err := canaryNotFound(exchanges); err != nil {
		return err
	}
	if err := ch.gaps(exchanges, now); err != nil {
		return err
	}
	return ch.orphans(now)
}

// canaryNotFound finds a canary read answered 404: a probe writes its canary and reads
// it back at once, so only another replica's probe (or the operator's cleanup) deleting
// it in between makes the read miss it, which would fail the probe with NoSuchKey.
func canaryNotFound(exchanges []s3Exchange) error {
	for _, x := range exchanges {
		if x.Method == http.MethodGet && strings.HasPrefix(x.key, phalanksv1beta1.CanaryPrefix) && x.Status == http.StatusNotFound {
			return fmt.Errorf("%s read canary %s/%s at %s and got 404: a false NoSuchKey", x.manager, x.bucket, x.key,
				x.Start.Format("15:04:05.000"))
		}
	}
	return nil
}

// deletedWhileAlive finds a bucket deletion while the StorageBucket of the bucket lived
// and nobody had asked to delete it.
func (ch *chaos) deletedWhileAlive(exchanges []s3Exchange) error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, x := range exchanges {
		if !x.deletedBucket() {
			continue
		}
		for _, inc := range ch.lives[x.bucket] {
			if !x.Start.Before(inc.created) && (inc.deleteRequested.IsZero() || x.Start.Before(inc.deleteRequested)) {
				return fmt.Errorf("%s deleted bucket %s at %s while StorageBucket %s lived", x.manager, x.bucket,
					x.Start.Format("15:04:05.000"), inc.uid)
			}
		}
	}
	return nil
}

// gaps measures, for every incarnation, the time from its creation to its first probe
// and between its probes, until its deletion was requested (or now).
func (ch *chaos) gaps(exchanges []s3Exchange, now time.Time) error {
	probes := map[string][]time.Time{}
	for _, x := range exchanges {
		if x.isProbe() {
			probes[x.bucket] = append(probes[x.bucket], x.Start)
		}
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for name, lives := range ch.lives {
		times := probes[name]
		sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
		for _, inc := range lives {
			end := now
			if !inc.deleteRequested.IsZero() {
				end = inc.deleteRequested
			}
			last := inc.created
			for _, at := range times {
				if at.Before(inc.created) || !at.Before(end) {
					continue
				}
				if gap := at.Sub(last); gap > ch.worstGap {
					ch.worstGap = gap
				}
				if gap := at.Sub(last); gap > chaosGapBound {
					return fmt.Errorf("bucket %s (%s) was not probed for %s, from %s to %s", name, inc.uid, gap.Round(time.Millisecond),
						last.Format("15:04:05.000"), at.Format("15:04:05.000"))
				}
				last = at
			}
			// A bucket created moments before a probe that records its creation is
			// probed the pass after; the bound covers it.
			if gap := end.Sub(last); gap > chaosGapBound {
				return fmt.Errorf("bucket %s (%s) was not probed for %s since %s", name, inc.uid, gap.Round(time.Millisecond),
					last.Format("15:04:05.000"))
			}
		}
	}
	return nil
}

// orphans finds a bucket that no StorageBucket owns, seen so in two checks a second
// apart (a bucket deleted between listing the buckets and the StorageBuckets is not).
func (ch *chaos) orphans(now time.Time) error {
	c, err := ch.p.s3.Client()
	if err != nil {
		return err
	}
	ctx := context.Background()
	buckets, err := c.ListBuckets(ctx)
	if err != nil {
		return err
	}
	list := &phalanksv1beta1.StorageBucketList{}
	if err := ch.p.c.List(ctx, list, client.InNamespace("team")); err != nil {
		return err
	}
	live := map[string]bool{}
	byBucket := map[string]bool{}
	for _, sb := range list.Items {
		live[string(sb.UID)] = true
		byBucket[sb.Spec.BucketName] = true
	}
	suspects := map[string]time.Time{}
	for _, b := range buckets {
		owner := ""
		if t, err := c.GetBucketTagging(ctx, b.Name); err == nil {
			owner = t.ToMap()[s3bucket.TagOwnerUID]
		}
		if (owner != "" && live[owner]) || (owner == "" && byBucket[b.Name]) {
			continue
		}
		key := b.Name + " " + owner
		ch.mu.Lock()
		first, seen := ch.suspects[key]
		ch.mu.Unlock()
		if seen && now.Sub(first) >= time.Second {
			return fmt.Errorf("bucket %s is orphaned: its owner tag names StorageBucket %q, which does not exist", b.Name, owner)
		}
		if !seen {
			first = now
		}
		suspects[key] = first
	}
	ch.mu.Lock()
	ch.suspects = suspects
	ch.mu.Unlock()
	return nil
}
