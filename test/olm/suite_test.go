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
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/olm"
)

// The whole suite runs in a private network namespace with only loopback; see
// olm.EnterPrivateNetwork.
func TestMain(m *testing.M) {
	if err := olm.EnterPrivateNetwork(); err != nil {
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
	local  *cluster.Cluster
	lm     *olm.OLM
	s3     *minio.Server
	scheme = newScheme()

	// previous and current are the tree packaged at two versions: the committed bundle's
	// version and the next patch release.
	previous, current *olm.Release
	// previousCatalog holds previous only; upgradeCatalog holds previous → current, whose
	// channel entries are upgradeChannel.
	previousCatalog, upgradeCatalog string
	upgradeChannel                  []declcfg.ChannelEntry
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

	By("packaging the tree at two versions with the project's bundle and catalog generator")
	// operator-registry reports optional bundle files it did not find at info level.
	logrus.SetLevel(logrus.WarnLevel)
	released, err := olm.ReleasedVersion()
	check(err)
	next := semver.Version{Major: released.Major, Minor: released.Minor, Patch: released.Patch + 1}
	previous, err = olm.PackageRelease(ctx, released, filepath.Join(dir, "releases", released.String()))
	check(err)
	current, err = olm.PackageRelease(ctx, next, filepath.Join(dir, "releases", next.String()))
	check(err)
	previousCatalog = filepath.Join(dir, "catalogs", "previous")
	_, err = olm.WriteCatalog(ctx, previousCatalog, previous)
	check(err)
	upgradeCatalog = filepath.Join(dir, "catalogs", "upgrade")
	upgradeChannel, err = olm.WriteCatalog(ctx, upgradeCatalog, previous, current)
	check(err)

	By("starting the local control plane with API aggregation")
	start := time.Now()
	local, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), Aggregation: true})
	check(err)
	DeferCleanup(local.Stop)
	k8s, err = client.New(local.Config, client.Options{Scheme: scheme})
	check(err)
	GinkgoWriter.Printf("control plane up in %s\n", time.Since(start).Round(time.Millisecond))

	By("starting OLM's olm and catalog operators and package-server out of cluster")
	start = time.Now()
	lm, err = olm.StartOLM(ctx, local, k8s, filepath.Join(dir, "olm"), logDir())
	check(err)
	DeferCleanup(lm.Stop)
	GinkgoWriter.Printf("OLM up in %s\n", time.Since(start).Round(time.Millisecond))

	By("starting MinIO inside the network namespace")
	minioDir := filepath.Join(dir, "minio")
	Expect(os.MkdirAll(minioDir, 0o700)).To(Succeed())
	s3, err = minio.Start(minio.Options{Dir: minioDir})
	check(err)
	DeferCleanup(s3.Stop)
})

// leftoverChildren lists the test process's child processes (pid and command line).
func leftoverChildren() []string {
	var left []string
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, pid := range strings.Fields(string(data)) {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline")) //nolint:gosec // G703: a PID the kernel listed
			left = append(left, pid+" "+strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "))
		}
	}
	return left
}

// stopped holds what specs start that must run until the suite ends (DeferCleanup in a
// spec would stop it when the spec ends).
var stopped []func() error

// stopAtSuiteEnd stops a process the specs started when the suite ends, before the
// harnesses BeforeSuite started (the newest first).
func stopAtSuiteEnd(stop func() error) { stopped = append(stopped, stop) }

var _ = AfterSuite(func() {
	for i := len(stopped) - 1; i >= 0; i-- {
		check(stopped[i]())
	}
})

// The folder with every log is named on failure and removed on success, after every
// process has been stopped.
var _ = ReportAfterSuite("logs", func(r Report) {
	if dir == "" {
		return
	}
	if left := leftoverChildren(); len(left) > 0 {
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
	checks := []func() error{local.Healthy, lm.Healthy}
	if kubelet != nil {
		checks = append(checks, kubelet.Err)
	}
	for _, healthy := range checks {
		if err := healthy(); err != nil {
			StopTrying(err.Error()).Now()
		}
	}
}
