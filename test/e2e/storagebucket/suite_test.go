// Package storagebucket_test runs the manager binary as a separate process against a
// real API server and MinIO: leader election between two replicas, and an API server
// restart on the local cluster harness.
package storagebucket_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/apiproxy"
	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/report"
	"github.com/phalanks/phalanks-operator/test/harness/tcpproxy"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

func TestStorageBucketE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "StorageBucket with the manager binary")
}

var (
	managerBin string
	scheme     = runtime.NewScheme()
)

var _ = BeforeSuite(func() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(phalanksv1beta1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	root, err := tools.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	// PHALANKS_E2E_MANAGER_BIN runs the specs against another build of the manager
	// (to watch a spec fail on a release without a fix).
	if bin := os.Getenv("PHALANKS_E2E_MANAGER_BIN"); bin != "" {
		managerBin = bin
		return
	}
	managerBin = filepath.Join(GinkgoT().TempDir(), "manager")
	build := exec.Command("go", "build", "-o", managerBin, ".")
	build.Dir = root
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build: %s", out)
})

// manager is one manager process and its metrics endpoint.
type manager struct {
	proc    *process.Process
	metrics string
	// api is the TCP proxy between the manager and the API server, when it has one.
	api *tcpproxy.Proxy
	// apiProxy is the HTTP proxy between the manager and the API server (behind api,
	// when it has both), when it has one.
	apiProxy *apiproxy.Proxy
}

// startManager runs the manager binary with a kubeconfig, plain-HTTP metrics on a free
// port, debug logs, and extra flags.
func startManager(name, kubeconfig string, extra ...string) *manager {
	GinkgoHelper()
	return startManagerWith(managerSpec{name: name, kubeconfig: kubeconfig, flags: extra})
}

// managerSpec is how to run one manager process.
type managerSpec struct {
	name, kubeconfig string
	flags            []string
	// env is added to the process's environment (e.g. a clock offset).
	env []string
	// viaProxy puts a TCP proxy between the manager and the API server, to stall or
	// drop its connection from outside.
	viaProxy bool
	// viaAPIProxy puts an HTTP proxy between the manager and the API server, to answer,
	// delay or hold chosen requests from outside.
	viaAPIProxy bool
}

func startManagerWith(spec managerSpec) *manager {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	_, err := certs.WriteServing(dir, "127.0.0.1")
	Expect(err).NotTo(HaveOccurred())
	ports := make([]int, 3)
	for i := range ports {
		ports[i], err = process.FreePort()
		Expect(err).NotTo(HaveOccurred())
	}
	m := &manager{metrics: "http://" + process.HostPort(ports[1]) + "/metrics"}
	kubeconfig := spec.kubeconfig
	if spec.viaAPIProxy {
		kubeconfig, m.apiProxy = apiProxiedKubeconfig(kubeconfig)
	}
	if spec.viaProxy {
		kubeconfig, m.api = proxiedKubeconfig(kubeconfig)
	}
	m.proc = &process.Process{
		Name: spec.name,
		Path: managerBin,
		Args: append([]string{
			"--kubeconfig", kubeconfig,
			"--webhook-port", strconv.Itoa(ports[0]), "--webhook-cert-dir", dir,
			"--metrics-bind-address", process.HostPort(ports[1]), "--metrics-secure=false",
			"--health-probe-bind-address", process.HostPort(ports[2]),
			"--zap-log-level=debug",
			// MinIO listens on 127.0.0.1, which the endpoint policy denies by default.
			"--storagebucket-endpoint-allow-cidrs=127.0.0.1/32",
		}, spec.flags...),
		Env:     spec.env,
		LogPath: filepath.Join(dir, spec.name+".log"),
	}
	Expect(m.proc.Start()).To(Succeed())
	DeferCleanup(func() {
		_ = m.proc.Stop(10 * time.Second)
		keepLogIfFailed(m.proc)
	})
	Expect(process.WaitFor(m.proc, time.Minute, func() error {
		_, err := m.scrape()
		return err
	})).To(Succeed())
	return m
}

// keepLogIfFailed copies a manager's log out of the spec's temporary directory when the
// spec failed, and says where.
func keepLogIfFailed(p *process.Process) {
	if !CurrentSpecReport().Failed() {
		return
	}
	dir := filepath.Join(os.TempDir(), "phalanks-e2e-logs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return
	}
	out := filepath.Join(dir, time.Now().Format("150405")+"-"+p.Name+".log")
	if os.WriteFile(out, data, 0o600) == nil { //nolint:gosec // G703: the name is the spec's process name under our own directory
		GinkgoWriter.Printf("the log of %s is kept in %s\n", p.Name, out)
	}
}

// proxiedKubeconfig starts a TCP proxy in front of the kubeconfig's API server and
// returns a kubeconfig that goes through it. The server certificate is for 127.0.0.1,
// which the proxy's address is too.
func proxiedKubeconfig(path string) (string, *tcpproxy.Proxy) {
	GinkgoHelper()
	cfg, err := clientcmd.LoadFromFile(path)
	Expect(err).NotTo(HaveOccurred())
	var proxy *tcpproxy.Proxy
	for _, cluster := range cfg.Clusters {
		u, err := url.Parse(cluster.Server)
		Expect(err).NotTo(HaveOccurred())
		if proxy == nil {
			proxy, err = tcpproxy.Start(u.Host)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(proxy.Close)
		}
		u.Host = proxy.Addr
		cluster.Server = u.String()
	}
	out := filepath.Join(GinkgoT().TempDir(), "kubeconfig-via-proxy")
	Expect(clientcmd.WriteToFile(*cfg, out)).To(Succeed())
	return out, proxy
}

// apiProxiedKubeconfig starts an HTTP proxy in front of the kubeconfig's API server,
// forwarding as the kubeconfig's user, and returns a kubeconfig that goes through it.
func apiProxiedKubeconfig(path string) (string, *apiproxy.Proxy) {
	GinkgoHelper()
	upstream, err := clientcmd.BuildConfigFromFlags("", path)
	Expect(err).NotTo(HaveOccurred())
	proxy := apiproxy.StartForTest(GinkgoT(), upstream)
	out := filepath.Join(GinkgoT().TempDir(), "kubeconfig-via-api-proxy")
	Expect(proxy.WriteKubeconfig(out)).To(Succeed())
	return out, proxy
}

// scrape returns the manager's metrics as "name{labels} value" lines.
func (m *manager) scrape() (map[string]float64, error) {
	resp, err := http.Get(m.metrics)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// sum adds the samples of a metric whose label text contains every filter. A manager
// whose metrics cannot be scraped fails the spec: no answer is not "not leading".
func (m *manager) sum(name string, filters ...string) float64 {
	GinkgoHelper()
	samples, err := m.scrape()
	Expect(err).NotTo(HaveOccurred(), "scrape %s's metrics at %s", m.proc.Name, m.metrics)
	total := 0.0
	for k, v := range samples {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		ok := true
		for _, f := range filters {
			ok = ok && strings.Contains(k, f)
		}
		if ok {
			total += v
		}
	}
	return total
}

// probes counts the probes this manager ran.
func (m *manager) probes() float64 {
	GinkgoHelper()
	return m.sum("phalanks_storagebucket_probes_total")
}

// leading reports whether this manager holds the leader election lease.
func (m *manager) leading() bool {
	GinkgoHelper()
	return m.sum("leader_election_master_status") == 1
}

func (m *manager) log() string {
	data, err := os.ReadFile(m.proc.LogPath)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

// platform is an API server and MinIO with the namespaces, the credentials Secret and
// the manager's RBAC the managers under test need, and the kubeconfig they run with.
type platform struct {
	env        *envtest.Env
	c          client.Client
	s3         *minio.Server
	kubeconfig string
}

// startPlatform starts the API server (with the given feature gates) and MinIO,
// creates the phalanks-system and team namespaces and team's credentials Secret, and
// grants the user the managers run as exactly the RBAC config/rbac grants.
func startPlatform(featureGates map[string]bool) *platform {
	GinkgoHelper()
	ctx := context.Background()
	env, err := envtest.Start(envtest.Options{Scheme: scheme, FeatureGates: featureGates})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	p := &platform{env: env, c: env.Client, s3: minio.StartForTest(GinkgoT(), minio.Options{})}
	for _, ns := range []string{"phalanks-system", "team"} {
		Expect(p.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	Expect(p.c.Create(ctx, credentialsSecret("team", p.s3))).To(Succeed())
	grantManagerRBAC(p.c, "phalanks-manager", "phalanks-system")
	kubeconfig, err := env.KubeconfigUser("phalanks-manager")
	Expect(err).NotTo(HaveOccurred())
	p.kubeconfig = writeKubeconfig(kubeconfig)
	return p
}

func writeKubeconfig(data []byte) string {
	GinkgoHelper()
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(path, data, 0o600)).To(Succeed())
	return path
}

// grantManagerRBAC gives user exactly the roles config/rbac grants the manager: the
// ClusterRole generated from the +kubebuilder:rbac markers, and the leader election
// Role in the lease namespace.
func grantManagerRBAC(c client.Client, user, leaseNamespace string) {
	GinkgoHelper()
	ctx := context.Background()
	root, err := tools.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}

	cr := &rbacv1.ClusterRole{}
	decodeFile(filepath.Join(root, "config", "rbac", "role.yaml"), cr)
	Expect(c.Create(ctx, cr)).To(Succeed())
	Expect(c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "manager-rolebinding"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
		Subjects:   subject,
	})).To(Succeed())

	role := &rbacv1.Role{}
	decodeFile(filepath.Join(root, "config", "rbac", "leader_election_role.yaml"), role)
	role.Namespace = leaseNamespace
	Expect(c.Create(ctx, role)).To(Succeed())
	Expect(c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: leaseNamespace, Name: "leader-election-rolebinding"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   subject,
	})).To(Succeed())
}

func decodeFile(path string, into any) {
	GinkgoHelper()
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	Expect(yaml.Unmarshal(data, into)).To(Succeed())
}

func credentialsSecret(ns string, s3 *minio.Server) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-credentials", Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": s3.AccessKey, "AWS_SECRET_ACCESS_KEY": s3.SecretKey},
	}
}

func storageBucket(ns, name, bucket string, s3 *minio.Server) *phalanksv1beta1.StorageBucket {
	return &phalanksv1beta1.StorageBucket{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: phalanksv1beta1.StorageBucketSpec{
			BucketName:           bucket,
			Endpoint:             s3.URL,
			InsecureAllowHTTP:    true,
			Region:               s3.Region,
			ManagementPolicy:     phalanksv1beta1.ManagementManage,
			CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "s3-credentials"},
			HealthCheck: phalanksv1beta1.HealthCheck{
				Interval: &metav1.Duration{Duration: 5 * time.Second},
				Timeout:  &metav1.Duration{Duration: time.Second},
			},
		},
	}
}

func ready(c client.Client, sb *phalanksv1beta1.StorageBucket) (metav1.ConditionStatus, string) {
	got := &phalanksv1beta1.StorageBucket{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(sb), got); err != nil {
		return "", err.Error()
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, phalanksv1beta1.ConditionReady); cond != nil {
		return cond.Status, cond.Reason
	}
	return "", "no Ready condition"
}

func eventuallyReady(c client.Client, sb *phalanksv1beta1.StorageBucket, status metav1.ConditionStatus, reason string, timeout time.Duration) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		s, r := ready(c, sb)
		g.Expect(s).To(Equal(status), "Ready reason %s", r)
		g.Expect(r).To(Equal(reason))
	}).WithTimeout(timeout).WithPolling(250 * time.Millisecond).Should(Succeed())
}

func expectNoSecrets(text string, values ...string) {
	GinkgoHelper()
	for _, v := range values {
		Expect(strings.Contains(text, v)).To(BeFalse(), "a secret value appears in the log")
	}
}

// The failures once more at the end of the output, where CI shows its tail.
var _ = report.FailuresLast()
