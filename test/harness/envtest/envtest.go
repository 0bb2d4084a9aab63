// Package envtest starts a real kube-apiserver and etcd (controller-runtime's envtest,
// with the binaries hack/tools builds) with this project's CRDs installed and CRD
// conversion pointed at a webhook server the test runs locally.
package envtest

import (
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Options configures an environment.
type Options struct {
	// Scheme knows every type the test uses. Types in it that implement conversion get
	// their CRD's conversion pointed at the local webhook server.
	Scheme *runtime.Scheme
	// CRDPaths default to config/crd/bases.
	CRDPaths []string
	// APIServerArgs are extra kube-apiserver flags, name to values.
	APIServerArgs map[string][]string
}

// Env is a running API server with our CRDs.
type Env struct {
	// Config authenticates as a cluster administrator.
	Config *rest.Config
	// Client reads straight from the API server (no cache), for assertions.
	Client client.Client
	Scheme *runtime.Scheme

	env *crenvtest.Environment
}

// Start launches etcd and kube-apiserver and installs the CRDs.
func Start(o Options) (*Env, error) {
	binDir, err := tools.BinDir()
	if err != nil {
		return nil, err
	}
	// envtest finds both in binDir; looking them up here fails early with the fix.
	if _, err := tools.Path("kube-apiserver"); err != nil {
		return nil, err
	}
	if _, err := tools.Path("etcd"); err != nil {
		return nil, err
	}
	if len(o.CRDPaths) == 0 {
		root, err := tools.RepoRoot()
		if err != nil {
			return nil, err
		}
		o.CRDPaths = []string{filepath.Join(root, "config", "crd", "bases")}
	}
	e := &crenvtest.Environment{
		BinaryAssetsDirectory: binDir,
		CRDInstallOptions: crenvtest.CRDInstallOptions{
			Paths:              o.CRDPaths,
			Scheme:             o.Scheme,
			ErrorIfPathMissing: true,
		},
		// An empty webhook install still issues serving certificates and makes envtest
		// point convertible CRDs at https://<host>:<port>/convert.
		WebhookInstallOptions:   crenvtest.WebhookInstallOptions{},
		ControlPlaneStopTimeout: 30 * time.Second,
		Scheme:                  o.Scheme,
	}
	for name, values := range o.APIServerArgs {
		e.ControlPlane.GetAPIServer().Configure().Set(name, values...)
	}
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	// Tests create thousands of objects; the default client limits would dominate.
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.New(cfg, client.Options{Scheme: o.Scheme})
	if err != nil {
		_ = e.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, Scheme: o.Scheme, env: e}, nil
}

// Stop ends kube-apiserver and etcd and removes their data.
func (e *Env) Stop() error { return e.env.Stop() }

// WebhookServer returns a webhook server listening where the CRDs' conversion points.
func (e *Env) WebhookServer() webhook.Server {
	w := e.env.WebhookInstallOptions
	return webhook.NewServer(webhook.Options{Host: w.LocalServingHost, Port: w.LocalServingPort, CertDir: w.LocalServingCertDir})
}

// ManagerOptions returns manager options for a manager under test: our scheme, the local
// webhook server, no metrics or health listeners, and no leader election unless asked.
func (e *Env) ManagerOptions() manager.Options {
	return manager.Options{
		Scheme:                 e.Scheme,
		WebhookServer:          e.WebhookServer(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}
}

// NewManager creates a manager with ManagerOptions.
func (e *Env) NewManager() (manager.Manager, error) {
	return ctrl.NewManager(e.Config, e.ManagerOptions())
}

// KubeconfigUser returns a kubeconfig for a new user in the given groups, for processes
// (the manager binary, kubectl) that run outside the test.
func (e *Env) KubeconfigUser(name string, groups ...string) ([]byte, error) {
	u, err := e.env.ControlPlane.AddUser(crenvtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, err
	}
	return u.KubeConfig()
}

// EtcdURL returns the client URL of the environment's etcd, for tests that check how
// objects are stored.
func (e *Env) EtcdURL() string { return e.env.ControlPlane.Etcd.URL.String() }
