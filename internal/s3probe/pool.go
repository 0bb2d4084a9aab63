// Package s3probe is how phalanks-operator talks to S3-compatible endpoints: one cached
// HTTP transport per (endpoint, CA bundle) with TLS always verified and every connection
// checked against the endpoint policy, S3 clients that never retry on their own, and the
// probe depths (Connect, HeadBucket, List, ReadWrite). Whatever goes wrong is classified
// by internal/taxonomy.
package s3probe

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"k8s.io/utils/clock"

	"github.com/phalanks/phalanks-operator/internal/taxonomy"
)

// Credentials is an S3 access key pair. It never prints its values.
type Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	// SessionToken is the token of temporary credentials; empty for a plain key pair.
	SessionToken string
	// secretHash is the SHA-256 of the secret and the token (what the client cache is
	// keyed by), when NewCredentials made it once for every probe that uses them.
	secretHash *[sha256.Size]byte
	// ambient: the operator's own credentials, from its environment (AmbientCredentials).
	ambient bool
}

// AmbientCredentials are the operator process's own credentials, looked up as the AWS
// SDKs do: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), MinIO's
// MINIO_ACCESS_KEY and MINIO_SECRET_KEY, then the IAM sources: a web identity token
// file (IRSA: AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN), the container credentials
// endpoint (EKS Pod Identity, ECS) and the instance metadata service. Temporary ones are
// renewed before they expire. Only this lookup reaches the metadata service: the
// endpoint policy still applies to every StorageBucket's endpoint.
var AmbientCredentials = &Credentials{ambient: true}

// NewCredentials returns the key pair and session token (empty: none) with what the
// Pool keys its clients by made once.
func NewCredentials(accessKeyID, secretAccessKey, sessionToken string) *Credentials {
	h := secretHash(secretAccessKey, sessionToken)
	return &Credentials{AccessKeyID: accessKeyID, SecretAccessKey: secretAccessKey, SessionToken: sessionToken, secretHash: &h}
}

// secretHash keys a client by the secret and the token: a new token is a new client.
func secretHash(secretAccessKey, sessionToken string) [sha256.Size]byte {
	return sha256.Sum256([]byte(secretAccessKey + "\x00" + sessionToken))
}

// String hides the key pair from logs and error messages.
func (Credentials) String() string { return "Credentials{redacted}" }

// GoString hides the key pair from %#v.
func (Credentials) GoString() string { return "Credentials{redacted}" }

// Addressing is how requests name the bucket.
type Addressing string

// Addressing styles.
const (
	AddressingAuto        Addressing = "Auto"
	AddressingPath        Addressing = "Path"
	AddressingVirtualHost Addressing = "VirtualHost"
)

// Endpoint is where a bucket lives and how to reach it.
type Endpoint struct {
	// URL is the endpoint, http:// or https://, without a path.
	URL    string
	Region string
	// Addressing defaults to Auto.
	Addressing Addressing
	// Credentials are nil for anonymous requests.
	Credentials *Credentials
	// CABundle is PEM; nil trusts the system roots.
	CABundle []byte
}

// Host returns the endpoint's host:port, or the URL when it does not parse.
func (e Endpoint) Host() string {
	host, _ := e.HostAndKey()
	return host
}

// Key names the endpoint for grouping buckets (scheme, host and port, lowercased).
func (e Endpoint) Key() string {
	_, key := e.HostAndKey()
	return key
}

// HostAndKey returns Host and Key with one parse of the URL.
func (e Endpoint) HostAndKey() (host, key string) {
	u, err := url.Parse(e.URL)
	if err != nil {
		return e.URL, strings.ToLower(e.URL)
	}
	host = u.Host
	if host == "" {
		host = e.URL
	}
	return host, strings.ToLower(u.Scheme + "://" + u.Host)
}

// Pool caches one http.Transport per (endpoint, CA bundle), so connections and TLS
// sessions are reused across probes, and one S3 client per (transport, credentials,
// region, addressing). Entries unused for IdleTTL are dropped.
type Pool struct {
	// MaxIdleConnsPerHost should be the probe concurrency, so concurrent probes of one
	// endpoint reuse their connections instead of handshaking every time.
	MaxIdleConnsPerHost int
	// IdleTTL drops transports and clients unused this long (default 15m).
	IdleTTL time.Duration
	Clock   clock.PassiveClock
	// Policy decides which addresses may be dialled; nil means DefaultPolicy.
	Policy *Policy
	// Proxy chooses the proxy of a request; nil means http.ProxyFromEnvironment, the
	// HTTP_PROXY, HTTPS_PROXY and NO_PROXY variables.
	Proxy func(*http.Request) (*url.URL, error)
	// Resolver resolves endpoint host names; nil means net.DefaultResolver.
	Resolver *net.Resolver
	// UnresolvableViaProxy allows an endpoint that goes through a proxy although its
	// name does not resolve here (the proxy's resolution is trusted).
	UnresolvableViaProxy bool

	mu         sync.Mutex
	parsed     map[string]*url.URL
	hostKeys   map[string][2]string
	transports map[transportKey]*transportEntry
	lastSweep  time.Time
}

type transportKey struct {
	scheme, host string
	ca           [sha256.Size]byte
}

type clientKey struct {
	accessKey  string
	secretHash [sha256.Size]byte
	ambient    bool
	region     string
	addressing Addressing
}

type transportEntry struct {
	rt *http.Transport
	// url is scheme://host of the endpoint.
	url     string
	used    time.Time
	clients map[clientKey]*clientEntry
	// notAfter is the expiry (Unix nanoseconds) of the leaf certificate of the newest
	// verified TLS connection; 0 before the first one.
	notAfter atomic.Int64
}

type clientEntry struct {
	c    *miniogo.Client
	used time.Time
}

// Conn is a ready S3 client for an endpoint and what the probe needs besides it.
type Conn struct {
	Client *miniogo.Client
	// Host is the endpoint's host:port.
	Host string
	// url is the endpoint's URL, for requests outside the S3 client.
	url   string
	entry *transportEntry
}

// CertNotAfter returns the expiry of the endpoint's certificate as last seen on a new
// TLS connection, or the zero time.
func (c *Conn) CertNotAfter() time.Time {
	if n := c.entry.notAfter.Load(); n != 0 {
		return time.Unix(0, n).UTC()
	}
	return time.Time{}
}

// Conn returns a client for the endpoint, creating the transport and client on first use.
func (p *Pool) Conn(e Endpoint) (*Conn, error) {
	u, err := p.parse(e.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, taxonomy.NewFailure(taxonomy.ReasonUnclassified, err, "endpoint %q is not an http:// or https:// URL", e.URL)
	}
	secure := u.Scheme == "https"
	tk := transportKey{scheme: u.Scheme, host: strings.ToLower(u.Host)}
	if secure && len(e.CABundle) > 0 {
		tk.ca = sha256.Sum256(e.CABundle)
	}
	ck := clientKey{region: e.Region, addressing: e.Addressing}
	if e.Credentials != nil && e.Credentials.ambient {
		ck.ambient = true
	} else if e.Credentials != nil {
		ck.accessKey = e.Credentials.AccessKeyID
		if h := e.Credentials.secretHash; h != nil {
			ck.secretHash = *h
		} else {
			ck.secretHash = secretHash(e.Credentials.SecretAccessKey, e.Credentials.SessionToken)
		}
	}

	now := p.clock().Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweepLocked(now)
	te := p.transports[tk]
	if te == nil {
		if te, err = p.newTransport(u, secure, e.CABundle); err != nil {
			return nil, err
		}
		if p.transports == nil {
			p.transports = map[transportKey]*transportEntry{}
		}
		p.transports[tk] = te
	}
	te.used = now
	ce := te.clients[ck]
	if ce == nil {
		c, err := newClient(u.Host, secure, guarded{te.rt}, e)
		if err != nil {
			return nil, taxonomy.NewFailure(taxonomy.ReasonUnclassified, err, "create S3 client for %s: %s", u.Host, taxonomy.StableText(err))
		}
		ce = &clientEntry{c: c}
		te.clients[ck] = ce
	}
	ce.used = now
	return &Conn{Client: ce.c, Host: u.Host, url: te.url, entry: te}, nil
}

// parse parses an endpoint URL, remembering the answer: every probe of every bucket
// on an endpoint asks for the same one. The URL returned is shared: read it only.
func (p *Pool) parse(raw string) (*url.URL, error) {
	p.mu.Lock()
	u, ok := p.parsed[raw]
	p.mu.Unlock()
	if ok {
		return u, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parsed == nil || len(p.parsed) >= maxParsed {
		p.parsed = map[string]*url.URL{} // endpoints come and go with StorageBuckets: start over
	}
	p.parsed[raw] = u
	return u, nil
}

// HostAndKey is Endpoint.HostAndKey of the endpoint URL raw, remembered: every pass of
// every bucket on an endpoint asks for the same one.
func (p *Pool) HostAndKey(raw string) (host, key string) {
	p.mu.Lock()
	hk, ok := p.hostKeys[raw]
	p.mu.Unlock()
	if ok {
		return hk[0], hk[1]
	}
	host, key = Endpoint{URL: raw}.HostAndKey()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hostKeys == nil || len(p.hostKeys) >= maxParsed {
		p.hostKeys = map[string][2]string{} // endpoints come and go with StorageBuckets: start over
	}
	p.hostKeys[raw] = [2]string{host, key}
	return host, key
}

// maxParsed bounds the remembered endpoint URLs.
const maxParsed = 4096

func (p *Pool) clock() clock.PassiveClock {
	if p.Clock == nil {
		return clock.RealClock{}
	}
	return p.Clock
}

// defaultKeepAlive is the TCP keep-alive period of endpoint connections.
const defaultKeepAlive = 30 * time.Second

// newDialer returns a dialer for one transport.
func (p *Pool) newDialer() *dialer {
	d := &dialer{policy: p.Policy, resolver: p.Resolver, proxy: p.Proxy, unresolvedViaProxy: p.UnresolvableViaProxy}
	if d.policy == nil {
		d.policy = DefaultPolicy()
	}
	if d.resolver == nil {
		d.resolver = net.DefaultResolver
	}
	if d.proxy == nil {
		d.proxy = http.ProxyFromEnvironment
	}
	return d
}

func (p *Pool) newTransport(u *url.URL, secure bool, caBundle []byte) (*transportEntry, error) {
	te := &transportEntry{clients: map[clientKey]*clientEntry{}, url: u.Scheme + "://" + u.Host}
	d := p.newDialer()
	rt := &http.Transport{
		Proxy:                 d.proxyFor,
		DialContext:           d.DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   max(p.MaxIdleConnsPerHost, 2),
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 0, // the probe's context bounds every request
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	if secure {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if len(caBundle) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(caBundle) {
				return nil, taxonomy.NewFailure(taxonomy.ReasonInvalidCABundle, nil, "the CA bundle holds no PEM-encoded certificate")
			}
			cfg.RootCAs = pool
		}
		// Runs after the standard verification succeeded, on every new connection.
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 {
				te.notAfter.Store(cs.PeerCertificates[0].NotAfter.UnixNano())
			}
			return nil
		}
		rt.TLSClientConfig = cfg
	}
	te.rt = rt
	return te, nil
}

func newClient(host string, secure bool, rt http.RoundTripper, e Endpoint) (*miniogo.Client, error) {
	creds := credentials.NewStatic("", "", "", credentials.SignatureAnonymous)
	switch {
	case e.Credentials != nil && e.Credentials.ambient:
		// One chain per client, which caches what it found until it expires.
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.EnvMinio{}, &credentials.IAM{Client: &http.Client{Timeout: 10 * time.Second}},
		})
	case e.Credentials != nil:
		creds = credentials.NewStaticV4(e.Credentials.AccessKeyID, e.Credentials.SecretAccessKey, e.Credentials.SessionToken)
	}
	lookup := miniogo.BucketLookupAuto
	switch e.Addressing {
	case AddressingPath:
		lookup = miniogo.BucketLookupPath
	case AddressingVirtualHost:
		lookup = miniogo.BucketLookupDNS
	}
	region := e.Region
	if region == "" {
		region = DefaultRegion
	}
	c, err := miniogo.New(host, &miniogo.Options{
		Creds:        creds,
		Secure:       secure,
		Transport:    rt,
		Region:       region, // always set: no bucket-location lookups
		BucketLookup: lookup,
		MaxRetries:   1, // one attempt: the schedule is the retry
	})
	if err != nil {
		return nil, err
	}
	// Talk to the AWS endpoint the spec names, not its dual-stack twin.
	c.SetS3EnableDualstack(false)
	return c, nil
}

// sweepLocked drops transports and clients that nobody used for IdleTTL, at most once
// a minute.
func (p *Pool) sweepLocked(now time.Time) {
	if now.Sub(p.lastSweep) < time.Minute {
		return
	}
	p.lastSweep = now
	ttl := p.IdleTTL
	if ttl <= 0 {
		ttl = 15 * time.Minute
	}
	for tk, te := range p.transports {
		for ck, ce := range te.clients {
			if now.Sub(ce.used) > ttl {
				delete(te.clients, ck)
			}
		}
		if len(te.clients) == 0 && now.Sub(te.used) > ttl {
			te.rt.CloseIdleConnections()
			delete(p.transports, tk)
		}
	}
}

// Len returns the number of cached transports and clients, for tests and metrics.
func (p *Pool) Len() (transports, clients int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, te := range p.transports {
		transports++
		clients += len(te.clients)
	}
	return transports, clients
}

func (e Endpoint) String() string { return fmt.Sprintf("Endpoint{%s}", e.URL) }
