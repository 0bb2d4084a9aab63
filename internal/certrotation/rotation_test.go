package certrotation_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var _ = Describe("Two replicas keeping their webhook certificate with the rotator", Ordered, func() {
	var a, b *replica
	BeforeAll(func() {
		a, b = startReplica("a"), startReplica("b")
	})

	It("issues the CA and a certificate into the Secret and injects the CA, but no replica is Ready before its pod has the certificate", func() {
		Eventually(func(g Gomega) {
			secret := &corev1.Secret{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: opts.SecretName}, secret)).To(Succeed())
			g.Expect(secret.Data).To(HaveKey("ca.crt"))
			g.Expect(secret.Data).To(HaveKey("tls.crt"))
			injectedCA(g)
		}).WithTimeout(time.Minute).Should(Succeed())
		Consistently(func(g Gomega) {
			for _, r := range []*replica{a, b} {
				g.Expect(r.ready()).NotTo(Succeed(), "replica %s is Ready without its certificate", r.name)
				_, err := handshake(r.webhookAddr, webhookName, injectedCA(g))
				g.Expect(err).To(HaveOccurred(), "replica %s completed a handshake without its certificate", r.name)
			}
		}).WithTimeout(3 * time.Second).Should(Succeed())
	})

	It("makes each replica Ready once its own pod has the certificate, serving it for the webhook and the metrics Service", func() {
		a.kubelet.paused.Store(false)
		Eventually(a.ready).WithTimeout(time.Minute).Should(Succeed())
		Consistently(b.ready).WithTimeout(2*time.Second).ShouldNot(Succeed(), "replica b is Ready while only a has the certificate")
		b.kubelet.paused.Store(false)
		Eventually(b.ready).WithTimeout(time.Minute).Should(Succeed())
		for _, r := range []*replica{a, b} {
			Eventually(func(g Gomega) {
				roots := injectedCA(g)
				_, err := handshake(r.webhookAddr, webhookName, roots)
				g.Expect(err).NotTo(HaveOccurred())
				_, err = handshake(r.metricsAddr, metricsName, roots)
				g.Expect(err).NotTo(HaveOccurred())
			}).WithTimeout(30 * time.Second).Should(Succeed())
		}
	})

	It("renews the certificate before it expires, and every handshake in the meantime verifies", func() {
		served := map[string]map[string]bool{a.name: {}, b.name: {}}
		failures := 0
		var lastErr error
		deadline := time.Now().Add(2 * time.Minute)
		// Three certificates served by each replica: two renewals, each reaching both pods.
		for time.Now().Before(deadline) && (len(served[a.name]) < 3 || len(served[b.name]) < 3) {
			roots := injectedCA(Default)
			for _, r := range []*replica{a, b} {
				for _, target := range [][2]string{{r.webhookAddr, webhookName}, {r.metricsAddr, metricsName}} {
					fp, err := handshake(target[0], target[1], roots)
					if err != nil {
						failures++
						lastErr = err
						continue
					}
					if target[1] == webhookName {
						served[r.name][fp] = true
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		Expect(failures).To(BeZero(), "failed handshakes during renewals, the last: %v", lastErr)
		Expect(served[a.name]).To(HaveLen(3), "certificates replica a served")
		Expect(served[b.name]).To(HaveLen(3), "certificates replica b served")
	})

	It("reports a replica whose pod stopped receiving renewals not Ready once its certificate expired, and Ready again when it catches up", func() {
		a.kubelet.paused.Store(true)
		Eventually(a.ready).WithTimeout(time.Minute).ShouldNot(Succeed())
		Expect(b.ready()).To(Succeed())
		_, err := handshake(a.webhookAddr, webhookName, injectedCA(Default))
		Expect(err).To(MatchError(ContainSubstring("certificate has expired")))
		a.kubelet.paused.Store(false)
		Eventually(a.ready).WithTimeout(time.Minute).Should(Succeed())
	})
})
