package sharding

import (
	"context"
	"fmt"
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
	// SlotsAnnotation is where a member publishes the slots it owns (Set.String), for
	// people and tests; the assignment never reads it.
	SlotsAnnotation = "phalanks.io/shard-slots"
)

// Member is one replica's membership in a ring: it holds its own Lease, reads the
// ring's Leases, and owns the slots Assign gives it among the live members. It is a
// manager Runnable that runs on every replica, elected or not.
type Member struct {
	// Leases reads and writes the ring's Leases in Namespace.
	Leases    coordinationclient.LeasesGetter
	Namespace string
	// Ring names the ring (the RingLabel value); Identity names this member, unique
	// among live members (the pod name).
	Ring, Identity string
	// LeaseDuration is how long a member counts as live after its last renewal seen by
	// the others; RenewPeriod is how often a member renews and rereads the ring.
	LeaseDuration, RenewPeriod time.Duration
	Clock                      clock.WithTicker
	Log                        logr.Logger
	// OnChange, when set, is called (from the member's goroutine) after the owned set
	// changed, with the old and the new set.
	OnChange func(old, owned Set)

	mu       sync.Mutex
	owned    Set
	changed  chan struct{} // closed and replaced at every change of owned
	seen     map[string]observation
	lastRenw time.Time // when this member's Lease was last renewed
	lease    *coordinationv1.Lease
	// abandon makes Start end without leaving, as a killed process would (tests).
	abandon bool
	// members is the live set of the last step; assigned is whether this member has
	// owned slots since it started; gained tells how each slot was taken over.
	members  []string
	assigned bool
	gained   [Slots]Gain
}

// observation is when this member last saw another's Lease change, on its own clock:
// liveness is judged on the observer's clock, so clock skew between replicas does not
// shorten or stretch anyone's lease.
type observation struct {
	resourceVersion string
	at              time.Time
}

// LeaseName is the name of a member's Lease.
func (m *Member) LeaseName() string { return m.Ring + "-" + m.Identity }

// NeedLeaderElection is false: every replica is a member.
func (m *Member) NeedLeaderElection() bool { return false }

// Owns reports whether this member owns a slot now.
func (m *Member) Owns(slot int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.owned.Has(slot)
}

// OwnsUID reports whether this member owns the slot of an object UID now.
func (m *Member) OwnsUID(uid types.UID) bool { return m.Owns(SlotOf(uid)) }

// Owned returns the owned slots and a channel closed at their next change.
func (m *Member) Owned() (Set, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	return m.owned, m.changed
}

func (m *Member) init() {
	if m.changed == nil {
		m.changed = make(chan struct{})
		m.seen = map[string]observation{}
	}
	if m.Clock == nil {
		m.Clock = clock.RealClock{}
	}
}

// Start renews the Lease and recomputes the owned slots every RenewPeriod until ctx
// ends, then gives up the slots and deletes the Lease, so the others take over at
// their next reread rather than after the lease expires.
func (m *Member) Start(ctx context.Context) error {
	m.mu.Lock()
	m.init()
	m.mu.Unlock()
	m.Log.Info("joining the shard ring", "ring", m.Ring, "lease", m.LeaseName(), "namespace", m.Namespace)
	tick := m.Clock.NewTicker(m.RenewPeriod)
	defer tick.Stop()
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
		}
	}
}

// step is one renew-and-reread round.
func (m *Member) step(ctx context.Context) {
	if err := m.renew(ctx); err != nil {
		m.Log.Error(err, "renew shard lease")
	}
	members, expired, err := m.liveMembers(ctx)
	if err != nil {
		m.Log.Error(err, "list shard leases")
		// Without a fresh view, keep the slots only while our own lease holds.
		members = nil
		if m.selfLive() {
			return
		}
	}
	owned := Set(0)
	if m.selfLive() {
		owned = Assign(members)[m.Identity]
	}
	m.noteGains(owned, members, expired)
	m.set(owned, members)
	if m.lease != nil && m.lease.Annotations[SlotsAnnotation] != owned.String() {
		if err := m.renew(ctx); err != nil {
			m.Log.Error(err, "publish owned slots")
		}
	}
}

// Gain is when this member took a slot over, and how long before that its previous
// owner may have stopped working on it.
type Gain struct {
	At time.Time
	// Window is zero when nothing can have been missed: the slot came with this
	// member's first assignment (what happened before its start is unknown, and the
	// objects continue where they are), or its previous owner is still live and works
	// until it sees the change. It is two renew periods when the previous owner left
	// (it deleted its Lease on the way out, seen up to a period late), and the lease
	// duration plus two renew periods when it expired (a crash).
	Window time.Duration
}

// Gained returns how this member came to own slot.
func (m *Member) Gained(slot int) Gain {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gained[slot]
}

// noteGains records a Gain for every slot owned now and not before.
func (m *Member) noteGains(owned Set, members []string, expired map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, first := m.members, !m.assigned
	m.members, m.assigned = members, m.assigned || owned != 0
	gained := owned &^ m.owned
	if gained == 0 {
		return
	}
	was := Assign(prev)
	live := map[string]bool{}
	for _, id := range members {
		live[id] = true
	}
	now := m.Clock.Now()
	for slot := range Slots {
		if !gained.Has(slot) {
			continue
		}
		g := Gain{At: now}
		previous := ""
		for id, set := range was {
			if set.Has(slot) {
				previous = id
			}
		}
		switch {
		case first, previous == "", live[previous]:
		case expired[previous]:
			g.Window = m.LeaseDuration + 2*m.RenewPeriod
		default:
			g.Window = 2 * m.RenewPeriod
		}
		m.gained[slot] = g
	}
}

// selfLive reports whether this member's own lease is still valid: a member that
// cannot renew gives up its slots before anyone else may count it as gone.
func (m *Member) selfLive() bool {
	return !m.lastRenw.IsZero() && m.Clock.Since(m.lastRenw) < m.LeaseDuration
}

func (m *Member) set(owned Set, members []string) {
	m.mu.Lock()
	old := m.owned
	if old == owned {
		m.mu.Unlock()
		return
	}
	m.owned = owned
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
	m.Log.Info("owned shard slots changed", "slots", owned.String(), "count", owned.Len(), "members", members)
	if m.OnChange != nil {
		m.OnChange(old, owned)
	}
}

// renew creates or renews this member's Lease, publishing the owned slots on it.
func (m *Member) renew(ctx context.Context) error {
	leases := m.Leases.Leases(m.Namespace)
	now := metav1.NewMicroTime(m.Clock.Now())
	m.mu.Lock()
	slots := m.owned.String()
	m.mu.Unlock()
	if m.lease == nil {
		seconds := int32(m.LeaseDuration.Seconds())
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: m.LeaseName(), Namespace: m.Namespace,
				Labels:      map[string]string{RingLabel: m.Ring},
				Annotations: map[string]string{SlotsAnnotation: slots},
			},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &m.Identity, LeaseDurationSeconds: &seconds,
				AcquireTime: &now, RenewTime: &now},
		}
		created, err := leases.Create(ctx, l, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Our own Lease from before a restart (same pod name): take it over.
			if created, err = leases.Get(ctx, l.Name, metav1.GetOptions{}); err == nil {
				m.lease = created
				return m.renew(ctx)
			}
		}
		if err != nil {
			return fmt.Errorf("create Lease %s: %w", l.Name, err)
		}
		m.lease, m.lastRenw = created, now.Time
		return nil
	}
	l := m.lease.DeepCopy()
	l.Spec.HolderIdentity, l.Spec.RenewTime = &m.Identity, &now
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[SlotsAnnotation] = slots
	updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil && ctx.Err() != nil {
		// Stopped mid-renewal: keep the Lease last stored, which leave deletes. (Had the
		// cancelled write landed, the delete's resourceVersion no longer matches, and the
		// Lease expires as before.)
		return fmt.Errorf("renew Lease %s: %w", l.Name, err)
	}
	if err != nil {
		// A conflict or a deleted Lease: start again from the stored one (or none).
		m.lease = nil
		if got, gerr := leases.Get(ctx, l.Name, metav1.GetOptions{}); gerr == nil {
			m.lease = got
		}
		return fmt.Errorf("renew Lease %s: %w", l.Name, err)
	}
	m.lease, m.lastRenw = updated, now.Time
	return nil
}

// liveMembers returns the identities of the ring's live members, this one included
// when its own lease holds, and those of members whose Lease is there but expired.
func (m *Member) liveMembers(ctx context.Context) ([]string, map[string]bool, error) {
	list, err := m.Leases.Leases(m.Namespace).List(ctx, metav1.ListOptions{LabelSelector: RingLabel + "=" + m.Ring})
	if err != nil {
		return nil, nil, err
	}
	expired := map[string]bool{}
	now := m.Clock.Now()
	seen := make(map[string]observation, len(list.Items))
	var live []string
	for i := range list.Items {
		l := &list.Items[i]
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if holder == "" {
			continue
		}
		if holder == m.Identity {
			if m.selfLive() {
				live = append(live, holder)
			}
			continue
		}
		o, known := m.seen[l.Name]
		switch {
		case !known:
			// First sight: the Lease's own renew time is all there is to go by, so a
			// replica that joins agrees at once with the others about who is live.
			// Afterwards only changes seen on this member's clock count.
			o = observation{resourceVersion: l.ResourceVersion}
			if l.Spec.RenewTime != nil {
				o.at = l.Spec.RenewTime.Time
				if o.at.After(now) {
					o.at = now
				}
			}
		case o.resourceVersion != l.ResourceVersion:
			o = observation{resourceVersion: l.ResourceVersion, at: now}
		}
		seen[l.Name] = o
		if !o.at.IsZero() && now.Sub(o.at) < leaseDuration(l, m.LeaseDuration) {
			live = append(live, holder)
			continue
		}
		expired[holder] = true
		m.collect(ctx, l, now)
	}
	m.seen = seen
	return live, expired, nil
}

// staleAfter is how many lease durations a dead member's Lease stays before a live
// member deletes it: every pod name gets its own Lease, so Leases of replaced pods
// would otherwise pile up.
const staleAfter = 20

// collect deletes a dead member's Lease once it has not been renewed for staleAfter
// lease durations (by its own renew time), unless it changed meanwhile.
func (m *Member) collect(ctx context.Context, l *coordinationv1.Lease, now time.Time) {
	if l.Spec.RenewTime == nil || now.Sub(l.Spec.RenewTime.Time) < staleAfter*leaseDuration(l, m.LeaseDuration) {
		return
	}
	uid, rv := l.UID, l.ResourceVersion
	err := m.Leases.Leases(m.Namespace).Delete(ctx, l.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err == nil {
		m.Log.Info("deleted the Lease of a member gone long ago", "lease", l.Name)
	}
}

func leaseDuration(l *coordinationv1.Lease, fallback time.Duration) time.Duration {
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return fallback
}

// leave gives up every slot and deletes the Lease.
func (m *Member) leave() {
	m.set(0, nil)
	if m.lease == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	uid, rv := m.lease.UID, m.lease.ResourceVersion
	err := m.Leases.Leases(m.Namespace).Delete(ctx, m.lease.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) {
		m.Log.Error(err, "delete shard lease on shutdown; the others take over when it expires")
		return
	}
	m.Log.Info("left the shard ring", "lease", m.LeaseName())
}
