package apiproxy_test

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/phalanks/phalanks-operator/test/harness/apiproxy"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
)

// The proxy answers the requests its rule picks, and ends the watches in flight: a
// client's informer watches again.
func TestTheProxyAnswersChosenRequestsAndEndsWatches(t *testing.T) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	env, err := envtest.Start(envtest.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	p := apiproxy.StartForTest(t, env.Config)
	cs := kubernetes.NewForConfigOrDie(p.Config())
	ctx := t.Context()

	p.Set(func(r *http.Request) apiproxy.Action {
		if resource, _ := apiproxy.Resource(r); r.Method == http.MethodPost && resource == "configmaps" {
			return apiproxy.InternalError
		}
		return apiproxy.Action{}
	})
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "refused"}}, metav1.CreateOptions{})
	if !apierrors.IsInternalError(err) {
		t.Errorf("a create the rule answers 500: %v", err)
	}
	p.Set(nil)

	factory := informers.NewSharedInformerFactory(cs, 0)
	inf := factory.Core().V1().ConfigMaps().Informer()
	watches := 0
	_ = inf.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) {})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory.Start(wctx.Done())
	if !cache.WaitForCacheSync(wctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync through the proxy")
	}
	var mu sync.Mutex
	var rewatches []string
	p.Set(func(r *http.Request) apiproxy.Action {
		if resource, _ := apiproxy.Resource(r); resource == "configmaps" && apiproxy.IsWatch(r) {
			mu.Lock()
			rewatches = append(rewatches, r.URL.RawQuery)
			mu.Unlock()
		}
		return apiproxy.Action{}
	})
	configMaps := func(r *http.Request) bool { resource, _ := apiproxy.Resource(r); return resource == "configmaps" }
	// A watch that ends within a second of its start without an event is taken for a
	// broken one, and the informer lists again: end an older one.
	deadline := time.Now().Add(10 * time.Second)
	for watches == 0 && time.Now().Before(deadline) {
		for _, age := range p.Watching(configMaps) {
			if age > 2*time.Second {
				watches = p.EndWatches(configMaps)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if watches == 0 {
		t.Fatal("the proxy holds no ConfigMap watch of the informer")
	}
	// The informer watches again from where it was, as after the API server's watch
	// timeout, rather than listing again; and it sees what changes after.
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, exists, _ := inf.GetStore().GetByKey("default/after"); !exists; _, exists, _ = inf.GetStore().GetByKey("default/after") {
		if time.Now().After(deadline.Add(20 * time.Second)) {
			t.Fatal("the informer did not watch again after its watch was ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, q := range rewatches {
		v, _ := url.ParseQuery(q)
		if v.Get("sendInitialEvents") == "true" || v.Get("resourceVersion") == "" {
			t.Errorf("after its watch was ended the informer listed again (watch %s); want a watch from its resourceVersion", q)
		}
	}
	if len(rewatches) == 0 {
		t.Error("the informer did not watch again")
	}
}
