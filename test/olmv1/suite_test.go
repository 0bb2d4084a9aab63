package olmv1_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/sirupsen/logrus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/report"
	"github.com/phalanks/phalanks-operator/test/harness/sandbox"
	"github.com/phalanks/phalanks-operator/test/harness/tinyproxy"
	"github.com/phalanks/phalanks-operator/test/olm"
	"github.com/phalanks/phalanks-operator/test/olmv1"
)

// The whole suite runs in a sandbox of private namespaces with the real node; see
// test/harness/sandbox.
func TestMain(m *testing.M) {
	if err := sandbox.Enter(); err != nil {
		fmt.Fprintln(os.Stderr, "test/olmv1:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

func TestOLMv1(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "OLM v1 install, upgrade and uninstall, end to end")
}

// Everything the specs share, set up once.
var (
	ctx   context.Context
	dir   string
	k8s   client.Client
	cs    kubernetes.Interface
	local *cluster.Cluster
	lm    *olmv1.OLMv1
	s3    *minio.Server
	// egressProxy is the proxy the configuration ConfigMap's storagebucket-proxy names.
	egressProxy *tinyproxy.Proxy
	scheme      = newScheme()

	// first is the first release (its released bundle, hack/olm/releases/0.1.0),
	// previous the committed bundle's release, current the tree as the next patch
	// release, unsafe the release after it with a StorageBucket CRD change OLM v1's
	// upgrade-safety preflight must refuse.
	first, previous, current, unsafe *olm.Release
	// deprecation is the committed catalog's deprecation message of the first release.
	deprecation string
)

// The catalog images, as a release would publish them: the committed catalog under the
// tag docs/install-olm.md's ClusterCatalog names, and the catalogs of the next releases.
const (
	committedCatalogImage = "quay.io/phalanks/phalanks-operator-catalog:latest"
	upgradeCatalogImage   = "quay.io/phalanks/phalanks-operator-catalog:e2e-v1-upgrade"
	unsafeCatalogImage    = "quay.io/phalanks/phalanks-operator-catalog:e2e-v1-unsafe"
	// testAppImage is what Foo's Deployment runs.
	testAppImage = "quay.io/phalanks-e2e/testapp:1"
)

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(s))
	utilruntime.Must(phalanksv1beta1.AddToScheme(s))
	return s
}

func logDir() string { return filepath.Join(dir, "logs") }

var _ = BeforeSuite(func() {
	ctrllog.SetLogger(GinkgoLogr)
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(context.Background())
	DeferCleanup(cancel)

	var err error
	dir, err = os.MkdirTemp("", "phalanks-olmv1-e2e-")
	check(err)
	Expect(os.MkdirAll(logDir(), 0o700)).To(Succeed())
	fmt.Fprintf(os.Stderr, "test/olmv1: logs and data in %s (kept if the suite fails)\n", dir)

	By("packaging the releases: the first one as released, the tree as the committed release, the next patch release and an unsafe one after it")
	logrus.SetLevel(logrus.WarnLevel)
	start := time.Now()
	first, err = releasedBundle("0.1.0")
	check(err)
	released, err := olm.ReleasedVersion()
	check(err)
	next := semver.Version{Major: released.Major, Minor: released.Minor, Patch: released.Patch + 1}
	afterNext := semver.Version{Major: next.Major, Minor: next.Minor, Patch: next.Patch + 1}
	previous, err = packageRelease(released)
	check(err)
	current, err = packageRelease(next)
	check(err)
	unsafe, err = packageRelease(afterNext)
	check(err)
	check(requireNewField(unsafe))
	GinkgoWriter.Printf("releases packaged in %s\n", time.Since(start).Round(time.Millisecond))

	By("starting the local cluster with a real node and cluster DNS, its registry mirroring quay.io")
	start = time.Now()
	local, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), RealNode: true, Mirrors: []string{"quay.io"}, ClusterDNS: true})
	check(err)
	DeferCleanup(func() { check(local.Shutdown()) })
	k8s, err = client.New(local.Config, client.Options{Scheme: scheme})
	check(err)
	cs, err = kubernetes.NewForConfig(local.Config)
	check(err)
	GinkgoWriter.Printf("cluster and node up in %s\n", time.Since(start).Round(time.Millisecond))

	By("building every release's images and the three catalogs, and pushing them to the node's registry")
	start = time.Now()
	deprecation, err = pushImages(ctx)
	check(err)
	GinkgoWriter.Printf("images built and pushed in %s\n", time.Since(start).Round(time.Millisecond))

	By("installing cert-manager's controllers and OLM v1 from its standard manifest")
	start = time.Now()
	lm, err = olmv1.Install(ctx, local, k8s, filepath.Join(dir, "olmv1"), logDir(), []string{"quay.io"})
	check(err)
	DeferCleanup(lm.Stop)
	GinkgoWriter.Printf("OLM v1 Available in %s\n", time.Since(start).Round(time.Millisecond))

	By("starting MinIO on the node's address, where pods reach it")
	minioDir := filepath.Join(dir, "minio")
	Expect(os.MkdirAll(minioDir, 0o700)).To(Succeed())
	s3, err = minio.Start(minio.Options{Dir: minioDir, Host: cluster.NodeIP})
	check(err)
	DeferCleanup(s3.Stop)

	By("starting the egress proxy StorageBucket endpoints are reached through (storagebucket-proxy)")
	proxyDir := filepath.Join(dir, "tinyproxy")
	Expect(os.MkdirAll(proxyDir, 0o700)).To(Succeed())
	egressProxy, err = tinyproxy.Start(tinyproxy.Options{Dir: proxyDir, Listen: netip.MustParseAddr(cluster.NodeIP)})
	check(err)
	DeferCleanup(egressProxy.Stop)
})

// The folder with every log is named on failure and removed on success, after every
// process has been stopped.
var _ = ReportAfterSuite("logs", func(r Report) {
	if dir == "" {
		return
	}
	if left := process.Children(); len(left) > 0 {
		Fail(fmt.Sprintf("processes outlived the suite: %s", strings.Join(left, "; ")))
	}
	if !r.SuiteSucceeded {
		fmt.Fprintf(os.Stderr, "test/olmv1: the suite failed; logs of every component are in %s (the cluster's in %s, pods' under %s)\n",
			logDir(), filepath.Join(dir, "cluster", "logs"), filepath.Join(dir, "cluster", "node", "overlay", "var-log", "upper", "pods"))
		return
	}
	_ = os.RemoveAll(dir)
})

// check fails the spec with err's message alone.
func check(err error) {
	GinkgoHelper()
	if err != nil {
		Fail(err.Error())
	}
}

// alive stops a wait early when a component has exited: waiting longer cannot help.
func alive() {
	for _, healthy := range []func() error{local.Healthy, lm.Healthy} {
		if err := healthy(); err != nil {
			StopTrying(err.Error()).Now()
		}
	}
}

// The failures once more at the end of the output, where CI shows its tail.
var _ = report.FailuresLast()
