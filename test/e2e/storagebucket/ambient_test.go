package storagebucket_test

import (
	"context"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/controllers/storagebucket"
)

var _ = Describe("The operator's own credentials", func() {
	It("are used only with --storagebucket-ambient-credentials, for StorageBuckets without a Secret, and never instead of a Secret", func() {
		ctx := context.Background()
		p := startPlatform(nil)
		s3c, err := p.s3.Client()
		Expect(err).NotTo(HaveOccurred())
		Expect(s3c.MakeBucket(ctx, "ambient-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		// The operator process's environment holds working credentials, as IRSA or a
		// mounted key pair would give it; no instance metadata service is asked.
		GinkgoT().Setenv("AWS_ACCESS_KEY_ID", p.s3.AccessKey)
		GinkgoT().Setenv("AWS_SECRET_ACCESS_KEY", p.s3.SecretKey)
		GinkgoT().Setenv("AWS_EC2_METADATA_DISABLED", "true")
		Expect(p.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}})).To(Succeed())
		Expect(p.c.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "wrong-keys", Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": p.s3.AccessKey, "AWS_SECRET_ACCESS_KEY": "not-the-secret"},
		})).To(Succeed())
		bare := storageBucket("tenant", "no-secret", "ambient-bucket", p.s3)
		bare.Spec.ManagementPolicy, bare.Spec.CredentialsSecretRef = phalanksv1beta1.ManagementObserve, nil
		Expect(p.c.Create(ctx, bare)).To(Succeed())
		// A Secret's credentials are the StorageBucket's, even wrong ones.
		wrong := storageBucket("tenant", "wrong-secret", "ambient-bucket", p.s3)
		wrong.Spec.ManagementPolicy, wrong.Spec.CredentialsSecretRef.Name = phalanksv1beta1.ManagementObserve, "wrong-keys"
		Expect(p.c.Create(ctx, wrong)).To(Succeed())

		By("off, the default: anonymous requests, which MinIO refuses")
		off := startInProcess(p, nil, "")
		eventuallyReady(p.c, bare, metav1.ConditionFalse, "AccessDenied", time.Minute)
		eventuallyReady(p.c, wrong, metav1.ConditionFalse, "InvalidCredentials", time.Minute)
		off.stop()

		By("on: the environment's credentials for the StorageBucket without a Secret only")
		startInProcess(p, nil, "", func(o *storagebucket.Options) { o.AmbientCredentials = true })
		eventuallyReady(p.c, bare, metav1.ConditionTrue, "BucketReady", time.Minute)
		Consistently(func() string { _, reason := ready(p.c, wrong); return reason }).
			WithTimeout(12 * time.Second).WithPolling(time.Second).Should(Equal("InvalidCredentials"))
	})
})
