package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/template"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// The real node's network, inside the sandbox's network namespace.
const (
	// NodeName is the real node's name.
	NodeName = "realnode-0"
	// NodeIP is the real node's InternalIP, on one end of a veth pair: the kubelet refuses
	// a loopback address and the kernel has no dummy interfaces.
	NodeIP       = "10.200.0.10"
	nodeLinkCIDR = "/24"
	nodeLink     = "rn-node"
	nodeLinkPeer = "rn-node-p"
	// ServiceCIDR is the Service range; the API server is its first address.
	ServiceCIDR   = "10.0.0.0/24"
	kubernetesSvc = "10.0.0.1"
	// PodCIDR is the pod network of the node's bridge. Every sandbox has its own network
	// namespace, so two clusters at once may both use it.
	PodCIDR    = "10.244.0.0/24"
	cniBridge  = "cni0"
	cniNetwork = "phalanks"
	// RegistryHost is the local registry's address as the node (and the test process,
	// which shares its network namespace) reaches it.
	RegistryHost = "localhost:5000"
	// RegistryTLSHost serves the same registry over TLS, with a certificate of the
	// cluster's CA (Cluster.CAFile): for clients that speak only HTTPS to registries and
	// trust a private CA, as operator-sdk does with SSL_CERT_FILE. The node trusts it too.
	RegistryTLSHost = "localhost:5443"
	// PodRegistryHost is the same registry as pods reach it, over plain HTTP: for
	// programs in pods that pull images themselves rather than through the node's
	// containerd (OLM v1's catalogd and operator-controller).
	PodRegistryHost = NodeIP + ":5000"
	// ClusterDomain is the cluster's DNS domain (Options.ClusterDNS).
	ClusterDomain = "cluster.local"
)

// Where the node's components write on their own, at paths they do not let us change
// (containerd's shim sockets under /run/containerd/s, the kubelet's /var/log/containers,
// CNI's result cache under /var/lib/cni, util-linux's /run/mount) or that we leave at
// their defaults because of them: each is overlaid for the node's lifetime with an
// overlay filesystem whose upper layer is in the node's directory, so the host's files
// stay as they are and what the node wrote stays readable there.
var overlaidDirs = []string{"/run", "/var/lib", "/var/log", "/opt"}

// The kernel parameters the kubelet insists on. It sets them machine-wide unless they
// already have these values (protectKernelDefaults makes it fail instead); the node
// shows it these values through files bind-mounted over /proc/sys, so the host's stay.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// Paths of the node's components, inside the overlays above unless under the node's
// directory.
const (
	containerdSocket = "/run/containerd/containerd.sock"
	kubeletRoot      = "/var/lib/kubelet"
	podLogsDir       = "/var/log/pods"
)

// containerdConfig is containerd's configuration (version 4: a version 3 file is
// migrated, and its top-level [grpc] address is then silently ignored).
var containerdConfig = template.Must(template.New("config.toml").Parse(`version = 4
root = "{{.Root}}"
state = "/run/containerd"

[plugins.'io.containerd.server.v1.grpc']
  address = "{{.Socket}}"
[plugins.'io.containerd.server.v1.ttrpc']
  address = "{{.Socket}}.ttrpc"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{{.PauseImage}}"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "{{.CertsDir}}"

[plugins.'io.containerd.cri.v1.runtime']
  # Root here lacks CAP_SYS_RESOURCE, so no process may lower its oom_score_adj below 0;
  # runc fails to create a sandbox the kubelet asks -998 for. This clamps it to containerd's.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{{.Runc}}"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{{.CNIBinDir}}"]
    conf_dir = "{{.CNIConfDir}}"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins.'io.containerd.nri.v1.nri']
  disable = true
`))

type containerdParams struct {
	Root, Socket, PauseImage, CertsDir, Runc, CNIBinDir, CNIConfDir string
}

// registryHosts is a containerd hosts.toml that sends every pull for a registry to the
// local one over plain HTTP, and nowhere else.
var registryHosts = template.Must(template.New("hosts.toml").Parse(`server = "http://{{.}}"

[host."http://{{.}}"]
  capabilities = ["pull", "resolve"]
`))

// registryTLSHosts is a containerd hosts.toml for the local registry's TLS listener,
// trusting the cluster's CA.
var registryTLSHosts = template.Must(template.New("hosts.toml").Parse(`server = "https://{{.Host}}"

[host."https://{{.Host}}"]
  capabilities = ["pull", "resolve"]
  ca = "{{.CA}}"
`))

// writeContainerdConfig writes config.toml and a hosts.toml for the local registry, its
// TLS listener and each registry it mirrors.
func (n *node) writeContainerdConfig(runc string) (string, error) {
	certs := filepath.Join(n.dir, "etc", "containerd", "certs.d")
	for _, host := range append([]string{RegistryHost}, n.mirrors...) {
		var b bytes.Buffer
		if err := registryHosts.Execute(&b, RegistryHost); err != nil {
			return "", err
		}
		if err := writeFile(filepath.Join(certs, host, "hosts.toml"), b.Bytes()); err != nil {
			return "", err
		}
	}
	var tlsHosts bytes.Buffer
	if err := registryTLSHosts.Execute(&tlsHosts, struct{ Host, CA string }{RegistryTLSHost, n.c.CAFile()}); err != nil {
		return "", err
	}
	if err := writeFile(filepath.Join(certs, RegistryTLSHost, "hosts.toml"), tlsHosts.Bytes()); err != nil {
		return "", err
	}
	var b bytes.Buffer
	err := containerdConfig.Execute(&b, containerdParams{
		Root:       filepath.Join(n.dir, "containerd"),
		Socket:     containerdSocket,
		PauseImage: PauseImage,
		CertsDir:   certs,
		Runc:       runc,
		CNIBinDir:  n.binDir,
		CNIConfDir: n.cniConfDir(),
	})
	if err != nil {
		return "", err
	}
	path := filepath.Join(n.dir, "etc", "containerd", "config.toml")
	return path, writeFile(path, b.Bytes())
}

func (n *node) cniConfDir() string { return filepath.Join(n.dir, "etc", "cni", "net.d") }

// writeCNIConfig writes the pod network: a bridge with host-local addresses and a
// default route through it, and portmap for hostPorts. containerd sets up each pod's
// loopback itself, with the loopback plugin from the same directory.
func (n *node) writeCNIConfig() error {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       cniNetwork,
		"plugins": []map[string]any{
			{
				"type": "bridge", "bridge": cniBridge, "isGateway": true, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": PodCIDR}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": filepath.Join(n.dir, "cni-ipam"),
				},
			},
			{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(n.cniConfDir(), "10-"+cniNetwork+".conflist"), data)
}

// writeKubeletConfig writes the KubeletConfiguration. It is built from the API types so
// that a misspelt field fails to compile: the kubelet decodes its file leniently and
// ignores unknown fields (podLogsDirectory for podLogsDir, say) with an info line.
func (n *node) writeKubeletConfig() (string, error) {
	cfg := kubeletv1beta1.KubeletConfiguration{
		TypeMeta:     metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		FailCgroupV1: ptr.To(false),
		CgroupDriver: "cgroupfs",
		// The sandbox's own cgroup: two nodes on one machine must not share one.
		CgroupRoot:               "/" + n.cgroup,
		ContainerRuntimeEndpoint: "unix://" + containerdSocket,
		FailSwapOn:               ptr.To(false),
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: n.c.pkiPath("ca.crt")},
		},
		Authorization:      kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		TLSCertFile:        n.c.pkiPath("kubelet.crt"),
		TLSPrivateKeyFile:  n.c.pkiPath("kubelet.key"),
		ReadOnlyPort:       0,
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        ptr.To[int32](kubeletHealthzPort),
		PodLogsDir:         podLogsDir,
		// With the default, an image pulled once under one name and run under another
		// counts as not preloaded and is pulled again, from the wrong place.
		ImagePullCredentialsVerificationPolicy: "NeverVerify",
		// The host's values are shown through the bind mounts above; fail rather than
		// change the machine's.
		ProtectKernelDefaults:       true,
		EvictionHard:                map[string]string{"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%"},
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		MaxPods:                     60,
		SerializeImagePulls:         ptr.To(false),
		// Node status every few seconds: tests wait on it.
		NodeStatusUpdateFrequency: metav1.Duration{Duration: 4 * time.Second},
		SyncFrequency:             metav1.Duration{Duration: 10 * time.Second},
		ShutdownGracePeriod:       metav1.Duration{},
	}
	if n.c.o.ClusterDNS {
		cfg.ClusterDNS, cfg.ClusterDomain = []string{NodeIP}, ClusterDomain
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(n.dir, "etc", "kubelet.yaml")
	return path, writeFile(path, data)
}

// kubeletHealthzPort and kubeProxyHealthzPort are the components' default ports; the
// sandbox's network namespace is the node's own.
const (
	kubeletHealthzPort   = 10248
	kubeProxyHealthzPort = 10256
)

// writeKubeProxyConfig writes the KubeProxyConfiguration: iptables mode, and conntrack
// parameters of zero, which leave the machine-wide conntrack sysctls alone (root here may
// not write them).
func (n *node) writeKubeProxyConfig() (string, error) {
	cfg := kubeproxyv1alpha1.KubeProxyConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: "kubeproxy.config.k8s.io/v1alpha1", Kind: "KubeProxyConfiguration"},
		ClientConnection:   componentbaseconfigv1alpha1.ClientConnectionConfiguration{Kubeconfig: n.c.kubeconfigPath("kube-proxy")},
		HostnameOverride:   NodeName,
		Mode:               "iptables",
		ClusterCIDR:        PodCIDR,
		HealthzBindAddress: fmt.Sprintf("127.0.0.1:%d", kubeProxyHealthzPort),
		MetricsBindAddress: "127.0.0.1:10249",
		OOMScoreAdj:        ptr.To[int32](0),
		Conntrack: kubeproxyv1alpha1.KubeProxyConntrackConfiguration{
			MaxPerCore:            ptr.To[int32](0),
			Min:                   ptr.To[int32](0),
			TCPEstablishedTimeout: &metav1.Duration{},
			TCPCloseWaitTimeout:   &metav1.Duration{},
		},
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(n.dir, "etc", "kube-proxy.yaml")
	return path, writeFile(path, data)
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600) //nolint:gosec // G703: a file of the node's own directory
}
