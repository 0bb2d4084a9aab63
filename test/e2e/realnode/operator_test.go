package realnode_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const (
	metricsService = "phalanks-controller-manager-metrics-service"
	metricsReader  = "phalanks-metrics-reader"
	// The manager's probes as config/manager sets them: liveness starts after 15s and
	// repeats every 20s.
	livenessDelay  = 15 * time.Second
	livenessPeriod = 20 * time.Second
)

func operatorSpecs() bool {
	return Describe("the operator as users deploy it from config/default", Ordered, func() {
		const userNamespace = "team-storage"

		BeforeAll(func() {
			Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: userNamespace}})).To(Succeed())
		})

		It("runs its image in a namespace where restricted Pod Security is enforced, its probes passing", func() {
			ns := &corev1.Namespace{}
			Expect(k8s.Get(ctx, client.ObjectKey{Name: operatorNamespace}, ns)).To(Succeed())
			Expect(ns.Labels).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "restricted"))

			pods := operatorPods()
			Expect(pods).To(HaveLen(2), "config/manager runs two replicas")
			for _, pod := range pods {
				Expect(pod.Spec.Containers[0].Image).To(Equal(operatorImage), "the image make deploy was given")
			}
			By("staying Ready without a restart until the liveness probe has run")
			Eventually(func(g Gomega) {
				alive()
				for _, pod := range pods {
					p := &corev1.Pod{}
					g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&pod), p)).To(Succeed())
					g.Expect(p.Status.ContainerStatuses).To(HaveLen(1))
					s := p.Status.ContainerStatuses[0]
					g.Expect(s.RestartCount).To(BeZero(), "the manager restarted: %+v", s.LastTerminationState)
					g.Expect(s.Ready).To(BeTrue())
					g.Expect(s.State.Running).NotTo(BeNil())
					g.Expect(time.Since(s.State.Running.StartedAt.Time)).To(BeNumerically(">", livenessDelay+livenessPeriod),
						"running long enough for the liveness probe to have run")
				}
			}).WithTimeout(podTimeout).WithPolling(time.Second).Should(Succeed())
			By("failing no liveness probe, and readiness probes only while waiting for the certificate, before turning Ready")
			readySince := map[string]time.Time{}
			for _, pod := range pods {
				p := &corev1.Pod{}
				Expect(k8s.Get(ctx, client.ObjectKeyFromObject(&pod), p)).To(Succeed())
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady {
						readySince[p.Name] = c.LastTransitionTime.Time
					}
				}
			}
			events := &corev1.EventList{}
			Expect(k8s.List(ctx, events, client.InNamespace(operatorNamespace))).To(Succeed())
			for _, e := range events.Items {
				if e.Reason != "Unhealthy" {
					continue
				}
				Expect(e.Message).To(HavePrefix("Readiness probe failed"), "pod %s: %s", e.InvolvedObject.Name, e.Message)
				if since, ok := readySince[e.InvolvedObject.Name]; ok {
					Expect(e.LastTimestamp.Time).NotTo(BeTemporally(">", since), "pod %s unready after it was Ready: %s", e.InvolvedObject.Name, e.Message)
				}
			}
		})

		It("serves metrics over HTTPS through its Service to an authorized ServiceAccount token only", func() {
			svc := &corev1.Service{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: metricsService}, svc)).To(Succeed())
			url := fmt.Sprintf("https://%s:%d/metrics", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)

			allowed := serviceAccountToken(userNamespace, "prometheus", metricsReader)
			denied := serviceAccountToken(userNamespace, "nosy", "")
			// The metrics endpoint serves the certificate the operator keeps, for the metrics
			// Service's name: verified as a scraper verifies it.
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: certPool(certSecret().Data["ca.crt"]), ServerName: metricsServerName, MinVersion: tls.VersionTLS12},
			}}
			Eventually(func(g Gomega) {
				status, body := get(g, hc, url, allowed)
				g.Expect(status).To(Equal(http.StatusOK), body)
				g.Expect(body).To(ContainSubstring("controller_runtime_reconcile_total"))
			}).WithTimeout(reconcileTimeout).WithPolling(poll).Should(Succeed())
			status, body := get(Default, hc, url, denied)
			Expect(status).To(Equal(http.StatusForbidden), body)
			status, body = get(Default, hc, url, "")
			Expect(status).To(Equal(http.StatusUnauthorized), body)
		})

		It("converts StorageBuckets through its webhook Service and reconciles them against MinIO to Ready", func() {
			Expect(k8s.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "minio-credentials", Namespace: userNamespace,
					// The operator reads only Secrets labelled for it.
					Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
				StringData: map[string]string{"AWS_ACCESS_KEY_ID": s3.AccessKey, "AWS_SECRET_ACCESS_KEY": s3.SecretKey},
			})).To(Succeed())
			Expect(s3.MakeBucket(ctx, "observed", miniogo.MakeBucketOptions{})).To(Succeed())

			alpha := &phalanksv1alpha1.StorageBucket{
				ObjectMeta: metav1.ObjectMeta{Name: "observed", Namespace: userNamespace},
				Spec: phalanksv1alpha1.StorageBucketSpec{
					BucketName: "observed", Endpoint: s3.Endpoint, Insecure: true, Region: s3.Region,
					SecretName: "minio-credentials", IntervalSeconds: 10,
				},
			}
			By("creating it as v1alpha1 and reading it as v1beta1 and back as v1alpha1: kube-apiserver calls the webhook Service")
			Expect(k8s.Create(ctx, alpha)).To(Succeed())
			beta := &phalanksv1beta1.StorageBucket{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(alpha), beta)).To(Succeed())
			Expect(beta.Spec.Endpoint).To(Equal("http://" + s3.Endpoint))
			Expect(beta.Spec.CredentialsSecretRef).To(HaveField("Name", "minio-credentials"))
			back := &phalanksv1alpha1.StorageBucket{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(alpha), back)).To(Succeed())
			Expect(back.Spec).To(Equal(alpha.Spec), "v1alpha1 → v1beta1 (stored) → v1alpha1")

			By("going Ready against the MinIO the pod reaches at the node's address")
			Eventually(func(g Gomega) {
				sb := &phalanksv1beta1.StorageBucket{}
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(alpha), sb)).To(Succeed())
				ready := findCondition(sb.Status.Conditions, phalanksv1beta1.ConditionReady)
				g.Expect(ready).NotTo(BeNil(), "status %+v", sb.Status)
				g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "%s: %s", ready.Reason, ready.Message)
			}).WithTimeout(reconcileTimeout).WithPolling(poll).Should(Succeed())
		})

		It("logs structured JSON lines, none of them with a secret value (kubectl logs through the kubelet)", func() {
			logs := kubectl("logs", "--namespace", operatorNamespace, "deployment/"+operatorDeployment)
			Expect(logs).To(MatchRegexp(`"msg":"Starting workers".*"controller":"storagebucket"`), "the manager logged its StorageBucket controller starting")
			lines := 0
			for line := range strings.Lines(logs) {
				if strings.TrimSpace(line) == "" {
					continue
				}
				lines++
				var entry map[string]any
				Expect(json.Unmarshal([]byte(line), &entry)).To(Succeed(), "not a JSON log line: %s", line)
				Expect(entry).To(HaveKey("msg"))
			}
			Expect(lines).To(BeNumerically(">", 5))
			Expect(logs).NotTo(ContainSubstring(s3.SecretKey), "the secret key appears in the manager's log")
		})
	})
}

// operatorPods returns the operator's pods that are not being deleted, once there are
// as many as its Deployment's replicas.
func operatorPods() []corev1.Pod {
	GinkgoHelper()
	var live []corev1.Pod
	Eventually(func(g Gomega) {
		dep := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, dep)).To(Succeed())
		pods := &corev1.PodList{}
		g.Expect(k8s.List(ctx, pods, client.InNamespace(operatorNamespace), client.MatchingLabels{"control-plane": "controller-manager"})).To(Succeed())
		live = nil
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				live = append(live, p)
			}
		}
		g.Expect(live).To(HaveLen(int(*dep.Spec.Replicas)), podsSummary(operatorNamespace))
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
	return live
}

// leaderElectionID is the manager's leader election Lease (main.go).
const leaderElectionID = "phalanks-operator.phalanks.io"

// leaderPod returns the operator pod that holds the leader election Lease: the one
// running scheduled scaling and Foo.
func leaderPod() *corev1.Pod {
	GinkgoHelper()
	pod := &corev1.Pod{}
	Eventually(func(g Gomega) {
		lease := &coordinationv1.Lease{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: leaderElectionID}, lease)).To(Succeed())
		g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
		// controller-runtime's identity is <host name>_<uuid>; a pod's host name is its name.
		name, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: name}, pod)).To(Succeed())
		g.Expect(pod.DeletionTimestamp).To(BeNil())
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
	return pod
}

// serviceAccountToken creates a ServiceAccount, bound to clusterRole unless it is empty,
// and returns a token for it.
func serviceAccountToken(namespace, name, clusterRole string) string {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}})).To(Succeed())
	if clusterRole != "" {
		Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: namespace + "-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
		})).To(Succeed())
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return tr.Status.Token
}

func get(g Gomega, hc *http.Client, url, token string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	g.Expect(err).NotTo(HaveOccurred())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, string(body)
}

func findCondition(conditions []metav1.Condition, t string) *metav1.Condition {
	for i := range conditions {
		if conditions[i].Type == t {
			return &conditions[i]
		}
	}
	return nil
}

func kubectl(args ...string) string {
	GinkgoHelper()
	bin, err := tools.Path("kubectl")
	check(err)
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", local.Kubeconfig}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "kubectl %s: %s", strings.Join(args, " "), stderr.String())
	return string(out)
}
