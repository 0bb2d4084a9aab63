// Package apiproxy is an HTTPS proxy that a test puts between a client (the manager)
// and the Kubernetes API server to make the API server misbehave on chosen requests
// only, from outside the code under test: answer them 429 Too Many Requests as API
// priority and fairness does, delay them, hold their answers, or end the watches in
// flight. Everything else is forwarded as it is.
//
// It serves with a certificate of its own and forwards with the credentials of the
// rest.Config it was started with: its clients reach the API server as that user and
// need no credentials themselves (WriteKubeconfig).
package apiproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/phalanks/phalanks-operator/test/harness/certs"
)

// Proxy is a running proxy.
type Proxy struct {
	// Addr is the host:port it listens on; URL adds the scheme.
	Addr, URL string
	// CAPEM is the CA its serving certificate is signed by.
	CAPEM []byte

	listener net.Listener
	server   *http.Server
	done     chan struct{}
	// target and transport reach the API server.
	target    *url.URL
	transport http.RoundTripper

	mu      sync.Mutex
	rule    func(*http.Request) Action
	watches map[*watchRequest]struct{}
	// streamed counts the bytes of watch events sent per resource.
	streamed map[string]int64
}

// Action is what the proxy does with a request; the zero Action forwards it.
type Action struct {
	// Status, when set, answers the request with this status and a Kubernetes Status
	// body instead of forwarding it; a 429 carries Retry-After: 1, as API priority and
	// fairness sends it (client-go waits and retries such an answer within the call's
	// deadline).
	Status int
	// Delay holds the request this long before forwarding it.
	Delay time.Duration
	// HoldAnswer, when set, forwards the request at once and holds its answer until the
	// channel is closed: the client gets the API server's answer as it was when the
	// request arrived, late.
	HoldAnswer <-chan struct{}
}

// TooManyRequests is the answer of an API server that turns a request away (client-go
// waits and tries again, until the call's deadline); InternalError that of one that
// failed it (client-go gives up at once).
var (
	TooManyRequests = Action{Status: http.StatusTooManyRequests}
	InternalError   = Action{Status: http.StatusInternalServerError}
)

type watchRequest struct {
	req   *http.Request
	since time.Time
	// end is closed to end the watch.
	end  chan struct{}
	once sync.Once
}

// Start listens on a free loopback port and forwards to the API server of upstream with
// its credentials.
func Start(upstream *rest.Config) (*Proxy, error) {
	target, err := url.Parse(upstream.Host)
	if err != nil {
		return nil, fmt.Errorf("API server host %q: %w", upstream.Host, err)
	}
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("transport to the API server: %w", err)
	}
	ca, err := certs.NewCA("phalanks-test-apiproxy-ca")
	if err != nil {
		return nil, err
	}
	pair, err := ca.Issue(certs.LeafOptions{CommonName: "127.0.0.1", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: l.Addr().String(), URL: "https://" + l.Addr().String(), CAPEM: ca.CertPEM,
		listener: l, done: make(chan struct{}), target: target, transport: transport,
		watches: map[*watchRequest]struct{}{}, streamed: map[string]int64{}}
	forward := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("Authorization") // the upstream transport authenticates
		},
		Transport:     transport,
		FlushInterval: -1, // watches stream
	}
	p.server = &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}},
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(w, r, forward) }),
	}
	go func() {
		defer close(p.done)
		_ = p.server.ServeTLS(l, "", "")
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
func StartForTest(t TB, upstream *rest.Config) *Proxy {
	t.Helper()
	p, err := Start(upstream)
	if err != nil {
		t.Fatalf("start API proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, forward http.Handler) {
	p.mu.Lock()
	rule := p.rule
	p.mu.Unlock()
	var a Action
	if rule != nil {
		a = rule(r)
	}
	if a.Status != 0 {
		answer(w, a.Status)
		return
	}
	if a.Delay > 0 {
		select {
		case <-time.After(a.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if a.HoldAnswer != nil {
		rec := &heldAnswer{header: http.Header{}}
		forward.ServeHTTP(rec, r)
		select {
		case <-a.HoldAnswer:
		case <-r.Context().Done():
			return
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
		return
	}
	if IsWatch(r) {
		p.watch(w, r)
		return
	}
	forward.ServeHTTP(w, r)
}

// hopByHop are the headers of one connection, not forwarded.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// watch forwards a watch and its events as they come, until the API server ends it, the
// client goes, or EndWatches ends it: then the answer ends as the API server ends a
// watch at its timeout, cleanly, and the client watches again from where it was.
func (p *Proxy) watch(w http.ResponseWriter, r *http.Request) {
	wr := &watchRequest{req: r, since: time.Now(), end: make(chan struct{})}
	p.mu.Lock()
	p.watches[wr] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.watches, wr)
		p.mu.Unlock()
	}()
	resource, _ := Resource(r)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	out := r.Clone(ctx)
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = p.target.Scheme, p.target.Host, p.target.Host
	out.Header.Del("Authorization") // the upstream transport authenticates
	for _, h := range hopByHop {
		out.Header.Del(h)
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	for _, h := range hopByHop {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()

	chunks := make(chan []byte)
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				select {
				case chunks <- append([]byte(nil), buf[:n]...):
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-wr.end:
			return
		case <-ctx.Done():
			return
		case b, ok := <-chunks:
			if !ok {
				return
			}
			n, err := w.Write(b)
			p.mu.Lock()
			p.streamed[resource] += int64(n)
			p.mu.Unlock()
			if err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// Streamed returns how many bytes the watches of resource (plural: "secrets") have
// sent their clients so far: a test waits for it to grow to know that an event reached
// the client.
func (p *Proxy) Streamed(resource string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streamed[resource]
}

// answer writes a Kubernetes Status with the code.
func answer(w http.ResponseWriter, code int) {
	reason := map[int]string{http.StatusTooManyRequests: "TooManyRequests", http.StatusInternalServerError: "InternalError",
		http.StatusServiceUnavailable: "ServiceUnavailable"}[code]
	w.Header().Set("Content-Type", "application/json")
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the test's API proxy answered %d",`+
		`"reason":%q,"details":{"retryAfterSeconds":1},"code":%d}`, code, reason, code)
}

// heldAnswer keeps an answer to write later.
type heldAnswer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (h *heldAnswer) Header() http.Header { return h.header }
func (h *heldAnswer) WriteHeader(code int) {
	if h.status == 0 {
		h.status = code
	}
}

func (h *heldAnswer) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return h.body.Write(b)
}

// Set makes rule decide every request from now on; nil forwards everything.
func (p *Proxy) Set(rule func(*http.Request) Action) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rule = rule
}

// EndWatches ends every watch in flight that match selects (every one when nil), cleanly,
// as the API server ends a watch at its timeout: the client watches again from where it
// was, without listing. It returns how many it ended.
func (p *Proxy) EndWatches(match func(*http.Request) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for wr := range p.watches {
		if match == nil || match(wr.req) {
			wr.once.Do(func() { close(wr.end) })
			n++
		}
	}
	return n
}

// Watching returns how long each watch in flight that match selects (every one when
// nil) has been running.
func (p *Proxy) Watching(match func(*http.Request) bool) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ages []time.Duration
	for wr := range p.watches {
		if match == nil || match(wr.req) {
			ages = append(ages, time.Since(wr.since))
		}
	}
	return ages
}

// Close stops the proxy and ends every request in flight.
func (p *Proxy) Close() {
	_ = p.server.Close()
	<-p.done
}

// Config returns a rest.Config that reaches the API server through the proxy, as the
// proxy's upstream user.
func (p *Proxy) Config() *rest.Config {
	return &rest.Config{Host: p.URL, TLSClientConfig: rest.TLSClientConfig{CAData: p.CAPEM}}
}

// WriteKubeconfig writes a kubeconfig that reaches the API server through the proxy.
func (p *Proxy) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxied"] = &clientcmdapi.Cluster{Server: p.URL, CertificateAuthorityData: p.CAPEM}
	cfg.AuthInfos["proxied"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxied"] = &clientcmdapi.Context{Cluster: "proxied", AuthInfo: "proxied"}
	cfg.CurrentContext = "proxied"
	return clientcmd.WriteToFile(*cfg, path)
}

// IsWatch reports whether a request is a watch.
func IsWatch(r *http.Request) bool {
	w, _ := strconv.ParseBool(r.URL.Query().Get("watch"))
	return w
}

// Resource returns the resource (plural) and name a request's path names:
// /apis/coordination.k8s.io/v1/namespaces/ns/leases/name → "leases", "name".
func Resource(r *http.Request) (resource, name string) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// /api/v1/... or /apis/group/version/...
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "", ""
	}
	if len(parts) == 2 && parts[0] == "namespaces" {
		return "namespaces", parts[1]
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) >= 1 {
		resource = parts[0]
	}
	if len(parts) >= 2 {
		name = parts[1]
	}
	return resource, name
}
