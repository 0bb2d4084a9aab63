package storagebucket_test

import (
	"context"
	"net/http"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	miniocreds "github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/tags"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/controllers/storagebucket"
	"github.com/phalanks/phalanks-operator/internal/s3bucket"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/tcpproxy"
)

var _ = Describe("StorageBucket probing", func() {
	var ns string
	ctx := context.Background()
	BeforeEach(func() {
		ns = namespace()
		credentials(ns, "s3-credentials", s3)
	})

	It("reports an existing bucket Ready with every check passed", func() {
		Expect(s3.MakeBucket(ctx, "ready-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := newBucket(ns, "ready", "ready-bucket", s3)
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		got := get(sb)
		for _, typ := range []string{"Reachable", "Authenticated", "BucketAvailable"} {
			Expect(condition(got, typ).Status).To(Equal(metav1.ConditionTrue), "%s: %+v", typ, condition(got, typ))
		}
		Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		Expect(got.Status.LastProbeTime).NotTo(BeNil())
		Expect(got.Status.LastSuccessTime).NotTo(BeNil())
		Expect(got.Status.LastProbeDuration).NotTo(BeNil())
		Expect(condition(got, "Managed").Type).To(BeEmpty(), "Observe has no Managed condition")
		Expect(events(sb)).To(ContainElement(HavePrefix("Normal/BucketReady")))
	})

	It("does not write an unchanged status on every probe", func() {
		Expect(s3.MakeBucket(ctx, "quiet-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := newBucket(ns, "quiet", "quiet-bucket", s3)
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		before := get(sb).ResourceVersion
		probes := counter("phalanks_storagebucket_up", map[string]string{"storagebucket_namespace": ns, "storagebucket": "quiet"})
		Expect(probes).To(Equal(1.0))
		scheduled := counter("phalanks_storagebucket_probes_total", map[string]string{"cause": "schedule"})
		// Two more scheduled probes of this bucket at 5s intervals (others may add more).
		Eventually(func() float64 {
			return counter("phalanks_storagebucket_probes_total", map[string]string{"cause": "schedule"})
		}).WithTimeout(30 * time.Second).Should(BeNumerically(">=", scheduled+2))
		Eventually(func() time.Duration { return time.Since(get(sb).Status.LastProbeTime.Time) }).
			WithTimeout(30 * time.Second).Should(BeNumerically(">", 11*time.Second))
		Expect(get(sb).ResourceVersion).To(Equal(before), "the status was rewritten although nothing changed")
	})

	It("writes an unchanged status at a heartbeat reconfigured while it runs", func() {
		Expect(s3.MakeBucket(ctx, "heartbeat-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := newBucket(ns, "heartbeat", "heartbeat-bucket", s3)
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		first := get(sb).Status.LastProbeTime.Time

		Expect(reconciler.Reconfigure(storagebucket.Options{Concurrency: suiteConcurrency, StatusHeartbeat: 8 * time.Second})).To(Succeed())
		DeferCleanup(func() {
			Expect(reconciler.Reconfigure(storagebucket.Options{Concurrency: suiteConcurrency})).To(Succeed())
		})
		// Probed every 5s: the probe at least 8s after the last write writes.
		Eventually(func() time.Time { return get(sb).Status.LastProbeTime.Time }).
			WithTimeout(30 * time.Second).Should(BeTemporally(">=", first.Add(8*time.Second)))
		Expect(condition(get(sb), phalanksv1beta1.ConditionReady).Reason).To(Equal("BucketReady"))

		By("going back to the default of an hour, which writes nothing for the probes after")
		Expect(reconciler.Reconfigure(storagebucket.Options{Concurrency: suiteConcurrency})).To(Succeed())
		time.Sleep(time.Second) // a write the old heartbeat started may still land
		before := get(sb).ResourceVersion
		Consistently(func() string { return get(sb).ResourceVersion }).
			WithTimeout(12 * time.Second).WithPolling(time.Second).Should(Equal(before))
	})

	It("probes at most as many buckets at once as its concurrency, reconfigured while probes hang", func() {
		Expect(s3.MakeBucket(ctx, "concurrency-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		// Bytes stop both ways: every probe through the proxy holds a connection until
		// its timeout.
		proxy := tcpproxy.StartForTest(GinkgoT(), s3.Endpoint)
		proxy.Stall()
		Expect(reconciler.Reconfigure(storagebucket.Options{Concurrency: 1})).To(Succeed())
		DeferCleanup(func() {
			Expect(reconciler.Reconfigure(storagebucket.Options{Concurrency: suiteConcurrency})).To(Succeed())
		})
		var buckets []*phalanksv1beta1.StorageBucket
		for _, name := range []string{"slow-a", "slow-b", "slow-c"} {
			sb := newBucket(ns, name, "concurrency-bucket", s3)
			sb.Spec.Endpoint = "http://" + proxy.Addr
			sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: time.Minute}
			sb.Spec.HealthCheck.Timeout = &metav1.Duration{Duration: 30 * time.Second}
			create(sb)
			buckets = append(buckets, sb)
		}
		Eventually(proxy.Open).WithTimeout(10 * time.Second).Should(Equal(1))
		Consistently(proxy.Open).WithTimeout(2*time.Second).Should(Equal(1), "a concurrency of 1 let more probes run")

		By("raised to 3: the two waiting probes start at once")
		Expect(reconciler.Reconfigure(storagebucket.Options{Concurrency: 3})).To(Succeed())
		Eventually(proxy.Open).WithTimeout(5 * time.Second).Should(Equal(3))

		proxy.Resume()
		for _, sb := range buckets {
			eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		}
	})

	It("uses a Secret's new key pair at the first probe after it changed, also after probes that reused the old one", func() {
		Expect(s3.MakeBucket(ctx, "rekeyed-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		sec := credentials(ns, "rekeyed", s3)
		sb := newBucket(ns, "rekeyed", "rekeyed-bucket", s3)
		sb.Spec.CredentialsSecretRef.Name = "rekeyed"
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		// Scheduled probes after the last status write reuse what the first one read.
		Consistently(func() string { return condition(get(sb), phalanksv1beta1.ConditionReady).Reason }).
			WithTimeout(2 * sb.Spec.HealthCheck.IntervalDuration()).WithPolling(500 * time.Millisecond).Should(Equal("BucketReady"))

		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sec), sec)).To(Succeed())
		sec.Data["AWS_SECRET_ACCESS_KEY"] = []byte("rotated-away")
		Expect(k8s.Update(ctx, sec)).To(Succeed())
		// At once: the Secret's change makes the bucket due, not its next interval.
		eventuallyReady(sb, metav1.ConditionFalse, "InvalidCredentials", sb.Spec.HealthCheck.IntervalDuration())
	})

	It("probes with temporary credentials and their session token, which MinIO's STS issued, and takes new ones at once", Label("minio-only"), func() {
		Expect(s3.MakeBucket(ctx, "session-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		issue := func() miniocreds.Value {
			GinkgoHelper()
			sts, err := miniocreds.NewSTSAssumeRole(s3.URL, miniocreds.STSAssumeRoleOptions{
				AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Location: s3.Region, DurationSeconds: 900})
			Expect(err).NotTo(HaveOccurred())
			v, err := sts.GetWithContext(&miniocreds.CredContext{Client: http.DefaultClient})
			Expect(err).NotTo(HaveOccurred())
			Expect(v.SessionToken).NotTo(BeEmpty(), "MinIO's STS issued temporary credentials")
			return v
		}
		temp := issue()
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "temporary", Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": temp.AccessKeyID, "AWS_SECRET_ACCESS_KEY": temp.SecretAccessKey,
				"AWS_SESSION_TOKEN": temp.SessionToken},
		}
		create(sec)
		withToken := newBucket(ns, "with-token", "session-bucket", s3)
		withToken.Spec.CredentialsSecretRef = &phalanksv1beta1.CredentialsSecretReference{Name: "temporary", SessionTokenKey: "AWS_SESSION_TOKEN"}
		create(withToken)
		// The same key pair without its token is refused by the server.
		withoutToken := newBucket(ns, "without-token", "session-bucket", s3)
		withoutToken.Spec.CredentialsSecretRef = &phalanksv1beta1.CredentialsSecretReference{Name: "temporary"}
		create(withoutToken)
		// A token key the Secret lacks is said so before any request.
		wrongKey := newBucket(ns, "wrong-token-key", "session-bucket", s3)
		wrongKey.Spec.CredentialsSecretRef = &phalanksv1beta1.CredentialsSecretReference{Name: "temporary", SessionTokenKey: "SESSION_TOKEN"}
		create(wrongKey)

		eventuallyReady(withToken, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		eventuallyReady(withoutToken, metav1.ConditionFalse, "InvalidCredentials", 30*time.Second)
		eventuallyReady(wrongKey, metav1.ConditionFalse, "SecretKeyMissing", 30*time.Second)
		Expect(condition(get(wrongKey), phalanksv1beta1.ConditionReady).Message).To(ContainSubstring(`no value for key "SESSION_TOKEN", which sessionTokenKey names`))

		By("taking the credentials the issuer wrote next, and a token that is not theirs is refused")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sec), sec)).To(Succeed())
		next := issue()
		sec.Data = map[string][]byte{"AWS_ACCESS_KEY_ID": []byte(next.AccessKeyID), "AWS_SECRET_ACCESS_KEY": []byte(next.SecretAccessKey),
			"AWS_SESSION_TOKEN": []byte(temp.SessionToken)}
		Expect(k8s.Update(ctx, sec)).To(Succeed())
		eventuallyReady(withToken, metav1.ConditionFalse, "InvalidCredentials", withToken.Spec.HealthCheck.IntervalDuration())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sec), sec)).To(Succeed())
		sec.Data["AWS_SESSION_TOKEN"] = []byte(next.SessionToken)
		Expect(k8s.Update(ctx, sec)).To(Succeed())
		eventuallyReady(withToken, metav1.ConditionTrue, "BucketReady", withToken.Spec.HealthCheck.IntervalDuration())
	})

	It("reports InvalidCredentials for a wrong key pair and AccessDenied for anonymous access", func() {
		Expect(s3.MakeBucket(ctx, "private-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wrong", Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": s3.AccessKey, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}})
		wrong := newBucket(ns, "wrong-key", "private-bucket", s3)
		wrong.Spec.CredentialsSecretRef.Name = "wrong"
		create(wrong)
		anonymous := newBucket(ns, "anonymous", "private-bucket", s3)
		anonymous.Spec.CredentialsSecretRef = nil
		create(anonymous)

		eventuallyReady(wrong, metav1.ConditionFalse, "InvalidCredentials", 30*time.Second)
		Expect(condition(get(wrong), "Authenticated").Reason).To(Equal("InvalidCredentials"))
		Expect(condition(get(wrong), "Reachable").Status).To(Equal(metav1.ConditionTrue))
		eventuallyReady(anonymous, metav1.ConditionFalse, "AccessDenied", 30*time.Second)
		Expect(events(wrong)).To(ContainElement(HavePrefix("Warning/InvalidCredentials")))
	})

	It("counts the failed probes in a row for alerts, back to zero when healthy, and drops the series with the StorageBucket", func() {
		Expect(s3.MakeBucket(ctx, "streak-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := newBucket(ns, "streak", "streak-bucket", s3)
		sb.Spec.CredentialsSecretRef.Name = "streak-credentials"
		create(sb)
		labels := map[string]string{"storagebucket_namespace": ns, "storagebucket": "streak"}
		failures := func() float64 { return counter("phalanks_storagebucket_consecutive_failures", labels) }
		Eventually(failures).WithTimeout(30*time.Second).Should(BeNumerically(">=", 2), "two 5s intervals without the Secret")
		credentials(ns, "streak-credentials", s3)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		Eventually(failures).WithTimeout(30 * time.Second).Should(BeZero())
		Expect(series("phalanks_storagebucket_consecutive_failures", labels)).To(Equal(1), "a healthy bucket reports 0, not nothing")
		Expect(k8s.Delete(ctx, sb)).To(Succeed())
		Eventually(func() int { return series("phalanks_storagebucket_consecutive_failures", labels) }).
			WithTimeout(30 * time.Second).Should(BeZero())
	})

	It("reports a missing Secret and recovers when it appears", func() {
		Expect(s3.MakeBucket(ctx, "later-secret", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := newBucket(ns, "later", "later-secret", s3)
		sb.Spec.CredentialsSecretRef.Name = "not-yet"
		sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 10 * time.Minute}
		create(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "SecretNotFound", 30*time.Second)
		Expect(condition(get(sb), "Reachable").Status).To(Equal(metav1.ConditionTrue), "the endpoint is still checked")
		credentials(ns, "not-yet", s3)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
	})

	It("reports NoSuchBucket for a missing bucket under Observe and leaves it missing", func() {
		sb := newBucket(ns, "observe-missing", "observed-never-created", s3)
		create(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "NoSuchBucket", 30*time.Second)
		Consistently(func() bool { return bucketExists(s3, "observed-never-created") }).
			WithTimeout(6 * time.Second).Should(BeFalse())
	})

	It("reports WrongRegion naming the endpoint's region", func() {
		Expect(s3.MakeBucket(ctx, "region-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := newBucket(ns, "region", "region-bucket", s3)
		sb.Spec.Region = "eu-west-1"
		create(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "WrongRegion", 30*time.Second)
		Expect(condition(get(sb), "Ready").Message).To(ContainSubstring(`"us-east-1"`))
	})

	It("re-probes at once when the credentials Secret is rotated", func() {
		Expect(s3.MakeBucket(ctx, "rotated-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := newBucket(ns, "rotated", "rotated-bucket", s3)
		sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 10 * time.Minute}
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)

		sec := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s3-credentials"}, sec)).To(Succeed())
		sec.Data["AWS_SECRET_ACCESS_KEY"] = []byte("rotated-to-something-wrong")
		Expect(k8s.Update(ctx, sec)).To(Succeed())
		start := time.Now()
		eventuallyReady(sb, metav1.ConditionFalse, "InvalidCredentials", 30*time.Second)
		Expect(time.Since(start)).To(BeNumerically("<", time.Minute), "well before the 10m interval")

		sec.Data["AWS_SECRET_ACCESS_KEY"] = []byte(s3.SecretKey)
		Expect(k8s.Update(ctx, sec)).To(Succeed())
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
	})

	It("re-probes at once when the spec changes", func() {
		Expect(s3.MakeBucket(ctx, "edited-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := newBucket(ns, "edited", "edited-bucket", s3)
		sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 10 * time.Minute}
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		got := get(sb)
		got.Spec.HealthCheck.Depth = phalanksv1beta1.ProbeConnect
		Expect(k8s.Update(ctx, got)).To(Succeed())
		Eventually(func(g Gomega) {
			now := get(sb)
			g.Expect(now.Status.ObservedGeneration).To(Equal(now.Generation))
			g.Expect(condition(now, "BucketAvailable").Type).To(BeEmpty(), "Connect checks reachability only")
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})

	It("leaves no canary behind with the ReadWrite depth, on a plain and a versioned bucket", func() {
		admin, err := s3.Client()
		Expect(err).NotTo(HaveOccurred())
		Expect(s3.MakeBucket(ctx, "rw-plain", miniogo.MakeBucketOptions{})).To(Succeed())
		Expect(s3.MakeBucket(ctx, "rw-versioned", miniogo.MakeBucketOptions{})).To(Succeed())
		Expect(admin.EnableVersioning(ctx, "rw-versioned")).To(Succeed())
		before := counter("phalanks_storagebucket_probe_duration_seconds", map[string]string{"depth": "ReadWrite", "result": "success"})
		for _, bucket := range []string{"rw-plain", "rw-versioned"} {
			sb := newBucket(ns, bucket, bucket, s3)
			sb.Spec.HealthCheck.Depth = phalanksv1beta1.ProbeReadWrite
			create(sb)
			eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		}
		// At least two probes of each bucket.
		Eventually(func() float64 {
			return counter("phalanks_storagebucket_probe_duration_seconds", map[string]string{"depth": "ReadWrite", "result": "success"})
		}).WithTimeout(30 * time.Second).Should(BeNumerically(">=", before+4))
		Expect(objects(s3, "rw-plain")).To(BeEmpty())
		Expect(objects(s3, "rw-versioned")).To(BeEmpty(), "no versions and no delete markers")
	})
})

var _ = Describe("StorageBucket management", func() {
	var ns string
	ctx := context.Background()
	BeforeEach(func() {
		ns = namespace()
		credentials(ns, "s3-credentials", s3)
	})

	bucketTags := func(bucket string) map[string]string {
		GinkgoHelper()
		c, err := s3.Client()
		Expect(err).NotTo(HaveOccurred())
		t, err := c.GetBucketTagging(ctx, bucket)
		if miniogo.ToErrorResponse(err).Code == "NoSuchTagSet" {
			return map[string]string{}
		}
		Expect(err).NotTo(HaveOccurred())
		return t.ToMap()
	}

	It("creates a missing bucket under Manage, tags it with the UID and reports Ready", func() {
		sb := newBucket(ns, "managed", "managed-new", s3)
		sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		got := get(sb)
		Expect(condition(got, "Managed").Reason).To(Equal("Owned"))
		Expect(bucketTags("managed-new")).To(HaveKeyWithValue(s3bucket.TagOwnerUID, string(got.UID)))
		Expect(events(sb)).To(ContainElement(HavePrefix("Normal/BucketCreated")))
		Expect(got.Finalizers).To(BeEmpty(), "no finalizer with deletionPolicy Retain")
	})

	It("never touches an existing bucket without our tag, and adopts it only when annotated", func() {
		admin, err := s3.Client()
		Expect(err).NotTo(HaveOccurred())
		Expect(s3.MakeBucket(ctx, "someone-elses", miniogo.MakeBucketOptions{})).To(Succeed())
		theirs, err := tags.NewTags(map[string]string{"team": "other"}, false)
		Expect(err).NotTo(HaveOccurred())
		Expect(admin.SetBucketTagging(ctx, "someone-elses", theirs)).To(Succeed())
		putObject(s3, "someone-elses", "their/data")
		objectsBefore := objects(s3, "someone-elses")

		sb := newBucket(ns, "not-ours", "someone-elses", s3)
		sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
		sb.Spec.HealthCheck.Depth = phalanksv1beta1.ProbeReadWrite
		create(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "ErrResourceExists", 30*time.Second)
		Expect(condition(get(sb), "Managed").Message).To(ContainSubstring("already exists and is not managed by this StorageBucket"))
		Expect(events(sb)).To(ContainElement(HavePrefix("Warning/ErrResourceExists")))
		// Probes go on (capped at List: no canary in a bucket that is not ours).
		listed := counter("phalanks_storagebucket_probe_duration_seconds", map[string]string{"depth": "List"})
		Eventually(func() float64 {
			return counter("phalanks_storagebucket_probe_duration_seconds", map[string]string{"depth": "List"})
		}).WithTimeout(30 * time.Second).Should(BeNumerically(">=", listed+1))
		Expect(bucketTags("someone-elses")).To(Equal(map[string]string{"team": "other"}))
		Expect(objects(s3, "someone-elses")).To(Equal(objectsBefore))

		got := get(sb)
		got.Annotations = map[string]string{phalanksv1beta1.AnnotationAdopt: "true"}
		Expect(k8s.Update(ctx, got)).To(Succeed())
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		Expect(bucketTags("someone-elses")).To(Equal(map[string]string{
			"team": "other", s3bucket.TagOwnerUID: string(got.UID), s3bucket.TagOwnerName: ns + "/not-ours"}))
		Expect(events(sb)).To(ContainElement(HavePrefix("Normal/BucketAdopted")))
	})
})

var _ = Describe("StorageBucket deletion", func() {
	var ns string
	ctx := context.Background()
	BeforeEach(func() {
		ns = namespace()
		credentials(ns, "s3-credentials", s3)
	})

	managed := func(name, bucket string, policy phalanksv1beta1.DeletionPolicy, strategy phalanksv1beta1.NonEmptyStrategy) *phalanksv1beta1.StorageBucket {
		GinkgoHelper()
		sb := newBucket(ns, name, bucket, s3)
		sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
		sb.Spec.DeletionPolicy = policy
		sb.Spec.NonEmptyStrategy = strategy
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		if policy == phalanksv1beta1.DeletionDelete {
			Expect(get(sb).Finalizers).To(ConsistOf(phalanksv1beta1.FinalizerBucketDeletion))
		}
		return sb
	}
	deleteIt := func(sb *phalanksv1beta1.StorageBucket) {
		GinkgoHelper()
		Expect(k8s.Delete(ctx, sb)).To(Succeed())
	}

	It("Retain keeps the bucket and its data, with no finalizer", func() {
		sb := managed("retain", "del-retain", phalanksv1beta1.DeletionRetain, phalanksv1beta1.NonEmptyFail)
		Expect(get(sb).Finalizers).To(BeEmpty())
		putObject(s3, "del-retain", "kept")
		deleteIt(sb)
		eventuallyGone(sb)
		Expect(bucketExists(s3, "del-retain")).To(BeTrue())
		Expect(objects(s3, "del-retain")).To(HaveLen(1))
	})

	It("Delete removes an empty bucket", func() {
		sb := managed("empty", "del-empty", phalanksv1beta1.DeletionDelete, phalanksv1beta1.NonEmptyFail)
		deleteIt(sb)
		eventuallyGone(sb)
		Expect(bucketExists(s3, "del-empty")).To(BeFalse())
	})

	It("Fail keeps a non-empty bucket and the finalizer, and deletes once it is empty", func() {
		sb := managed("fail", "del-fail", phalanksv1beta1.DeletionDelete, phalanksv1beta1.NonEmptyFail)
		putObject(s3, "del-fail", "precious")
		deleteIt(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "BucketNotEmpty", 30*time.Second)
		Expect(condition(get(sb), "Managed").Message).To(ContainSubstring("deletionPolicy to Retain"))
		Expect(get(sb).Finalizers).To(ConsistOf(phalanksv1beta1.FinalizerBucketDeletion))
		Expect(objects(s3, "del-fail")).To(HaveLen(1))

		c, err := s3.Client()
		Expect(err).NotTo(HaveOccurred())
		Expect(c.RemoveObject(ctx, "del-fail", "precious", miniogo.RemoveObjectOptions{})).To(Succeed())
		eventuallyGone(sb) // retried on schedule
		Expect(bucketExists(s3, "del-fail")).To(BeFalse())
	})

	It("DeleteIfEmpty leaves a non-empty bucket with its data and releases the StorageBucket", func() {
		sb := managed("ifempty", "del-ifempty", phalanksv1beta1.DeletionDelete, phalanksv1beta1.NonEmptyDeleteIfEmpty)
		putObject(s3, "del-ifempty", "precious")
		deleteIt(sb)
		eventuallyGone(sb)
		Expect(bucketExists(s3, "del-ifempty")).To(BeTrue())
		Expect(objects(s3, "del-ifempty")).To(HaveLen(1))
		Expect(events(sb)).To(ContainElement(HavePrefix("Warning/BucketNotEmpty")))
	})

	It("ForceEmpty removes every version and delete marker, then the bucket", func() {
		sb := managed("force", "del-force", phalanksv1beta1.DeletionDelete, phalanksv1beta1.NonEmptyForceEmpty)
		c, err := s3.Client()
		Expect(err).NotTo(HaveOccurred())
		Expect(c.EnableVersioning(ctx, "del-force")).To(Succeed())
		for range 3 {
			putObject(s3, "del-force", "a")
			putObject(s3, "del-force", "b/c")
		}
		Expect(c.RemoveObject(ctx, "del-force", "a", miniogo.RemoveObjectOptions{})).To(Succeed())
		Expect(objects(s3, "del-force")).To(HaveLen(7))
		deleteIt(sb)
		eventuallyGone(sb)
		Expect(bucketExists(s3, "del-force")).To(BeFalse())
		Expect(events(sb)).To(ContainElement(ContainSubstring("after deleting 7 object versions")))
	})

	It("ForceEmpty refuses a bucket under object lock until the policy says Retain", func() {
		Expect(s3.MakeBucket(ctx, "del-locked", miniogo.MakeBucketOptions{ObjectLocking: true})).To(Succeed())
		sb := newBucket(ns, "locked", "del-locked", s3)
		sb.Annotations = map[string]string{phalanksv1beta1.AnnotationAdopt: "true"}
		sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
		sb.Spec.DeletionPolicy = phalanksv1beta1.DeletionDelete
		sb.Spec.NonEmptyStrategy = phalanksv1beta1.NonEmptyForceEmpty
		create(sb)
		eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		putObject(s3, "del-locked", "locked-data")
		deleteIt(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "ObjectLockEnabled", 30*time.Second)
		Expect(condition(get(sb), "Managed").Message).To(ContainSubstring("set deletionPolicy to Retain"))
		Expect(get(sb).Finalizers).To(ConsistOf(phalanksv1beta1.FinalizerBucketDeletion))
		Expect(objects(s3, "del-locked")).To(HaveLen(1))

		got := get(sb)
		got.Spec.DeletionPolicy = phalanksv1beta1.DeletionRetain
		Expect(k8s.Update(ctx, got)).To(Succeed())
		eventuallyGone(sb)
		Expect(objects(s3, "del-locked")).To(HaveLen(1))
	})

	It("does not delete a bucket it does not own", func() {
		Expect(s3.MakeBucket(ctx, "del-foreign", miniogo.MakeBucketOptions{})).To(Succeed())
		sb := newBucket(ns, "foreign", "del-foreign", s3)
		sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
		sb.Spec.DeletionPolicy = phalanksv1beta1.DeletionDelete
		create(sb)
		eventuallyReady(sb, metav1.ConditionFalse, "ErrResourceExists", 30*time.Second)
		deleteIt(sb)
		eventuallyGone(sb)
		Expect(bucketExists(s3, "del-foreign")).To(BeTrue())
	})
})

var _ = Describe("StorageBucket outages", func() {
	It("goes not Ready within interval plus timeout when MinIO stops, and Ready within one interval after it restarts", func() {
		flaky := minio.StartForTest(GinkgoT(), minio.Options{})
		ns := namespace()
		credentials(ns, "s3-credentials", flaky)
		var sbs []*phalanksv1beta1.StorageBucket
		for _, name := range []string{"outage-a", "outage-b", "outage-c"} {
			Expect(flaky.MakeBucket(context.Background(), name, miniogo.MakeBucketOptions{})).To(Succeed())
			sb := newBucket(ns, name, name, flaky)
			create(sb)
			sbs = append(sbs, sb)
		}
		for _, sb := range sbs {
			eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		}
		const interval, timeout, slack = 5 * time.Second, time.Second, 3 * time.Second

		Expect(flaky.Stop()).To(Succeed())
		stopped := time.Now()
		for _, sb := range sbs {
			eventuallyReady(sb, metav1.ConditionFalse, "ConnectionRefused", interval+timeout+slack)
		}
		GinkgoWriter.Printf("not Ready after %s\n", time.Since(stopped))

		Expect(flaky.Restart()).To(Succeed())
		restarted := time.Now()
		for _, sb := range sbs {
			eventuallyReady(sb, metav1.ConditionTrue, "BucketReady", interval+slack)
		}
		GinkgoWriter.Printf("Ready again after %s\n", time.Since(restarted))
		Expect(events(sbs[0])).To(ContainElement(HavePrefix("Warning/ConnectionRefused")))
	})
})
