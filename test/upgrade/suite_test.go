package upgrade_test

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
	"github.com/sirupsen/logrus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
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
		fmt.Fprintln(os.Stderr, "test/upgrade:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

func TestUpgrade(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Upgrades that lose nothing, on a real node")
}

const (
	// podTimeout bounds pods starting, becoming Ready or going away on a loaded machine.
	podTimeout = 4 * time.Minute
	poll       = 500 * time.Millisecond
	// testAppRef is what the fleet's pods run, as the node pulls it.
	testAppRef = "quay.io/phalanks-e2e/testapp:1"
)

var (
	ctx    context.Context
	dir    string
	local  *cluster.Cluster
	k8s    client.Client
	scheme = newScheme()

	// s3 serves plain HTTP behind proxy, which records every request (the probes); s3tls
	// serves HTTPS with a private CA, for the CA-bundle StorageBucket.
	s3, s3tls *minio.Server
	proxy     *minio.Proxy
	probes    = &probeLog{}

	// previous and current are the tree packaged at two versions, as a release packages
	// it: the committed bundle's version and the next patch release. Their operator
	// images differ (the version is in their labels), so an upgrade rolls the pods.
	previous, current *olm.Release

	// results are the per-path numbers, printed at the end.
	results []pathResult
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
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(context.Background())
	DeferCleanup(cancel)
	var err error
	dir, err = os.MkdirTemp("", "phalanks-upgrade-e2e-")
	check(err)
	Expect(os.MkdirAll(logDir(), 0o700)).To(Succeed())
	fmt.Fprintf(os.Stderr, "test/upgrade: logs and data in %s (kept if the suite fails)\n", dir)

	By("packaging the tree at two versions with make bundle (operator-sdk), as a release does")
	logrus.SetLevel(logrus.WarnLevel)
	released, err := olm.ReleasedVersion()
	check(err)
	next := semver.Version{Major: released.Major, Minor: released.Minor, Patch: released.Patch + 1}
	previous, err = olm.PackageRelease(ctx, released, filepath.Join(dir, "releases", released.String()), GinkgoWriter)
	check(err)
	current, err = olm.PackageRelease(ctx, next, filepath.Join(dir, "releases", next.String()), GinkgoWriter)
	check(err)

	By("starting the local cluster with a real node, its registry mirroring quay.io")
	start := time.Now()
	local, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), RealNode: true, Mirrors: olm.Mirrors})
	check(err)
	DeferCleanup(func() { check(local.Shutdown()) })
	k8s, err = client.New(local.Config, client.Options{Scheme: scheme})
	check(err)
	GinkgoWriter.Printf("cluster and node up in %s\n", time.Since(start).Round(time.Millisecond))

	By("building both releases' images and pushing them to the node's registry")
	start = time.Now()
	im, err := olm.NewImages(local, filepath.Join(dir, "images"), GinkgoWriter)
	check(err)
	for _, r := range []*olm.Release{previous, current} {
		check(im.PushRelease(ctx, r))
	}
	check(im.PushTestApp(ctx, testAppRef))
	GinkgoWriter.Printf("images built and pushed in %s\n", time.Since(start).Round(time.Millisecond))

	By("starting MinIO on the node's address, behind a proxy that records the probes, and a second one over TLS")
	for name, tls := range map[string]bool{"minio": false, "minio-tls": true} {
		d := filepath.Join(dir, name)
		Expect(os.MkdirAll(d, 0o700)).To(Succeed())
		srv, err := minio.Start(minio.Options{Dir: d, Host: cluster.NodeIP, TLS: tls})
		check(err)
		DeferCleanup(srv.Stop)
		if tls {
			s3tls = srv
		} else {
			s3 = srv
		}
	}
	proxy, err = s3.StartProxyOn(cluster.NodeIP)
	check(err)
	DeferCleanup(proxy.Close)
	proxy.Record(probes.add)
})

// The folder with every log is named on failure and removed on success, after every
// process has been stopped; the per-path numbers are printed either way.
var _ = ReportAfterSuite("upgrade results", func(r Report) {
	printResults(os.Stdout)
	if dir == "" {
		return
	}
	if left := process.Children(); len(left) > 0 {
		Fail(fmt.Sprintf("processes outlived the suite: %s", strings.Join(left, "; ")))
	}
	if !r.SuiteSucceeded {
		fmt.Fprintf(os.Stderr, "test/upgrade: the suite failed; logs are in %s (the cluster's in %s)\n",
			logDir(), filepath.Join(dir, "cluster", "logs"))
		return
	}
	_ = os.RemoveAll(dir)
})

// check fails the spec with err's message alone: harness errors quote component logs.
func check(err error) {
	GinkgoHelper()
	if err != nil {
		Fail(err.Error())
	}
}

// alive stops a wait early when a component of the cluster has exited.
func alive() {
	if err := local.Healthy(); err != nil {
		StopTrying(err.Error()).Now()
	}
}

// The failures once more at the end of the output, where CI shows its tail.
var _ = report.FailuresLast()
