// Package fwdproxy is an HTTP forward proxy for tests: plain-HTTP requests in absolute
// form and CONNECT tunnels, as an egress proxy set in HTTP_PROXY/HTTPS_PROXY serves
// them. It resolves names by its own table, so a test can have names that only the
// proxy knows, and it counts what it was asked.
//
// It runs in the test process for unit tests (internal/s3probe's) that a plain
// `go test` runs on any machine. A real proxy with names of its own needs Debian's
// tinyproxy and a mount namespace (test/harness/tinyproxy); the StorageBucket e2e suite
// checks the same rules with the manager binary behind that one.
package fwdproxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a running forward proxy.
type Proxy struct {
	// URL is http://host:port, for HTTP_PROXY or a Proxy function.
	URL *url.URL

	hosts    map[string]string
	server   *http.Server
	listener net.Listener
	done     chan struct{}
	requests atomic.Int64

	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
}

// Start listens on a free loopback port. hosts maps each host:port the proxy serves to
// the address it connects to; any other target is answered 502.
func Start(hosts map[string]string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{URL: &url.URL{Scheme: "http", Host: l.Addr().String()}, hosts: hosts, listener: l,
		done: make(chan struct{}), tunnels: map[net.Conn]struct{}{}}
	p.server = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(p.serve)}
	go func() {
		defer close(p.done)
		_ = p.server.Serve(l)
	}()
	return p, nil
}

// TB is the part of testing.TB StartForTest needs.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// StartForTest starts a proxy and closes it when the test ends.
func StartForTest(t TB, hosts map[string]string) *Proxy {
	t.Helper()
	p, err := Start(hosts)
	if err != nil {
		t.Fatalf("start forward proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Requests returns how many requests (and CONNECTs) the proxy was asked.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	host := r.URL.Host
	if r.URL.Port() == "" {
		host = net.JoinHostPort(r.URL.Hostname(), "80")
	}
	target, ok := p.hosts[host]
	if !ok || !r.URL.IsAbs() {
		http.Error(w, "the proxy does not know "+r.URL.Host, http.StatusBadGateway)
		return
	}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.Out.URL.Scheme, pr.Out.URL.Host = "http", target
		pr.Out.Host = r.Host // requests are signed for the name the client used
	}}
	rp.ServeHTTP(w, r)
}

func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	target, ok := p.hosts[r.Host]
	if !ok {
		http.Error(w, "the proxy does not know "+r.Host, http.StatusBadGateway)
		return
	}
	upstream, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	client, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	p.mu.Lock()
	p.tunnels[client], p.tunnels[upstream] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = io.Copy(upstream, client); _ = upstream.Close() }()
		go func() { defer wg.Done(); _, _ = io.Copy(client, upstream); _ = client.Close() }()
		wg.Wait()
		p.mu.Lock()
		delete(p.tunnels, client)
		delete(p.tunnels, upstream)
		p.mu.Unlock()
	}()
}

// Close stops the proxy and its tunnels.
func (p *Proxy) Close() {
	_ = p.server.Close()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.tunnels {
		_ = c.Close()
	}
}
