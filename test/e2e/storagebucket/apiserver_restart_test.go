package storagebucket_test

import (
	"context"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

var _ = Describe("A kube-apiserver restart", func() {
	It("keeps probing while the replica's shard lease holds, and the status catches up once the API server is back", func() {
		ctx := context.Background()
		local, err := cluster.Start(ctx, cluster.Options{Dir: GinkgoT().TempDir()})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(local.Stop)
		c, err := client.New(local.Config, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		root, err := tools.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		defs, err := crds.Load(filepath.Join(root, "config", "crd", "bases"))
		Expect(err).NotTo(HaveOccurred())
		Expect(crds.Install(ctx, c, defs, nil)).To(Succeed())

		s3 := minio.StartForTest(GinkgoT(), minio.Options{})
		for _, ns := range []string{"phalanks-system", "team"} {
			Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		}
		Expect(c.Create(ctx, credentialsSecret("team", s3))).To(Succeed())
		sb := storageBucket("team", "survivor", "survivor-bucket", s3)
		Expect(c.Create(ctx, sb)).To(Succeed())

		// A renew deadline and a shard lease longer than the outage. Without the API
		// server the replica cannot renew its shard Lease, and it stops probing a margin
		// before the Lease it last renewed ends (another replica may hold its slots by
		// then): with the default 15s lease that is about 10s into the outage, which left
		// the probe after MinIO's stop to chance on a loaded machine.
		m := startManager("manager", local.Kubeconfig, "--leader-elect", "--leader-elect-namespace", "phalanks-system",
			"--leader-elect-lease-duration", "60s", "--leader-elect-renew-deadline", "45s", "--leader-elect-retry-period", "2s",
			"--storagebucket-shard-lease-duration", "90s", "--storagebucket-shard-renew-period", "5s")
		eventuallyReady(c, sb, metav1.ConditionTrue, "BucketReady", time.Minute)

		By("stopping kube-apiserver, then MinIO")
		Expect(local.StopAPIServer()).To(Succeed())
		Expect(s3.Stop()).To(Succeed())
		refused := `reason="ConnectionRefused"`
		Eventually(func() float64 { return m.sum("phalanks_storagebucket_probe_failures_total", refused) }).
			WithTimeout(30*time.Second).Should(BeNumerically(">=", 1), "the manager kept probing without the API server")

		By("starting kube-apiserver again")
		Expect(local.StartAPIServer()).To(Succeed())
		eventuallyReady(c, sb, metav1.ConditionFalse, "ConnectionRefused", time.Minute)

		By("starting MinIO again")
		Expect(s3.Restart()).To(Succeed())
		eventuallyReady(c, sb, metav1.ConditionTrue, "BucketReady", time.Minute)
		Expect(m.proc.Running()).To(BeTrue(), "the manager exited:\n%s", m.log())
		expectNoSecrets(m.log(), s3.SecretKey, s3.AccessKey)
	})
})
