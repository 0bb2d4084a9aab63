// Package cluster runs a local Kubernetes cluster from real components: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, with nodes of one of two
// kinds.
//
//   - Fake nodes (the default): kwok schedules nothing itself but reports every pod bound
//     to its nodes Running, so Deployments become Available and garbage collection works,
//     at any scale, with no container runtime and no root. The large benchmarks use them.
//   - A real node (Options.RealNode): containerd, runc, the CNI bridge plugins, the kubelet
//     and kube-proxy run real pods from images in a local registry. It needs root and a
//     sandbox (package sandbox): the cluster runs in the calling process's private
//     network, mount and PID namespaces.
package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/kubeconfig"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/sandbox"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Options configures a cluster.
type Options struct {
	// Dir holds data, certificates, kubeconfigs and logs. It must be private to the cluster.
	Dir string
	// Nodes is the number of fake nodes (default 1).
	Nodes int
	// APIServerArgs are extra kube-apiserver flags ("--name=value").
	APIServerArgs []string
	// Aggregation sets kube-apiserver up to proxy to aggregated API servers (such as OLM's
	// package-server): a front-proxy CA, the client certificate kube-apiserver presents
	// to them, and the request-header flags they trust. kube-apiserver publishes that CA
	// in kube-system/extension-apiserver-authentication for them to read.
	Aggregation bool
	// RealNode runs one real node, named NodeName, instead of kwok's fake ones (Nodes is
	// ignored). The calling process must run as root inside a sandbox (sandbox.Enter);
	// kube-apiserver then serves on NodeIP too, so pods reach it through the kubernetes
	// Service.
	RealNode bool
	// Mirrors are registries (such as "quay.io") whose images the real node pulls from the
	// local registry, RegistryHost, and nowhere else: an image the project publishes as
	// quay.io/phalanks/x:v1 runs from RegistryHost/phalanks/x:v1.
	Mirrors []string
	// ClusterDNS runs cluster DNS for the real node's pods, as CoreDNS does on a real
	// cluster: a DNS server on NodeIP answers <service>.<namespace>.svc.cluster.local
	// (and <service>.<namespace>.svc) with the Service's ClusterIP, and the kubelet gives
	// pods it as their nameserver with the search path of the cluster domain,
	// cluster.local. Other names do not resolve. Without it pods have no cluster DNS.
	ClusterDNS bool
}

// Cluster is a running local control plane.
type Cluster struct {
	// Kubeconfig is the path of an administrator kubeconfig.
	Kubeconfig string
	// Config is the administrator's REST config.
	Config *rest.Config
	// Server is the API server's URL.
	Server string
	// LogDir holds one log file per component.
	LogDir string

	o        Options
	pki      string
	tokens   map[string]string
	ca       *certs.CA
	caPEM    []byte
	etcd     *process.Process
	api      *process.Process
	kcm      *process.Process
	sched    *process.Process
	kwok     *process.Process
	node     *node
	apiPort  int
	etcdPort int
}

// Start brings up the control plane and the fake nodes and returns when a node is Ready.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.RealNode && !sandbox.Inside() {
		return nil, errors.New("a real node needs root and a sandbox of its own: call sandbox.Enter first thing in TestMain or main")
	}
	c := &Cluster{o: o, LogDir: filepath.Join(o.Dir, "logs"), pki: filepath.Join(o.Dir, "pki")}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Shutdown())
			err = fmt.Errorf("%w (component logs in %s)", err, c.LogDir)
		}
	}()
	for _, d := range []string{c.LogDir, c.pki} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := c.writePKI(); err != nil {
		return nil, err
	}
	if err := c.startEtcd(); err != nil {
		return nil, err
	}
	if err := c.StartAPIServer(); err != nil {
		return nil, err
	}
	if err := c.checkVersion(); err != nil {
		return nil, err
	}
	if err := c.startControllers(); err != nil {
		return nil, err
	}
	if o.RealNode {
		if err := c.startNode(ctx); err != nil {
			return nil, err
		}
		return c, nil
	}
	if err := c.createNodes(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

//go:embed kwok-stages.yaml
var kwokStages []byte

// Users of the control plane, each with a static token in the system:masters group.
var users = []string{"admin", "kube-controller-manager", "kube-scheduler", "kwok"}

func (c *Cluster) writePKI() error {
	ca, err := certs.NewCA("phalanks-local-ca")
	if err != nil {
		return err
	}
	c.ca, c.caPEM = ca, ca.CertPEM
	if err := os.WriteFile(c.pkiPath("ca.crt"), ca.CertPEM, 0o600); err != nil {
		return err
	}
	hosts := []string{"127.0.0.1", "localhost", kubernetesSvc, "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	if c.o.RealNode {
		hosts = append(hosts, NodeIP)
		// kube-apiserver authenticates to the kubelet (logs, exec, port-forward) as a
		// cluster administrator.
		client, err := ca.Issue(certs.LeafOptions{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Client: true})
		if err != nil {
			return err
		}
		if err := client.Write(c.pki, "apiserver-kubelet-client.crt", "apiserver-kubelet-client.key"); err != nil {
			return err
		}
	}
	serving, err := ca.Issue(certs.LeafOptions{CommonName: "kube-apiserver", Hosts: hosts})
	if err != nil {
		return err
	}
	if err := serving.Write(c.pki, "apiserver.crt", "apiserver.key"); err != nil {
		return err
	}
	// The service-account signer is a second key pair; a leaf certificate's key serves.
	sa, err := ca.Issue(certs.LeafOptions{CommonName: "service-accounts"})
	if err != nil {
		return err
	}
	if err := sa.Write(c.pki, "sa.crt", "sa.key"); err != nil {
		return err
	}
	if c.o.Aggregation {
		if err := writeFrontProxyPKI(c.pki); err != nil {
			return err
		}
	}
	c.tokens = map[string]string{}
	var lines []string
	for _, u := range users {
		c.tokens[u] = randomHex(24)
		lines = append(lines, fmt.Sprintf("%s,%s,%s,\"system:masters\"", c.tokens[u], u, u))
	}
	if err := os.WriteFile(filepath.Join(c.pki, "tokens.csv"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	if c.apiPort, err = process.FreePort(); err != nil {
		return err
	}
	c.Server = "https://" + process.HostPort(c.apiPort)
	for _, u := range users {
		if err := c.writeKubeconfig(u, kubeconfigUser{token: c.tokens[u]}); err != nil {
			return err
		}
	}
	c.Kubeconfig = c.kubeconfigPath("admin")
	c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	c.Config.QPS, c.Config.Burst = 1000, 2000
	return nil
}

// frontProxyClient is the common name of the certificate kube-apiserver presents to
// aggregated API servers.
const frontProxyClient = "front-proxy-client"

// writeFrontProxyPKI writes a front-proxy CA, separate from the cluster CA as the
// aggregation docs require, and the client certificate it signs for kube-apiserver.
func writeFrontProxyPKI(dir string) error {
	ca, err := certs.NewCA("phalanks-local-front-proxy-ca")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "front-proxy-ca.crt"), ca.CertPEM, 0o600); err != nil {
		return err
	}
	client, err := ca.Issue(certs.LeafOptions{CommonName: frontProxyClient, Client: true})
	if err != nil {
		return err
	}
	return client.Write(dir, "front-proxy-client.crt", "front-proxy-client.key")
}

func (c *Cluster) kubeconfigPath(user string) string {
	return filepath.Join(c.o.Dir, user+".kubeconfig")
}

func (c *Cluster) pkiPath(name string) string { return filepath.Join(c.pki, name) }

// CAFile is the PEM file of the cluster's CA, which signed kube-apiserver's serving
// certificate and, with a real node, the local registry's TLS one.
func (c *Cluster) CAFile() string { return c.pkiPath("ca.crt") }

// kubeconfigUser is how a user authenticates: a token, or a client certificate.
type kubeconfigUser struct{ token, certFile, keyFile string }

func (c *Cluster) writeKubeconfig(user string, u kubeconfigUser) error {
	return kubeconfig.Write(c.kubeconfigPath(user), kubeconfig.Config{
		Server: c.Server, CAFile: c.pkiPath("ca.crt"), User: user,
		Token: u.token, CertFile: u.certFile, KeyFile: u.keyFile,
	})
}

func (c *Cluster) component(name string, args ...string) (*process.Process, error) {
	bin, err := tools.Path(name)
	if err != nil {
		return nil, err
	}
	return &process.Process{Name: name, Path: bin, Args: args, LogPath: filepath.Join(c.LogDir, name+".log")}, nil
}

func (c *Cluster) startEtcd() error {
	var err error
	if c.etcdPort, err = process.FreePort(); err != nil {
		return err
	}
	peerPort, err := process.FreePort()
	if err != nil {
		return err
	}
	client := "http://" + process.HostPort(c.etcdPort)
	peer := "http://" + process.HostPort(peerPort)
	c.etcd, err = c.component("etcd",
		"--data-dir", filepath.Join(c.o.Dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default="+peer,
		"--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return err
	}
	if err := c.etcd.Start(); err != nil {
		return err
	}
	return process.WaitFor(c.etcd, time.Minute, func() error { return process.HTTPOK(http.DefaultClient, client+"/health", "") })
}

// StartAPIServer starts kube-apiserver on the cluster's fixed address (also after
// StopAPIServer, for fault tests) and waits until it is ready.
func (c *Cluster) StartAPIServer() error {
	if c.api != nil && c.api.Running() {
		return errors.New("kube-apiserver is already running")
	}
	args := []string{
		"--etcd-servers", "http://" + process.HostPort(c.etcdPort),
		"--secure-port", strconv.Itoa(c.apiPort),
		"--tls-cert-file", filepath.Join(c.pki, "apiserver.crt"),
		"--tls-private-key-file", filepath.Join(c.pki, "apiserver.key"),
		"--client-ca-file", filepath.Join(c.pki, "ca.crt"),
		"--token-auth-file", filepath.Join(c.pki, "tokens.csv"),
		"--authorization-mode", "Node,RBAC",
		"--service-cluster-ip-range", ServiceCIDR,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(c.pki, "sa.key"),
		"--service-account-signing-key-file", filepath.Join(c.pki, "sa.key"),
		"--allow-privileged=true",
	}
	if c.o.RealNode {
		// Pods reach kube-apiserver through the kubernetes Service, whose endpoint is the
		// advertised address; it reaches kubelets by their InternalIP (they have no DNS
		// name) and checks their serving certificates.
		args = append(args,
			"--bind-address", "0.0.0.0",
			"--advertise-address", NodeIP,
			"--kubelet-client-certificate", c.pkiPath("apiserver-kubelet-client.crt"),
			"--kubelet-client-key", c.pkiPath("apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority", c.pkiPath("ca.crt"),
			"--kubelet-preferred-address-types", "InternalIP",
			"--enable-admission-plugins", "NodeRestriction",
		)
	} else {
		args = append(args,
			"--bind-address", "127.0.0.1",
			"--advertise-address", "127.0.0.1",
			"--endpoint-reconciler-type", "none",
		)
	}
	if c.o.Aggregation {
		args = append(args,
			"--requestheader-client-ca-file", filepath.Join(c.pki, "front-proxy-ca.crt"),
			"--requestheader-allowed-names", frontProxyClient,
			"--requestheader-username-headers", "X-Remote-User",
			"--requestheader-group-headers", "X-Remote-Group",
			"--requestheader-extra-headers-prefix", "X-Remote-Extra-",
			"--proxy-client-cert-file", filepath.Join(c.pki, "front-proxy-client.crt"),
			"--proxy-client-key-file", filepath.Join(c.pki, "front-proxy-client.key"),
		)
	}
	args = append(args, c.o.APIServerArgs...)
	var err error
	if c.api, err = c.component("kube-apiserver", args...); err != nil {
		return err
	}
	if err := c.api.Start(); err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.caPEM)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return process.WaitFor(c.api, 2*time.Minute, func() error { return process.HTTPOK(hc, c.Server+"/readyz", c.tokens["admin"]) })
}

// checkVersion fails unless kube-apiserver is the Kubernetes version the test was asked
// to run (tools.EnvKubeTools).
func (c *Cluster) checkVersion() error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("read the API server's version: %w", err)
	}
	return tools.CheckKubeVersion(v.GitVersion)
}

// StopAPIServer stops kube-apiserver, leaving etcd and the other components running.
func (c *Cluster) StopAPIServer() error { return c.api.Stop(5 * time.Second) }

// offControllers are the kube-controller-manager controllers the local cluster runs
// without: there is no cloud (node routes, load balancers, cloud node lifecycle; newer
// versions no longer have these), pod CIDRs come from the CNI configuration, and no
// certificate signing is set up.
var offControllers = []string{
	"node-ipam-controller", "cloud-node-lifecycle-controller", "service-lb-controller",
	"node-route-controller", "certificatesigningrequest-signing-controller",
}

// controllersFlag returns kube-controller-manager's --controllers value: every default
// controller but those off, naming only controllers this version has (naming one it
// lacks is an error that stops it).
func controllersFlag(bin string, off []string) (string, error) {
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	help := string(out)
	_, list, ok := strings.Cut(help, "All controllers:")
	if ok {
		list, _, ok = strings.Cut(list, "Disabled-by-default controllers:")
	}
	if !ok {
		return "", fmt.Errorf("%s --help lists no controllers:\n%s", bin, help)
	}
	known := map[string]bool{}
	for _, name := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		known[name] = true
	}
	flag := "*"
	for _, name := range off {
		if known[name] {
			flag += ",-" + name
		}
	}
	return flag, nil
}

func (c *Cluster) startControllers() error {
	kcmArgs := []string{
		"--kubeconfig", c.kubeconfigPath("kube-controller-manager"),
		"--secure-port", "0",
		"--leader-elect=false",
		"--service-account-private-key-file", filepath.Join(c.pki, "sa.key"),
		"--root-ca-file", filepath.Join(c.pki, "ca.crt"),
		"--cluster-cidr", "10.1.0.0/16",
	}
	off := offControllers
	if c.o.RealNode {
		// The node lifecycle controller lifts the not-ready taint a real node registers
		// with; each controller acts as its own service account, as in a real cluster.
		kcmArgs = append(kcmArgs, "--use-service-account-credentials=true")
	} else {
		// kwok sends no heartbeats: the node lifecycle controller would taint its nodes
		// not-ready and evict their pods.
		off = append(slices.Clone(off), "node-lifecycle-controller")
	}
	var err error
	if c.kcm, err = c.component("kube-controller-manager", kcmArgs...); err != nil {
		return err
	}
	controllers, err := controllersFlag(c.kcm.Path, off)
	if err != nil {
		return err
	}
	c.kcm.Args = append(c.kcm.Args, "--controllers", controllers)
	c.sched, err = c.component("kube-scheduler",
		"--kubeconfig", c.kubeconfigPath("kube-scheduler"),
		"--secure-port", "0",
		"--leader-elect=false",
	)
	if err != nil {
		return err
	}
	if c.o.RealNode {
		for _, p := range []*process.Process{c.kcm, c.sched} {
			if err := p.Start(); err != nil {
				return err
			}
		}
		return nil
	}
	kwokPort, err := process.FreePort()
	if err != nil {
		return err
	}
	stages := filepath.Join(c.o.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, kwokStages, 0o600); err != nil {
		return err
	}
	c.kwok, err = c.component("kwok",
		"--kubeconfig", c.kubeconfigPath("kwok"),
		"--config", stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
		"--cidr", "10.1.0.0/16",
		"--node-ip", "10.0.1.1",
		"--server-address", process.HostPort(kwokPort),
	)
	if err != nil {
		return err
	}
	for _, p := range []*process.Process{c.kcm, c.sched, c.kwok} {
		if err := p.Start(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) createNodes(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	for i := range c.o.Nodes {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        fmt.Sprintf("kwok-node-%d", i),
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				// The platform labels a kubelet sets: the operator's Deployment requires them
				// (node affinity on the platforms its image is built for).
				Labels: map[string]string{
					"type": "kwok", "kubernetes.io/hostname": fmt.Sprintf("kwok-node-%d", i),
					"kubernetes.io/arch": runtime.GOARCH, "kubernetes.io/os": runtime.GOOS,
				},
			},
			Status: corev1.NodeStatus{
				Allocatable: fakeCapacity(),
				Capacity:    fakeCapacity(),
			},
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node: %w", err)
		}
		// Admission taints new nodes not-ready; the node lifecycle controller that would
		// lift the taint is off (kwok sends no heartbeats), so lift it here. A patch, not an
		// update: kwok may already be writing the node's status, and an update from the
		// created object then fails with a conflict.
		untaint := []byte(`{"spec":{"taints":null}}`)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, untaint, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("untaint node %s: %w", node.Name, err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := c.failedComponent(); err != nil {
			return err
		}
		waiting, err := notReadyNode(ctx, cs)
		if err == nil && waiting == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not Ready after 2m: %w", waiting, errors.Join(err, errors.New("timed out")))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) failedComponent() error {
	procs := []*process.Process{c.etcd, c.api, c.kcm, c.sched, c.kwok}
	if c.node != nil {
		procs = append(procs, c.node.processes()...)
	}
	for _, p := range procs {
		if p != nil {
			if err := p.FailedEarly(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Healthy returns an error naming the first component that has exited.
func (c *Cluster) Healthy() error { return c.failedComponent() }

// Stop ends every component, newest first; see Shutdown.
func (c *Cluster) Stop() { _ = c.Shutdown() }

// Shutdown ends every component, newest first. A real node is torn down first, leaving
// no process, mount, cgroup or network link behind; what it could not remove is
// returned.
func (c *Cluster) Shutdown() error {
	var err error
	if c.node != nil {
		err = c.node.stop()
	}
	for _, p := range []*process.Process{c.kwok, c.sched, c.kcm, c.api, c.etcd} {
		if p != nil {
			_ = p.Stop(15 * time.Second)
		}
	}
	return err
}

func fakeCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("1000"),
	}
}

// notReadyNode names a fake node that is not Ready yet, or "" when every one is.
func notReadyNode(ctx context.Context, cs kubernetes.Interface) (string, error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil {
		return "kwok-node-0", err
	}
	if len(nodes.Items) == 0 {
		return "kwok-node-0", nil
	}
	for i := range nodes.Items {
		if !nodeReady(&nodes.Items[i]) {
			return nodes.Items[i].Name, nil
		}
	}
	return "", nil
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
