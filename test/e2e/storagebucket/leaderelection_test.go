package storagebucket_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

// leaderElectionID is the manager's Lease name (main.go).
const leaderElectionID = "phalanks-operator.phalanks.io"

var _ = Describe("Two managers with leader election", func() {
	It("elect one leader, probe the bucket from exactly one replica, and the other takes over both when the leader dies", func() {
		// A Manage bucket with deletionPolicy Delete exercises every permission: status,
		// finalizer, events, Secrets.
		ctx := context.Background()
		// The managers run with exactly the RBAC that config/rbac grants.
		p := startPlatform(nil)
		c, s3, path := p.c, p.s3, p.kubeconfig
		sb := storageBucket("team", "elected", "elected-bucket", s3)
		sb.Spec.DeletionPolicy = phalanksv1beta1.DeletionDelete
		Expect(c.Create(ctx, sb)).To(Succeed())
		const lease, retry = 4 * time.Second, 500 * time.Millisecond
		flags := []string{"--leader-elect", "--leader-elect-namespace", "phalanks-system",
			"--leader-elect-lease-duration", lease.String(), "--leader-elect-renew-deadline", "3s",
			"--leader-elect-retry-period", retry.String(),
			"--storagebucket-shard-lease-duration", lease.String(), "--storagebucket-shard-renew-period", retry.String()}
		a := startManager("manager-a", path, flags...)
		b := startManager("manager-b", path, flags...)

		By("electing one leader")
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

		By("probing the bucket from the one replica whose shard holds it, every interval")
		// The replicas share the StorageBuckets whoever leads (a shard ring); with one
		// bucket, one of them probes and the other stays idle. Counted once the ring
		// settled: until both joined, the first may probe a bucket it then hands over.
		Eventually(func() error { return ringSettled(c, 2) }).WithTimeout(30 * time.Second).Should(Succeed())
		a0, b0 := a.probes(), b.probes()
		Eventually(func() float64 { return a.probes() - a0 + b.probes() - b0 }).WithTimeout(30 * time.Second).Should(BeNumerically(">=", 1))
		prober, idle, idle0 := a, b, b0
		if b.probes() > b0 {
			prober, idle, idle0 = b, a, a0
		}
		before := prober.probes()
		Eventually(prober.probes).WithTimeout(30 * time.Second).Should(BeNumerically(">=", before+2))
		Expect(idle.probes()).To(Equal(idle0), "both replicas probed the bucket")
		Expect(follower.leading()).To(BeFalse())

		By("killing the leader")
		leader.proc.Kill()
		killed := time.Now()
		Eventually(follower.leading).WithTimeout(lease + 10*time.Second).WithPolling(100 * time.Millisecond).Should(BeTrue())
		// The follower stamps the Lease with the moment it took it (same machine, same
		// clock), which leaves the metrics polling out of the measurement.
		held := &coordinationv1.Lease{}
		Expect(c.Get(ctx, client.ObjectKey{Namespace: "phalanks-system", Name: leaderElectionID}, held)).To(Succeed())
		Expect(held.Spec.AcquireTime).NotTo(BeNil())
		tookOver := held.Spec.AcquireTime.Sub(killed)
		GinkgoWriter.Printf("the follower took over %s after the leader was killed (lease %s)\n", tookOver, lease)
		// client-go counts the lease from when the follower saw the last renewal, and the
		// follower polls every retry period (with up to 20% jitter): up to two retry
		// periods come on top of the lease, plus the API server's answers to its reads,
		// which on a loaded 2-core machine (the rest of make test runs beside this) take
		// up to about a second.
		Expect(tookOver).To(BeNumerically("<=", lease+2*retry+retry/2+time.Second))
		Eventually(follower.probes).WithTimeout(30 * time.Second).Should(BeNumerically(">=", 2))
		eventuallyReady(c, sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)

		By("deleting the bucket with the StorageBucket, through the finalizer")
		Expect(c.Delete(ctx, sb)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(sb), sb)) }).
			WithTimeout(30 * time.Second).Should(BeTrue())
		admin, err := s3.Client()
		Expect(err).NotTo(HaveOccurred())
		Expect(admin.BucketExists(ctx, "elected-bucket")).To(BeFalse())
		Expect(a.log() + b.log()).NotTo(ContainSubstring("forbidden"))

		expectNoSecrets(a.log()+b.log(), s3.SecretKey, s3.AccessKey)
	})
})
