package s3probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

// Policy decides which addresses the operator may connect to on behalf of a
// StorageBucket. Anyone who may create a StorageBucket chooses its endpoint, so without a
// policy the operator would connect wherever they point it: the cloud metadata service,
// the node's own loopback services. The policy is enforced when a connection is made, on
// the address actually dialled, so a name that resolves to an allowed address when it is
// checked and to a denied one when it is used (DNS rebinding) gains nothing.
//
// Rules are CIDR prefixes that allow or deny. The most specific prefix that contains an
// address decides (a deny wins a tie); an address no rule contains is allowed. The
// built-in rules deny loopback, link-local (which holds the metadata services of AWS, GCP
// and Azure at 169.254.169.254), the unspecified addresses, multicast and the other
// well-known metadata addresses; an administrator adds rules with the operator's flags.
type Policy struct {
	rules []rule
}

type rule struct {
	prefix netip.Prefix
	allow  bool
	// why names the rule in messages.
	why string
}

// Built-in denials.
var defaultDeny = []struct{ cidr, why string }{
	{"127.0.0.0/8", "loopback"},
	{"::1/128", "loopback"},
	{"169.254.0.0/16", "link-local, where cloud metadata services live"},
	{"fe80::/10", "link-local"},
	{"0.0.0.0/8", "unspecified"},
	{"::/128", "unspecified"},
	{"224.0.0.0/4", "multicast"},
	{"ff00::/8", "multicast"},
	{"fd00:ec2::254/128", "the AWS metadata service"},
	{"100.100.100.200/32", "the Alibaba Cloud metadata service"},
	{"168.63.129.16/32", "the Azure platform endpoint"},
}

// DefaultPolicy returns the built-in rules only.
func DefaultPolicy() *Policy {
	p, err := NewPolicy(nil, nil)
	if err != nil {
		panic(err) // the built-in rules parse
	}
	return p
}

// NewPolicy returns the built-in rules plus the given CIDRs to allow and to deny.
func NewPolicy(allow, deny []string) (*Policy, error) {
	p := &Policy{}
	for _, d := range defaultDeny {
		p.rules = append(p.rules, rule{prefix: netip.MustParsePrefix(d.cidr), why: d.why})
	}
	add := func(cidrs []string, allowed bool, why string) error {
		for _, c := range cidrs {
			c = strings.TrimSpace(c)
			if c == "" {
				continue
			}
			prefix, err := netip.ParsePrefix(c)
			if err != nil {
				addr, aerr := netip.ParseAddr(c)
				if aerr != nil {
					return fmt.Errorf("endpoint policy: %q is not a CIDR prefix or an IP address", c)
				}
				prefix = netip.PrefixFrom(addr, addr.BitLen())
			}
			p.rules = append(p.rules, rule{prefix: prefix.Masked(), allow: allowed, why: why})
		}
		return nil
	}
	if err := add(deny, false, "denied by the operator's --storagebucket-endpoint-deny-cidrs"); err != nil {
		return nil, err
	}
	if err := add(allow, true, ""); err != nil {
		return nil, err
	}
	return p, nil
}

// Check returns nil when the policy allows addr, and the rule that denies it otherwise.
func (p *Policy) Check(addr netip.Addr) *DeniedError {
	// An IPv4-mapped IPv6 address reaches the IPv4 host: the IPv4 rules apply.
	addr = addr.WithZone("").Unmap()
	best, found := rule{}, false
	for _, r := range p.rules {
		if !r.prefix.Contains(addr) {
			continue
		}
		if !found || r.prefix.Bits() > best.prefix.Bits() || (r.prefix.Bits() == best.prefix.Bits() && !r.allow) {
			best, found = r, true
		}
	}
	if found && !best.allow {
		return &DeniedError{Why: best.why}
	}
	return nil
}

// DeniedError is the error of a connection the endpoint policy refused.
type DeniedError struct {
	// Why names the rule: "loopback", "link-local", ...
	Why string
}

func (e *DeniedError) Error() string {
	return "the operator's endpoint policy denies connections to this address (" + e.Why + ")"
}

// dialer dials only addresses the policy allows. The one exception is the egress proxy
// a request is sent through: the administrator configured it, a StorageBucket author
// did not. Each transport has a dialer of its own, which learns from its proxy function
// which addresses its requests are sent to a proxy at; an address that one of its
// requests also reaches directly (an endpoint pointed at the proxy itself) is checked.
type dialer struct {
	policy   *Policy
	resolver *net.Resolver
	proxy    func(*http.Request) (*url.URL, error)
	// unresolvedViaProxy allows a proxied endpoint whose name does not resolve here.
	unresolvedViaProxy bool

	mu sync.Mutex
	// proxies and direct hold the host:port this transport's requests were sent to a
	// proxy at, and those they were sent to directly.
	proxies, direct map[string]bool
}

func (d *dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	nd := &net.Dialer{KeepAlive: defaultKeepAlive, Resolver: d.resolver}
	d.mu.Lock()
	toProxy := d.proxies[address] && !d.direct[address]
	d.mu.Unlock()
	if !toProxy {
		nd.ControlContext = func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("endpoint policy: dialling %q: %w", address, err)
			}
			if denied := d.policy.Check(ap.Addr()); denied != nil {
				return denied
			}
			return nil
		}
	}
	conn, err := nd.DialContext(ctx, network, address)
	var denied *DeniedError
	if errors.As(err, &denied) {
		return nil, notAllowed(address, denied)
	}
	return conn, err
}

// notAllowed is the failure of a connection the policy refused. It names the rule but
// not the address a name resolved to.
func notAllowed(target string, denied *DeniedError) *taxonomy.Failure {
	return taxonomy.NewFailure(taxonomy.ReasonEndpointNotAllowed, denied,
		"the operator's endpoint policy does not allow connections to %s (%s); if it is a legitimate S3 endpoint, "+
			"the operator's administrator can allow it with --storagebucket-endpoint-allow-cidrs", target, denied.Why)
}

// proxyFor is the transport's Proxy function. A request that goes through a proxy is
// dialled to the proxy, not to the endpoint, so the endpoint is checked here, before
// the request leaves: an IP address as it is; a name must resolve here, and every
// address it resolves to must be allowed. A name that does not resolve here is denied
// (unless the administrator trusts the proxy's resolution): the proxy would resolve it
// by its own rules, and a name only the proxy knows could lead anywhere the proxy
// reaches. The proxy resolves the name again when it connects; its own egress policy
// is what stands between that second answer and the proxy's network.
func (d *dialer) proxyFor(req *http.Request) (*url.URL, error) {
	u, err := d.proxy(req)
	if err != nil {
		return nil, err
	}
	if u == nil {
		d.note(&d.direct, canonicalAddr(req.URL))
		return nil, nil
	}
	host := req.URL.Hostname()
	addr, numeric := literalAddr(host)
	switch {
	case numeric && !addr.IsValid():
		return nil, taxonomy.NewFailure(taxonomy.ReasonEndpointNotAllowed, nil,
			"the endpoint %s goes through an egress proxy, and its host reads as a number but not as a valid IPv4 address; "+
				"the proxy's C library might read it as some address, so the operator's endpoint policy cannot check it", req.URL.Host)
	case addr.IsValid():
		if err := d.policy.Check(addr); err != nil {
			return nil, notAllowed(req.URL.Host, err)
		}
	default:
		addrs, lerr := d.resolver.LookupNetIP(req.Context(), "ip", host)
		switch {
		case lerr != nil && !d.unresolvedViaProxy:
			return nil, taxonomy.NewFailure(taxonomy.ReasonEndpointNotAllowed, lerr,
				"the endpoint %s goes through an egress proxy, and its name does not resolve where the operator runs, so the "+
					"operator's endpoint policy cannot check where it leads; make the name resolvable in the operator's pod, or "+
					"let the operator's administrator trust the proxy's resolution with "+
					"--storagebucket-endpoint-allow-unresolvable-via-proxy", req.URL.Host)
		case lerr == nil:
			for _, a := range addrs {
				if err := d.policy.Check(a); err != nil {
					return nil, notAllowed(req.URL.Host, err)
				}
			}
		}
	}
	d.note(&d.proxies, canonicalAddr(u))
	return u, nil
}

func (d *dialer) note(set *map[string]bool, addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if *set == nil {
		*set = map[string]bool{}
	}
	(*set)[addr] = true
}

// canonicalAddr is the host:port the transport dials for a URL.
func canonicalAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "https":
			port = "443"
		case "socks5", "socks5h":
			port = "1080"
		default:
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// literalAddr reads host as an IP address the way the egress proxy may. An IPv6 or
// dotted-quad IPv4 address parses as such. Besides those, the C library a proxy resolves
// names with (inet_aton(3), which getaddrinfo(3) tries first) reads every IPv4 form of
// the 1980s: one to four parts separated by dots, each decimal, octal (a leading 0) or
// hexadecimal (a leading 0x), the last part filling the bytes the others leave, so that
// "2852039166", "0251.0376.0251.0376", "0xa9.0xfe.0xa9.0xfe" and "169.254.43518" are all
// 169.254.169.254, and "127.1" and "0x7f.1" are 127.0.0.1. Go's resolver reads none of
// them: they do not resolve here, and with --storagebucket-endpoint-allow-unresolvable-via-proxy
// they would go to the proxy unchecked.
//
// numeric reports whether host is a number in that sense: its last label (after one
// trailing dot) is a decimal or 0x-hexadecimal number, which the URL standard also
// takes for an IPv4 address. A numeric host that is no valid address (a part out of
// range, "08", five parts) returns the zero Addr: what a proxy makes of it is unknown.
func literalAddr(host string) (addr netip.Addr, numeric bool) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a, true
	}
	parts := strings.Split(strings.TrimSuffix(host, "."), ".")
	if !isNumber(parts[len(parts)-1]) {
		return netip.Addr{}, false
	}
	if len(parts) > 4 {
		return netip.Addr{}, true
	}
	var v uint64
	for i, p := range parts {
		n, ok := parseInetPart(p)
		// Every part but the last is one byte; the last fills what is left.
		limit := uint64(0xff)
		if i == len(parts)-1 {
			limit = 1<<(8*(5-len(parts))) - 1
		}
		if !ok || n > limit {
			return netip.Addr{}, true
		}
		if i == len(parts)-1 {
			v = v<<(8*(5-len(parts))) | n
		} else {
			v = v<<8 | n
		}
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// isNumber reports whether a host label is a number as the URL standard's IPv4 parser
// sees it: decimal digits, or 0x followed by hexadecimal digits (or nothing).
func isNumber(label string) bool {
	if label == "" {
		return false
	}
	digits := label
	if len(label) >= 2 && label[0] == '0' && (label[1] == 'x' || label[1] == 'X') {
		digits = label[2:]
		for _, c := range digits {
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
		return true
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseInetPart parses one part of an inet_aton address: 0x or 0X and hexadecimal
// digits, 0 and octal digits, or decimal digits.
func parseInetPart(p string) (uint64, bool) {
	base := 10
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true // the URL standard reads a bare 0x as 0 (inet_aton refuses it)
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	n, err := strconv.ParseUint(p, base, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}
