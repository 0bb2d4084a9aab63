package certrotation_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/phalanks/phalanks-operator/internal/certrotation"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/report"
)

func TestCertRotation(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Webhook certificate rotation suite")
}

const (
	namespace = "phalanks-system"
	crdName   = "storagebuckets.phalanks.io"
	// kubeletPeriod is how often the stand-in kubelet projects the Secret.
	kubeletPeriod = 100 * time.Millisecond
)

var (
	ctx    context.Context
	k8s    client.Client
	scheme = runtime.NewScheme()
	// Short enough to see several renewals in a test: a certificate valid for 20 s is
	// renewed 14 s before it expires, so every 6–7 s.
	opts = certrotation.Options{
		Enabled:        true,
		SecretName:     certrotation.DefaultSecretName,
		WebhookService: certrotation.DefaultWebhookService,
		MetricsService: certrotation.DefaultMetricsService,
		Validity:       20 * time.Second,
		RenewBefore:    14 * time.Second,
		CAValidity:     time.Hour,
		CheckInterval:  time.Second,
	}
	webhookName = certrotation.DefaultWebhookService + "." + namespace + ".svc"
	metricsName = certrotation.DefaultMetricsService + "." + namespace + ".svc"
)

var _ = BeforeSuite(func() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(context.Background())
	DeferCleanup(cancel)

	// No phalanks type in the scheme: envtest leaves the CRD's conversion alone, and the
	// test gives it the stanza config/crd adds, pointing at the webhook Service.
	env, err := envtest.Start(envtest.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	k8s = env.Client
	crd := &apiextensionsv1.CustomResourceDefinition{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
	crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{
			ClientConfig: &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{
				Namespace: namespace, Name: certrotation.DefaultWebhookService, Path: new("/convert"),
			}},
			ConversionReviewVersions: []string{"v1"},
		},
	}
	Expect(k8s.Update(ctx, crd)).To(Succeed())
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
	// config/default ships the Secret empty; the rotator fills it.
	Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: opts.SecretName, Namespace: namespace}})).To(Succeed())
	envConfig = env
})

var envConfig *envtest.Env

// replica is one operator pod's share of the rotation: a manager with the rotator, its
// webhook and metrics servers, and the directory the kubelet projects the Secret into.
type replica struct {
	name                                string
	dir                                 string
	webhookAddr, metricsAddr, healthURL string
	kubelet                             *kubelet
}

// startReplica starts a manager as main.go wires it with --webhook-cert-rotation, its
// stand-in kubelet paused.
func startReplica(name string) *replica {
	GinkgoHelper()
	r := &replica{name: name, dir: GinkgoT().TempDir()}
	ports := make([]int, 3)
	for i := range ports {
		var err error
		ports[i], err = process.FreePort()
		Expect(err).NotTo(HaveOccurred())
	}
	r.webhookAddr, r.metricsAddr = process.HostPort(ports[0]), process.HostPort(ports[1])
	r.healthURL = "http://" + process.HostPort(ports[2]) + "/readyz"

	mctx, cancel := context.WithCancel(ctx)
	rotation := certrotation.New(mctx, opts, r.dir)
	rotation.SetControllerName("cert-rotator-" + name)
	mgr, err := ctrl.NewManager(envConfig.Config, manager.Options{
		Scheme: scheme,
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: "127.0.0.1", Port: ports[0], CertDir: r.dir, TLSOpts: []func(*tls.Config){rotation.TLSOption},
		}),
		Metrics: metricsserver.Options{
			BindAddress: r.metricsAddr, SecureServing: true, TLSOpts: []func(*tls.Config){rotation.TLSOption},
		},
		HealthProbeBindAddress: process.HostPort(ports[2]),
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(rotation.Add(mgr, namespace, []string{crdName})).To(Succeed())
	_ = mgr.GetWebhookServer() // main.go's webhooks.Setup registers the server with the manager
	Expect(mgr.AddReadyzCheck("readyz", rotation.ReadyChecker(ports[0]))).To(Succeed())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(mctx)).To(Succeed())
	}()
	r.kubelet = &kubelet{dir: r.dir}
	r.kubelet.paused.Store(true)
	go r.kubelet.run(mctx)
	DeferCleanup(func() {
		cancel()
		Eventually(done).WithTimeout(time.Minute).Should(BeClosed())
	})
	return r
}

// ready reports the replica's readiness endpoint's verdict.
func (r *replica) ready() error {
	resp, err := http.Get(r.healthURL) //nolint:noctx // a loopback URL the test built
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s", resp.Status)
	}
	return nil
}

// kubelet stands in for the kubelet's projection of the Secret volume: while not paused,
// it copies the Secret's tls.crt, tls.key and ca.crt into dir as the kubelet's atomic
// writer does (a new timestamped directory, the ..data symlink swapped to it, each file
// a symlink through ..data).
type kubelet struct {
	dir    string
	paused atomic.Bool
	last   []byte
}

func (k *kubelet) run(ctx context.Context) {
	defer GinkgoRecover()
	t := time.NewTicker(kubeletPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if k.paused.Load() {
			continue
		}
		secret := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: opts.SecretName}, secret); err != nil {
			continue
		}
		items := map[string][]byte{}
		for _, key := range []string{"tls.crt", "tls.key", "ca.crt"} {
			if v, ok := secret.Data[key]; ok {
				items[key] = v
			}
		}
		sum := sha256.New()
		for _, key := range []string{"tls.crt", "tls.key", "ca.crt"} {
			sum.Write(items[key])
		}
		if digest := sum.Sum(nil); !bytes.Equal(digest, k.last) {
			Expect(k.project(items)).To(Succeed())
			k.last = digest
		}
	}
}

func (k *kubelet) project(items map[string][]byte) error {
	ts, err := os.MkdirTemp(k.dir, "..ts-")
	if err != nil {
		return err
	}
	for key, v := range items {
		if err := os.WriteFile(filepath.Join(ts, key), v, 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(k.dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(k.dir, "..data")); err != nil {
		return err
	}
	for key := range items {
		link := filepath.Join(k.dir, key)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", key), link); err != nil {
			return err
		}
	}
	return nil
}

// injectedCA returns the CA bundle kube-apiserver verifies the conversion webhook with.
func injectedCA(g Gomega) *x509.CertPool {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
	g.Expect(crd.Spec.Conversion.Webhook.ClientConfig.CABundle).NotTo(BeEmpty(), "no CA injected into %s", crdName)
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(crd.Spec.Conversion.Webhook.ClientConfig.CABundle)).To(BeTrue())
	return pool
}

// handshake connects to addr as kube-apiserver (or a scraper) would: verifying the
// server's certificate for serverName against roots, now. It returns the fingerprint of
// the certificate served.
func handshake(addr, serverName string, roots *x509.CertPool) (string, error) {
	d := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	leaf := conn.(*tls.Conn).ConnectionState().PeerCertificates[0]
	sum := sha256.Sum256(leaf.Raw)
	return hex.EncodeToString(sum[:8]), nil
}

// The failures once more at the end of the output, where CI shows its tail.
var _ = report.FailuresLast()
