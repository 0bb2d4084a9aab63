package sharding

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
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
			setOwned(m, Set(0x0000_0000_ffff_ffff)) // slots 0-31
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
				setOwned(m, owned)
				n := awaitHolding(t, inf, uids, owned, 30*time.Second)
				t.Logf("slots %q: the informer holds exactly its %d of %d objects", owned, n, len(uids))
			}
		})
	}
}

// setOwned makes m work on owned for the next hour, as a ring would.
func setOwned(m *Member, owned Set) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	m.validUntil = m.Clock.Now().Add(time.Hour)
	m.validUntilWall = m.wall().Add(time.Hour)
	m.setOwnedLocked(owned)
}

// awaitHolding waits until the informer holds exactly the objects of the slots in
// owned, and returns how many that is.
func awaitHolding(t *testing.T, inf cache.SharedIndexInformer, uids []types.UID, owned Set, limit time.Duration) int {
	t.Helper()
	want := map[string]bool{}
	for _, uid := range uids {
		if owned.Has(SlotOf(uid)) {
			want[string(uid)] = true
		}
	}
	deadline := time.Now().Add(limit)
	for {
		got := map[string]bool{}
		for _, o := range inf.GetStore().List() {
			got[string(o.(*metav1.PartialObjectMetadata).UID)] = true
		}
		if equal(got, want) {
			return len(want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("slots %q: the informer holds %d objects, want the %d of those slots", owned, len(got), len(want))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A ring change between an informer's list and its watch (the LIST+WATCH path, when
// streaming watch-list is off or refused) must not leave the objects of the new slots
// unseen: the watch continues the list's slots and hands the informer over to the new
// ones at the list's resourceVersion.
func TestAChangeBetweenListAndWatchIsNotMissed(t *testing.T) {
	skipWithoutShardedListAndWatch(t) // without the gate the informer lists everything and filters
	env := startAPIServer(t, true)
	ctx := t.Context()
	mc := metadata.NewForConfigOrDie(env.Config)
	uids := createBuckets(t, env, 120)
	first, second := Set(0x0000_0000_ffff_ffff), Set(0xffff_ffff_0000_0000)
	m := &Member{}
	setOwned(m, first)
	var lists, exact atomic.Int32
	lw := &Narrowed{Member: m, Inner: cache.ToListerWatcherWithContext(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if o.ResourceVersionMatch == metav1.ResourceVersionMatchExact {
				exact.Add(1)
				return mc.Resource(storageBuckets).Namespace("").List(ctx, o)
			}
			list, err := mc.Resource(storageBuckets).Namespace("").List(ctx, o)
			if lists.Add(1) == 1 {
				// The ring moves on while the first list's answer travels.
				setOwned(m, second)
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return mc.Resource(storageBuckets).Namespace("").Watch(ctx, o)
		},
	})}
	// The LIST+WATCH path: no watch-list stream, so List and Watch are separate calls.
	inf := cache.NewSharedIndexInformer(listThenWatch{lw}, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
	go inf.RunWithContext(ctx)
	awaitHolding(t, inf, uids, second, 20*time.Second)
	if lists.Load() != 1 || exact.Load() != 2 {
		t.Errorf("the informer listed %d times and the watch listed %d times at a resourceVersion; want 1 and 2 (the slots given away and those taken)",
			lists.Load(), exact.Load())
	}
}

// When the ring changes, the watch hands the informer over to the new slots without a
// relist (which client-go delays by a back-off that grows up to a minute): the objects
// of the slots taken arrive, those of the slots given away leave, and so do objects
// created and deleted while the informer did not hold their slots; several changes in a
// row, and one that takes every slot and one that gives every slot away, too.
func TestARingChangeIsHandedOverWithoutARelist(t *testing.T) {
	skipWithoutShardedListAndWatch(t)
	env := startAPIServer(t, true)
	ctx := t.Context()
	mc := metadata.NewForConfigOrDie(env.Config)
	uids := createBuckets(t, env, 120)
	m := &Member{}
	setOwned(m, Set(0x0000_0000_ffff_ffff))
	lw, relists, exact := countingNarrowed(mc, m, nil)
	inf := cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
	go inf.RunWithContext(ctx)
	awaitHolding(t, inf, uids, Set(0x0000_0000_ffff_ffff), 20*time.Second)
	if relists.Load() != 1 {
		t.Fatalf("the informer listed %d times before any ring change", relists.Load())
	}
	// The changes: overlapping sets, all slots, none, and two changes at once.
	steps := []struct {
		name  string
		owned []Set
	}{
		{"half moves on", []Set{Set(0x0000_ffff_ffff_0000)}},
		{"every slot", []Set{^Set(0)}},
		{"no slot", []Set{0}},
		{"two changes at once", []Set{Set(0xffff_0000_ffff_0000), Set(0x00ff_ff00_00ff_ff00)}},
	}
	held := Set(0x0000_0000_ffff_ffff)
	for i, step := range steps {
		// While the informer does not hold their slots (where it does not hold all):
		// one object deleted, one created.
		var gone types.UID
		uids, gone = deleteOneNotIn(t, env, uids, held)
		uids = append(uids, createBucket(t, env, fmt.Sprintf("new-%d", i)))
		for _, owned := range step.owned {
			setOwned(m, owned)
		}
		want := step.owned[len(step.owned)-1]
		n := awaitHolding(t, inf, uids, want, 10*time.Second)
		held = want
		// And after the handover, the watch goes on: a new object of the slots arrives.
		uids = append(uids, createBucket(t, env, fmt.Sprintf("after-%d", i)))
		awaitHolding(t, inf, uids, want, 10*time.Second)
		t.Logf("%s (%q): the informer holds exactly its %d objects (deleted meanwhile: %q)", step.name, want, n, gone)
	}
	if relists.Load() != 1 {
		t.Errorf("the informer listed %d times; the ring changes were handed over within the watch", relists.Load())
	}
	if exact.Load() == 0 {
		t.Error("no list at a resourceVersion: the handovers went another way")
	}
}

// A handover the API server cannot serve (the resourceVersion is too old to list at)
// falls back to a relist: the informer still ends up with exactly the new slots.
func TestAHandoverTheAPIServerCannotServeRelists(t *testing.T) {
	skipWithoutShardedListAndWatch(t)
	env := startAPIServer(t, true)
	ctx := t.Context()
	mc := metadata.NewForConfigOrDie(env.Config)
	uids := createBuckets(t, env, 60)
	m := &Member{}
	setOwned(m, Set(0x0000_0000_ffff_ffff))
	lw, relists, _ := countingNarrowed(mc, m, func() error {
		return apierrors.NewResourceExpired("the test's API server compacted that resourceVersion")
	})
	inf := cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
	go inf.RunWithContext(ctx)
	awaitHolding(t, inf, uids, Set(0x0000_0000_ffff_ffff), 20*time.Second)
	setOwned(m, Set(0xffff_ffff_0000_0000))
	awaitHolding(t, inf, uids, Set(0xffff_ffff_0000_0000), 30*time.Second)
	if relists.Load() < 2 {
		t.Errorf("the informer listed %d times; the handover failed, so it must have listed again", relists.Load())
	}
}

// countingNarrowed is a Narrowed of m over the API server's StorageBuckets that counts
// the informer's lists of its whole share (a LIST or a watch-list stream) and the
// handovers' lists at a resourceVersion; refuseExact, when set, answers the latter.
func countingNarrowed(mc metadata.Interface, m *Member, refuseExact func() error) (lw *Narrowed, relists, exact *atomic.Int32) {
	relists, exact = new(atomic.Int32), new(atomic.Int32)
	lw = &Narrowed{Member: m, Inner: cache.ToListerWatcherWithContext(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if o.ResourceVersionMatch != metav1.ResourceVersionMatchExact {
				relists.Add(1)
			} else if exact.Add(1); refuseExact != nil {
				return nil, refuseExact()
			}
			return mc.Resource(storageBuckets).Namespace("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				relists.Add(1)
			}
			return mc.Resource(storageBuckets).Namespace("").Watch(ctx, o)
		},
	})}
	return lw, relists, exact
}

// deleteOneNotIn deletes one StorageBucket whose slot is not in owned, if there is one,
// and returns the UIDs without it, and its UID.
func deleteOneNotIn(t *testing.T, env *envtest.Env, uids []types.UID, owned Set) ([]types.UID, types.UID) {
	t.Helper()
	list := &phalanksv1beta1.StorageBucketList{}
	if err := env.Client.List(t.Context(), list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		sb := &list.Items[i]
		if owned.Has(SlotOf(sb.UID)) {
			continue
		}
		if err := env.Client.Delete(t.Context(), sb); err != nil {
			t.Fatal(err)
		}
		out := make([]types.UID, 0, len(uids))
		for _, uid := range uids {
			if uid != sb.UID {
				out = append(out, uid)
			}
		}
		return out, sb.UID
	}
	return uids, ""
}

// A ring change between the end of an informer's streamed list (its watch-list stream,
// client-go's default) and the watch that continues it must not leave the objects of
// the new slots unseen. Here the stream's watch ends normally (the API server's watch
// timeout), the next watch is answered 429 (the reflector waits and watches again from
// the same resourceVersion, without listing), and the slots change meanwhile: the watch
// after that must not continue the stream's list with the new slots' selector, but make
// the informer list them.
func TestAChangeAfterAWatchListStreamEndedIsNotMissed(t *testing.T) {
	skipWithoutShardedListAndWatch(t)
	env := startAPIServer(t, true)
	ctx := t.Context()
	mc := metadata.NewForConfigOrDie(env.Config)
	uids := createBuckets(t, env, 120)
	first, second := Set(0x0000_0000_ffff_ffff), Set(0xffff_ffff_0000_0000)
	m := &Member{}
	setOwned(m, first)
	endStream := make(chan struct{})
	var watches atomic.Int32
	var streamed atomic.Bool
	lw := &Narrowed{Member: m, Inner: cache.ToListerWatcherWithContext(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return mc.Resource(storageBuckets).Namespace("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			switch watches.Add(1) {
			case 1:
				streamed.Store(o.SendInitialEvents != nil && *o.SendInitialEvents)
				w, err := mc.Resource(storageBuckets).Namespace("").Watch(ctx, o)
				if err != nil {
					return nil, err
				}
				return endsWhen(w, endStream), nil
			case 2:
				// The ring moves on while the API server turns the watch away.
				setOwned(m, second)
				return nil, apierrors.NewTooManyRequests("the test's API server is busy", 1)
			}
			return mc.Resource(storageBuckets).Namespace("").Watch(ctx, o)
		},
	})}
	inf := cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
	go inf.RunWithContext(ctx)
	awaitHolding(t, inf, uids, first, 20*time.Second)
	if !streamed.Load() {
		t.Fatal("the informer listed with a LIST rather than a watch-list stream; this case is about the stream")
	}
	// A watch that ends within a second of its start without an event is taken for a
	// broken one and makes the reflector list again: let the stream live longer.
	time.Sleep(2 * time.Second)
	close(endStream)
	awaitHolding(t, inf, uids, second, 30*time.Second)
	if watches.Load() < 3 {
		t.Errorf("the informer watched %d times; the stream ended, and a watch was turned away", watches.Load())
	}
}

// endingStream forwards a watch's events until end is closed, then ends without an
// error, as a watch the API server closes at its timeout does.
type endingStream struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func endsWhen(w watch.Interface, end <-chan struct{}) watch.Interface {
	s := &endingStream{inner: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(s.out)
		defer w.Stop()
		for {
			var e watch.Event
			var ok bool
			select {
			case <-end:
				return
			case <-s.stop:
				return
			case e, ok = <-w.ResultChan():
				if !ok {
					return
				}
			}
			select {
			case s.out <- e:
			case <-end:
				return
			case <-s.stop:
				return
			}
		}
	}()
	return s
}

func (s *endingStream) ResultChan() <-chan watch.Event { return s.out }
func (s *endingStream) Stop()                          { s.once.Do(func() { close(s.stop) }) }

// listThenWatch makes a reflector list and then watch, as it does when the API server
// refuses a watch-list stream.
type listThenWatch struct{ *Narrowed }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

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
		uids = append(uids, createBucket(t, env, fmt.Sprintf("%03d", i)))
	}
	return uids
}

// createBucket creates the StorageBucket sb-suffix in the namespace team.
func createBucket(t *testing.T, env *envtest.Env, suffix string) types.UID {
	t.Helper()
	sb := &phalanksv1beta1.StorageBucket{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "sb-" + suffix},
		Spec: phalanksv1beta1.StorageBucketSpec{
			BucketName: "bucket-" + suffix, Endpoint: "https://s3.example.com",
			CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "s3"},
		},
	}
	if err := env.Client.Create(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	return sb.UID
}
