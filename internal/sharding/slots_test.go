package sharding

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	serversharding "k8s.io/apiserver/pkg/sharding"
)

// The API server's own parser and matcher decide which objects a selector lists; the
// client-side path must agree with them on every UID.
func TestSelectorListsExactlyTheObjectsOfItsSlots(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // G404: a fixed test sequence, not a secret
	sets := []Set{0, All, 1, 1 << 63, Set(rng.Uint64()), Set(rng.Uint64()), Set(rng.Uint64() & rng.Uint64())}
	for _, set := range sets {
		sel, err := serversharding.Parse(set.Selector())
		if err != nil {
			t.Fatalf("the API server refuses the selector of %q: %v", set, err)
		}
		for range 2000 {
			obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: uuid.NewUUID()}}
			matches, err := sel.Matches(obj)
			if err != nil {
				t.Fatal(err)
			}
			if want := set.Has(SlotOf(obj.UID)); matches != want {
				t.Fatalf("set %q: uid %s in slot %d: the API server selects it: %v, SlotOf says %v",
					set, obj.UID, SlotOf(obj.UID), matches, want)
			}
		}
	}
}

func TestSlotSetsRoundTrip(t *testing.T) {
	for _, set := range []Set{0, All, 1, 0b1011, 1 << 63, 0xf0f0_0000_0000_0001} {
		back, err := ParseSet(set.String())
		if err != nil || back != set {
			t.Fatalf("ParseSet(%q) = %v, %v; want %v", set.String(), back, err, set)
		}
	}
	for _, bad := range []string{"64", "-1", "3-2", "a", "1,,2"} {
		if _, err := ParseSet(bad); err == nil {
			t.Errorf("ParseSet(%q) accepted", bad)
		}
	}
}

func members(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("phalanks-controller-manager-7d9f8-%05d", i*7919)
	}
	return out
}

func TestAssignGivesEverySlotToOneMemberEvenly(t *testing.T) {
	for n := 1; n <= 12; n++ {
		got := Assign(members(n))
		var union Set
		lo, hi := Slots, 0
		for _, s := range got {
			if union&s != 0 {
				t.Fatalf("N=%d: a slot has two owners", n)
			}
			union |= s
			lo, hi = min(lo, s.Len()), max(hi, s.Len())
		}
		if union != All {
			t.Fatalf("N=%d: slots without an owner: %v", n, ^union)
		}
		// No member above its bounded load; so none below what the others leave.
		capacity := (Slots + n - 1) / n
		if len(got) != n || hi > capacity || lo < Slots-(n-1)*capacity {
			t.Fatalf("N=%d: loads from %d to %d slots", n, lo, hi)
		}
	}
	if len(Assign(nil)) != 0 {
		t.Fatal("slots assigned without members")
	}
}

// A member joining or leaving moves about 1/N of the slots: the bound allows the few
// extra moves the load bound causes.
func TestAMembershipChangeMovesAboutOneNth(t *testing.T) {
	for n := 2; n <= 10; n++ {
		ms := members(n + 1)
		before, after := Assign(ms[:n]), Assign(ms)
		moved := 0
		for slot := range Slots {
			if owner(before, slot) != owner(after, slot) {
				moved++
			}
		}
		limit := Slots/(n+1) + Slots/8
		if moved > limit {
			t.Errorf("N=%d→%d: %d of %d slots moved (at most %d expected)", n, n+1, moved, Slots, limit)
		}
		t.Logf("N=%d→%d: %d slots moved (ideal %d)", n, n+1, moved, Slots/(n+1))
	}
}

func owner(a map[string]Set, slot int) string {
	for m, s := range a {
		if s.Has(slot) {
			return m
		}
	}
	return ""
}

func TestSlotsSpreadUIDsEvenly(t *testing.T) {
	counts := make([]int, Slots)
	const n = 64000
	for range n {
		counts[SlotOf(types.UID(uuid.NewUUID()))]++
	}
	for slot, c := range counts {
		// 1000 expected per slot; 6 standard deviations is ±190.
		if c < 810 || c > 1190 {
			t.Fatalf("slot %d got %d of %d UIDs", slot, c, n)
		}
	}
}

func TestFNV64aIsTheStandardHash(t *testing.T) {
	for _, s := range []string{"", "a", "0b5e6a1c-0000-4000-8000-000000000001", string(uuid.NewUUID())} {
		h := fnv.New64a()
		_, _ = h.Write([]byte(s))
		if got, want := FNV64a(s), h.Sum64(); got != want {
			t.Errorf("FNV64a(%q) = %x, want %x", s, got, want)
		}
	}
}
