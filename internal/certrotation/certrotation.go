// Package certrotation lets the operator keep its own webhook serving certificate when
// nothing else provides one, as on a cluster without cert-manager (`make deploy`).
//
// The certificate authority and the rotation are open-policy-agent/cert-controller's
// rotator, the one Gatekeeper runs: it keeps a CA and a serving certificate in a Secret,
// renews them before they expire, and injects the CA into the conversion webhook of each
// CRD it is given. The kubelet projects the Secret into the pod, where the webhook server
// and the metrics server read it. What this package adds is the wiring around it:
//
//   - the servers start before the certificate exists (on a first install the rotator
//     issues it after the pod started, and the kubelet projects it a sync period later):
//     they answer TLS handshakes with an error until it is there, then serve it and
//     every renewal (TLSOption);
//   - readiness waits until the rotator reports the certificate in place in this pod and
//     its CA injected, then for the webhook server to present a certificate that is
//     valid now, for the webhook Service's name, signed by the CA (ReadyChecker): the
//     Service sends conversions only to replicas that can serve them, and a replica
//     whose certificate expired (the kubelet stopped projecting renewals) shows as not
//     Ready rather than failing conversions;
//   - the certificate names the metrics Service too, so a scraper verifies the metrics
//     endpoint with the same CA (ca.crt in the Secret).
//
// Under OLM, which issues and mounts the webhook certificate and injects its CA itself,
// and with cert-manager, the rotation stays off (--webhook-cert-rotation=false).
package certrotation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Defaults. The names are those config/default gives the Secret and the Services (its
// namePrefix included); test/manifests checks that they agree.
const (
	DefaultSecretName     = "phalanks-webhook-server-cert" //nolint:gosec // G101: a Secret's name, not a credential
	DefaultWebhookService = "phalanks-webhook-service"
	DefaultMetricsService = "phalanks-controller-manager-metrics-service"

	// A year's certificate renewed 90 days before it expires, under a ten-year CA:
	// cert-controller's own defaults, which leave a renewal months to reach every pod.
	DefaultValidity      = 365 * 24 * time.Hour
	DefaultRenewBefore   = 90 * 24 * time.Hour
	DefaultCAValidity    = 10 * 365 * 24 * time.Hour
	DefaultCheckInterval = time.Hour

	// FieldOwner is the field manager of the CA bundle the rotator writes into CRDs, and
	// controllerName the name of the rotator's controller (in logs and metrics).
	FieldOwner     = "phalanks-cert-rotator"
	controllerName = "phalanks-cert-rotator"

	caName         = "phalanks-operator-ca"
	caOrganization = "phalanks-operator"
	certFile       = "tls.crt"
	keyFile        = "tls.key"
	caFile         = "ca.crt"

	// readyDialTimeout bounds the readiness check's handshake with its own server.
	readyDialTimeout = 5 * time.Second
)

// Options configure the rotation.
type Options struct {
	// Enabled turns the rotation on.
	Enabled bool
	// SecretName is the Secret, in the operator's namespace, that holds the CA and the
	// serving certificate; it must exist (config/default ships it empty) and be
	// projected into the webhook server's certificate directory.
	SecretName string
	// WebhookService and MetricsService are the Services, in the operator's namespace,
	// whose DNS names (<name>.<namespace>.svc) the certificate is for.
	WebhookService string
	MetricsService string
	// Validity is how long a serving certificate is valid; RenewBefore how long before
	// it expires a new one replaces it; CAValidity how long the CA is valid (it is
	// renewed RenewBefore its end too, with a new serving certificate); CheckInterval how
	// often the rotator checks (the Secret changing triggers a check as well).
	Validity      time.Duration
	RenewBefore   time.Duration
	CAValidity    time.Duration
	CheckInterval time.Duration
}

// BindFlags registers the rotation's command-line flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.Enabled, "webhook-cert-rotation", false,
		"Issue and renew the webhook serving certificate in the operator itself (a CA and a certificate in the "+
			"--webhook-cert-secret Secret, the CA injected into the StorageBucket CRD's conversion webhook); the "+
			"certificate also serves the metrics endpoint. Off under OLM and with cert-manager, which provide it.")
	fs.StringVar(&o.SecretName, "webhook-cert-secret", DefaultSecretName,
		"With --webhook-cert-rotation: the Secret in the operator's namespace that holds the CA and the certificate.")
	fs.StringVar(&o.WebhookService, "webhook-service-name", DefaultWebhookService,
		"With --webhook-cert-rotation: the webhook Service in the operator's namespace the certificate is for.")
	fs.StringVar(&o.MetricsService, "metrics-service-name", DefaultMetricsService,
		"With --webhook-cert-rotation: the metrics Service in the operator's namespace the certificate is also for.")
	fs.DurationVar(&o.Validity, "webhook-cert-validity", DefaultValidity,
		"With --webhook-cert-rotation: how long a serving certificate is valid.")
	fs.DurationVar(&o.RenewBefore, "webhook-cert-renew-before", DefaultRenewBefore,
		"With --webhook-cert-rotation: renew a certificate (or the CA) this long before it expires. Leave the "+
			"kubelet time to project the renewed Secret into every pod: well over its sync period plus "+
			"--webhook-cert-check-interval.")
	fs.DurationVar(&o.CAValidity, "webhook-ca-validity", DefaultCAValidity,
		"With --webhook-cert-rotation: how long the CA is valid.")
	fs.DurationVar(&o.CheckInterval, "webhook-cert-check-interval", DefaultCheckInterval,
		"With --webhook-cert-rotation: how often to check whether the certificate is due for renewal.")
}

// Validate reports options that would renew too late, never, or all the time.
func (o Options) Validate() error {
	if !o.Enabled {
		return nil
	}
	var errs []error
	for flagName, v := range map[string]string{
		"--webhook-cert-secret": o.SecretName, "--webhook-service-name": o.WebhookService, "--metrics-service-name": o.MetricsService,
	} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s must not be empty", flagName))
		}
	}
	switch {
	case o.CheckInterval <= 0:
		errs = append(errs, fmt.Errorf("--webhook-cert-check-interval %s must be positive", o.CheckInterval))
	case o.RenewBefore <= o.CheckInterval:
		// A check must fall while the old certificate is still valid.
		errs = append(errs, fmt.Errorf("--webhook-cert-renew-before %s must be longer than --webhook-cert-check-interval %s",
			o.RenewBefore, o.CheckInterval))
	}
	if o.Validity <= o.RenewBefore {
		// A new certificate would already be due: the rotator would renew on every check.
		errs = append(errs, fmt.Errorf("--webhook-cert-validity %s must be longer than --webhook-cert-renew-before %s",
			o.Validity, o.RenewBefore))
	}
	if o.CAValidity <= o.Validity {
		errs = append(errs, fmt.Errorf("--webhook-ca-validity %s must be longer than --webhook-cert-validity %s",
			o.CAValidity, o.Validity))
	}
	return errors.Join(errs...)
}

// Rotation is the rotation of the certificate in one directory, the one the webhook
// server reads (where the Secret is projected).
type Rotation struct {
	opts    Options
	certDir string
	ready   chan struct{}
	serving *servingCert
	// webhookName is the name the webhook server's certificate must be valid for; set
	// by Add.
	webhookName string
	// controllerName names the rotator's controller, unique in a process.
	controllerName string
}

// New prepares the rotation of the certificate in certDir. ctx bounds the watch of the
// certificate files the servers read (the manager's context).
func New(ctx context.Context, o Options, certDir string) *Rotation {
	return &Rotation{
		opts:           o,
		certDir:        certDir,
		ready:          make(chan struct{}),
		controllerName: controllerName,
		serving:        &servingCert{ctx: ctx, certPath: filepath.Join(certDir, certFile), keyPath: filepath.Join(certDir, keyFile)},
	}
}

// TLSOption makes a server serve the certificate from the rotation's directory as soon
// as it is there, and every renewal after it; until then handshakes fail.
func (r *Rotation) TLSOption(cfg *tls.Config) {
	cfg.GetCertificate = r.serving.GetCertificate
}

// DNSNames are the names the certificate is for: the webhook Service's first (the name
// kube-apiserver verifies), then the metrics Service's.
func (r *Rotation) DNSNames(namespace string) []string {
	return []string{
		r.opts.WebhookService + "." + namespace + ".svc",
		r.opts.MetricsService + "." + namespace + ".svc",
	}
}

// Add adds the rotator to mgr: namespace is the operator's (the Secret's and the
// Services'), crds the CRDs whose conversion webhook gets the CA. It runs on every
// replica, leader or not: each one waits for the certificate in its own pod.
func (r *Rotation) Add(mgr manager.Manager, namespace string, crds []string) error {
	if namespace == "" {
		return errors.New("certificate rotation needs the operator's namespace (POD_NAMESPACE)")
	}
	names := r.DNSNames(namespace)
	r.webhookName = names[0]
	webhooks := make([]rotator.WebhookInfo, 0, len(crds))
	for _, crd := range crds {
		webhooks = append(webhooks, rotator.WebhookInfo{Name: crd, Type: rotator.CRDConversion})
	}
	err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:              types.NamespacedName{Namespace: namespace, Name: r.opts.SecretName},
		CertDir:                r.certDir,
		CertName:               certFile,
		KeyName:                keyFile,
		CAName:                 caName,
		CAOrganization:         caOrganization,
		DNSName:                names[0],
		ExtraDNSNames:          names[1:],
		IsReady:                r.ready,
		Webhooks:               webhooks,
		FieldOwner:             FieldOwner,
		ControllerName:         r.controllerName,
		RequireLeaderElection:  false,
		ServerCertDuration:     r.opts.Validity,
		LookaheadInterval:      r.opts.RenewBefore,
		CaCertDuration:         r.opts.CAValidity,
		RotationCheckFrequency: r.opts.CheckInterval,
	})
	if err != nil {
		return fmt.Errorf("add certificate rotator: %w", err)
	}
	return nil
}

// ReadyChecker reports the webhook server on webhookPort ready once the rotator has seen
// the certificate projected into this pod and its CA injected, and while the server
// presents a certificate valid now for the webhook Service's name, signed by the CA
// projected beside it.
func (r *Rotation) ReadyChecker(webhookPort int) func(*http.Request) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(webhookPort))
	return func(req *http.Request) error {
		select {
		case <-r.ready:
		default:
			return errors.New("the webhook certificate is not in place yet: waiting for the rotator to issue it " +
				"and inject its CA, and for the kubelet to project its Secret into the pod")
		}
		caPEM, err := os.ReadFile(filepath.Join(r.certDir, caFile))
		if err != nil {
			return fmt.Errorf("the webhook certificate's CA: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(caPEM) {
			return fmt.Errorf("the webhook certificate's CA %s holds no certificate", filepath.Join(r.certDir, caFile))
		}
		ctx, cancel := context.WithTimeout(req.Context(), readyDialTimeout)
		defer cancel()
		d := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: r.webhookName, MinVersion: tls.VersionTLS12}}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("the webhook server does not serve a valid certificate for %s: %w", r.webhookName, err)
		}
		return conn.Close()
	}
}

// servingCert serves the certificate files of a directory that may not have them yet:
// controller-runtime's certificate watcher, created at the first handshake that finds
// them, reloads every renewal the kubelet projects.
type servingCert struct {
	ctx               context.Context
	certPath, keyPath string

	mu      sync.Mutex
	watcher *certwatcher.CertWatcher
}

// errNotYet is what a handshake gets before the kubelet projected the certificate.
var errNotYet = errors.New("the serving certificate has not been issued into this pod yet")

func (s *servingCert) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	w, err := s.load()
	if err != nil {
		return nil, err
	}
	return w.GetCertificate(hello)
}

func (s *servingCert) load() (*certwatcher.CertWatcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watcher != nil {
		return s.watcher, nil
	}
	w, err := certwatcher.New(s.certPath, s.keyPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNotYet, err)
	}
	go func() {
		if err := w.Start(s.ctx); err != nil {
			logf.Log.WithName("cert-rotation").Error(err, "watching the serving certificate failed; renewals are not picked up",
				"certificate", s.certPath)
		}
	}()
	s.watcher = w
	return w, nil
}
