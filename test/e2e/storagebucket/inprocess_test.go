package storagebucket_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/controllers/storagebucket"
	"github.com/phalanks/phalanks-operator/internal/s3bucket"
	"github.com/phalanks/phalanks-operator/internal/sharding"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/tcpproxy"
)

// These specs run the controller in the test process, to give its informer cache a
// connection of its own to the API server (through a TCP proxy the spec stalls) while
// its live reads and writes go straight there: a replica whose cache fell behind.

// inProcess is a manager running in the test process.
type inProcess struct {
	// watch is the TCP proxy between its cache and the API server.
	watch *tcpproxy.Proxy
	cache cache.Cache
	stop  func()
}

// startInProcess runs a manager with the StorageBucket controller whose cache reaches
// the API server through a TCP proxy. shard, when set, makes it a ring member;
// leaderElection names a leader election Lease it competes for; options change the
// controller's options.
func startInProcess(p *platform, shard *sharding.Member, leaderElection string, options ...func(*storagebucket.Options)) *inProcess {
	GinkgoHelper()
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	u, err := url.Parse(p.env.Config.Host)
	Expect(err).NotTo(HaveOccurred())
	proxy, err := tcpproxy.Start(u.Host)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(proxy.Close)
	viaProxy := rest.CopyConfig(p.env.Config)
	viaProxy.Host = "https://" + proxy.Addr
	opts := p.env.ManagerOptions()
	// Each spec's manager registers the controller again in this process.
	opts.Controller.SkipNameValidation = new(true)
	opts.NewCache = func(_ *rest.Config, o cache.Options) (cache.Cache, error) {
		o.HTTPClient, err = rest.HTTPClientFor(viaProxy)
		if err != nil {
			return nil, err
		}
		return cache.New(viaProxy, o)
	}
	if leaderElection != "" {
		opts.LeaderElection, opts.LeaderElectionID, opts.LeaderElectionNamespace = true, leaderElection, "phalanks-system"
	}
	mgr, err := ctrl.NewManager(p.env.Config, opts)
	Expect(err).NotTo(HaveOccurred())
	o := storagebucket.Options{Concurrency: 2, Shard: shard, EndpointAllowCIDRs: []string{"127.0.0.1/32"}}
	for _, f := range options {
		f(&o)
	}
	_, err = storagebucket.SetupWithManager(mgr, o)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	stop := func() {
		cancel()
		<-done
	}
	DeferCleanup(stop)
	return &inProcess{watch: proxy, cache: mgr.GetCache(), stop: stop}
}

var _ = Describe("A replica whose cache fell behind the API server", func() {
	It("never re-creates the bucket of a deleted StorageBucket, nor acts for a re-created one with the old one's identity", func() {
		ctx := context.Background()
		p := startPlatform(nil)
		watch := startInProcess(p, nil, "").watch
		x := storageBucket("team", "fenced", "fenced-bucket", p.s3)
		x.Spec.DeletionPolicy = phalanksv1beta1.DeletionDelete
		Expect(p.c.Create(ctx, x)).To(Succeed())
		eventuallyReady(p.c, x, metav1.ConditionTrue, "BucketReady", time.Minute)
		Expect(bucketExists(p.s3, "fenced-bucket")).To(BeTrue())

		By("stalling the cache's watch; meanwhile the StorageBucket is deleted as another replica would: bucket, then finalizer")
		watch.Stall()
		s3c, err := p.s3.Client()
		Expect(err).NotTo(HaveOccurred())
		Expect(s3c.RemoveBucket(ctx, "fenced-bucket")).To(Succeed())
		Expect(p.c.Delete(ctx, x)).To(Succeed())
		Expect(p.c.Get(ctx, client.ObjectKeyFromObject(x), x)).To(Succeed())
		controllerutil.RemoveFinalizer(x, phalanksv1beta1.FinalizerBucketDeletion)
		Expect(p.c.Update(ctx, x)).To(Succeed())
		eventuallyGone(p.c, x)

		By("its next probes find no bucket; the fence, asking the API server, keeps it from creating one")
		Consistently(func() bool { return bucketExists(p.s3, "fenced-bucket") }).
			WithTimeout(2*x.Spec.HealthCheck.IntervalDuration()).WithPolling(200*time.Millisecond).Should(BeFalse(),
			"the bucket of a deleted StorageBucket was created again")

		By("a new StorageBucket of the same name: the stale replica does not create its bucket under the old UID")
		again := storageBucket("team", "fenced", "fenced-bucket", p.s3)
		Expect(p.c.Create(ctx, again)).To(Succeed())
		Consistently(func() bool { return bucketExists(p.s3, "fenced-bucket") }).
			WithTimeout(x.Spec.HealthCheck.IntervalDuration() + time.Second).WithPolling(200 * time.Millisecond).Should(BeFalse())

		By("once the cache catches up, the new StorageBucket gets its bucket, tagged with its own UID")
		watch.Resume()
		eventuallyReady(p.c, again, metav1.ConditionTrue, "BucketReady", time.Minute)
		t, err := s3c.GetBucketTagging(ctx, "fenced-bucket")
		Expect(err).NotTo(HaveOccurred())
		Expect(t.ToMap()).To(HaveKeyWithValue(s3bucket.TagOwnerUID, string(again.UID)))
		var leftovers []string
		for obj := range s3c.ListObjectsIter(ctx, "fenced-bucket", miniogo.ListObjectsOptions{Recursive: true}) {
			leftovers = append(leftovers, obj.Key)
		}
		Expect(leftovers).To(BeEmpty())
	})
})

var _ = Describe("A replica that is not the leader", func() {
	It("leaves no handover work behind when it stops", func() {
		ctx := context.Background()
		p := startPlatform(nil)
		// More StorageBuckets than the handover channel holds (the controller's
		// concurrency, 2), so a handover that outlives its controller blocks.
		for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
			Expect(p.c.Create(ctx, storageBucket("team", "idle-"+name, "idle-"+name, p.s3))).To(Succeed())
		}
		// Someone else holds the leader election Lease for the whole spec.
		holder, duration := "someone-else", int32(3600)
		now := metav1.NewMicroTime(time.Now())
		Expect(p.c.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "phalanks-system", Name: "elected"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration, AcquireTime: &now, RenewTime: &now},
		})).To(Succeed())
		cs := kubernetes.NewForConfigOrDie(p.env.Config)
		member := &sharding.Member{Leases: cs.CoordinationV1(), Namespace: "phalanks-system", Ring: "inprocess",
			Identity: "only", LeaseDuration: 3 * time.Second, RenewPeriod: 500 * time.Millisecond,
			Log: ctrl.Log.WithName("shard")}
		stop := startInProcess(p, member, "elected").stop
		Eventually(func() sharding.Set { s, _ := member.Owned(); return s }).
			WithTimeout(30 * time.Second).Should(Equal(sharding.All))
		Eventually(func() int { return storageBucketGoroutines() }).
			WithTimeout(30*time.Second).Should(BeNumerically(">", 0), "the controller's goroutines never started")
		stop()
		Eventually(storageBucketGoroutines).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(BeZero(),
			func() string {
				return "goroutines of the StorageBucket controller outlived its manager:\n" + storageBucketStacks()
			})
	})
})

// storageBucketStacks returns the stacks of the goroutines running the controller's code.
func storageBucketStacks() string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "controllers/storagebucket.") && !strings.Contains(g, "storageBucketStacks") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

func storageBucketGoroutines() int {
	if s := storageBucketStacks(); s != "" {
		return strings.Count(s, "goroutine ")
	}
	return 0
}

var _ = Describe("A replica whose StorageBucket was replaced by a namesake in another replica's share", func() {
	It("forgets the old one: no series, nothing scheduled under its name", func() {
		ctx := context.Background()
		p := startPlatform(nil)
		cs := kubernetes.NewForConfigOrDie(p.env.Config)
		member := func(id string) *sharding.Member {
			return &sharding.Member{Leases: cs.CoordinationV1(), Namespace: "phalanks-system", Ring: "namesakes",
				Identity: id, LeaseDuration: 3 * time.Second, RenewPeriod: 500 * time.Millisecond, Log: ctrl.Log.WithName(id)}
		}
		// Replica a runs the controller (two workers); b is only a member of the ring:
		// whatever falls in its share, nobody in this process probes.
		a, b := member("a"), member("b")
		bctx, stopB := context.WithCancel(ctx)
		bDone := make(chan struct{})
		go func() { defer close(bDone); _ = b.Start(bctx) }()
		DeferCleanup(func() { stopB(); <-bDone })
		m := startInProcess(p, a, "")
		Eventually(func() int { s, _ := a.Owned(); return s.Len() }).WithTimeout(30 * time.Second).Should(Equal(sharding.Slots / 2))
		inShare := func(m *sharding.Member) func(*phalanksv1beta1.StorageBucket) bool {
			return func(sb *phalanksv1beta1.StorageBucket) bool { s, _ := m.Owned(); return s.Has(sharding.SlotOf(sb.UID)) }
		}
		x := createInShare(p.c, "namesake", p.s3.URL, p.s3, inShare(a))
		Eventually(func() bool { return exportsUp("team", "namesake") }).WithTimeout(time.Minute).Should(BeTrue(),
			"replica a never probed its StorageBucket")

		By("both of a's workers held by probes an S3 proxy keeps waiting")
		slow := p.s3.StartProxyForTest(GinkgoT())
		gate, held := make(chan struct{}), atomic.Int32{}
		slow.Observe(func(*http.Request) { held.Add(1); <-gate })
		release := sync.OnceFunc(func() { close(gate) })
		DeferCleanup(release)
		for _, name := range []string{"holder-1", "holder-2"} {
			createInShare(p.c, name, slow.URL, p.s3, inShare(a))
		}
		Eventually(held.Load).WithTimeout(30 * time.Second).Should(BeNumerically(">=", 2))

		By("meanwhile the StorageBucket is deleted and a namesake lands in b's share, and a's cache sees both")
		deleteAsAnotherReplica(p.c, x)
		y := createInShare(p.c, "namesake", p.s3.URL, p.s3, inShare(b))
		Eventually(func() types.UID {
			seen := &phalanksv1beta1.StorageBucket{}
			_ = m.cache.Get(ctx, client.ObjectKeyFromObject(y), seen)
			return seen.UID
		}).WithTimeout(30 * time.Second).Should(Equal(y.UID))

		By("once a worker is free, a's pass under that name finds the namesake, not its own")
		release()
		Eventually(func() bool { return exportsUp("team", "namesake") }).WithTimeout(2*x.Spec.HealthCheck.IntervalDuration()).
			WithPolling(100*time.Millisecond).Should(BeFalse(), "replica a still exports the series of a StorageBucket that is gone")
		Consistently(func() bool { return exportsUp("team", "namesake") }).WithTimeout(2*x.Spec.HealthCheck.IntervalDuration()).
			Should(BeFalse(), "the old StorageBucket is still on a's schedule and came back")
	})
})

// createInShare creates a StorageBucket named name on endpoint, again and again until its
// UID falls in the share inShare accepts (deleting each that does not), and returns it.
func createInShare(c client.Client, name, endpoint string, s3 *minio.Server, inShare func(*phalanksv1beta1.StorageBucket) bool) *phalanksv1beta1.StorageBucket {
	GinkgoHelper()
	ctx := context.Background()
	for {
		sb := storageBucket("team", name, name+"-bucket", s3)
		sb.Spec.Endpoint = endpoint
		if endpoint != s3.URL {
			// Probes that wait as long as the spec needs.
			sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: time.Minute}
			sb.Spec.HealthCheck.Timeout = &metav1.Duration{Duration: 30 * time.Second}
		}
		Expect(c.Create(ctx, sb)).To(Succeed())
		if inShare(sb) {
			return sb
		}
		deleteAsAnotherReplica(c, sb)
	}
}

// deleteAsAnotherReplica deletes a StorageBucket and removes its finalizer, if it has
// one, and waits until it is gone.
func deleteAsAnotherReplica(c client.Client, sb *phalanksv1beta1.StorageBucket) {
	GinkgoHelper()
	ctx := context.Background()
	Expect(c.Delete(ctx, sb)).To(Succeed())
	Eventually(func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(sb), sb); err != nil {
			return client.IgnoreNotFound(err)
		}
		if controllerutil.RemoveFinalizer(sb, phalanksv1beta1.FinalizerBucketDeletion) {
			_ = c.Update(ctx, sb)
		}
		return errors.New("still there")
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// exportsUp reports whether this process exports phalanks_storagebucket_up for the
// StorageBucket.
func exportsUp(namespace, name string) bool {
	GinkgoHelper()
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != "phalanks_storagebucket_up" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["storagebucket_namespace"] == namespace && labels["storagebucket"] == name {
				return true
			}
		}
	}
	return false
}
