package olm_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/tinyproxy"
)

// The company network the operator is installed into: an egress proxy on the node's
// address, and a MinIO over TLS whose certificate a CA of the company's signed. The
// Subscription's spec.config gives the operator both, as docs/configuration.md ("An
// egress proxy and a company CA", OLM v0) shows, and OLM keeps them across the upgrade.
var (
	egressS3    *minio.Server
	egressProxy *tinyproxy.Proxy
)

// companyCABucket is the StorageBucket on the MinIO the company CA signed, which names
// no caBundle: only SSL_CERT_FILE makes its certificate trusted.
const companyCABucket = "company-ca"

// startEgress starts the company network for the whole suite.
func startEgress() {
	GinkgoHelper()
	d := filepath.Join(dir, "minio-company-ca")
	Expect(os.MkdirAll(d, 0o700)).To(Succeed())
	var err error
	egressS3, err = minio.Start(minio.Options{Dir: d, Host: cluster.NodeIP, TLS: true})
	check(err)
	DeferCleanup(egressS3.Stop)
	Expect(egressS3.MakeBucket(ctx, companyCABucket, miniogo.MakeBucketOptions{})).To(Succeed())
	d = filepath.Join(dir, "tinyproxy")
	Expect(os.MkdirAll(d, 0o700)).To(Succeed())
	// CONNECT only to the MinIO over TLS: a Kubernetes client that went through the
	// proxy would be refused its tunnel to the API server.
	egressProxy, err = tinyproxy.Start(tinyproxy.Options{Dir: d, Listen: netip.MustParseAddr(cluster.NodeIP),
		ConnectPorts: []int{int(netip.MustParseAddrPort(egressS3.Endpoint).Port())}})
	check(err)
	DeferCleanup(egressProxy.Stop)
}

// egressConfig is the Subscription's spec.config for the company network, besides
// subscriptionEnv: the proxy, NO_PROXY with the Service range, and SSL_CERT_FILE at the
// CA ConfigMap it mounts.
func egressConfig() *operatorsv1alpha1.SubscriptionConfig {
	return &operatorsv1alpha1.SubscriptionConfig{
		Env: []corev1.EnvVar{
			subscriptionEnv,
			{Name: "HTTPS_PROXY", Value: egressProxy.URL.String()},
			{Name: "HTTP_PROXY", Value: egressProxy.URL.String()},
			{Name: "NO_PROXY", Value: cluster.ServiceCIDR + ",.svc,.cluster.local,localhost,127.0.0.1"},
			{Name: "SSL_CERT_FILE", Value: "/etc/phalanks/trusted-ca/ca-bundle.crt"},
		},
		Volumes: []corev1.Volume{{Name: "trusted-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "trusted-ca"},
			Items:                []corev1.KeyToPath{{Key: "ca-bundle.crt", Path: "ca-bundle.crt"}},
		}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "trusted-ca", MountPath: "/etc/phalanks/trusted-ca", ReadOnly: true}},
	}
}

// createTrustedCA creates the CA ConfigMap the Subscription mounts, in the install
// namespace.
func createTrustedCA() {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: installNamespace, Name: "trusted-ca"},
		Data:       map[string]string{"ca-bundle.crt": string(egressS3.CAPEM)},
	})).To(Succeed())
}

// createCompanyCABucket creates the StorageBucket on the MinIO the company CA signed,
// and its Secret, in the users' namespace.
func createCompanyCABucket() {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "company-credentials", Namespace: userNamespace,
			Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": egressS3.AccessKey, "AWS_SECRET_ACCESS_KEY": egressS3.SecretKey},
	})).To(Succeed())
	Expect(k8s.Create(ctx, &phalanksv1beta1.StorageBucket{
		ObjectMeta: metav1.ObjectMeta{Name: companyCABucket, Namespace: userNamespace},
		Spec: phalanksv1beta1.StorageBucketSpec{
			BucketName: companyCABucket, Endpoint: "https://" + egressS3.Endpoint, Region: egressS3.Region,
			CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "company-credentials"},
			HealthCheck:          phalanksv1beta1.HealthCheck{Interval: &metav1.Duration{Duration: 10 * time.Second}},
		},
	})).To(Succeed())
}

// expectThroughTheProxy checks that the operator reached the company's MinIO through the
// proxy, and the API server not.
func expectThroughTheProxy() {
	GinkgoHelper()
	Expect(egressProxy.Tunnels(egressS3.Endpoint)).To(BeNumerically(">", 0), "the probes of the company's MinIO did not go through the proxy")
	api := &corev1.Service{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, api)).To(Succeed())
	Expect(egressProxy.Requests(api.Spec.ClusterIP)).To(BeZero(), "NO_PROXY let the Kubernetes client through the proxy")
}
