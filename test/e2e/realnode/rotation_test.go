package realnode_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
)

func rotationSpecs() bool {
	return Describe("the webhook certificate the operator keeps", Ordered, func() {
		It("is served by every replica, for the webhook and the metrics Service, as the Secret holds it", func() {
			expectServedEverywhere(certSecret())
		})

		It("renews a certificate about to expire, and then again before each expires, with not one conversion failing", func() {
			load := startConversionLoad()
			secret := certSecret()
			ca := parseCert(secret.Data["ca.crt"])

			By("replacing the certificate with one that expires in 90 seconds, signed by the same CA")
			forged := issueFromSecret(secret, 90*time.Second)
			secret.Data["tls.crt"], secret.Data["tls.key"] = forged.cert, forged.key
			Expect(k8s.Update(ctx, secret)).To(Succeed())

			seen := map[string]bool{fingerprintPEM(forged.cert): true}
			for renewal := 1; renewal <= 3; renewal++ {
				By(fmt.Sprintf("waiting for renewal %d", renewal))
				var current *corev1.Secret
				Eventually(func(g Gomega) {
					alive()
					current = certSecret()
					g.Expect(seen).NotTo(HaveKey(fingerprintPEM(current.Data["tls.crt"])), "not renewed yet")
				}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
				seen[fingerprintPEM(current.Data["tls.crt"])] = true
				leaf := parseCert(current.Data["tls.crt"])
				Expect(leaf.NotAfter).To(BeTemporally("~", time.Now().Add(3*time.Minute), time.Minute), "a certificate of --webhook-cert-validity")
				Expect(current.Data["ca.crt"]).To(Equal(secret.Data["ca.crt"]), "a renewal keeps the CA")
				Expect(leaf.CheckSignatureFrom(ca)).To(Succeed())
				expectServedEverywhere(current)
			}
			requests, failures := load.stop()
			GinkgoWriter.Printf("%d v1alpha1 reads through the webhook during the renewals\n", requests)
			Expect(failures).To(BeEmpty(), "conversions failed during the renewals")
			Expect(requests).To(BeNumerically(">", 100), "too few conversions to tell")
		})
	})
}

// expectServedEverywhere waits until every operator pod serves the Secret's certificate
// on its webhook and metrics ports, verified with the CA in the CRD.
func expectServedEverywhere(secret *corev1.Secret) {
	GinkgoHelper()
	want := fingerprintPEM(secret.Data["tls.crt"])
	Eventually(func(g Gomega) {
		alive()
		roots := certPool(injectedCA(g))
		pods := &corev1.PodList{}
		g.Expect(k8s.List(ctx, pods, client.InNamespace(operatorNamespace), client.MatchingLabels{"control-plane": "controller-manager"})).To(Succeed())
		g.Expect(pods.Items).NotTo(BeEmpty())
		for _, p := range pods.Items {
			for port, name := range map[int]string{webhookPort: webhookServerName, metricsPort: metricsServerName} {
				fp, err := handshake(ctx, net.JoinHostPort(p.Status.PodIP, fmt.Sprint(port)), name, roots)
				g.Expect(err).NotTo(HaveOccurred(), "pod %s port %d", p.Name, port)
				g.Expect(fp).To(Equal(want), "pod %s port %d serves another certificate", p.Name, port)
			}
		}
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

// conversionLoad reads StorageBuckets as v1alpha1 without pause, each read converted by
// the webhook, and records every failure.
type conversionLoad struct {
	requests atomic.Int64
	mu       sync.Mutex
	failures []string
	cancel   context.CancelFunc
	done     chan struct{}
}

func startConversionLoad() *conversionLoad {
	GinkgoHelper()
	list := &phalanksv1alpha1.StorageBucketList{}
	Expect(k8s.List(ctx, list)).To(Succeed())
	Expect(list.Items).NotTo(BeEmpty(), "no StorageBucket to convert")
	lctx, cancel := context.WithCancel(ctx)
	l := &conversionLoad{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(l.done)
		for lctx.Err() == nil {
			err := k8s.List(lctx, &phalanksv1alpha1.StorageBucketList{})
			if lctx.Err() != nil {
				return
			}
			l.requests.Add(1)
			if err != nil {
				l.mu.Lock()
				l.failures = append(l.failures, time.Now().Format(time.TimeOnly)+" "+err.Error())
				l.mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return l
}

func (l *conversionLoad) stop() (int64, []string) {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.requests.Load(), l.failures
}

type pemPair struct{ cert, key []byte }

// issueFromSecret signs a serving certificate for the webhook and metrics Services with
// the CA in the Secret, valid for the given time from now.
func issueFromSecret(secret *corev1.Secret, valid time.Duration) pemPair {
	GinkgoHelper()
	ca := parseCert(secret.Data["ca.crt"])
	block, _ := pem.Decode(secret.Data["ca.key"])
	Expect(block).NotTo(BeNil())
	caKey, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	Expect(err).NotTo(HaveOccurred())
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	Expect(err).NotTo(HaveOccurred())
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	Expect(err).NotTo(HaveOccurred())
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: webhookServerName},
		DNSNames:     []string{webhookServerName, metricsServerName},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(valid),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	Expect(err).NotTo(HaveOccurred())
	return pemPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
	}
}

func parseCert(pemData []byte) *x509.Certificate {
	GinkgoHelper()
	block, _ := pem.Decode(pemData)
	Expect(block).NotTo(BeNil(), "no PEM certificate")
	c, err := x509.ParseCertificate(block.Bytes)
	Expect(err).NotTo(HaveOccurred())
	return c
}

func fingerprintPEM(pemData []byte) string {
	block, _ := pem.Decode(pemData)
	if block == nil {
		return ""
	}
	return fingerprint(block.Bytes)
}
