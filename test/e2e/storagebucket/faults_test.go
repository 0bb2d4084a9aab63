package storagebucket_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
)

// ringFlags run a manager as a member of a shard ring with this lease and renew period,
// writing every probe's lastProbeTime (a one-second heartbeat).
func ringFlags(lease, renew time.Duration) []string {
	return []string{"--leader-elect", "--leader-elect-namespace", "phalanks-system",
		"--storagebucket-shard-lease-duration", lease.String(), "--storagebucket-shard-renew-period", renew.String(),
		"--storagebucket-status-heartbeat", "1s"}
}

// managedBuckets creates n managed StorageBuckets at depth on MinIO through the
// endpoint, deleted with their StorageBucket when del, and returns their names.
func managedBuckets(c client.Client, s3 *minio.Server, endpoint, prefix string, n int, depth phalanksv1beta1.ProbeDepth, del bool) map[string]bool {
	GinkgoHelper()
	names := map[string]bool{}
	for i := range n {
		sb := bucketAt(s3, endpoint, fmt.Sprintf("%s-%02d", prefix, i), depth, del)
		Expect(c.Create(context.Background(), sb)).To(Succeed())
		names[sb.Name] = true
	}
	return names
}

// bucketAt is a managed StorageBucket in namespace team whose bucket has its name, on
// MinIO through the endpoint.
func bucketAt(s3 *minio.Server, endpoint, name string, depth phalanksv1beta1.ProbeDepth, del bool) *phalanksv1beta1.StorageBucket {
	sb := storageBucket("team", name, name, s3)
	sb.Spec.Endpoint = endpoint
	sb.Spec.HealthCheck.Depth = depth
	if del {
		sb.Spec.DeletionPolicy = phalanksv1beta1.DeletionDelete
	}
	return sb
}

// bucketExists asks MinIO directly whether a bucket exists.
func bucketExists(s3 *minio.Server, bucket string) bool {
	GinkgoHelper()
	c, err := s3.Client()
	Expect(err).NotTo(HaveOccurred())
	ok, err := c.BucketExists(context.Background(), bucket)
	Expect(err).NotTo(HaveOccurred())
	return ok
}

// eventuallyGone waits until the object is gone from the API server.
func eventuallyGone(c client.Client, obj client.Object) {
	GinkgoHelper()
	Eventually(func() bool {
		err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err)
	}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(BeTrue(), "%s still exists", client.ObjectKeyFromObject(obj))
}

// everyReady waits until every named StorageBucket is Ready.
func everyReady(c client.Client, names map[string]bool, timeout time.Duration) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		list := &phalanksv1beta1.StorageBucketList{}
		g.Expect(c.List(context.Background(), list, client.InNamespace("team"))).To(Succeed())
		ready := 0
		for _, sb := range list.Items {
			if names[sb.Name] && meta.IsStatusConditionTrue(sb.Status.Conditions, phalanksv1beta1.ConditionReady) {
				ready++
			}
		}
		g.Expect(ready).To(Equal(len(names)))
	}).WithTimeout(timeout).WithPolling(250 * time.Millisecond).Should(Succeed())
}

// readyWatch follows the Ready condition of every StorageBucket in team and records
// each time one that had been Ready is seen not Ready.
type readyWatch struct {
	mu    sync.Mutex
	ready map[string]bool
	flaps []string
	done  chan struct{}
	ended chan struct{}
}

func watchReady(c client.Client) *readyWatch {
	w := &readyWatch{ready: map[string]bool{}, done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		for {
			list := &phalanksv1beta1.StorageBucketList{}
			if err := c.List(context.Background(), list, client.InNamespace("team")); err == nil {
				w.observe(list.Items)
			}
			select {
			case <-w.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *readyWatch) observe(items []phalanksv1beta1.StorageBucket) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, sb := range items {
		key := string(sb.UID)
		cond := meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionReady)
		switch {
		case cond != nil && cond.Status == metav1.ConditionTrue:
			w.ready[key] = true
		case cond != nil && falseCanaryFailure(cond.Reason):
			// Whether or not it was Ready before: a fresh StorageBucket's first probe
			// must not fail on another replica's canary either.
			w.flaps = append(w.flaps, fmt.Sprintf("%s: Ready %s/%s: %s", sb.Name, cond.Status, cond.Reason, cond.Message))
			w.ready[key] = false
		case w.ready[key] && sb.DeletionTimestamp.IsZero() && cond != nil:
			w.flaps = append(w.flaps, fmt.Sprintf("%s: Ready %s/%s: %s", sb.Name, cond.Status, cond.Reason, cond.Message))
			w.ready[key] = false
		}
	}
}

// falseCanaryFailure reports whether a Ready reason is what a ReadWrite probe reports
// when another replica's probe wrote or deleted its canary in between: CanaryMismatch,
// or the unclassified error a canary read answered NoSuchKey becomes.
func falseCanaryFailure(reason string) bool {
	return reason == string(taxonomy.ReasonCanaryMismatch) || reason == string(taxonomy.ReasonUnclassified)
}

// stop ends the watch and returns the flaps seen.
func (w *readyWatch) stop() []string {
	close(w.done)
	<-w.ended
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flaps
}

func sortedNames(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var _ = Describe("A manager whose API connection stalls", func() {
	It("stops working within its lease, and never re-creates the bucket of a StorageBucket deleted meanwhile", func() {
		ctx := context.Background()
		p := startPlatform(nil)
		s3log := startS3Log(p.s3)
		const lease, renew, interval = 4 * time.Second, time.Second, 5 * time.Second
		// 18 buckets: the stalled replica holds a third of the slots, so the chance that
		// none of them is its own is (2/3)^18, under 0.1 %.
		names := managedBuckets(p.c, p.s3, s3log.URL(), "stall", 18, phalanksv1beta1.ProbeHeadBucket, true)
		flags := ringFlags(lease, renew)
		a := startManagerWith(managerSpec{name: "replica-a", kubeconfig: p.kubeconfig, flags: flags})
		b := startManagerWith(managerSpec{name: "replica-b", kubeconfig: p.kubeconfig, flags: flags})
		c := startManagerWith(managerSpec{name: "replica-c", kubeconfig: p.kubeconfig, flags: flags, viaProxy: true})
		managers := []*manager{a, b, c}
		for _, m := range managers {
			s3log.track(m)
		}
		everyReady(p.c, names, 2*time.Minute)
		// The ring settled with all three in it: the two others can own every bucket
		// before replica-c's first slots reach it (seen in CI: a snapshot then found it
		// owning none).
		Eventually(func() error {
			for _, m := range managers {
				if m.sum("phalanks_storagebucket_shard_slots") == 0 {
					return fmt.Errorf("%s holds no shard slot yet", m.proc.Name)
				}
			}
			if len(c.owned()) == 0 {
				return errors.New("replica-c owns none of the buckets yet")
			}
			return exactlyOneOwner(managers, names)
		}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		victimOwns := sortedNames(c.owned())
		Expect(victimOwns).NotTo(BeEmpty())
		x := &phalanksv1beta1.StorageBucket{}
		Expect(p.c.Get(ctx, client.ObjectKey{Namespace: "team", Name: victimOwns[0]}, x)).To(Succeed())

		By("stalling replica-c's connection to the API server: it stops probing within its lease")
		c.api.Stall()
		stalled := time.Now()
		// Its ownership ends a lease (less a margin) after its last renewal was sent.
		time.Sleep(lease)
		probes := c.probes()
		Consistently(c.probes).WithTimeout(interval+time.Second).WithPolling(250*time.Millisecond).Should(Equal(probes),
			"replica-c kept probing with its API connection stalled")

		By("the others take its buckets over; the user deletes one of them meanwhile")
		Eventually(func() bool { return a.owned()[x.Name] || b.owned()[x.Name] }).
			WithTimeout(lease + 3*renew + interval + 5*time.Second).WithPolling(250 * time.Millisecond).Should(BeTrue())
		Expect(p.c.Delete(ctx, x)).To(Succeed())
		Eventually(func() bool { return bucketExists(p.s3, x.Spec.BucketName) }).
			WithTimeout(30*time.Second).WithPolling(250*time.Millisecond).Should(BeFalse(), "the new owner did not delete the bucket")
		eventuallyGone(p.c, x)

		By("replica-c's cache still holds the deleted StorageBucket: it must not bring its bucket back")
		Consistently(func() bool { return bucketExists(p.s3, x.Spec.BucketName) }).
			WithTimeout(interval + 2*time.Second).WithPolling(200 * time.Millisecond).Should(BeFalse())
		GinkgoWriter.Printf("replica-c was stalled for %s (lease %s)\n", time.Since(stalled).Round(time.Millisecond), lease)
		c.api.Resume()
		delete(names, x.Name)
		Eventually(func() error { return exactlyOneOwner(managers, names) }).
			WithTimeout(lease + 5*renew + interval + 10*time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
		Consistently(func() bool { return bucketExists(p.s3, x.Spec.BucketName) }).
			WithTimeout(interval).WithPolling(200 * time.Millisecond).Should(BeFalse())
		Expect(c.sum("phalanks_storagebucket_shard_slots")).To(BeNumerically(">", 0), "replica-c did not rejoin")
		Expect(overlaps(s3log.snapshot())).To(Succeed())
	})
})

var _ = Describe("A rolling update of managers sharing ReadWrite buckets", func() {
	It("never lets two replicas probe one bucket at once: no false CanaryMismatch, NoSuchKey or Ready flap", func() {
		p := startPlatform(nil)
		s3log := startS3Log(p.s3)
		// A renew period long enough that replicas reading the ring at different times
		// would overlap on many buckets, were slots not handed over release-then-acquire.
		const lease, renew, interval = 6 * time.Second, 2 * time.Second, 5 * time.Second
		names := managedBuckets(p.c, p.s3, s3log.URL(), "rolling", 16, phalanksv1beta1.ProbeReadWrite, false)
		// Probes that a loaded machine slows down are not what this spec is about.
		for name := range names {
			sb := &phalanksv1beta1.StorageBucket{}
			Expect(p.c.Get(context.Background(), client.ObjectKey{Namespace: "team", Name: name}, sb)).To(Succeed())
			sb.Spec.HealthCheck.Timeout = &metav1.Duration{Duration: 4 * time.Second}
			Expect(p.c.Update(context.Background(), sb)).To(Succeed())
		}
		flags := ringFlags(lease, renew)
		start := func(name string) *manager {
			m := startManagerWith(managerSpec{name: name, kubeconfig: p.kubeconfig, flags: flags})
			s3log.track(m)
			return m
		}
		current := []*manager{start("old-0"), start("old-1")}
		everyReady(p.c, names, 2*time.Minute)
		Eventually(func() error { return exactlyOneOwner(current, names) }).
			WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		flaps := watchReady(p.c)
		// Failures counted from here on: what the buckets' creation cost is not the
		// rolling update's.
		failures, before := map[string]float64{}, map[string]float64{}
		read := func(m *manager, into map[string]float64) {
			samples, err := m.scrape()
			Expect(err).NotTo(HaveOccurred())
			for k, v := range samples {
				if strings.HasPrefix(k, "phalanks_storagebucket_probe_failures_total{") {
					into[m.proc.Name+" "+k] += v
				}
			}
		}
		for _, m := range current {
			read(m, before)
		}
		count := func(m *manager) {
			read(m, failures)
			for k, v := range before {
				if strings.HasPrefix(k, m.proc.Name+" ") {
					failures[k] -= v
				}
			}
			for k, v := range failures {
				if v == 0 {
					delete(failures, k)
				}
			}
		}
		for i := range 2 {
			By(fmt.Sprintf("replacing old-%d: a new replica joins, then the old one gets SIGTERM", i))
			n := start(fmt.Sprintf("new-%d", i))
			Eventually(func() float64 { return n.sum("phalanks_storagebucket_shard_slots") }).
				WithTimeout(4 * lease).WithPolling(200 * time.Millisecond).Should(BeNumerically(">", 0))
			old := current[0]
			// Let the new replica probe its first buckets before the old one goes.
			time.Sleep(interval)
			count(old)
			Expect(old.proc.Stop(30 * time.Second)).To(Succeed())
			current = append(current[1:], n)
			Eventually(func() error { return exactlyOneOwner(current, names) }).
				WithTimeout(4 * lease).WithPolling(250 * time.Millisecond).Should(Succeed())
		}
		time.Sleep(interval + time.Second)
		for _, m := range current {
			count(m)
		}
		Expect(flaps.stop()).To(BeEmpty())
		Expect(failures).To(BeEmpty(), "probe failures during the rolling update")
		Expect(overlaps(s3log.snapshot())).To(Succeed())
	})
})
