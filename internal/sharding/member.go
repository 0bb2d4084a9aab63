package sharding

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
)

// Labels and annotations on a member's Lease.
const (
	// RingLabel names the ring a Lease belongs to.
	RingLabel = "phalanks.io/shard-ring"
	// SlotsAnnotation is where a member publishes the slots it works on (Set.String),
	// for people and tests.
	SlotsAnnotation = "phalanks.io/shard-slots"
	// ClaimsAnnotation lists every slot a member claims: those it works on, those it is
	// about to start on, and those it gave up whose last work has not ended yet. No
	// member starts on a slot another live member claims.
	ClaimsAnnotation = "phalanks.io/shard-claims"
)

// Member is one replica's membership in a ring: it holds its own Lease, reads the
// ring's Leases, and works on the slots Assign gives it among the live members. It is
// a manager Runnable that runs on every replica, elected or not.
//
// Two rules keep two members from ever working on one slot at the same time, whatever
// the network and the clocks do:
//
//   - Ownership is a lease on this member's own clock. A member works on its slots
//     only until its last successful Lease write, counted from when the write was
//     sent, plus the lease duration minus a safety margin. The others count it out
//     no sooner than a lease duration after they saw that write, on their own clocks:
//     later, whatever the clocks say, since they saw it after it was sent. A member
//     that cannot renew (a stalled connection, a dead API server) stops on time.
//   - Slots change hands release-then-acquire, through the Leases. A member first
//     stops its work on a slot it gives up, waits for it to end and a safety margin
//     more, then publishes that it no longer claims it. A member that takes a slot
//     first publishes its claim, then reads the ring again, and starts only if no
//     other live member claims the slot. Two members racing for one slot cannot both
//     start: each one's read comes after its own claim was written, so the later read
//     sees the earlier claim.
//
// The work on a slot runs under a context the member makes when it takes the slot
// (Begin) and cancels itself: when it gives the slot up, and, from a timer that takes
// no lock any other work holds, when its ownership lapses. A slot whose work was
// cancelled stays claimed until that work ended (End) and the margin passed, so the
// next owner never starts while it may still reach a bucket.
//
// Liveness is judged only by changes seen on the reader's clock: a Lease counts as
// live for a lease duration after its resourceVersion was seen to change, or first
// seen at all. No one reads another member's renew time, so clock skew between
// replicas neither shortens nor stretches anyone's lease.
type Member struct {
	// Leases reads and writes the ring's Leases in Namespace.
	Leases    coordinationclient.LeasesGetter
	Namespace string
	// Ring names the ring (the RingLabel value); Identity names this member, unique
	// among live members (the pod name).
	Ring, Identity string
	// LeaseDuration is how long a member counts as live after the others last saw its
	// Lease change; RenewPeriod is how often a member renews and rereads the ring, and
	// the deadline of each of its API calls. ValidateTiming checks the pair.
	LeaseDuration, RenewPeriod time.Duration
	// Clock is this member's clock; nil means the real one.
	Clock clock.WithTickerAndDelayedExecution
	// WallClock, when set, is the wall clock the ownership is also checked against
	// (tests); nil means Clock's readings without their monotonic part.
	WallClock clock.PassiveClock
	Log       logr.Logger
	// WorkContext, when set, makes the context a slot's work runs under (Begin) from
	// the slot's two: ctx ends when the slot is given up or the ownership lapses;
	// cleanup only when the ownership lapses (work that must finish once started, such
	// as deleting a probe's canary, runs under it, and the slot stays claimed until it
	// ended). It is called, under the member's lock, each time the slot is taken; it
	// must not call the member.
	WorkContext func(slot int, ctx, cleanup context.Context) context.Context

	mu sync.Mutex
	// owned is the set worked on, valid until validUntil; pending is claimed and not
	// started. draining was given up while the ownership held, and lapsed was worked on
	// when the ownership lapsed: both stay claimed until their work ended and the margin
	// passed (settleLocked); a draining slot may be taken back at once, a lapsed one is
	// claimed afresh.
	owned, pending, draining, lapsed Set
	// validUntil is when the ownership lapses, on the monotonic clock Go measures
	// durations with (the one expiry is armed on); validUntilWall the same instant on
	// the wall clock. The monotonic clock stops while the machine is suspended, the wall
	// clock does not: the ownership holds only while both say so.
	validUntil, validUntilWall time.Time
	expiry                     clock.Timer
	changed                    chan struct{} // closed and replaced at every change of owned
	// work is the contexts and running work of each slot; terms counts the times each
	// slot was taken.
	work  [Slots]slotWork
	terms [Slots]uint32
	// wake makes Start step at once: a slot given up may now be withdrawn.
	wake chan struct{}
	// published is what the Lease claimed at the last successful write;
	// publishedPending the pending slots among them.
	published, publishedPending Set
	publishedSlots              string
	seen                        map[string]observation
	// lastClaim is, per slot, the last live member this member saw claim it, when,
	// and when that member's Lease had last changed, on this member's clock.
	lastClaim [Slots]claimSeen
	// lastRead is when the last successful read of the ring was made.
	lastRead time.Time
	gained   [Slots]Gain
	lease    *coordinationv1.Lease
	// abandon makes Start end without leaving, as a killed process would (tests).
	abandon bool
}

// unknownSlots marks the Lease's content as unknown after a failed write.
const unknownSlots = "?"

// claimSeen is the last sight of another member's claim on a slot.
type claimSeen struct {
	by            string
	read, changed time.Time
}

// observation is when this member last saw another's Lease change, on its own clock.
type observation struct {
	resourceVersion string
	at              time.Time
}

// MinRenewsPerLease is how many renew periods a lease duration must hold at least:
// a member renews every period, each call may take up to a period, and ownership ends
// a safety margin before the lease does.
const MinRenewsPerLease = 3

// ValidateTiming checks a lease duration and renew period: both positive, and the
// lease at least MinRenewsPerLease renew periods long, so a member renews several
// times before its ownership would lapse.
func ValidateTiming(leaseDuration, renewPeriod time.Duration) error {
	switch {
	case leaseDuration <= 0:
		return fmt.Errorf("the shard lease duration must be positive, not %s", leaseDuration)
	case renewPeriod <= 0:
		return fmt.Errorf("the shard renew period must be positive, not %s", renewPeriod)
	case renewPeriod*MinRenewsPerLease > leaseDuration:
		return fmt.Errorf("the shard renew period (%s) must be at most a third of the lease duration (%s): a member renews "+
			"every period, each call may take a period, and it stops working on its slots a margin before its lease ends",
			renewPeriod, leaseDuration)
	}
	return nil
}

// safetyMargin is how long before its lease ends, on its own clock, a member stops
// working: time for the cancellation of running work to take effect, and for clocks
// that do not run at exactly the same rate.
func (m *Member) safetyMargin() time.Duration { return m.LeaseDuration / 5 }

// LeaseName is the name of a member's Lease.
func (m *Member) LeaseName() string { return m.Ring + "-" + m.Identity }

// NeedLeaderElection is false: every replica is a member.
func (m *Member) NeedLeaderElection() bool { return false }

// Owns reports whether this member works on a slot now: it owns it and its ownership
// has not lapsed.
func (m *Member) Owns(slot int) bool {
	owned, _ := m.Owned()
	return owned.Has(slot)
}

// OwnsUID reports whether this member works on the slot of an object UID now.
func (m *Member) OwnsUID(uid types.UID) bool { return m.Owns(SlotOf(uid)) }

// Owned returns the slots worked on now and a channel closed at their next change.
func (m *Member) Owned() (Set, <-chan struct{}) {
	m.mu.Lock()
	m.init()
	lapsed := m.expireIfDueLocked()
	owned, changed := m.owned, m.changed
	m.mu.Unlock()
	m.logLapse(lapsed)
	return owned, changed
}

// ValidUntil returns when this member's ownership lapses unless it renews, on its
// own clock.
func (m *Member) ValidUntil() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.validUntil
}

func (m *Member) init() {
	if m.changed == nil {
		m.changed = make(chan struct{})
		m.seen = map[string]observation{}
		m.wake = make(chan struct{}, 1)
	}
	if m.Clock == nil {
		m.Clock = clock.RealClock{}
	}
}

// validLocked reports whether the ownership holds now: by the monotonic clock, and by
// the wall clock, which a suspend of the machine (a VM's, a laptop's) does not stop.
func (m *Member) validLocked() bool {
	return m.Clock.Now().Before(m.validUntil) && m.wall().Before(m.validUntilWall)
}

// wall reads the wall clock.
func (m *Member) wall() time.Time {
	if m.WallClock != nil {
		return m.WallClock.Now()
	}
	return m.Clock.Now().Round(0)
}

// Start renews the Lease and recomputes the slots every RenewPeriod until ctx ends,
// then stops the work on every slot and deletes the Lease, so the others take over
// at their next reread rather than after the lease expires.
func (m *Member) Start(ctx context.Context) error {
	if err := ValidateTiming(m.LeaseDuration, m.RenewPeriod); err != nil {
		return err
	}
	m.mu.Lock()
	m.init()
	m.mu.Unlock()
	m.Log.Info("joining the shard ring", "ring", m.Ring, "lease", m.LeaseName(), "namespace", m.Namespace)
	tick := m.Clock.NewTicker(m.RenewPeriod)
	defer tick.Stop()
	defer m.stopExpiry()
	for {
		m.step(ctx)
		select {
		case <-ctx.Done():
			m.mu.Lock()
			abandon := m.abandon
			m.mu.Unlock()
			if !abandon {
				m.leave()
			}
			return nil
		case <-tick.C():
		case <-m.wake:
		}
	}
}

// step is one round: renew (publishing the claims), reread the ring and apply what it
// says; when that adds claims, publish them and reread at once, so a slot given up by
// another member is taken within the same round.
func (m *Member) step(ctx context.Context) {
	if err := m.publish(ctx); err != nil {
		m.Log.Error(err, "renew shard lease")
	}
	for range 2 {
		v, err := m.read(ctx)
		if err != nil {
			// Without a fresh view nothing changes hands; the slots worked on are kept
			// only while the ownership holds.
			m.Log.Error(err, "list shard leases")
			return
		}
		m.apply(v)
		if !m.unpublished() {
			return
		}
		if err := m.publish(ctx); err != nil {
			m.Log.Error(err, "publish shard claims")
			return
		}
		m.mu.Lock()
		pending := m.pending
		m.mu.Unlock()
		if pending == 0 {
			return
		}
	}
}

// Gain is when this member took a slot over, and how long before that its previous
// owner may have stopped working on it.
type Gain struct {
	At time.Time
	// Window is zero when the slot is taken at this member's first read of the ring:
	// what happened before its start is unknown, and the objects continue where they
	// are. When no other member was seen claiming it since, one may still have while
	// this member's reads failed: it reaches back to the read before, plus two renew
	// periods. When the previous claimant gave the slot up while live (or left,
	// deleting its Lease), it reaches back to the last read that still showed its
	// claim, plus two renew periods and the margin: it stops, waits for its work to end
	// and the margin, then publishes (a call within a period). When the previous
	// claimant's Lease expired (a crash, a stall), it reaches back to the last change of
	// that Lease this member saw, plus two renew periods: the claimant may have died
	// right after that renewal.
	Window time.Duration
}

// Gained returns how this member came to own slot.
func (m *Member) Gained(slot int) Gain {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gained[slot]
}

// view is what one read of the ring found.
type view struct {
	// members are the live members, this one included while its ownership holds.
	members []string
	// claims are the slots the other live members claim.
	claims Set
	// expired are the members whose Lease is there but not live.
	expired map[string]bool
	// prevRead is when the read before this one was made (zero for the first).
	prevRead time.Time
}

// read lists the ring's Leases and judges who is live, on this member's clock.
func (m *Member) read(ctx context.Context) (view, error) {
	cctx, cancel := context.WithTimeout(ctx, m.RenewPeriod)
	defer cancel()
	list, err := m.Leases.Leases(m.Namespace).List(cctx, metav1.ListOptions{LabelSelector: RingLabel + "=" + m.Ring})
	if err != nil {
		return view{}, fmt.Errorf("list the Leases of ring %s: %w", m.Ring, err)
	}
	now := m.Clock.Now()
	var v view
	var stale []*coordinationv1.Lease
	m.mu.Lock()
	seen := make(map[string]observation, len(list.Items))
	for i := range list.Items {
		l := &list.Items[i]
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if holder == "" || holder == m.Identity {
			continue
		}
		o, known := m.seen[l.Name]
		if !known || o.resourceVersion != l.ResourceVersion {
			// A change, or the first sight: live for a lease duration from now.
			o = observation{resourceVersion: l.ResourceVersion, at: now}
		}
		seen[l.Name] = o
		d := leaseDuration(l, m.LeaseDuration)
		switch age := now.Sub(o.at); {
		case age < d:
			v.members = append(v.members, holder)
			c := claimsOf(l)
			v.claims |= c
			for slot := range Slots {
				if c.Has(slot) {
					m.lastClaim[slot] = claimSeen{by: holder, read: now, changed: o.at}
				}
			}
		default:
			if v.expired == nil {
				v.expired = map[string]bool{}
			}
			v.expired[holder] = true
			if age >= staleAfter*d {
				stale = append(stale, l)
			}
		}
	}
	m.seen = seen
	v.prevRead, m.lastRead = m.lastRead, now
	if m.validLocked() {
		v.members = append(v.members, m.Identity)
	}
	m.mu.Unlock()
	for _, l := range stale {
		m.collect(ctx, l)
	}
	return v, nil
}

// claimsOf returns the slots a Lease claims. A Lease written by a release without
// ClaimsAnnotation claims the slots it works on.
func claimsOf(l *coordinationv1.Lease) Set {
	var claims Set
	for _, key := range []string{ClaimsAnnotation, SlotsAnnotation} {
		if s, err := ParseSet(l.Annotations[key]); err == nil {
			claims |= s
		}
	}
	return claims
}

// apply takes what a read found: starts on the claimed slots no one else claims,
// stops the work on slots that are no longer this member's (they stay claimed while it
// drains), and claims the slots of its share that no one claims.
func (m *Member) apply(v view) {
	m.mu.Lock()
	now := m.Clock.Now()
	lapsed := m.expireIfDueLocked()
	m.settleLocked(now)
	target := Set(0)
	if m.validLocked() {
		target = Assign(v.members)[m.Identity]
	}
	// Start only on what was claimed in a write before this read, and that no one
	// else claims in it.
	start := m.pending & m.publishedPending & target &^ v.claims
	// A slot given up but still claimed (its work draining) that comes back was never
	// out of this member's hands: take it again.
	back := m.draining & target
	release := m.owned &^ target
	owned := (m.owned &^ release) | start | back
	m.draining = (m.draining &^ back) | release
	m.pending = (m.pending &^ start &^ v.claims) & target
	if m.validLocked() {
		m.pending |= target &^ owned &^ m.pending &^ m.draining &^ m.lapsed &^ v.claims
	}
	for slot := range Slots {
		switch {
		case release.Has(slot):
			m.stopLocked(slot, now, false)
		case start.Has(slot), back.Has(slot):
			m.openLocked(slot)
		}
		if !start.Has(slot) {
			continue
		}
		g := Gain{At: now}
		switch last := m.lastClaim[slot]; {
		case last.by == "" && v.prevRead.IsZero():
		case last.by == "":
			// Nobody was seen claiming it, but reads may have failed while someone
			// did: whoever it was came and went after the previous read.
			g.Window = now.Sub(v.prevRead) + 2*m.RenewPeriod
		case v.expired[last.by]:
			g.Window = now.Sub(last.changed) + 2*m.RenewPeriod
		default:
			g.Window = now.Sub(last.read) + 2*m.RenewPeriod + m.safetyMargin()
		}
		m.gained[slot] = g
	}
	old := m.setOwnedLocked(owned)
	m.mu.Unlock()
	m.logLapse(lapsed)
	if old != owned {
		m.Log.Info("owned shard slots changed", "slots", owned.String(), "count", owned.Len(), "members", v.members)
	}
}

// setOwnedLocked replaces the worked-on set and returns the old one.
func (m *Member) setOwnedLocked(owned Set) Set {
	old := m.owned
	if old != owned {
		m.owned = owned
		m.signalLocked()
	}
	return old
}

// signalLocked closes the channel Owned returned, and makes a new one.
func (m *Member) signalLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// unpublished reports whether the Lease does not say yet what this member claims.
func (m *Member) unpublished() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claimsLocked() != m.published || m.owned.String() != m.publishedSlots || m.pending != m.publishedPending
}

func (m *Member) claimsLocked() Set { return m.owned | m.pending | m.draining | m.lapsed }

// publish writes this member's Lease: renews it and publishes the claims. A write
// that succeeds extends the ownership to when it was sent plus the lease duration
// minus the margin, if the ownership still held when the answer came; if it had
// lapsed, the slots worked on were stopped at that moment, stay claimed until their
// work ended, and are claimed afresh after that.
func (m *Member) publish(ctx context.Context) error {
	m.mu.Lock()
	m.init()
	lapsed := m.expireIfDueLocked()
	m.settleLocked(m.Clock.Now())
	claims, pending, slots := m.claimsLocked(), m.pending, m.owned.String()
	m.mu.Unlock()
	m.logLapse(lapsed)
	sent, sentWall := m.Clock.Now(), m.wall()
	if err := m.write(ctx, claims, slots, sent); err != nil {
		// The write may still have landed, or not: until one succeeds, what the Lease
		// claims is unknown, and no pending slot may start.
		m.mu.Lock()
		m.publishedPending, m.publishedSlots = 0, unknownSlots
		m.mu.Unlock()
		return err
	}
	m.mu.Lock()
	lapsed = m.expireIfDueLocked()
	// A lapse during the write dropped the pending slots: they are claimed afresh.
	pending &= m.pending
	m.validUntil = sent.Add(m.LeaseDuration - m.safetyMargin())
	m.validUntilWall = sentWall.Add(m.LeaseDuration - m.safetyMargin())
	m.published, m.publishedPending, m.publishedSlots = claims, pending, slots
	m.armExpiryLocked()
	m.mu.Unlock()
	m.logLapse(lapsed)
	return nil
}

// write creates or updates the Lease with the claims, each call within a renew period.
func (m *Member) write(ctx context.Context, claims Set, slots string, now time.Time) error {
	leases := m.Leases.Leases(m.Namespace)
	renewed := metav1.NewMicroTime(now)
	annotations := map[string]string{SlotsAnnotation: slots, ClaimsAnnotation: claims.String()}
	call := func(f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, m.RenewPeriod)
		defer cancel()
		return f(cctx)
	}
	if m.lease == nil {
		seconds := publishedSeconds(m.LeaseDuration)
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: m.LeaseName(), Namespace: m.Namespace,
				Labels: map[string]string{RingLabel: m.Ring}, Annotations: annotations,
			},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &m.Identity, LeaseDurationSeconds: &seconds,
				AcquireTime: &renewed, RenewTime: &renewed},
		}
		var created *coordinationv1.Lease
		err := call(func(c context.Context) (err error) {
			created, err = leases.Create(c, l, metav1.CreateOptions{})
			return err
		})
		if apierrors.IsAlreadyExists(err) {
			// Our own Lease from before a restart (same pod name): take it over.
			err = call(func(c context.Context) (err error) {
				created, err = leases.Get(c, l.Name, metav1.GetOptions{})
				return err
			})
			if err == nil {
				m.lease = created
				return m.write(ctx, claims, slots, now)
			}
		}
		if err != nil {
			return fmt.Errorf("create Lease %s: %w", l.Name, err)
		}
		m.lease = created
		return nil
	}
	l := m.lease.DeepCopy()
	l.Spec.HolderIdentity, l.Spec.RenewTime = &m.Identity, &renewed
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		l.Annotations[k] = v
	}
	var updated *coordinationv1.Lease
	err := call(func(c context.Context) (err error) {
		updated, err = leases.Update(c, l, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// A write of ours that timed out and landed after all, or a deleted Lease:
		// start again from the stored one, or from none.
		m.lease = nil
		var got *coordinationv1.Lease
		if gerr := call(func(c context.Context) (err error) { got, err = leases.Get(c, l.Name, metav1.GetOptions{}); return err }); gerr == nil {
			m.lease = got
		}
	}
	if err != nil {
		return fmt.Errorf("renew Lease %s: %w", l.Name, err)
	}
	m.lease = updated
	return nil
}

// staleAfter is how many lease durations a dead member's Lease stays before a live
// member deletes it: every pod name gets its own Lease, so Leases of replaced pods
// would otherwise pile up.
const staleAfter = 20

// collect deletes a Lease this member has not seen change for staleAfter lease
// durations on its own clock, unless it changed meanwhile.
func (m *Member) collect(ctx context.Context, l *coordinationv1.Lease) {
	cctx, cancel := context.WithTimeout(ctx, m.RenewPeriod)
	defer cancel()
	uid, rv := l.UID, l.ResourceVersion
	err := m.Leases.Leases(m.Namespace).Delete(cctx, l.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err == nil {
		m.Log.Info("deleted the Lease of a member gone long ago", "lease", l.Name)
	}
}

// publishedSeconds is the lease duration a member publishes on its Lease, in the whole
// seconds the field holds: rounded up, so that the others, counting it out that long
// after they saw it change, never do so before its own ownership ended (2.9 s
// published as 2 would let them take its slots while it still works on them).
func publishedSeconds(d time.Duration) int32 {
	return int32(min(math.Ceil(d.Seconds()), math.MaxInt32))
}

func leaseDuration(l *coordinationv1.Lease, fallback time.Duration) time.Duration {
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return fallback
}

// leave stops the work on every slot, waits for it to end and the margin, and deletes
// the Lease so the others take over at once. Work that does not end within a renew
// period keeps the Lease in place: the others take over when it expires.
func (m *Member) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), m.RenewPeriod+m.safetyMargin()+time.Second)
	defer cancel()
	m.mu.Lock()
	now := m.Clock.Now()
	m.expireIfDueLocked()
	for slot := range Slots {
		if m.owned.Has(slot) {
			m.stopLocked(slot, now, false)
		}
	}
	m.draining |= m.owned
	m.pending = 0
	old := m.setOwnedLocked(0)
	m.mu.Unlock()
	if old != 0 {
		m.Log.Info("owned shard slots changed", "slots", "", "count", 0, "members", nil)
	}
	settled := m.awaitSettled(ctx)
	if m.lease == nil {
		return
	}
	if !settled {
		m.Log.Info("left the shard ring with work still running; the others take over when the Lease expires", "lease", m.LeaseName())
		return
	}
	// Only this member writes its Lease; the UID keeps a later incarnation of the name.
	uid := m.lease.UID
	dctx, dcancel := context.WithTimeout(context.Background(), m.RenewPeriod)
	defer dcancel()
	err := m.Leases.Leases(m.Namespace).Delete(dctx, m.lease.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		m.Log.Error(err, "delete shard lease on shutdown; the others take over when it expires")
		return
	}
	m.Log.Info("left the shard ring", "lease", m.LeaseName())
}
