// Package envtest starts a real kube-apiserver and etcd (controller-runtime's envtest,
// with the binaries hack/tools builds) with this project's CRDs installed and CRD
// conversion pointed at a webhook server the test runs locally.
package envtest

import (
	"fmt"
	"maps"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
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
	// FeatureGates are kube-apiserver feature gates to set. A gate turned off that the
	// running Kubernetes version does not have is left out (a server without the gate
	// lacks the feature); turning on a gate it does not have fails the start (see
	// KnowsFeatureGate).
	FeatureGates map[string]bool
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
	binDir, err := tools.KubeBinDir()
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
	if gates, err := featureGateFlag(o.FeatureGates); err != nil {
		return nil, err
	} else if gates != "" {
		e.ControlPlane.GetAPIServer().Configure().Set("feature-gates", gates)
	}
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	// Tests create thousands of objects; the default client limits would dominate.
	cfg.QPS, cfg.Burst = 1000, 2000
	if err := checkVersion(cfg); err != nil {
		_ = e.Stop()
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: o.Scheme})
	if err != nil {
		_ = e.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, Scheme: o.Scheme, env: e}, nil
}

// featureGateFlag returns the --feature-gates value for gates, without the gates turned
// off that the API server does not have.
func featureGateFlag(gates map[string]bool) (string, error) {
	var flags []string
	for _, name := range slices.Sorted(maps.Keys(gates)) {
		known, err := KnowsFeatureGate(name)
		if err != nil {
			return "", err
		}
		switch {
		case known:
			flags = append(flags, fmt.Sprintf("%s=%t", name, gates[name]))
		case gates[name]:
			return "", fmt.Errorf("the API server (%s) has no feature gate %s; check KnowsFeatureGate before turning it on",
				kubeVersion(), name)
		}
	}
	return strings.Join(flags, ","), nil
}

var (
	gatesOnce sync.Once
	gates     map[string]bool
	errGates  error
)

// KnowsFeatureGate reports whether the kube-apiserver the suites run (the version
// tools.EnvKubeTools selects) has the named feature gate, from the gates its --help
// lists, so that a suite can test a feature on the versions that have it and its
// absence on the others.
func KnowsFeatureGate(name string) (bool, error) {
	gatesOnce.Do(func() {
		bin, err := tools.Path("kube-apiserver")
		if err != nil {
			errGates = err
			return
		}
		// kube-apiserver prints its help on stderr with a non-zero exit on some versions.
		out, _ := exec.Command(bin, "--help").CombinedOutput()
		gates = map[string]bool{}
		for _, m := range gateInHelp.FindAllSubmatch(out, -1) {
			gates[string(m[1])] = true
		}
		if len(gates) == 0 {
			errGates = fmt.Errorf("%s --help lists no feature gates:\n%s", bin, out)
		}
	})
	return gates[name], errGates
}

// gateInHelp matches a gate in kube-apiserver's --feature-gates help, one per line:
// "kube:ShardedListAndWatch=true|false (ALPHA - default=false)" (1.31 and later) or
// "ShardedListAndWatch=true|false (ALPHA - default=false)".
var gateInHelp = regexp.MustCompile(`(?m)^\s+(?:[a-z]+:)?([A-Z][A-Za-z0-9]+)=true\|false`)

func kubeVersion() string {
	v, _, err := tools.KubeWant()
	if err != nil {
		return "version unknown"
	}
	return v
}

// checkVersion fails unless the API server is the Kubernetes version the suite was
// asked to run (tools.EnvKubeTools).
func checkVersion(cfg *rest.Config) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("read the API server's version: %w", err)
	}
	return tools.CheckKubeVersion(v.GitVersion)
}

// Stop ends kube-apiserver and etcd and removes their data.
func (e *Env) Stop() error { return e.env.Stop() }

// WebhookServer returns a webhook server listening where the CRDs' conversion points.
func (e *Env) WebhookServer() webhook.Server {
	w := e.env.WebhookInstallOptions
	return webhook.NewServer(webhook.Options{Host: w.LocalServingHost, Port: w.LocalServingPort, CertDir: w.LocalServingCertDir})
}

// WebhookServing returns the port and certificate directory of the local webhook server
// the CRDs' conversion points at, for a manager built with its own webhook options.
func (e *Env) WebhookServing() (port int, certDir string) {
	w := e.env.WebhookInstallOptions
	return w.LocalServingPort, w.LocalServingCertDir
}

// WebhookClientConfig returns how the API server reaches an admission webhook that a
// test serves at path on the WebhookServer (registered on the manager's webhook server):
// the local serving address, verified with the CA envtest issued its certificate from.
func (e *Env) WebhookClientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	w := e.env.WebhookInstallOptions
	url := "https://" + net.JoinHostPort(w.LocalServingHost, strconv.Itoa(w.LocalServingPort)) + path
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: w.LocalServingCAData}
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
