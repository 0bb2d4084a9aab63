package storagebucket_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

var _ = Describe("StorageBucket admission", func() {
	var ns string
	BeforeEach(func() { ns = namespace() })

	valid := func() *phalanksv1beta1.StorageBucket {
		return &phalanksv1beta1.StorageBucket{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "invalid-", Namespace: ns},
			Spec: phalanksv1beta1.StorageBucketSpec{
				BucketName: "photos-prod",
				Endpoint:   "https://s3.eu-central-1.amazonaws.com",
				Region:     "eu-central-1",
			},
		}
	}
	caRef := &phalanksv1beta1.KeyReference{Name: "ca"}

	It("accepts a minimal StorageBucket and fills in the defaults", func() {
		sb := valid()
		Expect(k8s.Create(context.Background(), sb)).To(Succeed())
		Expect(sb.Spec.HealthCheck.Interval.Duration).To(Equal(time.Minute))
		Expect(sb.Spec.HealthCheck.Timeout.Duration).To(Equal(5 * time.Second))
		Expect(sb.Spec.HealthCheck.Depth).To(Equal(phalanksv1beta1.ProbeHeadBucket))
		Expect(sb.Spec.ManagementPolicy).To(Equal(phalanksv1beta1.ManagementObserve))
		Expect(sb.Spec.DeletionPolicy).To(Equal(phalanksv1beta1.DeletionRetain))
		Expect(sb.Spec.NonEmptyStrategy).To(Equal(phalanksv1beta1.NonEmptyFail))
		Expect(sb.Spec.AddressingStyle).To(Equal(phalanksv1beta1.AddressingAuto))
	})

	DescribeTable("rejects an invalid manifest with a clear message",
		func(mutate func(*phalanksv1beta1.StorageBucket), message string) {
			sb := valid()
			mutate(sb)
			err := k8s.Create(context.Background(), sb)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("a bucket name that is too short",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.BucketName = "ab" },
			"spec.bucketName: Invalid value: \"ab\": spec.bucketName in body should be at least 3 chars long"),
		Entry("a bucket name with capitals",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.BucketName = "Photos" },
			"spec.bucketName in body should match"),
		Entry("a bucket name with two dots in a row",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.BucketName = "photos..prod" },
			"bucketName must not contain '..', '.-' or '-.'"),
		Entry("a bucket name that looks like an IP address",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.BucketName = "192.168.1.10" },
			"bucketName must not look like an IP address"),
		Entry("a bucket name with a reserved prefix",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.BucketName = "xn--photos" },
			"bucketName must not use a prefix or suffix that S3 reserves"),
		Entry("a plain http endpoint without insecureAllowHTTP",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.Endpoint = "http://minio.example.com:9000" },
			"endpoint uses plain http://, which sends credentials and data unencrypted; use https:// or set insecureAllowHTTP: true"),
		Entry("an endpoint that is not a URL",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.Endpoint = "s3.amazonaws.com" },
			"endpoint must be an absolute http:// or https:// URL"),
		Entry("an endpoint with a path",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.Endpoint = "https://s3.example.com/photos-prod" },
			"endpoint must not have a path: name the bucket in bucketName"),
		Entry("an endpoint with a query",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.Endpoint = "https://s3.example.com?x=1" },
			"endpoint must not have a query"),
		Entry("a CA bundle for a plain http endpoint",
			func(sb *phalanksv1beta1.StorageBucket) {
				sb.Spec.Endpoint, sb.Spec.InsecureAllowHTTP = "http://minio:9000", true
				sb.Spec.CABundle = &phalanksv1beta1.CABundleSource{ConfigMapKeyRef: caRef}
			},
			"caBundle applies only to an https:// endpoint"),
		Entry("a CA bundle naming both a ConfigMap and a Secret",
			func(sb *phalanksv1beta1.StorageBucket) {
				sb.Spec.CABundle = &phalanksv1beta1.CABundleSource{ConfigMapKeyRef: caRef, SecretKeyRef: caRef}
			},
			"caBundle needs exactly one of configMapKeyRef and secretKeyRef"),
		Entry("a probe interval under 5s",
			func(sb *phalanksv1beta1.StorageBucket) {
				sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 2 * time.Second}
			},
			"healthCheck.interval must be at least 5s"),
		Entry("a probe interval over a day",
			func(sb *phalanksv1beta1.StorageBucket) {
				sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 48 * time.Hour}
			},
			"healthCheck.interval must be at most 24h"),
		Entry("a timeout as long as the interval",
			func(sb *phalanksv1beta1.StorageBucket) {
				sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 10 * time.Second}
				sb.Spec.HealthCheck.Timeout = &metav1.Duration{Duration: 10 * time.Second}
			},
			"healthCheck.timeout must be shorter than healthCheck.interval"),
		Entry("a timeout over a minute",
			func(sb *phalanksv1beta1.StorageBucket) {
				sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 10 * time.Minute}
				sb.Spec.HealthCheck.Timeout = &metav1.Duration{Duration: 2 * time.Minute}
			},
			"healthCheck.timeout must be at most 60s"),
		Entry("an endpoint with a user name and password",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.Endpoint = "https://AKIA:secret@s3.example.com" },
			"endpoint must not hold a user name or password"),
		Entry("an endpoint with a user name",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.Endpoint = "https://admin@minio.example.com:9000" },
			"endpoint must not hold a user name or password"),
		Entry("a timeout under 100ms",
			func(sb *phalanksv1beta1.StorageBucket) {
				sb.Spec.HealthCheck.Timeout = &metav1.Duration{Duration: 10 * time.Millisecond}
			},
			"healthCheck.timeout must be at least 100ms"),
		Entry("an unknown probe depth",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.HealthCheck.Depth = "Deep" },
			`spec.healthCheck.depth: Unsupported value: "Deep": supported values: "Connect", "HeadBucket", "List", "ReadWrite"`),
		Entry("deletionPolicy Delete on a bucket that is only observed",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.DeletionPolicy = phalanksv1beta1.DeletionDelete },
			"deletionPolicy Delete needs managementPolicy Manage: the operator only deletes buckets it manages"),
		Entry("a region with capitals",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.Region = "EU-Central-1" },
			"spec.region in body should match"),
		Entry("an unknown management policy",
			func(sb *phalanksv1beta1.StorageBucket) { sb.Spec.ManagementPolicy = "Own" },
			`spec.managementPolicy: Unsupported value: "Own": supported values: "Observe", "Manage"`),
	)

	It("names only the real problem of a plain http endpoint, not a missing field", func() {
		sb := valid()
		sb.Spec.Endpoint = "http://minio.example.com:9000"
		err := k8s.Create(context.Background(), sb)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("endpoint uses plain http://"))
		Expect(err.Error()).NotTo(ContainSubstring("no such key"))
	})

	It("keeps endpoint and region while the bucket is managed, and lets them change once it is only observed", func() {
		ctx := context.Background()
		sb := valid()
		sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
		Expect(k8s.Create(ctx, sb)).To(Succeed())
		for name, edit := range map[string]func(*phalanksv1beta1.StorageBucket){
			"endpoint": func(s *phalanksv1beta1.StorageBucket) { s.Spec.Endpoint = "https://s3.eu-west-1.amazonaws.com" },
			"region":   func(s *phalanksv1beta1.StorageBucket) { s.Spec.Region = "eu-west-1" },
		} {
			err := updateLatest(sb, edit)
			Expect(err).To(HaveOccurred(), name)
			Expect(err.Error()).To(ContainSubstring("endpoint and region cannot change while managementPolicy is Manage"), name)
		}
		By("turning management off, which may move it in the same update")
		Expect(updateLatest(sb, func(s *phalanksv1beta1.StorageBucket) {
			s.Spec.Endpoint, s.Spec.Region = "https://s3.eu-west-1.amazonaws.com", "eu-west-1"
			s.Spec.ManagementPolicy = phalanksv1beta1.ManagementObserve
		})).To(Succeed())
		Expect(updateLatest(sb, func(s *phalanksv1beta1.StorageBucket) {
			s.Spec.ManagementPolicy = phalanksv1beta1.ManagementManage
		})).To(Succeed(), "managing the bucket at its new place")
	})

	It("rejects a change of the bucket name", func() {
		sb := valid()
		Expect(k8s.Create(context.Background(), sb)).To(Succeed())
		err := updateLatest(sb, func(s *phalanksv1beta1.StorageBucket) { s.Spec.BucketName = "photos-other" })
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("bucketName is immutable"))
	})
})

// updateLatest applies edit to the newest version of sb and updates it, again when the
// update lost a race with the controller's status write, and returns the update's
// (validation) error.
func updateLatest(sb *phalanksv1beta1.StorageBucket, edit func(*phalanksv1beta1.StorageBucket)) error {
	GinkgoHelper()
	ctx := context.Background()
	var err error
	Eventually(func() bool {
		latest := &phalanksv1beta1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sb), latest)).To(Succeed())
		edit(latest)
		err = k8s.Update(ctx, latest)
		return !apierrors.IsConflict(err)
	}).WithTimeout(30 * time.Second).Should(BeTrue())
	return err
}
