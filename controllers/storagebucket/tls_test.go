package storagebucket_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
)

var _ = Describe("StorageBucket with a TLS endpoint", func() {
	It("is Ready with the private CA bundle and TLSUnknownAuthority without it", func() {
		ctx := context.Background()
		secure := minio.StartForTest(GinkgoT(), minio.Options{TLS: true})
		Expect(secure.MakeBucket(ctx, "tls-bucket", miniogo.MakeBucketOptions{})).To(Succeed())
		ns := namespace()
		credentials(ns, "s3-credentials", secure)
		ca := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "private-ca"},
			Data: map[string]string{"ca.crt": string(secure.CAPEM)}}
		create(ca)

		withCA := newBucket(ns, "with-ca", "tls-bucket", secure)
		withCA.Spec.CABundle = &phalanksv1beta1.CABundleSource{ConfigMapKeyRef: &phalanksv1beta1.KeyReference{Name: "private-ca"}}
		withCA.Spec.HealthCheck.Interval = &metav1.Duration{Duration: 10 * time.Minute}
		create(withCA)
		withoutCA := newBucket(ns, "without-ca", "tls-bucket", secure)
		create(withoutCA)

		eventuallyReady(withCA, metav1.ConditionTrue, "BucketReady", 30*time.Second)
		eventuallyReady(withoutCA, metav1.ConditionFalse, "TLSUnknownAuthority", 30*time.Second)
		Expect(condition(get(withoutCA), "Ready").Message).To(ContainSubstring("set caBundle"))

		By("recording when the server certificate expires")
		leaf := serverCertificate(secure)
		Eventually(func(g Gomega) {
			notAfter := get(withCA).Status.ServerCertificateNotAfter
			g.Expect(notAfter).NotTo(BeNil())
			g.Expect(notAfter.Unix()).To(Equal(leaf.NotAfter.Unix()))
		}).WithTimeout(30 * time.Second).Should(Succeed())

		By("re-probing at once when the CA bundle changes")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ca), ca)).To(Succeed())
		ca.Data["ca.crt"] = "not a certificate"
		Expect(k8s.Update(ctx, ca)).To(Succeed())
		eventuallyReady(withCA, metav1.ConditionFalse, "InvalidCABundle", 30*time.Second)
	})
})

// serverCertificate returns the leaf certificate the server presents.
func serverCertificate(server *minio.Server) *x509.Certificate {
	GinkgoHelper()
	pool := x509.NewCertPool()
	Expect(pool.AppendCertsFromPEM(server.CAPEM)).To(BeTrue())
	conn, err := tls.Dial("tcp", server.Endpoint, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0]
}
