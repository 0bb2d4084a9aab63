package s3probe_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	miniogo "github.com/minio/minio-go/v7"

	"github.com/phalanks/phalanks-operator/internal/s3probe"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/process"
)

// tlsServer serves 200 OK to every request over TLS with the given certificate.
func tlsServer(t *testing.T, pair *certs.Pair) *httptest.Server {
	t.Helper()
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// silentListener accepts connections and never answers.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

func closedPort(t *testing.T) string {
	t.Helper()
	port, err := process.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return process.HostPort(port)
}

// loopbackAllowed is the endpoint policy of tests whose servers listen on 127.0.0.1,
// which the built-in policy denies.
func loopbackAllowed(t *testing.T) *s3probe.Policy {
	t.Helper()
	p, err := s3probe.NewPolicy([]string{"127.0.0.1/32"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newProber(t *testing.T) *s3probe.Prober {
	return &s3probe.Prober{Pool: &s3probe.Pool{MaxIdleConnsPerHost: 4, Policy: loopbackAllowed(t)}}
}

// TestClassifiesRealFailures probes real sockets, TLS servers and MinIO into each
// failure of the taxonomy.
func TestClassifiesRealFailures(t *testing.T) {
	ca, err := certs.NewCA("probe-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(o certs.LeafOptions) *certs.Pair {
		p, err := ca.Issue(o)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	valid := tlsServer(t, issue(certs.LeafOptions{CommonName: "ok", Hosts: []string{"127.0.0.1"}}))
	expired := tlsServer(t, issue(certs.LeafOptions{CommonName: "old", Hosts: []string{"127.0.0.1"}, NotAfter: time.Now().Add(-time.Hour)}))
	wrongHost := tlsServer(t, issue(certs.LeafOptions{CommonName: "elsewhere", Hosts: []string{"elsewhere.example"}}))
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(unavailable.Close)
	plainHTTP := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(plainHTTP.Close)
	silent := silentListener(t)
	refused := closedPort(t)

	s3 := minio.StartForTest(t, minio.Options{})
	ctx := t.Context()
	if err := s3.MakeBucket(ctx, "present", miniogo.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	good := &s3probe.Credentials{AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey}

	for name, tc := range map[string]struct {
		target     s3probe.Target
		wantReason taxonomy.Reason
		wantCheck  taxonomy.Check
		wantInMsg  string
	}{
		"a closed port is ConnectionRefused": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: "http://" + refused}, Depth: s3probe.DepthHeadBucket},
			wantReason: taxonomy.ReasonConnectionRefused, wantCheck: taxonomy.CheckReachable, wantInMsg: refused,
		},
		"a closed port refuses the Connect depth too": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: "https://" + refused}, Depth: s3probe.DepthConnect},
			wantReason: taxonomy.ReasonConnectionRefused, wantCheck: taxonomy.CheckReachable,
		},
		"a host name that does not resolve is DNSFailure": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: "https://nonexistent.invalid"}, Depth: s3probe.DepthHeadBucket},
			wantReason: taxonomy.ReasonDNSFailure, wantCheck: taxonomy.CheckReachable, wantInMsg: "nonexistent.invalid",
		},
		"the Connect depth dials the scheme's default port when the URL names none": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: "https://nonexistent.invalid"}, Depth: s3probe.DepthConnect},
			wantReason: taxonomy.ReasonDNSFailure, wantCheck: taxonomy.CheckReachable, wantInMsg: "nonexistent.invalid",
		},
		"an endpoint that never answers is Timeout": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: "http://" + silent}, Depth: s3probe.DepthHeadBucket, Timeout: 300 * time.Millisecond},
			wantReason: taxonomy.ReasonTimeout, wantCheck: taxonomy.CheckReachable, wantInMsg: "300ms",
		},
		"a TLS handshake that never completes is Timeout": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: "https://" + silent}, Depth: s3probe.DepthConnect, Timeout: 300 * time.Millisecond},
			wantReason: taxonomy.ReasonTimeout, wantCheck: taxonomy.CheckReachable,
		},
		"a certificate from a CA nobody trusts is TLSUnknownAuthority": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: valid.URL}, Depth: s3probe.DepthHeadBucket},
			wantReason: taxonomy.ReasonTLSUnknownAuthority, wantCheck: taxonomy.CheckReachable, wantInMsg: "probe-test-ca",
		},
		"an unknown authority fails the Connect depth too": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: valid.URL}, Depth: s3probe.DepthConnect},
			wantReason: taxonomy.ReasonTLSUnknownAuthority, wantCheck: taxonomy.CheckReachable,
		},
		"an expired certificate is CertificateExpired": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: expired.URL, CABundle: ca.CertPEM}, Depth: s3probe.DepthHeadBucket},
			wantReason: taxonomy.ReasonCertificateExpired, wantCheck: taxonomy.CheckReachable, wantInMsg: "expired at",
		},
		"a certificate for another host is CertificateInvalid": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: wrongHost.URL, CABundle: ca.CertPEM}, Depth: s3probe.DepthConnect},
			wantReason: taxonomy.ReasonCertificateInvalid, wantCheck: taxonomy.CheckReachable, wantInMsg: "elsewhere.example",
		},
		"an endpoint that does not speak TLS is TLSHandshakeFailed": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: strings.Replace(plainHTTP.URL, "http://", "https://", 1)}, Depth: s3probe.DepthHeadBucket},
			wantReason: taxonomy.ReasonTLSHandshakeFailed, wantCheck: taxonomy.CheckReachable,
		},
		"a CA bundle without a certificate is InvalidCABundle": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: valid.URL, CABundle: []byte("not pem")}, Depth: s3probe.DepthHeadBucket},
			wantReason: taxonomy.ReasonInvalidCABundle, wantCheck: taxonomy.CheckReachable,
		},
		"a 503 answer is ServerError": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: unavailable.URL}, Bucket: "present", Depth: s3probe.DepthHeadBucket},
			wantReason: taxonomy.ReasonServerError, wantCheck: taxonomy.CheckReachable, wantInMsg: "Service Unavailable",
		},
		"a wrong secret key is InvalidCredentials": {
			target: s3probe.Target{Endpoint: s3probe.Endpoint{URL: s3.URL, Credentials: &s3probe.Credentials{AccessKeyID: s3.AccessKey, SecretAccessKey: "wrong-secret"}},
				Bucket: "present", Depth: s3probe.DepthHeadBucket},
			wantReason: taxonomy.ReasonInvalidCredentials, wantCheck: taxonomy.CheckAuthenticated, wantInMsg: "SignatureDoesNotMatch",
		},
		"an unknown access key is InvalidCredentials": {
			target: s3probe.Target{Endpoint: s3probe.Endpoint{URL: s3.URL, Credentials: &s3probe.Credentials{AccessKeyID: "nobody", SecretAccessKey: "wrong-secret"}},
				Bucket: "present", Depth: s3probe.DepthList},
			wantReason: taxonomy.ReasonInvalidCredentials, wantCheck: taxonomy.CheckAuthenticated, wantInMsg: "InvalidAccessKeyId",
		},
		"an anonymous request to a private bucket is AccessDenied": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: s3.URL}, Bucket: "present", Depth: s3probe.DepthHeadBucket},
			wantReason: taxonomy.ReasonAccessDenied, wantCheck: taxonomy.CheckAuthenticated, wantInMsg: "present",
		},
		"a missing bucket is NoSuchBucket": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: s3.URL, Credentials: good}, Bucket: "absent", Depth: s3probe.DepthHeadBucket},
			wantReason: taxonomy.ReasonNoSuchBucket, wantCheck: taxonomy.CheckBucketAvailable, wantInMsg: `"absent"`,
		},
		"a missing bucket is NoSuchBucket for the List depth too": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: s3.URL, Credentials: good}, Bucket: "absent", Depth: s3probe.DepthList},
			wantReason: taxonomy.ReasonNoSuchBucket, wantCheck: taxonomy.CheckBucketAvailable,
		},
		"a request signed for another region is WrongRegion naming the server's region": {
			target:     s3probe.Target{Endpoint: s3probe.Endpoint{URL: s3.URL, Credentials: good, Region: "eu-west-1"}, Bucket: "present", Depth: s3probe.DepthHeadBucket},
			wantReason: taxonomy.ReasonWrongRegion, wantCheck: taxonomy.CheckBucketAvailable, wantInMsg: `"us-east-1"`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.target.Timeout == 0 {
				tc.target.Timeout = 5 * time.Second
			}
			if tc.target.Bucket == "" {
				tc.target.Bucket = "any-bucket"
			}
			res := newProber(t).Probe(ctx, tc.target)
			f := res.Failure
			if f == nil {
				t.Fatalf("probe passed, want %s", tc.wantReason)
			}
			if f.Reason != tc.wantReason || f.Check != tc.wantCheck {
				t.Fatalf("got %s/%s (%s; cause %v), want %s/%s", f.Check, f.Reason, f.Message, f.Unwrap(), tc.wantCheck, tc.wantReason)
			}
			if !strings.Contains(f.Message, tc.wantInMsg) {
				t.Errorf("message %q does not mention %q", f.Message, tc.wantInMsg)
			}
			if strings.Contains(f.Message, s3.SecretKey) || strings.Contains(f.Message, "wrong-secret") {
				t.Errorf("message %q holds a secret key", f.Message)
			}
		})
	}
}

func TestExpiredCertificateReportsItsNotAfter(t *testing.T) {
	ca, err := certs.NewCA("expiry-ca")
	if err != nil {
		t.Fatal(err)
	}
	notAfter := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	pair, err := ca.Issue(certs.LeafOptions{CommonName: "old", Hosts: []string{"127.0.0.1"}, NotAfter: notAfter})
	if err != nil {
		t.Fatal(err)
	}
	srv := tlsServer(t, pair)
	res := newProber(t).Probe(t.Context(), s3probe.Target{Endpoint: s3probe.Endpoint{URL: srv.URL, CABundle: ca.CertPEM},
		Bucket: "any-bucket", Depth: s3probe.DepthConnect, Timeout: 5 * time.Second})
	if res.Failure == nil || res.Failure.Reason != taxonomy.ReasonCertificateExpired {
		t.Fatalf("got %+v, want CertificateExpired", res.Failure)
	}
	if !res.CertNotAfter.Equal(notAfter) {
		t.Errorf("certNotAfter = %v, want %v", res.CertNotAfter, notAfter)
	}
}

func TestRepeatedFailuresKeepTheSameMessage(t *testing.T) {
	silent := silentListener(t)
	refused := closedPort(t)
	p := newProber(t)
	for _, target := range []s3probe.Target{
		{Endpoint: s3probe.Endpoint{URL: "http://" + refused}, Depth: s3probe.DepthHeadBucket},
		{Endpoint: s3probe.Endpoint{URL: "http://" + silent}, Depth: s3probe.DepthHeadBucket},
	} {
		// A timeout long enough that a loaded machine never turns the refused connection
		// into a timeout; the silent listener costs it twice.
		target.Bucket, target.Timeout = "any-bucket", 3*time.Second
		first := p.Probe(t.Context(), target).Failure
		second := p.Probe(t.Context(), target).Failure
		if first == nil || second == nil || first.Message != second.Message {
			t.Errorf("messages differ between two probes of %s: %v / %v", target.URL, first, second)
		}
	}
}

func TestHealthyBucketPassesEveryDepth(t *testing.T) {
	s3 := minio.StartForTest(t, minio.Options{TLS: true})
	ctx := t.Context()
	if err := s3.MakeBucket(ctx, "healthy", miniogo.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	p := newProber(t)
	for _, depth := range []s3probe.Depth{s3probe.DepthConnect, s3probe.DepthHeadBucket, s3probe.DepthList, s3probe.DepthReadWrite} {
		res := p.Probe(ctx, s3probe.Target{
			Endpoint: s3probe.Endpoint{URL: s3.URL, CABundle: s3.CAPEM,
				Credentials: &s3probe.Credentials{AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey}},
			Bucket: "healthy", Depth: depth, Timeout: 5 * time.Second, CanaryKey: ".phalanks-probe/test",
		})
		if res.Failure != nil {
			t.Errorf("%s: %v (cause %v)", depth, res.Failure, res.Failure.Unwrap())
		}
		if res.CertNotAfter.IsZero() || res.CertNotAfter.Before(time.Now()) {
			t.Errorf("%s: certNotAfter = %v, want the server certificate's future expiry", depth, res.CertNotAfter)
		}
	}
	if tr, cl := p.Pool.Len(); tr != 1 || cl != 1 {
		t.Errorf("pool holds %d transports and %d clients, want one of each for one endpoint and key pair", tr, cl)
	}
}

func TestReadWriteLeavesNoCanaryBehind(t *testing.T) {
	s3 := minio.StartForTest(t, minio.Options{})
	ctx := t.Context()
	admin, err := s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.MakeBucket(ctx, "plain", miniogo.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s3.MakeBucket(ctx, "versioned", miniogo.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.EnableVersioning(ctx, "versioned"); err != nil {
		t.Fatal(err)
	}
	p := newProber(t)
	for _, bucket := range []string{"plain", "versioned"} {
		for range 3 {
			res := p.Probe(ctx, s3probe.Target{
				Endpoint: s3probe.Endpoint{URL: s3.URL, Credentials: &s3probe.Credentials{AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey}},
				Bucket:   bucket, Depth: s3probe.DepthReadWrite, Timeout: 5 * time.Second, CanaryKey: ".phalanks-probe/uid-1",
			})
			if res.Failure != nil {
				t.Fatalf("%s: %v", bucket, res.Failure)
			}
		}
		var left []string
		for obj := range admin.ListObjectsIter(ctx, bucket, miniogo.ListObjectsOptions{WithVersions: true, Recursive: true}) {
			if obj.Err != nil {
				t.Fatal(obj.Err)
			}
			left = append(left, obj.Key+"@"+obj.VersionID)
		}
		if len(left) != 0 {
			t.Errorf("%s: the canary left versions or delete markers behind: %v", bucket, left)
		}
	}
}

func TestCredentialsNeverPrint(t *testing.T) {
	c := s3probe.Credentials{AccessKeyID: "AKIA-visible", SecretAccessKey: "s3cr3t"}
	for _, s := range []string{c.String(), c.GoString(), strings.Join([]string{(&c).String()}, "")} {
		if strings.Contains(s, "s3cr3t") || strings.Contains(s, "AKIA-visible") {
			t.Errorf("credentials printed as %q", s)
		}
	}
}

// TestAProbeEndsByTheCallersDeadline: deleting a canary may outlast the probe timeout
// (a canary must not stay behind), but never the deadline of the pass that runs the
// probe. The endpoint accepts the canary and then answers nothing.
func TestAProbeEndsByTheCallersDeadline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
			return
		}
		<-r.Context().Done() // the read and the delete hang
	}))
	t.Cleanup(srv.Close)
	const timeout, deadline = 1500 * time.Millisecond, 2 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	res := newProber(t).Probe(ctx, s3probe.Target{Endpoint: s3probe.Endpoint{URL: srv.URL}, Bucket: "any-bucket",
		Depth: s3probe.DepthReadWrite, Timeout: timeout, CanaryKey: ".phalanks-probe/deadline"})
	elapsed := time.Since(start)
	if res.Failure == nil || res.Failure.Reason != taxonomy.ReasonTimeout {
		t.Errorf("got %v, want Timeout", res.Failure)
	}
	// Without the bound: the read's timeout plus another whole timeout for the delete.
	if elapsed > deadline+500*time.Millisecond {
		t.Errorf("the probe took %s, past the caller's deadline of %s", elapsed.Round(time.Millisecond), deadline)
	}
}

// A guard on a probe's context is asked right before each of its requests leaves, the
// canary's cleanup included, and a request it refuses is never sent: a replica whose
// right to the bucket ended sends nothing more for it, whatever its contexts say yet.
func TestAGuardStopsEveryRequestItRefuses(t *testing.T) {
	s3 := minio.StartForTest(t, minio.Options{})
	ctx := t.Context()
	if err := s3.MakeBucket(ctx, "guarded", miniogo.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	proxy := s3.StartProxyForTest(t)
	var sent []string
	var mu sync.Mutex
	proxy.Observe(func(r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Method+" "+r.URL.Path)
		mu.Unlock()
	})
	refused := errors.New("this replica no longer holds the bucket")
	allowed := 0
	guard := func() error {
		if allowed == 0 {
			return refused
		}
		allowed--
		return nil
	}
	p := newProber(t)
	target := s3probe.Target{
		Endpoint: s3probe.Endpoint{URL: proxy.URL, Region: s3.Region, Credentials: &s3probe.Credentials{AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey}},
		Bucket:   "guarded", Timeout: 5 * time.Second, CanaryKey: ".phalanks-probe/uid-1",
	}
	for _, depth := range []s3probe.Depth{s3probe.DepthConnect, s3probe.DepthHeadBucket, s3probe.DepthList, s3probe.DepthReadWrite} {
		target.Depth = depth
		if res := p.Probe(s3probe.WithGuard(ctx, guard), target); res.Failure == nil || !errors.Is(res.Failure, refused) {
			t.Errorf("%s with the guard refusing: %v, want the guard's error", depth, res.Failure)
		}
	}
	if len(sent) != 0 {
		t.Errorf("requests the guard refused were sent: %v", sent)
	}

	// It allows the canary's put and nothing after it: not the read back, nor the
	// delete that runs under the cleanup context.
	allowed = 1
	target.Depth = s3probe.DepthReadWrite
	if res := p.Probe(s3probe.WithGuard(ctx, guard), target); res.Failure == nil {
		t.Error("the ReadWrite probe passed although the guard refused its read and delete")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 1 || !strings.HasPrefix(sent[0], http.MethodPut) {
		t.Errorf("sent %v; want the canary's put only", sent)
	}
}

// TestARegionIsFoundOnlyWhenAskedFor probes a bucket on a server in eu-central-1: a
// target that may discover the region signs for us-east-1 (none given) or a wrong one,
// is told the right one and passes; one whose region is fixed reports WrongRegion; and
// a Connect probe, which signs nothing, finds no region.
func TestARegionIsFoundOnlyWhenAskedFor(t *testing.T) {
	s3 := minio.StartForTest(t, minio.Options{Region: "eu-central-1"})
	ctx := t.Context()
	if err := s3.MakeBucket(ctx, "elsewhere", miniogo.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	p := newProber(t)
	target := func(region string, depth s3probe.Depth, discover bool) s3probe.Target {
		return s3probe.Target{
			Endpoint: s3probe.Endpoint{URL: s3.URL, Region: region,
				Credentials: &s3probe.Credentials{AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey}},
			Bucket: "elsewhere", Depth: depth, Timeout: 5 * time.Second, CanaryKey: ".phalanks-probe/test", DiscoverRegion: discover,
		}
	}
	for _, tc := range []struct {
		name       string
		target     s3probe.Target
		wantReason taxonomy.Reason
		wantRegion string
	}{
		{"HeadBucket, no region, discovering", target("", s3probe.DepthHeadBucket, true), "", "eu-central-1"},
		{"List, a wrong region, discovering", target("ap-south-1", s3probe.DepthList, true), "", "eu-central-1"},
		{"ReadWrite, no region, discovering", target("", s3probe.DepthReadWrite, true), "", "eu-central-1"},
		{"HeadBucket, a wrong region, fixed", target("us-west-2", s3probe.DepthHeadBucket, false), taxonomy.ReasonWrongRegion, ""},
		{"HeadBucket, no region, fixed", target("", s3probe.DepthHeadBucket, false), taxonomy.ReasonWrongRegion, ""},
		{"Connect, discovering", target("", s3probe.DepthConnect, true), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := p.Probe(ctx, tc.target)
			var got taxonomy.Reason
			if res.Failure != nil {
				got = res.Failure.Reason
			}
			if got != tc.wantReason {
				t.Errorf("reason %q (%v), want %q", got, res.Failure, tc.wantReason)
			}
			if res.Region != tc.wantRegion {
				t.Errorf("region %q, want %q", res.Region, tc.wantRegion)
			}
		})
	}
}
