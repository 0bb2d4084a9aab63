// Package sharding spreads StorageBuckets over the operator's replicas with the
// Kubernetes API as the only coordinator.
//
// The 64-bit FNV-1a hash space of object UIDs is cut into a fixed number of equal
// range slots. The hash and the ranges are exactly those of KEP-5866's shard
// selector (shardRange(object.metadata.uid, start, end)), so one function decides
// ownership on both paths: an API server with the ShardedListAndWatch feature
// sends each replica only the objects of its slots, and any other API server sends
// everything and the replica filters on its side.
//
// Slots go to the ring's live members (the replicas holding an unexpired Lease
// labelled with the ring's name) by rendezvous hashing with bounded load: each slot
// prefers the member with the highest hash of (member, slot), and no member takes
// more than its fair share, rounded up. Every replica computes the same assignment
// from the same set of live Leases; a member joining or leaving moves about 1/N of
// the slots.
package sharding

import (
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Slots is the number of hash range slots, and so the largest useful replica count.
const Slots = 64

// slotBits is log2(Slots): a slot is the top slotBits bits of the UID's hash.
const slotBits = 6

// SlotOf returns the slot of an object UID: the top bits of the 64-bit FNV-1a hash
// of the UID string, the hash KEP-5866's shardRange computes.
func SlotOf(uid types.UID) int {
	return int(FNV64a(string(uid)) >> (64 - slotBits))
}

// FNV64a is the 64-bit FNV-1a hash of s, computed without allocating (it is taken
// several times per probe).
func FNV64a(s string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	return h
}

// Set is a set of slots.
type Set uint64

// Has reports whether s holds slot.
func (s Set) Has(slot int) bool { return s&(1<<uint(slot)) != 0 }

// Len returns how many slots s holds.
func (s Set) Len() int {
	n := 0
	for v := uint64(s); v != 0; v &= v - 1 {
		n++
	}
	return n
}

// All is the set of every slot.
const All = Set(^uint64(0))

// slotStart returns the first hash of slot, as a KEP-5866 hex bound.
func slotBound(slot int) string {
	if slot >= Slots {
		return "0x10000000000000000" // 2^64, the exclusive end of the hash space
	}
	return fmt.Sprintf("0x%016x", uint64(slot)<<(64-slotBits)) //nolint:gosec // G115: 0 <= slot < Slots
}

// ranges returns the runs of consecutive slots in s as [start, end) pairs.
func (s Set) ranges() [][2]int {
	var out [][2]int
	for slot := 0; slot < Slots; slot++ {
		if !s.Has(slot) {
			continue
		}
		if n := len(out); n > 0 && out[n-1][1] == slot {
			out[n-1][1] = slot + 1
			continue
		}
		out = append(out, [2]int{slot, slot + 1})
	}
	return out
}

// Selector returns the KEP-5866 shard selector that lists exactly the objects whose
// UID falls in s. An empty selector would select everything and an empty range is
// refused, so the empty set gets the one-hash range [0, 1): no UID in practice, and
// the controller's own slot check drops it if one ever hashed to 0.
func (s Set) Selector() string {
	rs := s.ranges()
	if len(rs) == 0 {
		return "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("shardRange(object.metadata.uid, '%s', '%s')", slotBound(r[0]), slotBound(r[1]))
	}
	return strings.Join(parts, " || ")
}

// String writes s as slot runs, e.g. "0-9,17,40-63"; "" for the empty set. Each
// member publishes its slots this way on its Lease.
func (s Set) String() string {
	rs := s.ranges()
	parts := make([]string, len(rs))
	for i, r := range rs {
		if r[1]-r[0] == 1 {
			parts[i] = strconv.Itoa(r[0])
		} else {
			parts[i] = fmt.Sprintf("%d-%d", r[0], r[1]-1)
		}
	}
	return strings.Join(parts, ",")
}

// ParseSet reads what String writes.
func ParseSet(text string) (Set, error) {
	var s Set
	if text == "" {
		return s, nil
	}
	for _, part := range strings.Split(text, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("slot set %q: %w", text, err)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("slot set %q: %w", text, err)
			}
		}
		if first < 0 || last >= Slots || first > last {
			return 0, fmt.Errorf("slot set %q: %q is not a run of slots in [0,%d)", text, part, Slots)
		}
		for slot := first; slot <= last; slot++ {
			s |= 1 << uint(slot)
		}
	}
	return s, nil
}

// Assign gives every slot to one of members (whose order does not matter) and returns
// the slot set of each member. With no members it returns an empty map.
//
// Rendezvous hashing with bounded load: every slot first goes to the member with the
// highest score(member, slot); then, while a member holds more than ceil(Slots/N),
// its least preferred slot moves to that slot's next choice with room. The result
// depends on the set of members only, and a membership change moves little more than
// the slots whose first choice changed.
func Assign(members []string) map[string]Set {
	out := make(map[string]Set, len(members))
	if len(members) == 0 {
		return out
	}
	ms := append([]string(nil), members...)
	sort.Strings(ms)
	capacity := (Slots + len(ms) - 1) / len(ms)

	// ranked[slot] lists member indexes, best first; scores[slot][member].
	ranked := make([][]int, Slots)
	scores := make([][]uint64, Slots)
	owner := make([]int, Slots)
	load := make([]int, len(ms))
	for slot := range Slots {
		scores[slot] = make([]uint64, len(ms))
		ranked[slot] = make([]int, len(ms))
		for i, m := range ms {
			ranked[slot][i], scores[slot][i] = i, score(m, slot)
		}
		sc := scores[slot]
		sort.Slice(ranked[slot], func(a, b int) bool { return sc[ranked[slot][a]] > sc[ranked[slot][b]] })
		owner[slot] = ranked[slot][0]
		load[owner[slot]]++
	}
	for i := range ms {
		for load[i] > capacity {
			// The slot this member scores lowest goes to its next choice with room.
			// (A member above capacity owns slots, so the loop finds one.)
			weakest, lowest := 0, uint64(math.MaxUint64)
			for slot, o := range owner {
				if o == i && scores[slot][i] <= lowest {
					weakest, lowest = slot, scores[slot][i]
				}
			}
			moved := false
			for _, j := range ranked[weakest] {
				if j != i && load[j] < capacity {
					owner[weakest] = j
					load[i]--
					load[j]++
					moved = true
					break
				}
			}
			if !moved {
				break // cannot happen: N members have room for ⌈Slots/N⌉·N ≥ Slots slots
			}
		}
	}
	for slot, i := range owner {
		out[ms[i]] |= 1 << uint(slot)
	}
	return out
}

// score is the rendezvous weight of a member for a slot.
func score(member string, slot int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	_, _ = h.Write([]byte{0, byte(slot)}) //nolint:gosec // G115: 0 <= slot < Slots fits a byte
	// FNV's last bytes mix weakly into the high bits; a finalizer spreads them.
	v := h.Sum64()
	v ^= v >> 33
	v *= 0xff51afd7ed558ccd
	v ^= v >> 33
	v *= 0xc4ceb9fe1a85ec53
	v ^= v >> 33
	return v
}
