package olm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/sirupsen/logrus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/report"
	"github.com/phalanks/phalanks-operator/test/harness/sandbox"
	"github.com/phalanks/phalanks-operator/test/olm"
)

// The whole suite runs in a sandbox of private namespaces with the real node; see
// test/harness/sandbox.
func TestMain(m *testing.M) {
	if err := sandbox.Enter(); err != nil {
		fmt.Fprintln(os.Stderr, "test/olm:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

func TestOLM(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "OLM install and upgrade, end to end")
}

// Everything the specs share, set up once: starting the control plane and OLM costs
// most of the suite's time.
var (
	ctx    context.Context
	dir    string
	k8s    client.Client
	cs     kubernetes.Interface
	local  *cluster.Cluster
	lm     *olm.OLM
	s3     *minio.Server
	scheme = newScheme()

	// previous and current are the tree packaged at two versions: the committed bundle's
	// version and the next patch release.
	previous, current *olm.Release
	// previousCatalog is the catalog image holding previous only; upgradeCatalog the one
	// holding previous → current, whose channel entries are upgradeChannel.
	previousCatalog, upgradeCatalog string
	upgradeChannel                  []declcfg.ChannelEntry
	// untarImage is the busybox image operator-sdk scorecard's untar step runs here, and
	// the registry pod of operator-sdk run bundle decompresses its catalog with.
	untarImage string
	// indexImage is the opm image operator-sdk run bundle serves its catalog with.
	indexImage string
)

// The catalog images' references, as a release would publish them.
const (
	previousCatalogImage = "quay.io/phalanks/phalanks-operator-catalog:e2e-previous"
	upgradeCatalogImage  = "quay.io/phalanks/phalanks-operator-catalog:e2e-upgrade"
	busyboxImage         = "quay.io/phalanks-e2e/busybox:1.35"
	// decompressionImage is the image operator-sdk run bundle-upgrade always decompresses
	// its catalog with (run bundle's --decompression-image default); busybox serves here.
	decompressionImage = "registry.access.redhat.com/ubi9/ubi:9.8"
	// testAppImage is what Foo's Deployment runs.
	testAppImage = "quay.io/phalanks-e2e/testapp:1"
)

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(operatorsv1alpha1.AddToScheme(s))
	utilruntime.Must(operatorsv1.AddToScheme(s))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(s))
	utilruntime.Must(phalanksv1beta1.AddToScheme(s))
	return s
}

// builtinScorecardImage is the image the bundle's scorecard configuration names for
// operator-sdk's built-in tests (quay.io/operator-framework/scorecard-test:<version>).
func builtinScorecardImage(bundleDir string) (string, error) {
	cfg, err := readScorecardConfig(bundleDir)
	if err != nil {
		return "", err
	}
	for _, s := range cfg.Stages {
		for _, t := range s.Tests {
			if len(t.Entrypoint) > 0 && t.Entrypoint[0] == "scorecard-test" {
				return t.Image, nil
			}
		}
	}
	return "", fmt.Errorf("the scorecard configuration of %s names no built-in test", bundleDir)
}

// logDir holds every process's log.
func logDir() string { return filepath.Join(dir, "logs") }

var _ = BeforeSuite(func() {
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(context.Background())
	DeferCleanup(cancel)

	var err error
	dir, err = os.MkdirTemp("", "phalanks-olm-e2e-")
	check(err)
	Expect(os.MkdirAll(logDir(), 0o700)).To(Succeed())
	fmt.Fprintf(os.Stderr, "test/olm: logs and data in %s (kept if the suite fails)\n", dir)

	By("packaging the tree at two versions with make bundle (operator-sdk), as a release does")
	// operator-registry reports optional bundle files it did not find at info level.
	logrus.SetLevel(logrus.WarnLevel)
	released, err := olm.ReleasedVersion()
	check(err)
	next := semver.Version{Major: released.Major, Minor: released.Minor, Patch: released.Patch + 1}
	previous, err = olm.PackageRelease(ctx, released, filepath.Join(dir, "releases", released.String()), GinkgoWriter)
	check(err)
	current, err = olm.PackageRelease(ctx, next, filepath.Join(dir, "releases", next.String()), GinkgoWriter)
	check(err)

	By("starting the local cluster with a real node and API aggregation, its registry mirroring quay.io and registry.access.redhat.com")
	start := time.Now()
	local, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), RealNode: true, Aggregation: true, Mirrors: olm.Mirrors})
	check(err)
	DeferCleanup(func() { check(local.Shutdown()) })
	k8s, err = client.New(local.Config, client.Options{Scheme: scheme})
	check(err)
	cs, err = kubernetes.NewForConfig(local.Config)
	check(err)
	GinkgoWriter.Printf("cluster and node up in %s\n", time.Since(start).Round(time.Millisecond))

	By("building the images of both releases and their catalogs, and pushing them to the node's registry")
	start = time.Now()
	im, err := olm.NewImages(local, filepath.Join(dir, "images"), GinkgoWriter)
	check(err)
	for _, r := range []*olm.Release{previous, current} {
		check(im.PushRelease(ctx, r))
	}
	_, err = olm.WriteCatalog(ctx, filepath.Join(dir, "catalogs", "previous"), previous)
	check(err)
	check(im.PushCatalog(ctx, filepath.Join(dir, "catalogs", "previous"), previousCatalogImage))
	upgradeChannel, err = olm.WriteCatalog(ctx, filepath.Join(dir, "catalogs", "upgrade"), previous, current)
	check(err)
	check(im.PushCatalog(ctx, filepath.Join(dir, "catalogs", "upgrade"), upgradeCatalogImage))
	previousCatalog, upgradeCatalog = previousCatalogImage, upgradeCatalogImage
	utilImage, opmImage, err := im.PushOLMImages(ctx, previousCatalogImage)
	check(err)
	check(im.PushBusybox(ctx, busyboxImage, decompressionImage))
	check(im.PushTestApp(ctx, testAppImage))
	untarImage = busyboxImage
	builtin, err := builtinScorecardImage(current.BundleDir)
	check(err)
	check(im.PushScorecardTest(ctx, builtin))
	indexImage, err = im.PushIndexImage(ctx, "phalanks-e2e/opm:e2e")
	check(err)
	GinkgoWriter.Printf("images built and pushed in %s\n", time.Since(start).Round(time.Millisecond))

	By("starting OLM's olm and catalog operators and package-server out of cluster")
	start = time.Now()
	lm, err = olm.StartOLM(ctx, local, k8s, filepath.Join(dir, "olm"), logDir(), utilImage, opmImage)
	check(err)
	DeferCleanup(lm.Stop)
	GinkgoWriter.Printf("OLM up in %s\n", time.Since(start).Round(time.Millisecond))

	By("starting MinIO on the node's address, where pods reach it")
	minioDir := filepath.Join(dir, "minio")
	Expect(os.MkdirAll(minioDir, 0o700)).To(Succeed())
	s3, err = minio.Start(minio.Options{Dir: minioDir, Host: cluster.NodeIP})
	check(err)
	DeferCleanup(s3.Stop)
	By("starting a company's network beside it: an egress proxy and a MinIO over TLS signed by a CA of its own")
	startEgress()
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
		fmt.Fprintf(os.Stderr, "test/olm: the suite failed; logs of every component are in %s (the cluster's in %s)\n",
			logDir(), filepath.Join(dir, "cluster", "logs"))
		return
	}
	_ = os.RemoveAll(dir)
})

// check fails the spec with err's message alone: harness errors quote component logs,
// which Gomega's dump of the error value would repeat.
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
