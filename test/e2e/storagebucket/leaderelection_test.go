package storagebucket_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
)

var _ = Describe("Two managers with leader election", func() {
	It("lets only the leader probe, and the other takes over within the lease duration when the leader dies", func() {
		ctx := context.Background()
		env, err := envtest.Start(envtest.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(env.Stop)
		c := env.Client
		s3 := minio.StartForTest(GinkgoT(), minio.Options{})
		for _, ns := range []string{"phalanks-system", "team"} {
			Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		}
		Expect(c.Create(ctx, credentialsSecret("team", s3))).To(Succeed())
		sb := storageBucket("team", "elected", "elected-bucket", s3)
		Expect(c.Create(ctx, sb)).To(Succeed())

		kubeconfig, err := env.KubeconfigUser("phalanks-manager", "system:masters")
		Expect(err).NotTo(HaveOccurred())
		path := writeKubeconfig(kubeconfig)
		const lease, retry = 4 * time.Second, 500 * time.Millisecond
		flags := []string{"--leader-elect", "--leader-elect-namespace", "phalanks-system",
			"--leader-elect-lease-duration", lease.String(), "--leader-elect-renew-deadline", "3s",
			"--leader-elect-retry-period", retry.String()}
		a := startManager("manager-a", path, flags...)
		b := startManager("manager-b", path, flags...)

		By("electing one leader, which probes")
		var leader, follower *manager
		Eventually(func() bool {
			switch {
			case a.leading():
				leader, follower = a, b
			case b.leading():
				leader, follower = b, a
			}
			return leader != nil
		}).WithTimeout(time.Minute).Should(BeTrue())
		eventuallyReady(c, sb, metav1.ConditionTrue, "BucketReady", time.Minute)

		By("keeping the follower idle while the leader probes every interval")
		before := leader.probes()
		Eventually(leader.probes).WithTimeout(30 * time.Second).Should(BeNumerically(">=", before+2))
		Expect(follower.probes()).To(BeZero(), "the follower probed")
		Expect(follower.leading()).To(BeFalse())

		By("killing the leader")
		leader.proc.Kill()
		killed := time.Now()
		Eventually(follower.leading).WithTimeout(lease + 10*time.Second).WithPolling(100 * time.Millisecond).Should(BeTrue())
		tookOver := time.Since(killed)
		GinkgoWriter.Printf("the follower took over %s after the leader was killed (lease %s)\n", tookOver, lease)
		// client-go counts the lease from when the follower saw the last renewal, and the
		// follower polls every retry period (with up to 20% jitter): up to two retry
		// periods come on top of the lease.
		Expect(tookOver).To(BeNumerically("<=", lease+2*retry+retry/2))
		Eventually(follower.probes).WithTimeout(30 * time.Second).Should(BeNumerically(">=", 2))
		eventuallyReady(c, sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)

		expectNoSecrets(a.log()+b.log(), s3.SecretKey, s3.AccessKey)
	})
})
