package managedcache

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// cfg is a real kube-apiserver's (envtest, from KUBEBUILDER_ASSETS: make test-olmv1 points
// it at the project's tool binaries).
var cfg *rest.Config

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "managedcache: KUBEBUILDER_ASSETS must name a directory with kube-apiserver and etcd (make test-olmv1 sets it)")
		os.Exit(2)
	}
	env := &envtest.Environment{}
	var err error
	if cfg, err = env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "managedcache: start envtest:", err)
		os.Exit(2)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "managedcache: stop envtest:", err)
	}
	os.Exit(code)
}

var (
	configMaps = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	secrets    = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
)

// recorder is a source's far end: the names of the objects whose events reached it.
type recorder struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (r *recorder) has(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[name]
}

// start starts a source of tc that records the names of created objects, as
// operator-controller's ClusterExtension controller is fed (with a predicate).
func start(ctx context.Context, t *testing.T, tc TrackingCache) *recorder {
	t.Helper()
	r := &recorder{seen: map[string]bool{}}
	h := handler.Funcs{CreateFunc: func(_ context.Context, e event.CreateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.seen[e.Object.GetName()] = true
	}}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	t.Cleanup(q.ShutDown)
	if err := tc.Source(h, predicate.ResourceVersionChangedPredicate{}).Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	return r
}

func newCache(t *testing.T) (context.Context, *trackingCache, client.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := NewTrackingCache(logr.Discard(), cfg, cache.Options{Scheme: clientgoscheme.Scheme, Mapper: mapper})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tc.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("tracking cache: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, tc.(*trackingCache), c
}

func user(name, uid string) client.Object {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}}
}

func create(ctx context.Context, t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	obj.SetNamespace("default")
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond for up to a minute.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within a minute: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func watching(tc *trackingCache) sets.Set[schema.GroupVersionKind] {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return sets.KeySet(tc.informers)
}

func TestEventsOfWatchedKindsReachSourcesStartedBeforeAndAfter(t *testing.T) {
	ctx, tc, c := newCache(t)
	before := start(ctx, t, tc)
	if err := tc.Watch(ctx, user("ext", "uid-1"), sets.New(configMaps)); err != nil {
		t.Fatal(err)
	}
	after := start(ctx, t, tc)
	create(ctx, t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched"}})
	eventually(t, "both sources see the ConfigMap", func() bool { return before.has("watched") && after.has("watched") })
	if !watching(tc).Equal(sets.New(configMaps)) {
		t.Fatalf("informers %v, want ConfigMaps only", watching(tc))
	}
}

func TestAKindStopsWhenItsLastUserIsFreed(t *testing.T) {
	ctx, tc, c := newCache(t)
	seen := start(ctx, t, tc)
	a, b := user("a", "uid-a"), user("b", "uid-b")
	for _, u := range []client.Object{a, b} {
		if err := tc.Watch(ctx, u, sets.New(configMaps)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tc.Free(ctx, a); err != nil {
		t.Fatal(err)
	}
	create(ctx, t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b-still-watches"}})
	eventually(t, "the ConfigMap's event while b watches", func() bool { return seen.has("b-still-watches") })

	// A user of the same name but another UID is another user: freeing it frees nothing.
	if err := tc.Free(ctx, user("b", "uid-b-recreated")); err != nil {
		t.Fatal(err)
	}
	if !watching(tc).Has(configMaps) {
		t.Fatal("freeing a re-created user of the same name stopped b's informer")
	}

	if err := tc.Free(ctx, b); err != nil {
		t.Fatal(err)
	}
	if len(watching(tc)) != 0 {
		t.Fatalf("informers %v after every user was freed", watching(tc))
	}
	// The ConfigMap informer is gone: a ConfigMap created now is not delivered, while a
	// Secret watched afterwards, created after it, is.
	create(ctx, t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nobody-watches"}})
	if err := tc.Watch(ctx, a, sets.New(secrets)); err != nil {
		t.Fatal(err)
	}
	create(ctx, t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "a-watches-secrets"}})
	eventually(t, "the Secret's event", func() bool { return seen.has("a-watches-secrets") })
	if seen.has("nobody-watches") {
		t.Fatal("a ConfigMap's event arrived after the last ConfigMap user was freed")
	}
}

func TestWatchingAKindTheServerDoesNotServeFails(t *testing.T) {
	ctx, tc, _ := newCache(t)
	err := tc.Watch(ctx, user("ext", "uid-1"), sets.New(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Nothing"}))
	if err == nil {
		t.Fatal("Watch of a kind the server does not serve succeeded")
	}
	if len(watching(tc)) != 0 {
		t.Fatalf("informers %v after a failed Watch", watching(tc))
	}
}

func TestWatchRefusesAUserWithoutUID(t *testing.T) {
	ctx, tc, _ := newCache(t)
	if err := tc.Watch(ctx, user("ext", ""), sets.New(configMaps)); err == nil {
		t.Fatal("Watch for a user without UID succeeded")
	}
}
