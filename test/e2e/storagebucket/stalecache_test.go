package storagebucket_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/sharding"
	"github.com/phalanks/phalanks-operator/test/harness/apiproxy"
)

// storageBucketListOrWatch selects a replica's lists and watches of StorageBuckets.
func storageBucketListOrWatch(r *http.Request) bool {
	resource, name := apiproxy.Resource(r)
	return resource == "storagebuckets" && name == "" && r.Method == http.MethodGet
}

// requestsOn returns what m has sent to bucket since, for Consistently.
func requestsOn(log *s3Log, m *manager, bucket string, since time.Time) func() []string {
	return func() []string {
		var out []string
		for _, e := range log.snapshot() {
			if e.manager == m.proc.Name && e.bucket == bucket && e.Start.After(since) {
				out = append(out, fmt.Sprintf("%s %s?%s at %s", e.Method, e.Path, e.Query, e.Start.Format("15:04:05.000")))
			}
		}
		return out
	}
}

// A replica's cache can miss a StorageBucket's deletion (the process was paused, its
// watch was away) while another replica, which owned the slot, deleted the bucket;
// churn then creates a new StorageBucket of the same bucket name. When the slot comes
// to the replica with the stale cache, the old StorageBucket looks alive to it and its
// probe is due: it must not probe the bucket that now belongs to the new one.
var _ = Describe("A manager whose cache missed another replica's deletion of a StorageBucket", func() {
	It("does not probe that StorageBucket's bucket, which a new StorageBucket has taken, when it takes the slot over", func() {
		ctx := context.Background()
		p := startPlatform(nil)
		s3log := startS3Log(p.s3)
		const lease, renew, interval = 4 * time.Second, time.Second, 5 * time.Second
		flags := ringFlags(lease, renew)
		a := startManagerWith(managerSpec{name: "replica-a", kubeconfig: p.kubeconfig, flags: flags, viaAPIProxy: true})
		b := startManagerWith(managerSpec{name: "replica-b", kubeconfig: p.kubeconfig, flags: flags})
		managers := []*manager{a, b}
		s3log.track(a)
		s3log.track(b)

		By("ReadWrite StorageBuckets until one is replica-b's (its canary object names its UID)")
		names := map[string]bool{}
		var x *phalanksv1beta1.StorageBucket
		for i := 0; x == nil; i++ {
			Expect(i).To(BeNumerically("<", 12), "none of %d StorageBuckets landed on replica-b", i)
			sb := bucketAt(p.s3, s3log.URL(), fmt.Sprintf("missed-%02d", i), phalanksv1beta1.ProbeReadWrite, true)
			Expect(p.c.Create(ctx, sb)).To(Succeed())
			names[sb.Name] = true
			everyReady(p.c, names, 2*time.Minute)
			Eventually(func() error { return exactlyOneOwner(managers, names) }).
				WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
			if b.owned()[sb.Name] {
				x = sb
			}
		}

		By("replica-a's StorageBucket lists and watches are turned away: its cache stops where it is")
		a.apiProxy.Set(func(r *http.Request) apiproxy.Action {
			if storageBucketListOrWatch(r) {
				return apiproxy.TooManyRequests
			}
			return apiproxy.Action{}
		})
		Expect(a.apiProxy.EndWatches(storageBucketListOrWatch)).To(BeNumerically(">", 0))

		By("replica-b deletes the StorageBucket's bucket; a new StorageBucket of the same bucket name follows")
		Expect(p.c.Delete(ctx, x)).To(Succeed())
		eventuallyGone(p.c, x)
		y := bucketAt(p.s3, s3log.URL(), x.Name, phalanksv1beta1.ProbeReadWrite, true)
		Expect(p.c.Create(ctx, y)).To(Succeed())
		since := time.Now()

		By("replica-b leaves: replica-a takes every slot, the old StorageBucket's included, with its cache still stale")
		Expect(b.proc.Stop(30 * time.Second)).To(Succeed())
		s3log.untrack(b)
		Eventually(func() float64 { return a.sum("phalanks_storagebucket_shard_slots") }).
			WithTimeout(lease + 5*renew).WithPolling(250 * time.Millisecond).Should(BeNumerically("==", sharding.Slots))
		// The old StorageBucket comes due within an interval of the takeover.
		touched := requestsOn(s3log, a, x.Spec.BucketName, since)
		Consistently(touched).WithTimeout(2*interval+2*time.Second).WithPolling(250*time.Millisecond).Should(BeEmpty(),
			"replica-a probed the bucket of StorageBucket %s, deleted by replica-b, whose bucket name %s has taken", x.UID, y.UID)

		By("replica-a lists again: the new StorageBucket is Ready, and nobody wrote the old one's canary since its deletion")
		a.apiProxy.Set(nil)
		everyReady(p.c, map[string]bool{y.Name: true}, 2*time.Minute)
		for _, e := range s3log.snapshot() {
			if e.Start.After(since) {
				Expect(e.key).NotTo(Equal(phalanksv1beta1.CanaryPrefix+string(x.UID)), "%s %s?%s at %s by %s", e.Method, e.Path, e.Query, e.Start, e.manager)
			}
		}
		Expect(overlaps(s3log.snapshot())).To(Succeed())
	})
})

// The replica that deleted a bucket and released its StorageBucket may not see the
// StorageBucket go for a while (its watch behind, a slow API server): its cache still
// holds the StorageBucket being deleted, with the finalizer, and the deletion's next
// pass comes due. That pass must not reach the bucket, which a new StorageBucket of the
// same bucket name may hold by now (the chaos suite saw exactly this: HEAD and tagging
// reads of the new StorageBucket's bucket, in a loop of failed finalizer updates).
var _ = Describe("A manager whose cache missed its own release of a StorageBucket it deleted", func() {
	It("does not reach the bucket again on the deletion's next pass, which a new StorageBucket of the same bucket name holds", func() {
		ctx := context.Background()
		p := startPlatform(nil)
		s3log := startS3Log(p.s3)
		const lease, renew, interval = 4 * time.Second, time.Second, 5 * time.Second
		a := startManagerWith(managerSpec{name: "replica-a", kubeconfig: p.kubeconfig, flags: ringFlags(lease, renew), viaAPIProxy: true})
		s3log.track(a)

		x := bucketAt(p.s3, s3log.URL(), "released", phalanksv1beta1.ProbeHeadBucket, true)
		Expect(p.c.Create(ctx, x)).To(Succeed())
		everyReady(p.c, map[string]bool{x.Name: true}, 2*time.Minute)

		By("the StorageBucket is deleted; as replica-a releases it, its StorageBucket watch ends and lists and watches are turned away")
		var frozen atomic.Bool
		xName := x.Name // x itself is read into below, while the rule runs
		a.apiProxy.Set(func(r *http.Request) apiproxy.Action {
			// The object's own PATCH, not its status's: the finalizer's release.
			if resource, name := apiproxy.Resource(r); resource == "storagebuckets" && name == xName && r.Method == http.MethodPatch &&
				!strings.HasSuffix(r.URL.Path, "/status") && !frozen.Load() {
				// Before the release reaches the API server: no event of it can come.
				frozen.Store(true)
				a.apiProxy.EndWatches(storageBucketListOrWatch)
			}
			if frozen.Load() && storageBucketListOrWatch(r) {
				return apiproxy.TooManyRequests
			}
			return apiproxy.Action{}
		})
		Expect(p.c.Delete(ctx, x)).To(Succeed())
		eventuallyGone(p.c, x)
		Expect(frozen.Load()).To(BeTrue(), "replica-a released the StorageBucket without a PATCH through its proxy")
		Expect(bucketExists(p.s3, x.Spec.BucketName)).To(BeFalse(), "replica-a did not delete the bucket")
		y := bucketAt(p.s3, s3log.URL(), x.Name, phalanksv1beta1.ProbeHeadBucket, true)
		Expect(p.c.Create(ctx, y)).To(Succeed())
		since := time.Now()

		By("the deletion's next pass comes due on replica-a's stale StorageBucket")
		touched := requestsOn(s3log, a, x.Spec.BucketName, since)
		Consistently(touched).WithTimeout(2*interval+2*time.Second).WithPolling(250*time.Millisecond).Should(BeEmpty(),
			"replica-a reached the bucket for StorageBucket %s, which it had deleted and released, while %s has its name", x.UID, y.UID)

		By("replica-a lists again: the new StorageBucket gets its bucket and is Ready")
		a.apiProxy.Set(nil)
		everyReady(p.c, map[string]bool{y.Name: true}, 2*time.Minute)
		Expect(bucketExists(p.s3, y.Spec.BucketName)).To(BeTrue())
	})
})
