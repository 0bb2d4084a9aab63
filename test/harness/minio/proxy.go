package minio

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a plain-HTTP reverse proxy in front of a Server that can answer chosen
// requests with an S3 error instead of forwarding them, the way an S3 implementation
// without a feature (or a request that failed half way) answers. Requests keep the
// Host header the client signed, so MinIO accepts their signatures.
type Proxy struct {
	// Endpoint is host:port; URL adds the scheme.
	Endpoint string
	URL      string

	listener net.Listener
	server   *http.Server
	done     chan struct{}

	mu      sync.Mutex
	rule    func(*http.Request) *S3Error
	observe func(*http.Request)
	record  func(Exchange)
	hold    func(*http.Request) time.Duration
	// requests counts the requests the proxy saw, forwarded or failed.
	requests atomic.Int64
}

// S3Error is an error answer the proxy gives.
type S3Error struct {
	Status int
	Code   string
	// Region, when set, is the bucket's region the answer names, in the header
	// x-amz-bucket-region and the error document, as AWS S3 names it in a 301
	// PermanentRedirect.
	Region string
}

// NotImplemented is what an endpoint without a feature answers.
var NotImplemented = &S3Error{Status: http.StatusNotImplemented, Code: "NotImplemented"}

// InternalError is what a failing endpoint answers.
var InternalError = &S3Error{Status: http.StatusInternalServerError, Code: "InternalError"}

// StartProxy starts a proxy in front of s on a free loopback port. s must serve plain HTTP.
func (s *Server) StartProxy() (*Proxy, error) { return s.StartProxyOn("127.0.0.1") }

// StartProxyOn starts the proxy on a free port of host: the local cluster's node
// address, for pods to reach it (cluster.NodeIP).
func (s *Server) StartProxyOn(host string) (*Proxy, error) {
	if s.opts.TLS {
		return nil, fmt.Errorf("the proxy forwards plain HTTP only")
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	target := &url.URL{Scheme: "http", Host: s.Endpoint}
	p := &Proxy{Endpoint: l.Addr().String(), URL: "http://" + l.Addr().String(), listener: l, done: make(chan struct{})}
	forward := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host
	}}
	p.server = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		p.requests.Add(1)
		p.mu.Lock()
		rule, observe, record, hold := p.rule, p.observe, p.record, p.hold
		p.mu.Unlock()
		if observe != nil {
			observe(r)
		}
		body := &bodyReader{ReadCloser: r.Body}
		r.Body = body
		var held time.Duration
		if hold != nil {
			held = hold(r)
		}
		if held > 0 {
			// Served now, answered late: the answer is kept, recorded, and sent after
			// the hold.
			answer := &heldAnswer{header: http.Header{}, status: http.StatusOK}
			forward.ServeHTTP(answer, r)
			if record != nil {
				record(Exchange{Remote: r.RemoteAddr, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
					Start: start, End: time.Now(), Status: answer.status, Held: held, Aborted: body.broken()})
			}
			select {
			case <-time.After(held):
			case <-r.Context().Done():
				return
			}
			for k, v := range answer.header {
				w.Header()[k] = v
			}
			w.WriteHeader(answer.status)
			_, _ = w.Write(answer.body.Bytes())
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		if record != nil {
			defer func() {
				record(Exchange{Remote: r.RemoteAddr, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
					Start: start, End: time.Now(), Status: rec.status, Aborted: body.broken()})
			}()
		}
		if rule != nil {
			if e := rule(r); e != nil {
				rec.Header().Set("Content-Type", "application/xml")
				region := ""
				if e.Region != "" {
					rec.Header().Set("X-Amz-Bucket-Region", e.Region)
					region = "<Region>" + e.Region + "</Region>"
				}
				rec.WriteHeader(e.Status)
				_, _ = fmt.Fprintf(rec, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>refused by the test proxy</Message>%s</Error>`, e.Code, region)
				return
			}
		}
		forward.ServeHTTP(rec, r)
	})}
	go func() {
		defer close(p.done)
		_ = p.server.Serve(l)
	}()
	return p, nil
}

// StartProxyForTest starts a proxy and closes it when the test ends.
func (s *Server) StartProxyForTest(t TB) *Proxy {
	t.Helper()
	p, err := s.StartProxy()
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Fail answers every request for which rule returns an error with that error; nil
// forwards everything again.
func (p *Proxy) Fail(rule func(*http.Request) *S3Error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rule = rule
}

// Observe calls fn with every request as it arrives (before it is forwarded or failed).
func (p *Proxy) Observe(fn func(*http.Request)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observe = fn
}

// Exchange is one request the proxy served and its answer.
type Exchange struct {
	// Remote is the client's host:port.
	Remote      string
	Method      string
	Path, Query string
	// Start is when the request arrived; End when the server's answer was complete
	// (an answer HoldAnswers holds reaches the client later).
	Start, End time.Time
	Status     int
	// Held is how long the answer is held (HoldAnswers) after End.
	Held time.Duration
	// Aborted says the client stopped sending the request before its body's end (it
	// closed the connection half way, as a process does that cancels a request it was
	// paused in the middle of sending): the server never got the request whole, so it
	// did nothing.
	Aborted bool
}

// bodyReader reads a request's body and remembers whether reading it failed before
// its end.
type bodyReader struct {
	io.ReadCloser
	mu  sync.Mutex
	eof bool
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.mu.Lock()
		if err == io.EOF {
			b.eof = true
		} else if !b.eof {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

func (b *bodyReader) broken() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err != nil
}

// HoldAnswers serves every request for which fn returns a duration at once, and holds
// its answer that long before the client gets it, as a slow way back would: the request
// takes effect on time, and the client waits for its answer (nil holds nothing).
func (p *Proxy) HoldAnswers(fn func(*http.Request) time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = fn
}

// heldAnswer keeps an answer to send later.
type heldAnswer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (h *heldAnswer) Header() http.Header         { return h.header }
func (h *heldAnswer) WriteHeader(code int)        { h.status = code }
func (h *heldAnswer) Write(b []byte) (int, error) { return h.body.Write(b) }

// Record calls fn with every exchange once it is answered.
func (p *Proxy) Record(fn func(Exchange)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record = fn
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (the reverse proxy flushes).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Requests returns how many requests the proxy saw.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Close stops the proxy.
func (p *Proxy) Close() {
	_ = p.server.Close()
	<-p.done
}

// Tagging matches the bucket tagging requests of the given methods (all when none).
func Tagging(e *S3Error, methods ...string) func(*http.Request) *S3Error {
	return func(r *http.Request) *S3Error {
		if _, ok := r.URL.Query()["tagging"]; !ok {
			return nil
		}
		if len(methods) == 0 {
			return e
		}
		for _, m := range methods {
			if strings.EqualFold(m, r.Method) {
				return e
			}
		}
		return nil
	}
}
