package storagemigration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/storagemigration"
	"github.com/phalanks/phalanks-operator/internal/webhooks"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/report"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const crdName = "storagebuckets.phalanks.io"

func TestStorageMigration(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Storage migration suite")
}

// releaseStoringV1alpha1 writes the StorageBucket CRD as a release that stored v1alpha1
// would have installed it, into a directory of its own.
func releaseStoringV1alpha1(dir string) {
	root, err := tools.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(filepath.Join(root, "config", "crd", "bases", "phalanks.io_storagebuckets.yaml"))
	Expect(err).NotTo(HaveOccurred())
	crd := &apiextensionsv1.CustomResourceDefinition{}
	Expect(yaml.Unmarshal(data, crd)).To(Succeed())
	setStorage(crd, "v1alpha1")
	out, err := yaml.Marshal(crd)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(dir, "storagebuckets.yaml"), out, 0o600)).To(Succeed())
}

func setStorage(crd *apiextensionsv1.CustomResourceDefinition, version string) {
	for i := range crd.Spec.Versions {
		crd.Spec.Versions[i].Storage = crd.Spec.Versions[i].Name == version
	}
}

// storedAPIVersions reads every StorageBucket straight from etcd and returns the
// apiVersion each is encoded in.
func storedAPIVersions(ctx context.Context, etcdURL, namespace string) map[string]string {
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 10 * time.Second})
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = etcd.Close() }()
	resp, err := etcd.Get(ctx, "/registry/phalanks.io/storagebuckets/"+namespace+"/", clientv3.WithPrefix())
	Expect(err).NotTo(HaveOccurred())
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		var obj metav1.PartialObjectMetadata
		Expect(json.Unmarshal(kv.Value, &obj)).To(Succeed(), "objects are stored as JSON")
		out[obj.Name] = obj.APIVersion
	}
	return out
}

var _ = Describe("Storage migration after an upgrade from a release that stored v1alpha1", func() {
	It("rewrites every object in v1beta1 and trims storedVersions", func(ctx SpecContext) {
		scheme := runtime.NewScheme()
		utilruntime.Must(clientgoscheme.AddToScheme(scheme))
		utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
		utilruntime.Must(phalanksv1alpha1.AddToScheme(scheme))
		utilruntime.Must(phalanksv1beta1.AddToScheme(scheme))

		By("installing the old release's CRD, which stores v1alpha1")
		oldCRDs := GinkgoT().TempDir()
		releaseStoringV1alpha1(oldCRDs)
		env, err := envtest.Start(envtest.Options{Scheme: scheme, CRDPaths: []string{oldCRDs}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(env.Stop)
		k8s := env.Client

		mgr, err := env.NewManager()
		Expect(err).NotTo(HaveOccurred())
		Expect(webhooks.Setup(mgr)).To(Succeed())
		migrator := &storagemigration.Migrator{
			CRDName: crdName, Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(),
			Log: GinkgoLogr, PageSize: 7, RetryInitial: 100 * time.Millisecond,
		}
		mgrCtx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		go func() {
			defer GinkgoRecover()
			Expect(mgr.Start(mgrCtx)).To(Succeed())
		}()

		By("creating objects as v1alpha1")
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "migrate"}}
		Expect(k8s.Create(ctx, ns)).To(Succeed())
		const count = 20
		for i := range count {
			Expect(k8s.Create(ctx, &phalanksv1alpha1.StorageBucket{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprintf("bucket-%02d", i)},
				Spec: phalanksv1alpha1.StorageBucketSpec{
					Endpoint: "s3.eu-central-1.amazonaws.com", BucketName: fmt.Sprintf("data-%02d", i), SecretName: "creds",
				},
			})).To(Succeed())
		}
		Expect(storedAPIVersions(ctx, env.EtcdURL(), ns.Name)).To(HaveLen(count))
		for name, v := range storedAPIVersions(ctx, env.EtcdURL(), ns.Name) {
			Expect(v).To(Equal("phalanks.io/v1alpha1"), name)
		}

		By("upgrading the CRD to store v1beta1")
		crd := &apiextensionsv1.CustomResourceDefinition{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
		setStorage(crd, "v1beta1")
		Expect(k8s.Update(ctx, crd)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
			g.Expect(crd.Status.StoredVersions).To(ConsistOf("v1alpha1", "v1beta1"))
		}).Should(Succeed())

		By("running the migration as the manager's leader-only runnable")
		Expect(mgr.Add(migrator)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
			g.Expect(crd.Status.StoredVersions).To(Equal([]string{"v1beta1"}))
		}).WithTimeout(time.Minute).Should(Succeed())

		stored := storedAPIVersions(ctx, env.EtcdURL(), ns.Name)
		Expect(stored).To(HaveLen(count))
		for name, v := range stored {
			Expect(v).To(Equal("phalanks.io/v1beta1"), name)
		}
		list := &phalanksv1beta1.StorageBucketList{}
		Expect(k8s.List(ctx, list, client.InNamespace(ns.Name))).To(Succeed())
		Expect(list.Items).To(HaveLen(count))
		for _, b := range list.Items {
			Expect(b.Spec.Endpoint).To(Equal("https://s3.eu-central-1.amazonaws.com"))
			Expect(b.Spec.CredentialsSecretRef.Name).To(Equal("creds"))
		}

		By("doing nothing on the next start")
		res, err := migrator.Migrate(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res).To(Equal(storagemigration.Result{StorageVersion: "v1beta1"}))
	})
})

// The failures once more at the end of the output, where CI shows its tail.
var _ = report.FailuresLast()
