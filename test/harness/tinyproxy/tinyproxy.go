// Package tinyproxy runs Debian's tinyproxy, a maintained HTTP forward proxy, as a child
// process on a free loopback port, for tests of a process whose egress goes through
// HTTP_PROXY and HTTPS_PROXY (OLM on OpenShift injects the cluster's proxy into operator
// pods).
//
// The proxy resolves names with a hosts file of its own: it runs in a private mount
// namespace (unshare(1)) where that file is bind-mounted over /etc/hosts, so a test can
// have names that only the proxy resolves, while every other process on the machine
// still reads the real /etc/hosts. The proxy's log tells which hosts it was asked for.
package tinyproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/phalanks/phalanks-operator/test/harness/process"
)

// Options configures a proxy.
type Options struct {
	// Dir holds the configuration, the hosts file and the logs; it must exist and be
	// private to this proxy.
	Dir string
	// Hosts maps the names only the proxy resolves to their addresses.
	Hosts map[string]netip.Addr
	// ConnectPorts are the ports CONNECT may tunnel to; tinyproxy refuses the others
	// (and allows every port when there are none).
	ConnectPorts []int
	// Listen is the address to serve on; empty means 127.0.0.1, where only this machine's
	// processes are let in. On another address (the local cluster's node address, for
	// pods on the real node) every client is.
	Listen netip.Addr
}

// Proxy is a running tinyproxy.
type Proxy struct {
	// URL is http://<Listen>:port, for HTTP_PROXY and HTTPS_PROXY.
	URL *url.URL

	proc *process.Process
	log  string
}

// readinessName is the name the readiness request asks the proxy for: the proxy's hosts
// file maps it to a server of the harness.
const readinessName = "readiness.tinyproxy.test"

// Start runs tinyproxy in a mount namespace of its own and returns when it has proxied
// a request to a name only its hosts file knows. It needs tinyproxy (Debian's package)
// and unshare (util-linux); as root it creates the mount namespace, otherwise it
// creates a user namespace for it too, which needs unprivileged user namespaces.
func Start(o Options) (*Proxy, error) {
	bin, err := exec.LookPath("tinyproxy")
	if err != nil {
		return nil, errors.New("tinyproxy not found in PATH: install Debian's tinyproxy " +
			"(`make test` does, with hack/tools/apt.sh)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, errors.New("unshare not found in PATH: install Debian's util-linux")
	}
	if _, ok := o.Hosts[readinessName]; ok {
		return nil, fmt.Errorf("%s is the harness's own name", readinessName)
	}
	ready, err := startReadinessServer()
	if err != nil {
		return nil, err
	}
	defer ready.close()
	port, err := process.FreePort()
	if err != nil {
		return nil, err
	}
	listen := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if o.Listen.IsValid() {
		listen = o.Listen
	}
	p := &Proxy{URL: &url.URL{Scheme: "http", Host: net.JoinHostPort(listen.String(), strconv.Itoa(port))},
		log: filepath.Join(o.Dir, "tinyproxy.log")}

	hosts := []string{"127.0.0.1 localhost", "::1 localhost", "127.0.0.1 " + readinessName}
	for name, addr := range o.Hosts {
		hosts = append(hosts, addr.String()+" "+name)
	}
	hostsPath := filepath.Join(o.Dir, "hosts")
	if err := os.WriteFile(hostsPath, []byte(strings.Join(hosts, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	conf := []string{
		"Port " + strconv.Itoa(port),
		"Listen " + listen.String(),
		"Timeout 60",
		"MaxClients 100",
		// CONNECT and request lines are logged at Connect; Info adds how the proxy
		// resolved and connected, for a failed spec's reader.
		"LogLevel Info",
		fmt.Sprintf("LogFile %q", p.log),
	}
	if listen.IsLoopback() {
		// Without an Allow line tinyproxy serves every client.
		conf = append(conf, "Allow "+listen.String())
	}
	for _, cp := range o.ConnectPorts {
		conf = append(conf, "ConnectPort "+strconv.Itoa(cp))
	}
	confPath := filepath.Join(o.Dir, "tinyproxy.conf")
	if err := os.WriteFile(confPath, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}

	// unshare makes the new namespace's mounts private (its default propagation), so the
	// bind mount stays inside; it execs the shell, which execs tinyproxy in the
	// foreground (-d): the process's PID is tinyproxy's.
	args := []string{"--mount"}
	if os.Geteuid() != 0 {
		args = []string{"--user", "--map-root-user", "--mount"}
	}
	args = append(args, "--", "/bin/sh", "-c", `mount --bind "$1" /etc/hosts && exec "$2" -d -c "$3"`,
		"sh", hostsPath, bin, confPath)
	p.proc = &process.Process{Name: "tinyproxy", Path: unshare, Args: args, LogPath: filepath.Join(o.Dir, "tinyproxy.out")}
	if err := p.proc.Start(); err != nil {
		return nil, err
	}
	if err := process.WaitFor(p.proc, 30*time.Second, func() error { return ready.check(p.URL) }); err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("%w\ntinyproxy's log %s:\n%s", err, p.log, process.Tail(p.log, 20))
	}
	return p, nil
}

// TB is the part of testing.TB (and Ginkgo's GinkgoT) that StartForTest needs.
type TB interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// StartForTest starts a proxy in a test's temporary directory and stops it when the
// test ends. A machine without tinyproxy fails the test.
func StartForTest(t TB, o Options) *Proxy {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	p, err := Start(o)
	if err != nil {
		t.Fatalf("start tinyproxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}

// Stop ends the proxy.
func (p *Proxy) Stop() error { return p.proc.Stop(10 * time.Second) }

// LogPath returns tinyproxy's own log, the file Requests reads.
func (p *Proxy) LogPath() string { return p.log }

// Requests returns how many requests for the host name the proxy was asked, plain
// (absolute-form) and CONNECT, as its log records them.
func (p *Proxy) Requests(name string) (int, error) {
	return p.count(requestedHost, name)
}

// Tunnels returns how many CONNECT requests to hostPort (host:port) the proxy was asked,
// as its log records them.
func (p *Proxy) Tunnels(hostPort string) (int, error) {
	return p.count(tunnelTarget, hostPort)
}

// count returns how many lines of the log read name what it reads from them.
func (p *Proxy) count(read func(line string) (string, bool), want string) (int, error) {
	data, err := os.ReadFile(p.log)
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range strings.Lines(string(data)) {
		if got, ok := read(line); ok && strings.EqualFold(got, want) {
			n++
		}
	}
	return n, nil
}

// tunnelTarget returns the host:port of a CONNECT line of tinyproxy's log.
func tunnelTarget(line string) (string, bool) {
	f, ok := requestFields(line)
	if !ok || f[0] != http.MethodConnect {
		return "", false
	}
	return f[1], true
}

// requestFields returns the method and target of a request line of tinyproxy's log.
func requestFields(line string) ([]string, bool) {
	_, rest, ok := strings.Cut(line, "]: Request (file descriptor ")
	if !ok {
		return nil, false
	}
	_, rest, ok = strings.Cut(rest, "): ")
	f := strings.Fields(rest)
	return f, ok && len(f) >= 2
}

// requestedHost returns the host name of a request line of tinyproxy's log:
//
//	CONNECT   Nov 27 09:30:28.522 [5680]: Request (file descriptor 5): GET http://example.test:9000/ HTTP/1.1
//	CONNECT   Nov 27 09:30:28.633 [5680]: Request (file descriptor 5): CONNECT example.test:9000 HTTP/1.1
func requestedHost(line string) (string, bool) {
	f, ok := requestFields(line)
	if !ok {
		return "", false
	}
	if f[0] == http.MethodConnect {
		host, _, err := net.SplitHostPort(f[1])
		return host, err == nil
	}
	u, err := url.Parse(f[1])
	if err != nil || !u.IsAbs() {
		return "", false
	}
	return u.Hostname(), true
}

// readinessServer answers a random token on a loopback port, which only a request
// through the proxy reaches by readinessName.
type readinessServer struct {
	port   int
	token  string
	server *http.Server
}

func startReadinessServer() (*readinessServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	r := &readinessServer{port: l.Addr().(*net.TCPAddr).Port, token: hex.EncodeToString(b)}
	r.server = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, r.token)
	})}
	go func() { _ = r.server.Serve(l) }()
	return r, nil
}

// check asks the proxy for readinessName: the answer comes back only if tinyproxy
// serves, and resolves with the hosts file of its namespace.
func (r *readinessServer) check(proxy *url.URL) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	target := "http://" + net.JoinHostPort(readinessName, strconv.Itoa(r.port)) + "/"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || string(body) != r.token {
		return fmt.Errorf("GET %s through %s: %s %q", target, proxy, resp.Status, body)
	}
	return nil
}

func (r *readinessServer) close() { _ = r.server.Close() }
