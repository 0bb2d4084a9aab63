package storagebucket

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/sharding"
	"github.com/phalanks/phalanks-operator/test/harness/apiproxy"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
)

// The fence's live read of the StorageBucket may take longer than what is left of the
// replica's ownership: the API server is slow (the same slowness that fails the Lease
// renewals), or the process was paused while the answer travelled. The fence must look
// at the ownership again once the answer came, rather than create the bucket of a
// StorageBucket whose slot another replica has meanwhile taken over (and whose
// deletion it may have finished: an orphaned bucket). The pass's context is not
// cancelled here, as for a process that resumes before the lapse's cancellation ran.
func TestTheFenceChecksOwnershipAgainAfterItsLiveRead(t *testing.T) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(phalanksv1beta1.AddToScheme(scheme))
	env, err := envtest.Start(envtest.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := t.Context()
	for _, ns := range []string{"team", "ring"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	api := apiproxy.StartForTest(t, env.Config)
	const lease, renew = 3 * time.Second, time.Second
	m := &sharding.Member{Leases: kubernetes.NewForConfigOrDie(api.Config()).CoordinationV1(), Namespace: "ring", Ring: "test",
		Identity: "replica", LeaseDuration: lease, RenewPeriod: renew, Log: testr.New(t)}
	mctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Start(mctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if owned, _ := m.Owned(); owned == sharding.All {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica owns no slots after 15s")
		}
	}
	sb := &phalanksv1beta1.StorageBucket{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "slow-fence"},
		Spec: phalanksv1beta1.StorageBucketSpec{BucketName: "slow-fence", Endpoint: "https://s3.example.com",
			CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "s3"}}}
	if err := env.Client.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	reader, err := client.New(api.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{api: reader, opts: Options{Shard: m}}

	held, release := make(chan struct{}, 1), make(chan struct{})
	api.Set(func(req *http.Request) apiproxy.Action {
		switch resource, name := apiproxy.Resource(req); {
		case req.Method == http.MethodGet && resource == "storagebuckets" && name == sb.Name:
			select {
			case held <- struct{}{}:
			default:
			}
			return apiproxy.Action{HoldAnswer: release}
		case req.Method == http.MethodPut && resource == "leases":
			return apiproxy.TooManyRequests
		}
		return apiproxy.Action{}
	})
	result := make(chan error, 1)
	go func() { result <- r.fence(sb, false)(context.Background()) }()
	<-held
	for deadline := time.Now().Add(3 * lease); m.OwnsUID(sb.UID); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replica's ownership did not lapse with its renewals answered 429")
		}
	}
	close(release)
	err = <-result
	if !fenced(err) || !strings.Contains(err.Error(), "lost the StorageBucket's shard slot") {
		t.Errorf("the fence answered %v after the ownership lapsed during its read; want it fenced for the lost slot", err)
	}
}
