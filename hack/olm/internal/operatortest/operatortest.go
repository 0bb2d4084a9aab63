// Package operatortest runs the operator against an envtest API server the way OLM would
// run it from the bundle: the manager binary built from this tree, started with the CSV
// Deployment's arguments, as a user that holds exactly the CSV's clusterPermissions and
// permissions, serving its webhooks (CRD conversion) on loopback with a test certificate.
package operatortest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Namespace stands for the namespace OLM installs the operator into: the CSV's
// permissions (the leader election Role) are granted there.
const Namespace = "phalanks-operator"

// user is the identity the manager runs as, bound to the CSV's permissions.
const user = "phalanks-operator-manager"

// Scheme knows the kinds the harness creates.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}

// StartEnv starts an API server with no CRDs installed; tests install the CRDs they
// need, pointed at the operator's webhook.
func StartEnv(t testing.TB) *envtest.Env {
	t.Helper()
	empty := t.TempDir()
	env, err := envtest.Start(envtest.Options{Scheme: Scheme(), CRDPaths: []string{empty}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env
}

var (
	buildOnce sync.Once
	binary    string
	errBuild  error
)

// Main runs the tests of a package that starts managers (call it from TestMain:
// os.Exit(operatortest.Main(m))) and then removes the manager binary ManagerBinary built.
func Main(m *testing.M) int {
	code := m.Run()
	if binary != "" {
		_ = os.RemoveAll(filepath.Dir(binary))
	}
	return code
}

// ManagerBinary builds the manager from the repository (once per test process) into a
// directory that lives as long as the process: Main removes it.
func ManagerBinary() (string, error) {
	buildOnce.Do(func() {
		root, err := tools.RepoRoot()
		if err != nil {
			errBuild = err
			return
		}
		dir, err := os.MkdirTemp("", "phalanks-manager-")
		if err != nil {
			errBuild = err
			return
		}
		binary = filepath.Join(dir, "manager")
		cmd := exec.Command("go", "build", "-o", binary, ".")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			errBuild = fmt.Errorf("build the manager: %w\n%s", err, out)
		}
	})
	return binary, errBuild
}

// Operator is a running manager.
type Operator struct {
	// Webhook is where the API server sends conversion requests for CRDs installed with
	// crds.Install.
	Webhook *crds.Webhook
	// LogPath is the manager's log.
	LogPath string

	proc       *process.Process
	healthPort int
	certDir    string
	caPool     *x509.CertPool
}

// Prepare picks the manager's ports and issues its webhook certificate, so the CRDs can be
// installed with conversion pointed at it before it starts (it watches them on start).
func Prepare(t testing.TB) *Operator {
	t.Helper()
	dir := t.TempDir()
	o := &Operator{certDir: filepath.Join(dir, "serving-certs"), LogPath: filepath.Join(dir, "manager.log"), caPool: x509.NewCertPool()}
	ca, err := certs.WriteServing(o.certDir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	o.caPool.AddCert(ca.Cert)
	webhookPort, err := process.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if o.healthPort, err = process.FreePort(); err != nil {
		t.Fatal(err)
	}
	o.Webhook = &crds.Webhook{URL: fmt.Sprintf("https://%s%s", process.HostPort(webhookPort), bundle.ConversionPath), CABundle: ca.CertPEM}
	o.proc = &process.Process{Name: "manager", LogPath: o.LogPath}
	o.proc.Args = []string{fmt.Sprintf("--webhook-port=%d", webhookPort), "--webhook-cert-dir=" + o.certDir}
	return o
}

// AddArgs adds manager arguments to the CSV Deployment's, before Start: what an
// administrator would add to the installed CSV (an endpoint policy that allows the
// test's loopback MinIO).
func (o *Operator) AddArgs(args ...string) {
	o.proc.Args = append(o.proc.Args, args...)
}

// Start grants the CSV's permissions to the manager's user, then starts the manager with
// the CSV Deployment's arguments (listen addresses moved to free loopback ports, the
// metrics endpoint off, the leader election Lease in Namespace) and waits until it is
// ready. It is stopped, and its log shown on failure, when the test ends.
func (o *Operator) Start(ctx context.Context, t testing.TB, env *envtest.Env, csv *operatorsv1alpha1.ClusterServiceVersion) {
	t.Helper()
	path, err := ManagerBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := grant(ctx, env.Client, csv); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := env.KubeconfigUser(user)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(filepath.Dir(o.LogPath), "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	args, err := managerArgs(csv)
	if err != nil {
		t.Fatal(err)
	}
	o.proc.Path = path
	o.proc.Args = append(args, append(o.proc.Args,
		"--kubeconfig="+kubeconfigPath,
		fmt.Sprintf("--health-probe-bind-address=%s", process.HostPort(o.healthPort)),
		"--metrics-bind-address=0",
		"--leader-elect-namespace="+Namespace,
		"--zap-log-level=debug",
	)...)
	t.Cleanup(func() {
		_ = o.proc.Stop(30 * time.Second)
		if t.Failed() {
			t.Logf("manager log %s:\n%s", o.LogPath, process.Tail(o.LogPath, 80))
		}
	})
	o.run(t)
}

// Restart stops the manager and starts it again with the same arguments, as new pods of
// an upgraded Deployment would.
func (o *Operator) Restart(t testing.TB) {
	t.Helper()
	if err := o.proc.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	o.run(t)
}

func (o *Operator) run(t testing.TB) {
	t.Helper()
	if err := o.proc.Start(); err != nil {
		t.Fatal(err)
	}
	ready := fmt.Sprintf("http://%s/readyz", process.HostPort(o.healthPort))
	if err := process.WaitFor(o.proc, 2*time.Minute, func() error { return get(ready, nil) }); err != nil {
		t.Fatal(err)
	}
	// Ready means the webhook server started; the API server will reach it over TLS.
	if err := process.WaitFor(o.proc, time.Minute, func() error {
		return get(strings.TrimSuffix(o.Webhook.URL, bundle.ConversionPath)+"/healthz-unrouted", o.caPool)
	}); err != nil {
		t.Fatal(err)
	}
}

// get succeeds on any HTTP answer below 500 (the TLS check is the point for the webhook
// server, whose unrouted paths answer 404).
func get(url string, roots *x509.CertPool) error {
	c := &http.Client{Timeout: 5 * time.Second}
	if roots != nil {
		c.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 500 {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if roots == nil && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// managerArgs returns the arguments of the manager container in the CSV's Deployment,
// without the listen addresses the harness sets itself.
func managerArgs(csv *operatorsv1alpha1.ClusterServiceVersion) ([]string, error) {
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name != bundle.ManagerContainer {
				continue
			}
			var args []string
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--health-probe-bind-address") || strings.HasPrefix(a, "--metrics-bind-address") {
					continue
				}
				args = append(args, a)
			}
			return args, nil
		}
	}
	return nil, fmt.Errorf("the CSV has no %q container", bundle.ManagerContainer)
}

// grant creates what OLM creates for an AllNamespaces install: a ClusterRole and binding
// per clusterPermissions entry, a Role and binding in the operator's namespace per
// permissions entry, bound here to the manager's user instead of its service account.
func grant(ctx context.Context, c client.Client, csv *operatorsv1alpha1.ClusterServiceVersion) error {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	strategy := csv.Spec.InstallStrategy.StrategySpec
	for i, p := range strategy.ClusterPermissions {
		name := fmt.Sprintf("%s-cluster-%d", user, i)
		objs := []client.Object{
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: p.Rules},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}},
		}
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				return fmt.Errorf("grant clusterPermissions: %w", err)
			}
		}
	}
	for i, p := range strategy.Permissions {
		name := fmt.Sprintf("%s-%d", user, i)
		objs := []client.Object{
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace}, Rules: p.Rules},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace}, Subjects: subject,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}},
		}
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				return fmt.Errorf("grant permissions: %w", err)
			}
		}
	}
	return nil
}
