package sharding

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
)

var storageBuckets = schema.GroupVersionResource{Group: "phalanks.io", Version: "v1beta1", Resource: "storagebuckets"}

func startAPIServer(t *testing.T, gate bool) *envtest.Env {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := phalanksv1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	env, err := envtest.Start(envtest.Options{Scheme: scheme, FeatureGates: map[string]bool{shardedListAndWatch: gate}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env
}

// The feature gate of KEP-5866 (alpha in Kubernetes 1.36).
const shardedListAndWatch = "ShardedListAndWatch"

// skipWithoutShardedListAndWatch skips a case that turns the gate on where the API
// server has no such gate: the case with the gate off covers such servers (the gate is
// then left out, and the server has no shard selectors at all).
func skipWithoutShardedListAndWatch(t *testing.T) {
	t.Helper()
	known, err := envtest.KnowsFeatureGate(shardedListAndWatch)
	if err != nil {
		t.Fatal(err)
	}
	if !known {
		t.Skipf("this Kubernetes version has no %s gate; ShardedListAndWatch=false tests the replicas' fallback on it", shardedListAndWatch)
	}
}

// Both paths of the fallback: an API server with the ShardedListAndWatch gate serves
// each replica its share; one without it, or an older one that has no such gate, is
// detected, and the replica filters.
func TestServerSideShardingIsDetectedAndListsOnlyTheOwnedSlots(t *testing.T) {
	for _, gate := range []bool{false, true} {
		t.Run(fmt.Sprintf("ShardedListAndWatch=%t", gate), func(t *testing.T) {
			if gate {
				skipWithoutShardedListAndWatch(t)
			}
			env := startAPIServer(t, gate)
			ctx := t.Context()
			mc := metadata.NewForConfigOrDie(env.Config)
			supported, err := ServerSideSupported(ctx, mc, storageBuckets)
			if err != nil || supported != gate {
				t.Fatalf("ServerSideSupported = %v, %v; the gate is %v", supported, err, gate)
			}
			if !gate {
				return
			}
			uids := createBuckets(t, env, 120)

			m := &Member{}
			m.init()
			m.set(Set(0x0000_0000_ffff_ffff), nil) // slots 0-31
			lw := &Narrowed{Member: m, Inner: cache.ToListerWatcherWithContext(&cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return mc.Resource(storageBuckets).Namespace("").List(ctx, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return mc.Resource(storageBuckets).Namespace("").Watch(ctx, o)
				},
			})}
			inf := cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
			go inf.RunWithContext(ctx)
			for _, owned := range []Set{Set(0x0000_0000_ffff_ffff), Set(0xffff_0000_ffff_0000), 0} {
				m.set(owned, nil)
				want := map[string]bool{}
				for _, uid := range uids {
					if owned.Has(SlotOf(uid)) {
						want[string(uid)] = true
					}
				}
				deadline := time.Now().Add(30 * time.Second)
				for {
					got := map[string]bool{}
					for _, o := range inf.GetStore().List() {
						got[string(o.(*metav1.PartialObjectMetadata).UID)] = true
					}
					if equal(got, want) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("slots %q: the informer holds %d objects, want the %d of those slots", owned, len(got), len(want))
					}
					time.Sleep(100 * time.Millisecond)
				}
				t.Logf("slots %q: the informer holds exactly its %d of %d objects", owned, len(want), len(uids))
			}
		})
	}
}

func equal(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func createBuckets(t *testing.T, env *envtest.Env, n int) []types.UID {
	t.Helper()
	ctx := t.Context()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}); err != nil {
		t.Fatal(err)
	}
	var uids []types.UID
	for i := range n {
		sb := &phalanksv1beta1.StorageBucket{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: fmt.Sprintf("sb-%03d", i)},
			Spec: phalanksv1beta1.StorageBucketSpec{
				BucketName: fmt.Sprintf("bucket-%03d", i), Endpoint: "https://s3.example.com",
				CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "s3"},
			},
		}
		if err := env.Client.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		uids = append(uids, sb.UID)
	}
	return uids
}

// A randomised ring: members join, leave gracefully and die (stop renewing without
// deleting their Lease), against a real API server. After every change the ring must
// converge within the lease duration plus two renew periods, and from then on every
// slot is owned by exactly one live member at every sampled instant.
func TestRandomJoinsAndLeavesKeepEverySlotOwnedOnce(t *testing.T) {
	env := startAPIServer(t, false)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	const ns = "ring"
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const lease, renew = 2 * time.Second, 200 * time.Millisecond
	type running struct {
		m    *Member
		stop context.CancelFunc
		done chan struct{}
	}
	var mu sync.Mutex
	live := map[string]*running{}
	next := 0
	join := func() {
		next++
		m := &Member{Leases: cs.CoordinationV1(), Namespace: ns, Ring: "test", Identity: fmt.Sprintf("member-%d", next),
			LeaseDuration: lease, RenewPeriod: renew, Log: testr.New(t).WithName(fmt.Sprintf("member-%d", next))}
		ctx, cancel := context.WithCancel(context.Background())
		r := &running{m: m, stop: cancel, done: make(chan struct{})}
		go func() { _ = m.Start(ctx); close(r.done) }()
		mu.Lock()
		live[m.Identity] = r
		mu.Unlock()
	}
	remove := func(kill bool) string {
		mu.Lock()
		defer mu.Unlock()
		for id, r := range live {
			r.m.mu.Lock()
			r.m.abandon = kill
			r.m.mu.Unlock()
			r.stop()
			<-r.done
			delete(live, id)
			return id
		}
		return ""
	}
	t.Cleanup(func() {
		for len(live) > 0 {
			remove(false)
		}
	})
	// converged: every live member owns what Assign gives it among the live members.
	converged := func() error {
		mu.Lock()
		defer mu.Unlock()
		ids := make([]string, 0, len(live))
		for id := range live {
			ids = append(ids, id)
		}
		want := Assign(ids)
		for id, r := range live {
			if owned, _ := r.m.Owned(); owned != want[id] {
				return fmt.Errorf("%s owns %q, not its share %q among %v", id, owned, want[id], ids)
			}
		}
		return nil
	}
	check := func() error {
		mu.Lock()
		defer mu.Unlock()
		var union Set
		for id, r := range live {
			owned, _ := r.m.Owned()
			if union&owned != 0 {
				return fmt.Errorf("%s owns slots another live member owns: %q", id, union&owned)
			}
			union |= owned
		}
		if len(live) > 0 && union != All {
			return fmt.Errorf("slots without a live owner: %q", ^union)
		}
		return nil
	}

	liveIDs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var ids []string
		for id := range live {
			ids = append(ids, id)
		}
		return ids
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)) //nolint:gosec // G404: a random test schedule, not a secret
	// awaitConvergence polls converged until limit and returns how long it took.
	awaitConvergence := func(limit time.Duration, what string) time.Duration {
		start := time.Now()
		for converged() != nil {
			if time.Since(start) > limit {
				t.Fatalf("%s: no convergence after %s: %v", what, limit, converged())
			}
			time.Sleep(20 * time.Millisecond)
		}
		return time.Since(start)
	}
	join()
	join()
	// The first two must have published their Leases and seen each other before the
	// first step: a member killed before its Lease exists was never an owner, and its
	// slots are no takeover.
	awaitConvergence(10*time.Second, "the first two members")
	worst := time.Duration(0)
	for step := range 14 {
		before := Assign(liveIDs())
		var what, gone string
		wantWindow := time.Duration(0)
		switch op := rng.IntN(4); {
		case len(live) <= 1 || op < 2 && len(live) < 6:
			join()
			what = "join"
		case op == 2:
			gone, wantWindow = remove(false), 2*renew
			what = "leave " + gone
		default:
			gone, wantWindow = remove(true), lease+2*renew
			what = "kill " + gone
		}
		// A second of API latency on a loaded machine on top of the bound.
		took := awaitConvergence(lease+2*renew+time.Second, fmt.Sprintf("step %d (%s)", step, what))
		// The slots of a member that went were taken over with the window in which it
		// may have stopped working: two renew periods after a leave, the lease duration
		// on top after a kill.
		if gone != "" {
			mu.Lock()
			for id, r := range live {
				owned, _ := r.m.Owned()
				for slot := range Slots {
					if owned.Has(slot) && before[gone].Has(slot) {
						if g := r.m.Gained(slot); g.Window != wantWindow {
							t.Errorf("step %d (%s): %s took slot %d over with window %s, want %s", step, what, id, slot, g.Window, wantWindow)
						}
					}
				}
			}
			mu.Unlock()
		}
		worst = max(worst, took)
		// Converged: sampled for a few renew periods, the invariant holds throughout.
		for range 20 {
			if err := check(); err != nil {
				t.Fatalf("step %d (%s): after convergence: %v", step, what, err)
			}
			time.Sleep(renew / 4)
		}
		t.Logf("step %d: %s, %d members, converged in %s", step, what, len(live), took.Round(time.Millisecond))
	}
	t.Logf("slowest convergence %s (lease %s, renew %s)", worst.Round(time.Millisecond), lease, renew)
}
