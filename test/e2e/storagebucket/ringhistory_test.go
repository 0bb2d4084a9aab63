package storagebucket_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/internal/sharding"
)

// ringHistory follows the Leases of the StorageBucket ring from outside, polling them,
// and keeps every version of each member's Lease: when it was first seen, the slots
// the member said it works on and those it claimed. It tells whether a member could
// own a slot at an instant, to judge the S3 requests a member sent.
type ringHistory struct {
	mu       sync.Mutex
	versions map[string][]leaseVersion // by member, oldest first
	done     chan struct{}
	ended    chan struct{}
}

type leaseVersion struct {
	seen          time.Time
	rv            string
	slots, claims sharding.Set
}

// ringPoll is how often ringHistory lists the Leases.
const ringPoll = 100 * time.Millisecond

func watchRing(c client.Client) *ringHistory {
	h := &ringHistory{versions: map[string][]leaseVersion{}, done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(h.ended)
		for {
			leases := &coordinationv1.LeaseList{}
			if err := c.List(context.Background(), leases, client.InNamespace("phalanks-system"),
				client.MatchingLabels{sharding.RingLabel: "phalanks-storagebuckets"}); err == nil {
				h.observe(leases.Items, time.Now())
			}
			select {
			case <-h.done:
				return
			case <-time.After(ringPoll):
			}
		}
	}()
	return h
}

func (h *ringHistory) observe(leases []coordinationv1.Lease, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range leases {
		if l.Spec.HolderIdentity == nil {
			continue
		}
		id := *l.Spec.HolderIdentity
		vs := h.versions[id]
		if n := len(vs); n > 0 && vs[n-1].rv == l.ResourceVersion {
			continue
		}
		slots, _ := sharding.ParseSet(l.Annotations[sharding.SlotsAnnotation])
		claims, _ := sharding.ParseSet(l.Annotations[sharding.ClaimsAnnotation])
		h.versions[id] = append(vs, leaseVersion{seen: at, rv: l.ResourceVersion, slots: slots, claims: claims})
	}
}

func (h *ringHistory) stop() {
	close(h.done)
	<-h.ended
}

// ownerTolerance is how far from an instant the Lease versions in effect are looked at:
// a member publishes a slot it started on in its next write (within a call), and the
// Leases are seen up to ringPoll and a list's time late.
const ownerTolerance = 2 * time.Second

// mayOwn returns nil if member could work on slot at t: some version of its Lease that
// says it works on the slot was in effect within ownerTolerance of t, and was written
// less than a lease duration before t (a member works only until its last successful
// write, counted from when it was sent, plus the lease duration minus a margin). A member
// whose ownership lapsed (paused, its writes refused) and that sends a request for a
// slot before its Lease says it works on it again fails both.
func (h *ringHistory) mayOwn(member string, slot int, t time.Time, lease time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	vs := h.versions[member]
	for i, v := range vs {
		if v.seen.After(t.Add(ownerTolerance)) {
			break
		}
		inEffectUntil := time.Now()
		if i+1 < len(vs) {
			inEffectUntil = vs[i+1].seen
		}
		if v.slots.Has(slot) && !inEffectUntil.Before(t.Add(-ownerTolerance)) && !v.seen.Before(t.Add(-lease)) {
			return nil
		}
	}
	last := "none"
	for _, v := range vs {
		if !v.seen.After(t) {
			last = fmt.Sprintf("seen %s working on %s", v.seen.Format("15:04:05.000"), v.slots)
		}
	}
	return fmt.Errorf("%s did not own slot %d at %s (its last Lease version before: %s)", member, slot, t.Format("15:04:05.000"), last)
}

// owner returns the live member (its Lease changed within lease) whose newest Lease
// version says it works on slot, or "" (the Lease of a member that died still says so).
func (h *ringHistory) owner(slot int, lease time.Duration) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, vs := range h.versions {
		if v := vs[len(vs)-1]; time.Since(v.seen) < lease && v.slots.Has(slot) {
			return id
		}
	}
	return ""
}

// settled returns nil when the ring's live members (whose Leases changed within a
// lease duration) are exactly members, sorted, and each works on exactly its share
// among them and claims nothing besides: no slot is changing hands. A replica killed
// moments ago still looks live by its Lease, so the running replicas are asked for:
// its slots are not settled until the others took them.
func (h *ringHistory) settled(members []string, lease time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	latest := map[string]leaseVersion{}
	var live []string
	for id, vs := range h.versions {
		if v := vs[len(vs)-1]; now.Sub(v.seen) < lease {
			latest[id] = v
			live = append(live, id)
		}
	}
	sort.Strings(live)
	if !slices.Equal(live, members) {
		return fmt.Errorf("the ring's live members are %v, the running replicas %v", live, members)
	}
	for id, share := range sharding.Assign(live) {
		if v := latest[id]; v.slots != share || v.claims != share {
			return fmt.Errorf("%s works on %s and claims %s, its share is %s", id, v.slots, v.claims, share)
		}
	}
	return nil
}
