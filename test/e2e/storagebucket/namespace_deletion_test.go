package storagebucket_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// namespaceCase is one StorageBucket in a namespace of its own, and what becomes of its
// bucket when the namespace is deleted.
type namespaceCase struct {
	ns       string
	policy   phalanksv1beta1.DeletionPolicy
	manage   phalanksv1beta1.ManagementPolicy
	strategy phalanksv1beta1.NonEmptyStrategy
	objects  int
	// kept says the bucket outlives the namespace.
	kept bool
}

var _ = Describe("Deleting a namespace", func() {
	It("completes for every deletionPolicy, deleting the buckets that can be deleted and keeping the others", func() {
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
		Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "phalanks-system"}})).To(Succeed())

		const timeout = 15 * time.Second
		managerFlags := []string{"--leader-elect", "--leader-elect-namespace", "phalanks-system",
			"--storagebucket-namespace-deletion-timeout", timeout.String()}
		m := startManager("manager", local.Kubeconfig, managerFlags...)

		cases := []*namespaceCase{
			{ns: "observe", manage: phalanksv1beta1.ManagementObserve, policy: phalanksv1beta1.DeletionRetain, objects: 1, kept: true},
			{ns: "retain", manage: phalanksv1beta1.ManagementManage, policy: phalanksv1beta1.DeletionRetain, objects: 1, kept: true},
			{ns: "delete-empty", manage: phalanksv1beta1.ManagementManage, policy: phalanksv1beta1.DeletionDelete, strategy: phalanksv1beta1.NonEmptyFail},
			{ns: "delete-force", manage: phalanksv1beta1.ManagementManage, policy: phalanksv1beta1.DeletionDelete, strategy: phalanksv1beta1.NonEmptyForceEmpty, objects: 3},
			{ns: "delete-ifempty", manage: phalanksv1beta1.ManagementManage, policy: phalanksv1beta1.DeletionDelete, strategy: phalanksv1beta1.NonEmptyDeleteIfEmpty, objects: 1, kept: true},
			// Fail waits for an empty bucket, but not longer than the namespace allows.
			{ns: "delete-fail", manage: phalanksv1beta1.ManagementManage, policy: phalanksv1beta1.DeletionDelete, strategy: phalanksv1beta1.NonEmptyFail, objects: 1, kept: true},
		}
		restarted := &namespaceCase{ns: "operator-restarted", manage: phalanksv1beta1.ManagementManage, policy: phalanksv1beta1.DeletionDelete,
			strategy: phalanksv1beta1.NonEmptyFail, kept: true}
		sbs := map[string]*phalanksv1beta1.StorageBucket{}
		for _, tc := range append(cases, restarted) {
			sbs[tc.ns] = setUpNamespaceCase(ctx, c, s3, tc)
		}

		By("stopping the operator, deleting one namespace, and starting the operator once its Secret is gone")
		Expect(m.proc.Stop(10 * time.Second)).To(Succeed())
		Expect(c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: restarted.ns}})).To(Succeed())
		Eventually(func() bool {
			err := c.Get(ctx, client.ObjectKey{Namespace: restarted.ns, Name: "s3-credentials"}, &corev1.Secret{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(2*time.Minute).Should(BeTrue(), "the namespace controller deletes the Secret")
		Expect(c.Get(ctx, client.ObjectKeyFromObject(sbs[restarted.ns]), &phalanksv1beta1.StorageBucket{})).To(Succeed(),
			"the finalizer holds the StorageBucket while the operator is away")
		m = startManager("manager-again", local.Kubeconfig, managerFlags...)

		By("deleting the other namespaces")
		started := time.Now()
		for _, tc := range cases {
			Expect(c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.ns}})).To(Succeed())
		}
		for _, tc := range append(cases, restarted) {
			Eventually(func() bool {
				err := c.Get(ctx, client.ObjectKey{Name: tc.ns}, &corev1.Namespace{})
				return apierrors.IsNotFound(err)
			}).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(BeTrue(), "namespace %s is still there:\n%s", tc.ns, m.log())
		}
		GinkgoWriter.Printf("every namespace gone %s after its deletion\n", time.Since(started).Round(time.Second))

		admin, err := s3.Client()
		Expect(err).NotTo(HaveOccurred())
		for _, tc := range append(cases, restarted) {
			exists, err := admin.BucketExists(ctx, tc.ns)
			Expect(err).NotTo(HaveOccurred())
			Expect(exists).To(Equal(tc.kept), "bucket of %s", tc.ns)
			if tc.kept {
				Expect(objectCount(admin, tc.ns)).To(Equal(tc.objects), "the data in the bucket of %s", tc.ns)
			}
		}
		for _, ns := range []string{"delete-fail", restarted.ns} {
			Expect(m.log()).To(MatchRegexp(`releasing the StorageBucket and keeping its bucket".*"bucket":%q`, ns), "the operator says it kept the bucket of %s", ns)
		}
		Expect(m.log()).To(ContainSubstring("releasing the StorageBucket and keeping its bucket"))
		expectNoSecrets(m.log(), s3.SecretKey, s3.AccessKey)
	})
})

// setUpNamespaceCase creates the case's namespace, Secret and StorageBucket (its bucket is
// named after the namespace), waits until it is Ready, then puts the case's objects in it.
func setUpNamespaceCase(ctx context.Context, c client.Client, s3 *minio.Server, tc *namespaceCase) *phalanksv1beta1.StorageBucket {
	GinkgoHelper()
	Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.ns}})).To(Succeed())
	Expect(c.Create(ctx, credentialsSecret(tc.ns, s3))).To(Succeed())
	if tc.manage == phalanksv1beta1.ManagementObserve {
		Expect(s3.MakeBucket(ctx, tc.ns, miniogo.MakeBucketOptions{})).To(Succeed())
	}
	sb := storageBucket(tc.ns, "bucket", tc.ns, s3)
	sb.Spec.ManagementPolicy, sb.Spec.DeletionPolicy, sb.Spec.NonEmptyStrategy = tc.manage, tc.policy, tc.strategy
	Expect(c.Create(ctx, sb)).To(Succeed())
	eventuallyReady(c, sb, metav1.ConditionTrue, "BucketReady", time.Minute)
	admin, err := s3.Client()
	Expect(err).NotTo(HaveOccurred())
	for i := range tc.objects {
		_, err := admin.PutObject(ctx, tc.ns, fmt.Sprintf("data-%d", i), strings.NewReader("payload"), 7, miniogo.PutObjectOptions{})
		Expect(err).NotTo(HaveOccurred())
	}
	return sb
}

func objectCount(c *miniogo.Client, bucket string) int {
	GinkgoHelper()
	n := 0
	for obj := range c.ListObjectsIter(context.Background(), bucket, miniogo.ListObjectsOptions{Recursive: true, WithVersions: true}) {
		Expect(obj.Err).NotTo(HaveOccurred())
		n++
	}
	return n
}
