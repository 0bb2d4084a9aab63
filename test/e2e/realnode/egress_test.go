package realnode_test

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tinyproxy"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// The example values of config/egress/manager_egress_patch.yaml, which a user replaces.
const (
	exampleProxy        = "http://proxy.example.com:3128"
	exampleServiceRange = "10.96.0.0/12"
)

// egress is the company network of egressSpecs: a MinIO over TLS whose certificate a CA
// of the company's signed, and the egress proxy. They outlive the specs: from then on
// the operator reaches every endpoint through the proxy, make undeploy's bucket deletion
// included.
var egress struct {
	s3    *minio.Server
	proxy *tinyproxy.Proxy
}

// startEgress starts the company network for the rest of the suite.
func startEgress() {
	GinkgoHelper()
	minioDir := filepath.Join(dir, "minio-company-ca")
	Expect(os.MkdirAll(minioDir, 0o700)).To(Succeed())
	var err error
	egress.s3, err = minio.Start(minio.Options{Dir: minioDir, Host: cluster.NodeIP, TLS: true})
	check(err)
	DeferCleanup(egress.s3.Stop)
	Expect(egress.s3.MakeBucket(ctx, "egress", miniogo.MakeBucketOptions{})).To(Succeed())
	// CONNECT only to the MinIO over TLS: had the Kubernetes client gone through the
	// proxy, its tunnel to the API server (port 443) would be refused.
	proxyDir := filepath.Join(dir, "tinyproxy")
	Expect(os.MkdirAll(proxyDir, 0o700)).To(Succeed())
	egress.proxy, err = tinyproxy.Start(tinyproxy.Options{Dir: proxyDir, Listen: netip.MustParseAddr(cluster.NodeIP),
		ConnectPorts: []int{int(netip.MustParseAddrPort(egress.s3.Endpoint).Port())}})
	check(err)
	DeferCleanup(egress.proxy.Stop)
}

func egressSpecs() bool {
	return Describe("behind an egress proxy, trusting a company CA (config/egress)", Ordered, func() {
		It("reaches an HTTPS endpoint the company CA signed through the proxy, its Kubernetes client going direct", func() {
			const ns = "team-egress"
			Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())

			secure, proxy := egress.s3, egress.proxy
			DeferCleanup(func() {
				if CurrentSpecReport().Failed() {
					GinkgoWriter.Printf("tinyproxy's log %s:\n%s", proxy.LogPath(), process.Tail(proxy.LogPath(), 60))
				}
			})
			Expect(k8s.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "s3-credentials", Namespace: ns,
					Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
				StringData: map[string]string{"AWS_ACCESS_KEY_ID": secure.AccessKey, "AWS_SECRET_ACCESS_KEY": secure.SecretKey},
			})).To(Succeed())
			sb := &phalanksv1beta1.StorageBucket{
				ObjectMeta: metav1.ObjectMeta{Name: "egress", Namespace: ns},
				Spec: phalanksv1beta1.StorageBucketSpec{
					BucketName: "egress", Endpoint: "https://" + secure.Endpoint, Region: secure.Region,
					CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "s3-credentials"},
					HealthCheck:          phalanksv1beta1.HealthCheck{Interval: &metav1.Duration{Duration: 10 * time.Second}},
				},
			}
			Expect(k8s.Create(ctx, sb)).To(Succeed())
			By("without the company CA the endpoint's certificate is not trusted (the image has public roots only)")
			expectBucketReady(sb, metav1.ConditionFalse, "TLSUnknownAuthority")
			Expect(proxy.Tunnels(secure.Endpoint)).To(BeZero(), "the proxy was used before the operator was told of it")

			By("the CA in the ConfigMap the patch mounts, and the patch applied as kustomize applies it")
			ca := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "trusted-ca"},
				Data: map[string]string{"ca-bundle.crt": string(secure.CAPEM)}}
			Expect(k8s.Create(ctx, ca)).To(Succeed())
			// make undeploy deletes it with the namespace.
			root, err := tools.RepoRoot()
			check(err)
			patch, err := os.ReadFile(filepath.Join(root, "config/egress/manager_egress_patch.yaml"))
			check(err)
			Expect(string(patch)).To(ContainSubstring(exampleProxy))
			Expect(string(patch)).To(ContainSubstring(exampleServiceRange))
			patch = []byte(strings.NewReplacer(exampleProxy, proxy.URL.String(), exampleServiceRange, cluster.ServiceCIDR).Replace(string(patch)))
			// kustomize picks the Deployment by the component's target; the API server
			// would compare the patch's name with the live one.
			var fields map[string]any
			check(yaml.Unmarshal(patch, &fields))
			delete(fields, "metadata")
			patchJSON, err := json.Marshal(fields)
			check(err)
			dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: operatorDeployment}}
			Expect(k8s.Patch(ctx, dep, client.RawPatch(types.StrategicMergePatchType, patchJSON))).To(Succeed())
			expectOperatorAvailable()

			expectBucketReady(sb, metav1.ConditionTrue, "BucketReady")
			Expect(proxy.Tunnels(secure.Endpoint)).To(BeNumerically(">", 0), "the probes did not go through the proxy")
			apiServer := &corev1.Service{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, apiServer)).To(Succeed())
			Expect(proxy.Requests(apiServer.Spec.ClusterIP)).To(BeZero(), "NO_PROXY let the Kubernetes client through the proxy")
		})
	})
}

// expectBucketReady waits for the StorageBucket's Ready condition to have the status and
// reason.
func expectBucketReady(sb *phalanksv1beta1.StorageBucket, status metav1.ConditionStatus, reason string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		alive()
		got := &phalanksv1beta1.StorageBucket{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sb), got)).To(Succeed())
		ready := findCondition(got.Status.Conditions, phalanksv1beta1.ConditionReady)
		g.Expect(ready).NotTo(BeNil(), "status %+v", got.Status)
		g.Expect(ready.Status).To(Equal(status), "%s: %s", ready.Reason, ready.Message)
		g.Expect(ready.Reason).To(Equal(reason), ready.Message)
	}).WithTimeout(reconcileTimeout).WithPolling(poll).Should(Succeed())
}
