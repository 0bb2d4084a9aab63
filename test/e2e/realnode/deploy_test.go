package realnode_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/controllers/foo"
	"github.com/phalanks/phalanks-operator/internal/certrotation"
	"github.com/phalanks/phalanks-operator/test/harness/deploy"
	"github.com/phalanks/phalanks-operator/test/harness/replicas"
	"github.com/phalanks/phalanks-operator/test/harness/samples"
)

const (
	storageBucketCRD = "storagebuckets.phalanks.io"
	webhookPort      = 9443
	metricsPort      = 8443
	// samplesNamespace receives config/samples.
	samplesNamespace = "samples"
)

// The names the certificate is for, as kube-apiserver and Prometheus check them.
var (
	webhookServerName = certrotation.DefaultWebhookService + "." + operatorNamespace + ".svc"
	metricsServerName = certrotation.DefaultMetricsService + "." + operatorNamespace + ".svc"
)

// Shortened so that the rotation specs see several renewals: a certificate valid for
// three minutes, renewed two minutes before it expires (so about every minute), checked
// every ten seconds. The real node's kubelet projects a changed Secret within its sync
// period of ten seconds.
var managerFlags = []string{
	"--scaling-grace-period=" + scalingGracePeriod,
	"--webhook-cert-validity=3m",
	"--webhook-cert-renew-before=2m",
	"--webhook-cert-check-interval=10s",
}

func deploySpecs() bool {
	return Describe("make deploy", Ordered, func() {
		It("runs both replicas Ready under restricted Pod Security, none of them Ready before its pod serves the certificate the CRD trusts", func() {
			watch := watchReadiness()
			start := time.Now()
			out, err := deploy.Make(ctx, local.Kubeconfig, "deploy", "IMG="+operatorImage)
			check(err)
			GinkgoWriter.Print(out)
			expectOperatorAvailable()
			violations, waited := watch.stop()
			GinkgoWriter.Printf("make deploy: both replicas Ready in %s; a running replica was seen waiting for its certificate %d times\n",
				time.Since(start).Round(time.Millisecond), waited)
			Expect(violations).To(BeEmpty(), "replicas Ready without serving a certificate the CRD's CA verifies")

			ns := &corev1.Namespace{}
			Expect(k8s.Get(ctx, client.ObjectKey{Name: operatorNamespace}, ns)).To(Succeed())
			Expect(ns.Labels).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "restricted"))
			pods := operatorPods()
			Expect(pods).To(HaveLen(2), "config/manager runs two replicas")
			for _, p := range pods {
				Expect(p.Spec.Containers[0].Image).To(Equal(operatorImage), "the image make deploy was given")
				Expect(p.Spec.Containers[0].Args).To(ContainElement("--webhook-cert-rotation=true"))
			}

			By("holding the CA and the certificate in the Secret, the CA in the CRD")
			secret := certSecret()
			for _, key := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
				Expect(secret.Data).To(HaveKey(key))
			}
			Expect(injectedCA(Default)).To(Equal(secret.Data["ca.crt"]))
			leaf := parseCert(secret.Data["tls.crt"])
			Expect(leaf.DNSNames).To(ContainElements(webhookServerName, metricsServerName))
		})

		It("make deploy-monitoring adds the ServiceMonitor, the scraper's identity and the alerting rules, leaving the rest as it is", func() {
			before := &appsv1.Deployment{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, before)).To(Succeed())
			out, err := deploy.Make(ctx, local.Kubeconfig, "deploy-monitoring", "IMG="+operatorImage)
			check(err)
			GinkgoWriter.Print(out)
			for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
				list := &unstructured.UnstructuredList{}
				list.SetAPIVersion("monitoring.coreos.com/v1")
				list.SetKind(kind + "List")
				Expect(k8s.List(ctx, list, client.InNamespace(operatorNamespace))).To(Succeed())
				Expect(list.Items).To(HaveLen(1), "%s in %s", kind, operatorNamespace)
			}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "phalanks-metrics-scraper"}, &corev1.ServiceAccount{})).To(Succeed())
			after := &appsv1.Deployment{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, after)).To(Succeed())
			Expect(after.Generation).To(Equal(before.Generation), "make deploy-monitoring changed the operator's Deployment")
		})

		It("rolls out a change of the manager's flags: a shorter scaling grace period and a three-minute certificate", func() {
			dep := &appsv1.Deployment{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, dep)).To(Succeed())
			var ops []string
			for _, f := range managerFlags {
				ops = append(ops, fmt.Sprintf(`{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":%q}`, f))
			}
			Expect(k8s.Patch(ctx, dep, client.RawPatch(types.JSONPatchType, []byte("["+strings.Join(ops, ",")+"]")))).To(Succeed())
			expectOperatorAvailable()
			for _, p := range operatorPods() {
				Expect(p.Spec.Containers[0].Args).To(ContainElements(managerFlags))
			}
		})

		It("keeps its own replica count from its configuration ConfigMap, one replica at a time, each a member of the StorageBucket ring", func() {
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "phalanks-operator-config"},
				Data:       map[string]string{"operator-replicas": "3"},
			}
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			DeferCleanup(func() { _ = k8s.Delete(context.Background(), cm) })
			expectReplicas(3)
			reasons := func(g Gomega) []string {
				list := &eventsv1.EventList{}
				g.Expect(k8s.List(ctx, list, client.InNamespace(operatorNamespace))).To(Succeed())
				var out []string
				for _, e := range list.Items {
					if e.Regarding.Kind == "Deployment" && e.Regarding.Name == operatorDeployment {
						out = append(out, e.Reason+": "+e.Note)
					}
				}
				return out
			}
			Eventually(reasons).Should(ContainElement(ContainSubstring("OperatorScaled: Scaled from 2 to 3 replicas towards 3")))

			By("a count set by hand is set back to the configured one")
			dep := &appsv1.Deployment{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, dep)).To(Succeed())
			base := dep.DeepCopy()
			dep.Spec.Replicas = ptr.To[int32](1)
			Expect(k8s.Patch(ctx, dep, client.MergeFrom(base))).To(Succeed())
			expectReplicas(3)

			By("deleting the ConfigMap: back to the default of two")
			Expect(k8s.Delete(ctx, cm)).To(Succeed())
			expectReplicas(2)
		})
	})
}

// expectReplicas waits until the operator's Deployment runs n replicas, all available,
// and the StorageBucket ring has exactly their pods as live members.
func expectReplicas(n int32) {
	GinkgoHelper()
	Eventually(func() error {
		alive()
		return replicas.Check(ctx, k8s, operatorNamespace, operatorDeployment, n)
	}).WithTimeout(3 * podTimeout).WithPolling(poll).Should(Succeed())
}

func samplesSpecs() bool {
	return Describe("config/samples", Ordered, func() {
		It("reach their expected state in a namespace that enforces the restricted Pod Security level: the StorageBuckets Ready against MinIO (the managed one in a bucket the operator created), the Foo's and the scheduled workload's pods Ready", func() {
			Expect(k8s.Create(ctx, samples.Namespace(samplesNamespace))).To(Succeed())
			env := samplesEnv()
			applied, err := samples.Apply(ctx, env, samples.Adapters(), "phalanks-e2e")
			check(err)
			Expect(applied).To(ContainElement(HaveField("Object", HaveKeyWithValue("kind", "StorageBucket"))))
			Eventually(func(g Gomega) {
				alive()
				for _, s := range applied {
					done, state := samples.Check(ctx, env, samples.Expectations(), s)
					g.Expect(done).To(BeTrue(), "%s: %s", samples.Describe(s), state)
				}
			}).WithTimeout(podTimeout).WithPolling(time.Second).Should(Succeed())
			Expect(bucketExists(managedSampleBucket)).To(BeTrue(), "the operator created the managed sample's bucket")
		})
	})
}

// managedSampleBucket is the bucket of config/samples' managed StorageBucket
// (managementPolicy Manage, deletionPolicy Delete).
const managedSampleBucket = "ci-build-cache"

// observedSampleBucket is the bucket the samples only observe.
const observedSampleBucket = "acme-photos-archive"

func samplesEnv() samples.Env {
	return samples.Env{Client: k8s, S3: s3, Image: testApp, Namespace: samplesNamespace}
}

func undeploySpecs() bool {
	return Describe("make undeploy", Ordered, func() {
		It("deletes the StorageBuckets and Foos while the operator runs, then all make deploy-monitoring applied, and leaves only what docs/deploy.md says", func() {
			fooDeployments := &appsv1.DeploymentList{}
			Expect(k8s.List(ctx, fooDeployments, client.HasLabels{foo.LabelOwned})).To(Succeed())

			start := time.Now()
			out, err := deploy.Make(ctx, local.Kubeconfig, "undeploy", "DEPLOY_CONFIG=config/prometheus", "UNDEPLOY_TIMEOUT=3m")
			check(err)
			GinkgoWriter.Print(out)
			GinkgoWriter.Printf("make undeploy took %s\n", time.Since(start).Round(time.Millisecond))

			By("leaving no namespace, CRD, cluster role or binding of the operator")
			err = k8s.Get(ctx, client.ObjectKey{Name: operatorNamespace}, &corev1.Namespace{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "namespace %s: %v", operatorNamespace, err)
			crds := &apiextensionsv1.CustomResourceDefinitionList{}
			Expect(k8s.List(ctx, crds)).To(Succeed())
			for _, c := range crds.Items {
				Expect(c.Spec.Group).NotTo(Equal(phalanksv1beta1.GroupVersion.Group), "CRD %s is left", c.Name)
			}
			roles := &rbacv1.ClusterRoleList{}
			Expect(k8s.List(ctx, roles)).To(Succeed())
			for _, r := range roles.Items {
				Expect(r.Name).NotTo(HavePrefix("phalanks-"), "ClusterRole %s is left", r.Name)
			}
			bindings := &rbacv1.ClusterRoleBindingList{}
			Expect(k8s.List(ctx, bindings)).To(Succeed())
			for _, b := range bindings.Items {
				Expect(b.Name).NotTo(HavePrefix("phalanks-"), "ClusterRoleBinding %s is left", b.Name)
			}

			By("leaving no Lease, Secret or finalizer of the operator anywhere")
			leases := &coordinationv1.LeaseList{}
			Expect(k8s.List(ctx, leases)).To(Succeed())
			for _, l := range leases.Items {
				Expect(l.Name).NotTo(HavePrefix("phalanks"), "Lease %s/%s is left", l.Namespace, l.Name)
				Expect(l.Labels).NotTo(HaveKey("phalanks.io/shard-ring"), "shard Lease %s/%s is left", l.Namespace, l.Name)
			}
			secrets := &corev1.SecretList{}
			Expect(k8s.List(ctx, secrets)).To(Succeed())
			for _, s := range secrets.Items {
				Expect(s.Name).NotTo(Equal(certrotation.DefaultSecretName), "the certificate Secret is left in %s", s.Namespace)
			}
			deployments := &appsv1.DeploymentList{}
			Expect(k8s.List(ctx, deployments)).To(Succeed())
			for _, d := range deployments.Items {
				for _, f := range d.Finalizers {
					Expect(f).NotTo(HavePrefix("phalanks.io/"), "Deployment %s/%s keeps a finalizer", d.Namespace, d.Name)
				}
			}

			By("deleting the Foos' Deployments with the Foos, and leaving the workloads under scheduled scaling")
			for _, d := range fooDeployments.Items {
				Eventually(func() bool {
					return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(&d), &appsv1.Deployment{}))
				}).WithTimeout(reconcileTimeout).Should(BeTrue(), "the Deployment %s/%s of a deleted Foo", d.Namespace, d.Name)
			}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: samplesNamespace, Name: "office-hours"}, &appsv1.Deployment{})).To(Succeed(),
				"the scheduled-scaling sample is the user's workload")

			By("keeping on S3 the buckets their deletion policy keeps, deleting the one whose policy deletes it")
			Expect(bucketExists(observedSampleBucket)).To(BeTrue(), "the observed sample's bucket (deletionPolicy Retain)")
			Expect(bucketExists(managedSampleBucket)).To(BeFalse(), "the managed sample's bucket (deletionPolicy Delete, empty)")
		})
	})
}

// readinessWatch samples the operator's pods while make deploy runs: a pod Ready whose
// webhook server does not present a certificate the CRD's CA verifies is a violation.
type readinessWatch struct {
	mu         sync.Mutex
	violations []string
	waited     int
	cancel     context.CancelFunc
	done       chan struct{}
}

func watchReadiness() *readinessWatch {
	wctx, cancel := context.WithCancel(ctx)
	w := &readinessWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(w.done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			w.sample(wctx)
		}
	}()
	return w
}

func (w *readinessWatch) sample(wctx context.Context) {
	pods := &corev1.PodList{}
	if err := k8s.List(wctx, pods, client.InNamespace(operatorNamespace), client.MatchingLabels{"control-plane": "controller-manager"}); err != nil {
		return
	}
	roots := x509.NewCertPool()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := k8s.Get(wctx, client.ObjectKey{Name: storageBucketCRD}, crd); err == nil && crd.Spec.Conversion != nil &&
		crd.Spec.Conversion.Webhook != nil && crd.Spec.Conversion.Webhook.ClientConfig != nil {
		roots.AppendCertsFromPEM(crd.Spec.Conversion.Webhook.ClientConfig.CABundle)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
			continue
		}
		_, err := handshake(wctx, net.JoinHostPort(p.Status.PodIP, fmt.Sprint(webhookPort)), webhookServerName, roots)
		if wctx.Err() != nil {
			return
		}
		w.mu.Lock()
		switch {
		case podReady(&p) && err != nil:
			w.violations = append(w.violations, fmt.Sprintf("%s Ready, its webhook: %v", p.Name, err))
		case !podReady(&p) && err != nil:
			w.waited++
		}
		w.mu.Unlock()
	}
}

func (w *readinessWatch) stop() ([]string, int) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.violations), w.waited
}

// handshake connects to addr as kube-apiserver calls the webhook (or Prometheus scrapes
// the metrics): the certificate verified for serverName against roots. It returns the
// fingerprint of the certificate served.
func handshake(hctx context.Context, addr, serverName string, roots *x509.CertPool) (string, error) {
	d := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}}
	dctx, cancel := context.WithTimeout(hctx, 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	return fingerprint(conn.(*tls.Conn).ConnectionState().PeerCertificates[0].Raw), nil
}

func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:8])
}

// certSecret returns the Secret the operator keeps its CA and certificate in.
func certSecret() *corev1.Secret {
	GinkgoHelper()
	s := &corev1.Secret{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: certrotation.DefaultSecretName}, s)).To(Succeed())
	return s
}

// injectedCA returns the CA bundle in the StorageBucket CRD's conversion webhook.
func injectedCA(g Gomega) []byte {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: storageBucketCRD}, crd)).To(Succeed())
	g.Expect(crd.Spec.Conversion).NotTo(BeNil())
	g.Expect(crd.Spec.Conversion.Webhook.ClientConfig.CABundle).NotTo(BeEmpty(), "no CA injected")
	return crd.Spec.Conversion.Webhook.ClientConfig.CABundle
}

func certPool(pemData []byte) *x509.CertPool {
	GinkgoHelper()
	pool := x509.NewCertPool()
	Expect(pool.AppendCertsFromPEM(pemData)).To(BeTrue())
	return pool
}

// bucketExists asks MinIO whether a bucket exists.
func bucketExists(name string) bool {
	GinkgoHelper()
	c, err := s3.Client()
	Expect(err).NotTo(HaveOccurred())
	exists, err := c.BucketExists(ctx, name)
	Expect(err).NotTo(HaveOccurred())
	return exists
}
