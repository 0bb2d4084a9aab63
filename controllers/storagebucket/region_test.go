package storagebucket_test

import (
	"context"
	"net/http"
	"regexp"
	"sync"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/versitygw"
)

// signedRegion finds the region in a SigV4 Authorization header's credential scope.
var signedRegion = regexp.MustCompile(`Credential=[^/]+/\d{8}/([^/]+)/s3/aws4_request`)

// regions counts the requests a proxy saw per region they were signed for.
type regions struct {
	mu     sync.Mutex
	counts map[string]int
}

func (r *regions) observe(req *http.Request) {
	m := signedRegion.FindStringSubmatch(req.Header.Get("Authorization"))
	if m == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[m[1]]++
}

func (r *regions) count(region string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[region]
}

var _ = Describe("StorageBucket region discovery", func() {
	const region = "eu-central-1"
	var (
		ns     string
		server *minio.Server
		proxy  *minio.Proxy
		seen   *regions
	)
	ctx := context.Background()
	BeforeEach(func() {
		ns = namespace()
		// A server in another region than the one requests are signed for first; it
		// refuses every request signed for another (MinIO and versitygw both do).
		server = versitygw.StartForTest(GinkgoT(), minio.Options{Region: region})
		credentials(ns, "s3-credentials", server)
		proxy = server.StartProxyForTest(GinkgoT())
		seen = &regions{counts: map[string]int{}}
		proxy.Observe(seen.observe)
	})
	// through names the proxy as the endpoint of sb, so its requests are counted.
	through := func(sb *phalanksv1beta1.StorageBucket) *phalanksv1beta1.StorageBucket {
		sb.Spec.Endpoint = proxy.URL
		sb.Spec.Region = ""
		return sb
	}

	It("finds the region of a bucket whose spec names none, remembers it, and shows it in status", func() {
		Expect(server.MakeBucket(ctx, "found-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := through(newBucket(ns, "found", "found-bucket", server))
		sb.Spec.HealthCheck.Depth = phalanksv1beta1.ProbeList
		create(sb)
		Expect(get(sb).Spec.Region).To(BeEmpty(), "no region is defaulted at admission")
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		Eventually(func() string { return get(sb).Status.Region }).WithTimeout(30 * time.Second).Should(Equal(region))

		// Remembered: the next probes are signed for the region found, none for the
		// default again.
		wrong, right := seen.count("us-east-1"), seen.count(region)
		Expect(wrong).To(BeNumerically(">=", 1), "the first request was signed for the default region")
		Eventually(func() int { return seen.count(region) }).WithTimeout(30*time.Second).Should(BeNumerically(">=", right+2),
			"two more probes (every 5 s)")
		Expect(seen.count("us-east-1")).To(Equal(wrong), "a probe after the region was found was signed for the default region")
		Expect(events(sb)).NotTo(ContainElement(HavePrefix("Warning/")))

		// A region the spec sets is used as it is, and status.region is for found ones.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sb), sb)).To(Succeed())
		sb.Spec.Region = region
		Expect(k8s.Update(ctx, sb)).To(Succeed())
		Eventually(func() string { return get(sb).Status.Region }).WithTimeout(30 * time.Second).Should(BeEmpty())
		expectReadyNow(sb, metav1.ConditionTrue, "BucketReady")
	})

	It("finds the right region again when status.region is wrong", func() {
		Expect(server.MakeBucket(ctx, "forged-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := through(newBucket(ns, "forged", "forged-bucket", server))
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		Eventually(func() string { return get(sb).Status.Region }).WithTimeout(30 * time.Second).Should(Equal(region))

		// Someone with the right to write the status (or a stale copy of it) names
		// another region: it is only the first guess, and the endpoint corrects it.
		got := get(sb)
		base := got.DeepCopy()
		got.Status.Region = "ap-south-1"
		Expect(k8s.Status().Patch(ctx, got, client.MergeFrom(base))).To(Succeed())
		Eventually(func() int { return seen.count("ap-south-1") }).WithTimeout(30*time.Second).Should(BeNumerically(">=", 1),
			"the next probe tried the region the status named")
		Eventually(func() string { return get(sb).Status.Region }).WithTimeout(30 * time.Second).Should(Equal(region))
		expectReadyNow(sb, metav1.ConditionTrue, "BucketReady")
		Expect(events(sb)).NotTo(ContainElement(HavePrefix("Warning/")), "the wrong guess never showed as a failure")
	})

	It("creates a managed bucket whose spec names no region in the region the endpoint names, and deletes it there", func() {
		sb := through(newBucket(ns, "created", "created-in-found-region", server))
		sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
		sb.Spec.DeletionPolicy = phalanksv1beta1.DeletionDelete
		sb.Spec.HealthCheck.Depth = phalanksv1beta1.ProbeReadWrite
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		got := get(sb)
		Expect(got.Status.CreatedBucket).NotTo(BeNil())
		Expect(got.Status.CreatedBucket.Region).To(Equal(region))
		Expect(got.Status.Region).To(Equal(region))
		Expect(bucketExists(server, "created-in-found-region")).To(BeTrue())
		Expect(events(sb)).To(ContainElement(ContainSubstring(`in region "eu-central-1"`)))

		Expect(k8s.Delete(ctx, sb)).To(Succeed())
		eventuallyGone(sb)
		Expect(bucketExists(server, "created-in-found-region")).To(BeFalse(), "deletionPolicy Delete applies to the bucket created in the region found")
	})

	It("follows a 301 PermanentRedirect that names the region in x-amz-bucket-region, as AWS S3 answers", func() {
		Expect(server.MakeBucket(ctx, "redirected-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		// In front of the server, the proxy answers every request signed for another
		// region the way AWS S3 does, before the server could say anything.
		proxy.Fail(func(r *http.Request) *minio.S3Error {
			if m := signedRegion.FindStringSubmatch(r.Header.Get("Authorization")); m != nil && m[1] != region {
				return &minio.S3Error{Status: http.StatusMovedPermanently, Code: "PermanentRedirect", Region: region}
			}
			return nil
		})
		found := through(newBucket(ns, "redirected", "redirected-bucket", server))
		create(found)
		pinned := through(newBucket(ns, "redirected-pinned", "redirected-bucket", server))
		pinned.Spec.Region = "us-west-2"
		create(pinned)
		eventuallyReady(found, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		Expect(get(found).Status.Region).To(Equal(region))
		eventuallyReady(pinned, metav1.ConditionFalse, "WrongRegion", 30*time.Second)
		Expect(condition(get(pinned), "Ready").Message).To(ContainSubstring(`set spec.region to "eu-central-1"`))
	})

	It("keeps reporting WrongRegion, naming the right one, when the spec sets a wrong region", func() {
		Expect(server.MakeBucket(ctx, "pinned-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := through(newBucket(ns, "pinned", "pinned-bucket", server))
		sb.Spec.Region = "us-west-2"
		create(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "WrongRegion", 30*time.Second)
		got := get(sb)
		Expect(condition(got, "Ready").Message).To(ContainSubstring(`set spec.region to "eu-central-1"`))
		Expect(got.Status.Region).To(BeEmpty())
		Expect(seen.count(region)).To(BeZero(), "a region the spec sets is not overridden")
	})
})

// expectReadyNow checks sb's Ready condition once.
func expectReadyNow(sb *phalanksv1beta1.StorageBucket, status metav1.ConditionStatus, reason string) {
	GinkgoHelper()
	got := condition(get(sb), "Ready")
	Expect(got.Status).To(Equal(status), "%+v", got)
	Expect(got.Reason).To(Equal(reason), "%+v", got)
}
