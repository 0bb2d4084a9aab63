package s3probe_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	miniogo "github.com/minio/minio-go/v7"

	"github.com/phalanks/phalanks-operator/internal/s3probe"
	"github.com/phalanks/phalanks-operator/internal/taxonomy"
	"github.com/phalanks/phalanks-operator/test/harness/dns"
	"github.com/phalanks/phalanks-operator/test/harness/fwdproxy"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
)

func TestPolicyRules(t *testing.T) {
	for name, tc := range map[string]struct {
		allow, deny []string
		allowed     []string
		denied      []string
	}{
		"the built-in rules deny loopback, link-local, metadata and unspecified addresses": {
			denied: []string{"127.0.0.1", "127.1.2.3", "::1", "169.254.169.254", "fe80::1", "0.0.0.0", "::",
				"::ffff:127.0.0.1", "::ffff:169.254.169.254", "fd00:ec2::254", "100.100.100.200", "224.0.0.1"},
			allowed: []string{"10.96.0.1", "192.168.1.10", "52.219.170.9", "2600:1f18::1"},
		},
		"an allowed prefix opens exactly itself": {
			allow: []string{"127.0.0.1/32"}, allowed: []string{"127.0.0.1", "::ffff:127.0.0.1"}, denied: []string{"127.0.0.2", "::1"},
		},
		"a bare address is a one-address prefix": {
			allow: []string{"127.0.0.1"}, allowed: []string{"127.0.0.1"}, denied: []string{"127.0.0.2"},
		},
		"a denied prefix closes a cluster range": {
			deny: []string{"10.96.0.0/12"}, denied: []string{"10.96.0.1", "10.111.255.255"}, allowed: []string{"10.112.0.1"},
		},
		"the most specific prefix decides": {
			allow: []string{"10.0.0.0/8"}, deny: []string{"0.0.0.0/0", "10.96.0.0/12"},
			allowed: []string{"10.1.2.3"}, denied: []string{"8.8.8.8", "10.96.0.10", "127.0.0.1"},
		},
		"a deny wins a tie": {
			allow: []string{"192.168.0.0/16"}, deny: []string{"192.168.0.0/16"}, denied: []string{"192.168.3.4"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := s3probe.NewPolicy(tc.allow, tc.deny)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range tc.allowed {
				if d := p.Check(netip.MustParseAddr(a)); d != nil {
					t.Errorf("%s denied (%s), want allowed", a, d.Why)
				}
			}
			for _, a := range tc.denied {
				if p.Check(netip.MustParseAddr(a)) == nil {
					t.Errorf("%s allowed, want denied", a)
				}
			}
		})
	}
	if _, err := s3probe.NewPolicy([]string{"10.0.0.0/33"}, nil); err == nil {
		t.Error("an invalid prefix was accepted")
	}
}

// countingListener accepts connections on addr, counts them and closes them.
func countingListener(t *testing.T, addr string) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	return l.Addr().String(), &n
}

func TestPolicyDeniesLoopbackBeforeConnecting(t *testing.T) {
	addr, accepted := countingListener(t, "127.0.0.1:0")
	p := &s3probe.Prober{Pool: &s3probe.Pool{}} // the built-in policy
	for _, depth := range []s3probe.Depth{s3probe.DepthConnect, s3probe.DepthHeadBucket} {
		res := p.Probe(t.Context(), s3probe.Target{Endpoint: s3probe.Endpoint{URL: "http://" + addr}, Bucket: "any-bucket",
			Depth: depth, Timeout: 5 * time.Second})
		if res.Failure == nil || res.Failure.Reason != taxonomy.ReasonEndpointNotAllowed || res.Failure.Check != taxonomy.CheckReachable {
			t.Fatalf("%s: got %v, want Reachable/EndpointNotAllowed", depth, res.Failure)
		}
		if !strings.Contains(res.Failure.Message, "loopback") || !strings.Contains(res.Failure.Message, "--storagebucket-endpoint-allow-cidrs") {
			t.Errorf("%s: message %q does not name the rule and the flag that opens it", depth, res.Failure.Message)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the denied address got %d connections", n)
	}
}

// TestPolicyIsEnforcedOnTheDialledAddress resolves a name that answers an allowed
// address and a denied one in turn, as a DNS rebinding attacker's name does: whatever a
// lookup said before, only connections to the allowed address are made.
func TestPolicyIsEnforcedOnTheDialledAddress(t *testing.T) {
	allowed := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close") // every probe dials (and resolves) again
		w.WriteHeader(http.StatusForbidden)
	}))
	allowed.Start()
	t.Cleanup(allowed.Close)
	_, port, _ := net.SplitHostPort(allowed.Listener.Addr().String())
	_, denied := countingListener(t, "127.0.0.2:"+port)

	var lookups atomic.Int64
	server, err := dns.Start(func(name string) []netip.Addr {
		if name != "rebind.test" {
			return nil
		}
		if lookups.Add(1)%2 == 1 {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.2")}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.Stop)

	p := &s3probe.Prober{Pool: &s3probe.Pool{Policy: loopbackAllowed(t), Resolver: server.Resolver()}}
	reached, refused := 0, 0
	for range 10 {
		res := p.Probe(t.Context(), s3probe.Target{Endpoint: s3probe.Endpoint{URL: "http://rebind.test:" + port},
			Bucket: "any-bucket", Depth: s3probe.DepthConnect, Timeout: 5 * time.Second})
		switch {
		case res.Failure == nil:
			reached++
		case res.Failure.Reason == taxonomy.ReasonEndpointNotAllowed:
			refused++
			if strings.Contains(res.Failure.Message, "127.0.0.2") {
				t.Errorf("message %q names the address the name resolved to", res.Failure.Message)
			}
		default:
			t.Fatalf("probe failed with %v", res.Failure)
		}
	}
	if reached == 0 || refused == 0 {
		t.Fatalf("reached %d, refused %d: the name did not alternate", reached, refused)
	}
	if n := denied.Load(); n != 0 {
		t.Errorf("the denied address got %d connections", n)
	}
}

func nxdomain(t *testing.T) *net.Resolver {
	t.Helper()
	return resolver(t, map[string][]netip.Addr{})
}

// resolver answers from names, and NXDOMAIN for every other name.
func resolver(t *testing.T, names map[string][]netip.Addr) *net.Resolver {
	t.Helper()
	server, err := dns.Start(func(name string) []netip.Addr { return names[name] })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.Stop)
	return server.Resolver()
}

// testNet is an address of TEST-NET-1: allowed by the policy, routed nowhere. Names
// that resolve to it here reach MinIO only through the proxy.
var testNet = netip.MustParseAddr("192.0.2.10")

func proxiedMinIO(t *testing.T) (*minio.Server, string, *fwdproxy.Proxy) {
	t.Helper()
	s3 := minio.StartForTest(t, minio.Options{})
	if err := s3.MakeBucket(t.Context(), "proxied", miniogo.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(s3.Endpoint)
	name := "minio.behind-proxy.test:" + port
	return s3, name, fwdproxy.StartForTest(t, map[string]string{name: s3.Endpoint})
}

func proxiedTarget(s3 *minio.Server, host string, depth s3probe.Depth) s3probe.Target {
	return s3probe.Target{
		Endpoint: s3probe.Endpoint{URL: "http://" + host, Region: s3.Region,
			Credentials: &s3probe.Credentials{AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey}},
		Bucket: "proxied", Depth: depth, Timeout: 5 * time.Second, CanaryKey: ".phalanks-probe/test"}
}

// Behind an egress proxy, every depth (Connect included) goes through the proxy, for
// an endpoint whose name resolves here to an address the policy allows.
func TestEveryDepthGoesThroughTheProxy(t *testing.T) {
	s3, name, proxy := proxiedMinIO(t)
	names := map[string][]netip.Addr{"minio.behind-proxy.test": {testNet}}
	// The built-in policy: the proxy on loopback is the administrator's, and allowed.
	p := &s3probe.Prober{Pool: &s3probe.Pool{Proxy: http.ProxyURL(proxy.URL), Resolver: resolver(t, names)}}
	for _, depth := range []s3probe.Depth{s3probe.DepthConnect, s3probe.DepthHeadBucket, s3probe.DepthReadWrite} {
		before := proxy.Requests()
		if res := p.Probe(t.Context(), proxiedTarget(s3, name, depth)); res.Failure != nil {
			t.Errorf("%s: %v (cause %v)", depth, res.Failure, res.Failure.Unwrap())
		}
		if proxy.Requests() == before {
			t.Errorf("%s did not go through the proxy", depth)
		}
	}
}

// A name that does not resolve where the operator runs cannot be checked: through a
// proxy, which would resolve it by its own rules (a proxy-only name, DNS rebinding to
// the proxy host's metadata service or network), it is denied and the proxy is never
// asked, unless the administrator trusts the proxy's resolution.
func TestAProxiedNameThatDoesNotResolveHereIsDenied(t *testing.T) {
	s3, name, proxy := proxiedMinIO(t)
	p := &s3probe.Prober{Pool: &s3probe.Pool{Proxy: http.ProxyURL(proxy.URL), Resolver: nxdomain(t)}}
	for _, depth := range []s3probe.Depth{s3probe.DepthConnect, s3probe.DepthHeadBucket} {
		res := p.Probe(t.Context(), proxiedTarget(s3, name, depth))
		if res.Failure == nil || res.Failure.Reason != taxonomy.ReasonEndpointNotAllowed {
			t.Errorf("%s: got %v, want EndpointNotAllowed", depth, res.Failure)
		} else if !strings.Contains(res.Failure.Message, "--storagebucket-endpoint-allow-unresolvable-via-proxy") {
			t.Errorf("%s: message %q does not name the flag", depth, res.Failure.Message)
		}
	}
	if n := proxy.Requests(); n != 0 {
		t.Errorf("the proxy was asked %d times for a name that cannot be checked", n)
	}

	trusting := &s3probe.Prober{Pool: &s3probe.Pool{Proxy: http.ProxyURL(proxy.URL), Resolver: nxdomain(t), UnresolvableViaProxy: true}}
	if res := trusting.Probe(t.Context(), proxiedTarget(s3, name, s3probe.DepthHeadBucket)); res.Failure != nil {
		t.Errorf("trusting the proxy's resolution: %v", res.Failure)
	}
}

// Every address a proxied name resolves to must be allowed: one denied address among
// allowed ones denies the name.
func TestAProxiedNameWithOneDeniedAddressIsDenied(t *testing.T) {
	s3, name, proxy := proxiedMinIO(t)
	names := map[string][]netip.Addr{"minio.behind-proxy.test": {testNet, netip.MustParseAddr("169.254.169.254")}}
	p := &s3probe.Prober{Pool: &s3probe.Pool{Proxy: http.ProxyURL(proxy.URL), Resolver: resolver(t, names)}}
	res := p.Probe(t.Context(), proxiedTarget(s3, name, s3probe.DepthHeadBucket))
	if res.Failure == nil || res.Failure.Reason != taxonomy.ReasonEndpointNotAllowed {
		t.Errorf("got %v, want EndpointNotAllowed", res.Failure)
	}
	if n := proxy.Requests(); n != 0 {
		t.Errorf("the proxy was asked %d times", n)
	}
}

// The policy spares the proxy only as the proxy of a request: an endpoint that points
// at the proxy's own address and is reached directly (NO_PROXY) is checked like any
// other, even after the proxy served other endpoints.
func TestAnEndpointAtTheProxysAddressIsChecked(t *testing.T) {
	s3, name, proxy := proxiedMinIO(t)
	names := map[string][]netip.Addr{"minio.behind-proxy.test": {testNet}}
	viaProxyFor := func(req *http.Request) (*url.URL, error) {
		if req.URL.Host == name {
			return proxy.URL, nil
		}
		return nil, nil // NO_PROXY for everything else
	}
	p := &s3probe.Prober{Pool: &s3probe.Pool{Proxy: viaProxyFor, Resolver: resolver(t, names)}}
	if res := p.Probe(t.Context(), proxiedTarget(s3, name, s3probe.DepthHeadBucket)); res.Failure != nil {
		t.Fatalf("through the proxy: %v", res.Failure)
	}
	before := proxy.Requests()
	res := p.Probe(t.Context(), proxiedTarget(s3, proxy.URL.Host, s3probe.DepthConnect))
	if res.Failure == nil || res.Failure.Reason != taxonomy.ReasonEndpointNotAllowed {
		t.Errorf("the proxy's own address as an endpoint: got %v, want EndpointNotAllowed", res.Failure)
	}
	if n := proxy.Requests() - before; n != 0 {
		t.Errorf("the proxy's address was reached directly %d times", n)
	}
}

func TestPolicyChecksTheEndpointOfAProxiedRequest(t *testing.T) {
	proxy := fwdproxy.StartForTest(t, map[string]string{})
	p := &s3probe.Prober{Pool: &s3probe.Pool{Proxy: http.ProxyURL(proxy.URL), Resolver: nxdomain(t)}}
	for _, endpoint := range []string{"http://169.254.169.254", "http://[::1]:" + strconv.Itoa(80)} {
		res := p.Probe(t.Context(), s3probe.Target{Endpoint: s3probe.Endpoint{URL: endpoint}, Bucket: "any-bucket",
			Depth: s3probe.DepthConnect, Timeout: 5 * time.Second})
		if res.Failure == nil || res.Failure.Reason != taxonomy.ReasonEndpointNotAllowed {
			t.Errorf("%s: got %v, want EndpointNotAllowed", endpoint, res.Failure)
		}
	}
	if n := proxy.Requests(); n != 0 {
		t.Errorf("the proxy was asked %d times for a denied endpoint", n)
	}
}

// Through an egress proxy, an endpoint host that the proxy's C library reads as an IPv4
// address (inet_aton: one to four parts, each decimal, octal or hexadecimal, the last
// filling the remaining bytes) is checked as that address, even where Go's resolver
// reads it as a name that does not resolve and the administrator trusts the proxy's
// resolution; a host that reads as a number but as no valid address is denied too. The
// proxy is never asked.
func TestAProxiedEndpointWrittenAsAnyIPv4FormIsChecked(t *testing.T) {
	proxy := fwdproxy.StartForTest(t, map[string]string{})
	p := &s3probe.Prober{Pool: &s3probe.Pool{Proxy: http.ProxyURL(proxy.URL), Resolver: nxdomain(t), UnresolvableViaProxy: true}}
	const linkLocal, loopback, noAddress = "link-local", "loopback", "not as a valid IPv4 address"
	for form, tc := range map[string]struct{ host, why string }{
		"one decimal part":                     {"2852039166", linkLocal},
		"one octal part":                       {"025177524776", linkLocal},
		"one hexadecimal part":                 {"0xa9fea9fe", linkLocal},
		"one hexadecimal part, upper case":     {"0XA9FEA9FE", linkLocal},
		"four octal parts":                     {"0251.0376.0251.0376", linkLocal},
		"four hexadecimal parts":               {"0xa9.0xfe.0xa9.0xfe", linkLocal},
		"four parts, mixed bases":              {"0xa9.254.0251.0xfe", linkLocal},
		"three parts, the last 16 bits":        {"169.254.43518", linkLocal},
		"two parts, the last 24 bits":          {"127.1", loopback},
		"two parts, hexadecimal and decimal":   {"0x7f.1", loopback},
		"two parts, octal":                     {"0177.01", loopback},
		"one decimal part, loopback":           {"2130706433", loopback},
		"dotted quad with a trailing dot":      {"169.254.169.254.", linkLocal},
		"a number that is no address: 5 parts": {"1.2.3.4.5", noAddress},
		"a number that is no address: 08":      {"08.1.1.1", noAddress},
		"a part out of range":                  {"1.256.1.1", noAddress},
		"a last part out of range":             {"1.2.0x1000000", noAddress},
		"a number beyond 32 bits":              {"4294967296", noAddress},
		"a name ending in a number":            {"metadata.internal.123", noAddress},
	} {
		res := p.Probe(t.Context(), s3probe.Target{Endpoint: s3probe.Endpoint{URL: "http://" + tc.host}, Bucket: "any-bucket",
			Depth: s3probe.DepthConnect, Timeout: 5 * time.Second})
		switch {
		case res.Failure == nil || res.Failure.Reason != taxonomy.ReasonEndpointNotAllowed:
			t.Errorf("%s (%s): got %v, want EndpointNotAllowed", form, tc.host, res.Failure)
		case !strings.Contains(res.Failure.Message, tc.why):
			t.Errorf("%s (%s): %q does not say %q", form, tc.host, res.Failure.Message, tc.why)
		}
	}
	if n := proxy.Requests(); n != 0 {
		t.Errorf("the proxy was asked %d times for endpoints the policy denies", n)
	}

	// The same forms of an address the policy allows reach the proxy.
	for _, host := range []string{"3221225994", "0xc0.0.2.10", "192.0.522"} { // 192.0.2.10
		before := proxy.Requests()
		res := p.Probe(t.Context(), s3probe.Target{Endpoint: s3probe.Endpoint{URL: "http://" + host}, Bucket: "any-bucket",
			Depth: s3probe.DepthConnect, Timeout: 5 * time.Second})
		if res.Failure != nil && res.Failure.Reason == taxonomy.ReasonEndpointNotAllowed {
			t.Errorf("%s (192.0.2.10, allowed): %v", host, res.Failure)
		}
		if proxy.Requests() == before {
			t.Errorf("%s (192.0.2.10, allowed) did not go to the proxy", host)
		}
	}
}
