// Command demo shows the operator working with no Docker: it starts the local cluster
// with a real node (containerd, the kubelet and kube-proxy, in a sandbox of private
// namespaces: it needs root) and MinIO, installs the CRDs, runs the manager binary
// against them, applies config/samples, and shows their live status and their pods until
// Ctrl-C. The samples' images cannot be pulled here; their pods run testapp, a small web
// server the harness builds, from the node's local registry.
//
// The manager runs as a local process rather than as a pod from its image: the demo is
// the quick look after a change, and `make build` is all it waits for. The operator as
// users deploy it, in a pod from its image, is what make test's real-node suite runs.
//
// With DEMO_ONESHOT=1 it exits 0 as soon as every sample reached its expected state,
// and non-zero (naming the samples that did not) after DEMO_TIMEOUT (default 5m).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/images"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/samples"
	"github.com/phalanks/phalanks-operator/test/harness/sandbox"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const (
	// demoNamespace holds the samples.
	demoNamespace = "phalanks-demo"
	// operatorNamespace holds the leader election lease, as it would on a cluster.
	operatorNamespace = "phalanks-system"
)

func main() {
	// The demo's own clients have nothing to log; without a logger, controller-runtime
	// prints a warning with a stack trace the first time one is made.
	ctrllog.SetLogger(logr.Discard())
	if err := sandbox.Enter(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// env is what the demo started, for the sample adapters and expectations.
type env struct {
	root    string
	dir     string
	cluster *cluster.Cluster
	s3      *minio.Server
	client  client.Client
	manager *process.Process
	// image is the image the samples' pods run.
	image string
}

func run() (err error) {
	oneshot := os.Getenv("DEMO_ONESHOT") == "1"
	timeout := 5 * time.Minute
	if v := os.Getenv("DEMO_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("DEMO_TIMEOUT: %w", err)
		}
		timeout = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := tools.RepoRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "phalanks-demo-")
	if err != nil {
		return err
	}
	e := &env{root: root, dir: dir}
	defer func() { e.teardown(err == nil) }()

	step("starting the local cluster (etcd, kube-apiserver, controller-manager, scheduler) and a real node (containerd, kubelet, kube-proxy)")
	if e.cluster, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), RealNode: true}); err != nil {
		return err
	}
	step("building testapp, the image the samples' pods run, into the node's registry")
	if e.image, err = e.pushTestApp(ctx); err != nil {
		return err
	}
	if e.client, err = client.New(e.cluster.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	step("starting MinIO on loopback")
	if e.s3, err = minio.Start(minio.Options{Dir: mkdir(dir, "minio")}); err != nil {
		return err
	}
	step("installing the CRDs and starting the manager")
	if err := e.startManager(ctx); err != nil {
		return err
	}
	step("applying config/samples to namespace " + demoNamespace)
	samples, err := e.applySamples(ctx)
	if err != nil {
		return err
	}
	enter, err := sandbox.EnterCommand()
	if err != nil {
		return err
	}
	kubectl, err := tools.Path("kubectl")
	if err != nil {
		return err
	}
	fmt.Printf("\nThe demo cluster is up. It lives in the demo's own network and mount namespaces; in another terminal, as root:\n"+
		"  %s %s --kubeconfig %s get %s,pods -n %s\n"+
		"Manager log: %s\nNode logs (containerd, kubelet, kube-proxy): %s\nMinIO: %s (log %s)\n\n",
		enter, kubectl, e.cluster.Kubeconfig, kindsArg(samples), demoNamespace,
		e.manager.LogPath, e.cluster.LogDir, e.s3.URL, e.s3.LogPath())
	return e.watch(ctx, samples, oneshot, timeout)
}

func step(msg string) { fmt.Printf("demo: %s\n", msg) }

func mkdir(parent, name string) string {
	d := filepath.Join(parent, name)
	if err := os.MkdirAll(d, 0o700); err != nil {
		panic(err)
	}
	return d
}

func (e *env) startManager(ctx context.Context) error {
	certDir := mkdir(e.dir, "webhook-certs")
	ca, err := certs.WriteServing(certDir, "127.0.0.1", "localhost")
	if err != nil {
		return err
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = process.FreePort(); err != nil {
			return err
		}
	}
	webhookPort, metricsPort, healthPort := ports[0], ports[1], ports[2]
	defs, err := crds.Load(filepath.Join(e.root, "config", "crd", "bases"))
	if err != nil {
		return err
	}
	wh := &crds.Webhook{URL: fmt.Sprintf("https://%s/convert", process.HostPort(webhookPort)), CABundle: ca.CertPEM}
	if err := crds.Install(ctx, e.client, defs, wh); err != nil {
		return err
	}
	// The samples' namespace enforces the restricted Pod Security level, as users'
	// namespaces do.
	for _, ns := range []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}, samples.Namespace(demoNamespace)} {
		err := e.client.Create(ctx, ns)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	bin, err := tools.Path("manager")
	if err != nil {
		return err
	}
	e.manager = &process.Process{
		Name: "manager",
		Path: bin,
		Args: []string{
			"--kubeconfig", e.cluster.Kubeconfig,
			"--leader-elect", "--leader-elect-namespace", operatorNamespace,
			"--webhook-port", strconv.Itoa(webhookPort), "--webhook-cert-dir", certDir,
			"--metrics-bind-address", process.HostPort(metricsPort),
			"--health-probe-bind-address", process.HostPort(healthPort),
			// The scheduled-scaling sample is applied moments before its downtime.
			"--scaling-grace-period=10s",
			// The demo's MinIO listens on 127.0.0.1, which the endpoint policy denies
			// unless allowed.
			"--storagebucket-endpoint-allow-cidrs=127.0.0.1/32",
			"--zap-devel",
		},
		LogPath: filepath.Join(e.dir, "manager.log"),
	}
	if err := e.manager.Start(); err != nil {
		return err
	}
	return process.WaitFor(e.manager, time.Minute, func() error {
		return process.HTTPOK(nil, "http://"+process.HostPort(healthPort)+"/readyz", "")
	})
}

// pushTestApp builds testapp and pushes it to the node's registry, returning the image
// reference pods run it by.
func (e *env) pushTestApp(ctx context.Context) (string, error) {
	img, err := images.TestApp(ctx, filepath.Join(e.dir, "build"))
	if err != nil {
		return "", err
	}
	const repository = "phalanks-demo/testapp:1"
	if _, err := e.cluster.Push(ctx, repository, img); err != nil {
		return "", err
	}
	return cluster.RegistryHost + "/" + repository, nil
}

// teardown stops everything the demo started. It removes the demo directory after a
// clean run unless DEMO_KEEP=1, and keeps it (logs included) after a failure.
func (e *env) teardown(clean bool) {
	step("stopping the manager, MinIO and the control plane")
	if e.manager != nil {
		_ = e.manager.Stop(15 * time.Second)
	}
	if e.s3 != nil {
		_ = e.s3.Stop()
	}
	if e.cluster != nil {
		if err := e.cluster.Shutdown(); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
		}
	}
	if clean && os.Getenv("DEMO_KEEP") != "1" {
		_ = os.RemoveAll(e.dir)
		return
	}
	fmt.Printf("demo: logs and data kept in %s\n", e.dir)
}
