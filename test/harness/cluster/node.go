package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/phalanks/phalanks-operator/internal/imagebuild"
	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/dns"
	"github.com/phalanks/phalanks-operator/test/harness/images"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/sandbox"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// PauseImage is the pod sandbox image: the harness builds it and pushes it to the local
// registry before the node starts.
const PauseImage = RegistryHost + "/pause:1"

// node is the cluster's real node: containerd, the kubelet and kube-proxy, running in the
// sandbox's namespaces (see package sandbox) with a bridge pod network.
type node struct {
	c       *Cluster
	dir     string
	binDir  string
	cgroup  string
	mirrors []string

	// mountsBefore are the mount points that existed before the node started, keyed by
	// mount ID and path; every other one is the node's to unmount.
	mountsBefore map[string]bool

	// baseHosts is the host's /etc/hosts; stopHosts ends following the Services into
	// the node's copy, and hostsDone is closed when it has.
	baseHosts []byte
	stopHosts context.CancelFunc
	hostsDone chan struct{}

	registry    *imagebuild.Registry
	registryLog *os.File

	// dns is the cluster DNS server (Options.ClusterDNS); serviceIPs holds what it
	// answers, the ClusterIP of each Service by name, as followServices last read them.
	dns        *dns.Server
	serviceIPs atomic.Pointer[map[string]netip.Addr]

	containerd *process.Process
	kubelet    *process.Process
	proxy      *process.Process
}

// startNode brings the real node up and waits until it is Ready and schedulable and
// kube-proxy has synced.
func (c *Cluster) startNode(ctx context.Context) error {
	binDir, err := tools.BinDir()
	if err != nil {
		return err
	}
	n := &node{c: c, dir: filepath.Join(c.o.Dir, "node"), binDir: binDir, cgroup: sandbox.CgroupName(), mirrors: c.o.Mirrors}
	c.node = n
	if err := n.checkDir(); err != nil {
		return err
	}
	if n.mountsBefore, err = mountKeys(); err != nil {
		return err
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return errors.New("runc not found in PATH: run `make tools-node`, which installs Debian's runc")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return errors.New("iptables not found in PATH: run `make tools-node`, which installs Debian's iptables")
	}
	// containerd finds its shim and the CNI plugins in the tools directory itself; a missing
	// one fails the start here rather than the first pod.
	if err := errors.Join(
		found(tools.Path("containerd")), found(tools.Path("containerd-shim-runc-v2")),
		found(tools.Path("kubelet")), found(tools.Path("kube-proxy")),
		found(tools.Path("bridge")), found(tools.Path("host-local")), found(tools.Path("loopback")), found(tools.Path("portmap")),
	); err != nil {
		return fmt.Errorf("%w (the real node's tools: `make tools-node`)", err)
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"set up the node's network", n.setUpNetwork},
		{"overlay the host paths the node writes to", n.shieldHost},
		{"resolve Service names through /etc/hosts", n.bindHosts},
		{"create the node's cgroup", n.createCgroups},
		{"write the node's certificates", n.writePKI},
		{"write the CNI configuration", n.writeCNIConfig},
		{"start the local registry with the pause image", func() error { return n.startRegistry(ctx) }},
		{"start the cluster DNS server", n.startDNS},
		{"start containerd", func() error { return n.startContainerd(runc) }},
		{"start the kubelet", n.startKubelet},
		{"start kube-proxy", n.startKubeProxy},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	if err := n.waitReady(ctx); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	hostsCtx, stop := context.WithCancel(context.Background())
	n.stopHosts, n.hostsDone = stop, make(chan struct{})
	go func() {
		defer close(n.hostsDone)
		n.followServices(hostsCtx, cs)
	}()
	return nil
}

// found drops a tool's path, keeping the error.
func found(_ string, err error) error { return err }

// checkDir refuses a node directory inside one of the overlaid paths: containerd's
// overlay snapshots cannot live on an overlay filesystem.
func (n *node) checkDir() error {
	abs, err := filepath.Abs(n.dir)
	if err != nil {
		return err
	}
	for _, d := range overlaidDirs {
		if abs == d || strings.HasPrefix(abs, d+"/") {
			return fmt.Errorf("the cluster directory %s is under %s, which the real node overlays; use a directory under /tmp", abs, d)
		}
	}
	n.dir = abs
	return os.MkdirAll(n.dir, 0o750)
}

// setUpNetwork gives the node its IP on a veth pair, routes Service ClusterIPs through
// it (so processes in the namespace reach Services through kube-proxy's rules: locally
// generated packets are routed before they are translated) and turns on what a bridge
// pod network needs.
func (n *node) setUpNetwork() error {
	cmds := [][]string{
		{"link", "add", nodeLink, "type", "veth", "peer", "name", nodeLinkPeer},
		{"addr", "add", NodeIP + nodeLinkCIDR, "dev", nodeLink},
		{"link", "set", nodeLink, "up"},
		{"link", "set", nodeLinkPeer, "up"},
		{"route", "add", ServiceCIDR, "dev", nodeLink},
	}
	for _, args := range cmds {
		if err := sandbox.IP(args...); err != nil {
			return err
		}
	}
	// Both are per network namespace.
	for key, value := range map[string]string{"net/ipv4/ip_forward": "1", "net/bridge/bridge-nf-call-iptables": "1"} {
		if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o600); err != nil {
			return fmt.Errorf("sysctl %s: %w", key, err)
		}
	}
	return nil
}

// shieldHost mounts the overlays over the host paths the node writes to and the files
// that show the kubelet its kernel parameters (see overlaidDirs and kubeletSysctls).
func (n *node) shieldHost() error {
	for _, d := range overlaidDirs {
		base := filepath.Join(n.dir, "overlay", strings.ReplaceAll(strings.TrimPrefix(d, "/"), "/", "-"))
		upper, work := filepath.Join(base, "upper"), filepath.Join(base, "work")
		if err := os.MkdirAll(work, 0o700); err != nil {
			return err
		}
		// The overlay's root takes the upper directory's mode: keep the host directory's.
		lower, err := os.Stat(d)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(upper, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(upper, lower.Mode().Perm()); err != nil {
			return err
		}
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", d, upper, work)
		if err := syscall.Mount("overlay", d, "overlay", 0, opts); err != nil {
			return fmt.Errorf("overlay %s: %w", d, err)
		}
	}
	dir := filepath.Join(n.dir, "sysctl")
	for key, value := range kubeletSysctls {
		file := filepath.Join(dir, strings.ReplaceAll(key, "/", "."))
		if err := writeFile(file, []byte(value+"\n")); err != nil {
			return err
		}
		if err := bindFile(file, filepath.Join("/proc/sys", key)); err != nil {
			return err
		}
	}
	return nil
}

func bindFile(file, over string) error {
	if err := syscall.Mount(file, over, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over %s: %w", file, over, err)
	}
	return nil
}

// cgroupDirs returns the node's cgroup directory in every mounted hierarchy.
func (n *node) cgroupDirs() ([]string, error) {
	hierarchies, err := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, h := range hierarchies {
		dirs = append(dirs, filepath.Join(filepath.Dir(h), n.cgroup))
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.procs"); err == nil {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", n.cgroup))
	}
	if len(dirs) == 0 {
		return nil, errors.New("no cgroup hierarchy under /sys/fs/cgroup")
	}
	return dirs, nil
}

// createCgroups creates the kubelet's cgroupRoot, which must exist in every hierarchy.
func (n *node) createCgroups() error {
	if n.cgroup == "" {
		return errors.New("not inside a sandbox: the real node needs sandbox.Enter")
	}
	dirs, err := n.cgroupDirs()
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

// writePKI issues the kubelet's serving certificate and the client certificates the
// kubelet (a member of system:nodes, so the Node authorizer and NodeRestriction apply)
// and kube-proxy (system:kube-proxy, bound to system:node-proxier) authenticate with.
func (n *node) writePKI() error {
	serving, err := n.c.ca.Issue(certs.LeafOptions{CommonName: NodeName, Hosts: []string{NodeIP, NodeName}})
	if err != nil {
		return err
	}
	if err := serving.Write(n.c.pki, "kubelet.crt", "kubelet.key"); err != nil {
		return err
	}
	for _, u := range []struct{ name, cn, org string }{
		{"kubelet", "system:node:" + NodeName, "system:nodes"},
		{"kube-proxy", "system:kube-proxy", ""},
	} {
		o := certs.LeafOptions{CommonName: u.cn, Client: true}
		if u.org != "" {
			o.Organization = []string{u.org}
		}
		pair, err := n.c.ca.Issue(o)
		if err != nil {
			return err
		}
		if err := pair.Write(n.c.pki, u.name+"-client.crt", u.name+"-client.key"); err != nil {
			return err
		}
		if err := n.c.writeKubeconfig(u.name, kubeconfigUser{certFile: n.c.pkiPath(u.name + "-client.crt"), keyFile: n.c.pkiPath(u.name + "-client.key")}); err != nil {
			return err
		}
	}
	return nil
}

// startRegistry serves the local registry in this process, on the node's loopback, and
// pushes the pause image the node's containerd runs every pod sandbox from.
func (n *node) startRegistry(ctx context.Context) error {
	log, err := os.OpenFile(filepath.Join(n.c.LogDir, "registry.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	serving, err := n.c.ca.Issue(certs.LeafOptions{CommonName: "local-registry", Hosts: []string{"localhost", "127.0.0.1"}})
	if err != nil {
		return err
	}
	if err := serving.Write(n.c.pki, "registry.crt", "registry.key"); err != nil {
		return err
	}
	n.registry, err = imagebuild.StartRegistry(registryListen, imagebuild.RegistryOptions{
		BlobDir: filepath.Join(n.dir, "registry"), Log: log,
		TLSAddr: registryTLSListen, TLSCertFile: n.c.pkiPath("registry.crt"), TLSKeyFile: n.c.pkiPath("registry.key"),
	})
	if err != nil {
		_ = log.Close()
		return err
	}
	n.registryLog = log
	pause, err := images.Pause(ctx, filepath.Join(n.dir, "build"))
	if err != nil {
		return err
	}
	_, err = n.c.Push(ctx, strings.TrimPrefix(PauseImage, RegistryHost+"/"), pause)
	return err
}

// registryListen and registryTLSListen are where the local registry listens. Plain HTTP
// on every address of the sandbox's network namespace: loopback (RegistryHost, for
// containerd and the test process), the node's address (PodRegistryHost, for pods) and
// the pod bridge's; TLS on loopback (RegistryTLSHost).
const (
	registryListen    = "0.0.0.0:5000"
	registryTLSListen = "127.0.0.1:5443"
)

// Push pushes an image or an image index to the real node's local registry as
// RegistryHost/repository, where repository is "path/name:tag", and returns its reference
// by digest. A name under a mirrored registry (Options.Mirrors) runs as that registry's:
// "phalanks/x:v1" pushed here runs as "quay.io/phalanks/x:v1".
func (c *Cluster) Push(ctx context.Context, repository string, a imagebuild.Artifact) (string, error) {
	if c.node == nil || c.node.registry == nil {
		return "", errors.New("the cluster has no real node and no local registry")
	}
	return imagebuild.Push(ctx, RegistryHost+"/"+repository, a, imagebuild.Options{})
}

func (n *node) startContainerd(runc string) error {
	config, err := n.writeContainerdConfig(runc)
	if err != nil {
		return err
	}
	if n.containerd, err = n.c.component("containerd", "--config", config); err != nil {
		return err
	}
	// containerd looks its shim up in PATH.
	n.containerd.Env = []string{"PATH=" + n.binDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	if err := n.containerd.Start(); err != nil {
		return err
	}
	return process.WaitFor(n.containerd, time.Minute, func() error {
		conn, err := net.DialTimeout("unix", containerdSocket, time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

func (n *node) startKubelet() error {
	config, err := n.writeKubeletConfig()
	if err != nil {
		return err
	}
	n.kubelet, err = n.c.component("kubelet",
		"--config", config,
		"--kubeconfig", n.c.kubeconfigPath("kubelet"),
		"--root-dir", kubeletRoot,
		"--hostname-override", NodeName,
		"--node-ip", NodeIP,
	)
	if err != nil {
		return err
	}
	return n.kubelet.Start()
}

func (n *node) startKubeProxy() error {
	config, err := n.writeKubeProxyConfig()
	if err != nil {
		return err
	}
	if n.proxy, err = n.c.component("kube-proxy", "--config", config); err != nil {
		return err
	}
	return n.proxy.Start()
}

// waitReady waits until the node is Ready with no NoSchedule taint (the node lifecycle
// controller lifts the not-ready one), kube-proxy has synced its rules, and the default
// ServiceAccount exists for pods to run as.
func (n *node) waitReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(n.c.Config)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	check := func() error {
		node, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !nodeReady(node) {
			return fmt.Errorf("node %s is not Ready: %s", NodeName, readyMessage(node))
		}
		for _, t := range node.Spec.Taints {
			if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
				return fmt.Errorf("node %s has taint %s", NodeName, t.ToString())
			}
		}
		if err := process.HTTPOK(hc, fmt.Sprintf("http://127.0.0.1:%d/healthz", kubeProxyHealthzPort), ""); err != nil {
			return fmt.Errorf("kube-proxy: %w", err)
		}
		_, err = cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		last := check()
		if last == nil {
			return nil
		}
		if err := n.c.failedComponent(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("real node not ready after 3m: %w", last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func readyMessage(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Reason + ": " + c.Message
		}
	}
	return "no Ready condition yet"
}

func (n *node) processes() []*process.Process {
	return []*process.Process{n.containerd, n.kubelet, n.proxy}
}

// stop tears the node down, leaving nothing behind: kube-proxy and the kubelet, then
// every container and shim by the PID containerd recorded, then containerd; the pod
// network's links and rules; every mount made since the node started (overlays, the
// kubelet's bind mount of its root, pod volumes, container root filesystems, pod network
// namespaces), newest first; and the node's cgroups.
func (n *node) stop() error {
	var errs []error
	if n.stopHosts != nil {
		n.stopHosts()
		<-n.hostsDone
	}
	for _, p := range []*process.Process{n.proxy, n.kubelet} {
		if p != nil {
			errs = append(errs, p.Stop(15*time.Second))
		}
	}
	shims := n.killContainers()
	if n.containerd != nil {
		errs = append(errs, n.containerd.Stop(15*time.Second))
	}
	errs = append(errs, killAndReap(shims))
	if n.registry != nil {
		errs = append(errs, n.registry.Close(), n.registryLog.Close())
	}
	if n.dns != nil {
		n.dns.Stop()
	}
	errs = append(errs, n.removeNetwork())
	errs = append(errs, n.unmountAll())
	if n.cgroup != "" {
		dirs, err := n.cgroupDirs()
		errs = append(errs, err)
		for _, d := range dirs {
			errs = append(errs, sandbox.RemoveCgroupTree(d))
		}
	}
	return errors.Join(errs...)
}

// killContainers kills the process of every container containerd runs (each container's
// init, whose exit ends its PID namespace) and returns the PIDs of their shims, which
// outlive containerd by design: each init's parent.
func (n *node) killContainers() []int {
	tasks, _ := filepath.Glob("/run/containerd/io.containerd.runtime.v2.task/*/*")
	var inits, shims []int
	for _, t := range tasks {
		pid, err := readPID(filepath.Join(t, "init.pid"))
		if err != nil {
			continue
		}
		inits = append(inits, pid)
		if ppid := parentOf(pid); ppid > 1 && !slices.Contains(shims, ppid) {
			shims = append(shims, ppid)
		}
	}
	for _, pid := range inits {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// The shims reap them and record their exit.
	waitGone(inits, 30*time.Second)
	return shims
}

func readPID(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// killAndReap kills the processes and waits until they are gone: the sandbox's init
// reaps them (shims are its children once their starter has exited).
func killAndReap(pids []int) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if left := waitGone(pids, 30*time.Second); len(left) > 0 {
		return fmt.Errorf("processes %v survived SIGKILL", left)
	}
	return nil
}

// waitGone waits until none of the processes exists, and returns those that still do.
func waitGone(pids []int, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, pid := range pids {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether a process exists, zombies included: it is gone once reaped.
func alive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// parentOf returns a process's parent PID, or 0.
func parentOf(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// removeNetwork deletes the node's links and flushes the rules kube-proxy, the kubelet
// and portmap added; all of them live in the sandbox's network namespace, which a next
// node in the same sandbox reuses.
func (n *node) removeNetwork() error {
	var errs []error
	for _, link := range []string{nodeLink, cniBridge} {
		if _, err := net.InterfaceByName(link); err == nil {
			errs = append(errs, sandbox.IP("link", "delete", link))
		}
	}
	for _, table := range []string{"filter", "nat", "mangle", "raw"} {
		for _, args := range [][]string{{"-t", table, "-F"}, {"-t", table, "-X"}} {
			if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, out))
			}
		}
	}
	return errors.Join(errs...)
}

// mount is one line of /proc/self/mountinfo.
type mount struct{ id, point string }

func (m mount) key() string { return m.id + " " + m.point }

func mounts() ([]mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []mount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		out = append(out, mount{id: fields[0], point: unescapeMountPoint(fields[4])})
	}
	return out, sc.Err()
}

// unescapeMountPoint undoes mountinfo's octal escapes of space, tab, newline and
// backslash.
func unescapeMountPoint(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func mountKeys() (map[string]bool, error) {
	ms, err := mounts()
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for _, m := range ms {
		keys[m.key()] = true
	}
	return keys, nil
}

// newMounts returns the mounts made since the node started, newest first.
func (n *node) newMounts() ([]mount, error) {
	ms, err := mounts()
	if err != nil {
		return nil, err
	}
	var out []mount
	for _, m := range ms {
		if !n.mountsBefore[m.key()] {
			out = append(out, m)
		}
	}
	slices.Reverse(out)
	return out, nil
}

// unmountAll unmounts every mount made since the node started, newest first (mountinfo
// lists them in the order they were made); a mount still busy is detached.
func (n *node) unmountAll() error {
	if n.mountsBefore == nil {
		return nil
	}
	for range 3 {
		ms, err := n.newMounts()
		if err != nil || len(ms) == 0 {
			return err
		}
		for _, m := range ms {
			_ = syscall.Unmount(m.point, 0)
		}
	}
	ms, err := n.newMounts()
	if err != nil {
		return err
	}
	for _, m := range ms {
		_ = syscall.Unmount(m.point, syscall.MNT_DETACH)
	}
	if ms, err = n.newMounts(); err != nil || len(ms) == 0 {
		return err
	}
	var left []string
	for _, m := range ms {
		left = append(left, m.point)
	}
	return fmt.Errorf("mounts left after unmounting: %s", strings.Join(left, ", "))
}
