package storagebucket_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// renderedMonitoring returns the objects of config/prometheus, as kustomize renders them.
func renderedMonitoring() []*unstructured.Unstructured {
	GinkgoHelper()
	kustomize, err := tools.Path("kustomize")
	Expect(err).NotTo(HaveOccurred())
	root, err := tools.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	out, err := exec.Command(kustomize, "build", filepath.Join(root, "config", "prometheus")).Output()
	Expect(err).NotTo(HaveOccurred())
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			Fail(err.Error())
		}
		objs = append(objs, u)
	}
}

func rendered[T any](objs []*unstructured.Unstructured, kind, name string) *T {
	GinkgoHelper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			out := new(T)
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out)).To(Succeed())
			return out
		}
	}
	Fail(fmt.Sprintf("config/prometheus renders no %s %s", kind, name))
	return nil
}

var _ = Describe("Scraping the metrics the way the shipped ServiceMonitor does", func() {
	It("verifies the serving certificate for the Service name and is authorized by the scraper's token only", func() {
		ctx := context.Background()
		env, err := envtest.Start(envtest.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(env.Stop)
		c := env.Client
		objs := renderedMonitoring()
		var serverName string
		for _, u := range objs {
			if u.GetKind() == "ServiceMonitor" {
				endpoints, _, _ := unstructured.NestedSlice(u.Object, "spec", "endpoints")
				serverName, _, _ = unstructured.NestedString(endpoints[0].(map[string]any), "tlsConfig", "serverName")
			}
		}
		Expect(serverName).NotTo(BeEmpty())

		By("installing the rendered scraper identity and metrics roles")
		Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "phalanks-system"}})).To(Succeed())
		for _, obj := range []client.Object{
			rendered[corev1.ServiceAccount](objs, "ServiceAccount", "phalanks-metrics-scraper"),
			rendered[rbacv1.ClusterRole](objs, "ClusterRole", "phalanks-metrics-reader"),
			rendered[rbacv1.ClusterRole](objs, "ClusterRole", "phalanks-metrics-auth-role"),
			rendered[rbacv1.ClusterRoleBinding](objs, "ClusterRoleBinding", "phalanks-metrics-scraper"),
		} {
			Expect(c.Create(ctx, obj)).To(Succeed())
		}
		grantManagerRBAC(c, "phalanks-manager", "phalanks-system")
		Expect(c.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "manager-metrics-auth"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "phalanks-metrics-auth-role"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "phalanks-manager"}},
		})).To(Succeed())
		Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "phalanks-system", Name: "nobody"}})).To(Succeed())
		cs, err := kubernetes.NewForConfig(env.Config)
		Expect(err).NotTo(HaveOccurred())
		token := func(sa string) string {
			GinkgoHelper()
			tr, err := cs.CoreV1().ServiceAccounts("phalanks-system").CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			return tr.Status.Token
		}

		By("serving the metrics with a certificate for the metrics Service, as the operator's rotator issues it")
		ca, err := certs.NewCA("metrics-ca")
		Expect(err).NotTo(HaveOccurred())
		pair, err := ca.Issue(certs.LeafOptions{CommonName: serverName, Hosts: []string{serverName}})
		Expect(err).NotTo(HaveOccurred())
		certDir := GinkgoT().TempDir()
		Expect(pair.Write(certDir, "tls.crt", "tls.key")).To(Succeed())
		kubeconfig, err := env.KubeconfigUser("phalanks-manager")
		Expect(err).NotTo(HaveOccurred())
		metricsAddr := startSecureMetricsManager(writeKubeconfig(kubeconfig), certDir)

		scrape := func(name, bearer string) (int, string, error) {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(ca.CertPEM) // the ca.crt the ServiceMonitor trusts
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12}}}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+metricsAddr+"/metrics", nil)
			if err != nil {
				return 0, "", err
			}
			if bearer != "" {
				req.Header.Set("Authorization", "Bearer "+bearer)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return 0, "", err
			}
			defer func() { _ = resp.Body.Close() }()
			body, err := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body), err
		}

		By("scraping with the verified certificate and the scraper's token")
		scraper := token("phalanks-metrics-scraper")
		Eventually(func(g Gomega) {
			status, body, err := scrape(serverName, scraper)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(status).To(Equal(http.StatusOK), body)
			g.Expect(body).To(ContainSubstring("phalanks_storagebucket_scheduled"))
		}).WithTimeout(time.Minute).Should(Succeed())

		By("refusing a token without the metrics-reader role, and no token")
		status, _, err := scrape(serverName, token("nobody"))
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(http.StatusForbidden))
		status, _, err = scrape(serverName, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(http.StatusUnauthorized))

		By("failing verification for any other name: the check is real")
		_, _, err = scrape("other-service.phalanks-system.svc", scraper)
		Expect(err).To(MatchError(ContainSubstring("certificate")))
	})
})

// startSecureMetricsManager runs the manager with its metrics served over TLS from
// certDir, authenticated and authorized (the default), and returns the metrics address.
func startSecureMetricsManager(kubeconfig, certDir string) string {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	ca, err := certs.NewCA("webhook-ca")
	Expect(err).NotTo(HaveOccurred())
	pair, err := ca.Issue(certs.LeafOptions{CommonName: "webhook", Hosts: []string{"127.0.0.1"}})
	Expect(err).NotTo(HaveOccurred())
	Expect(pair.Write(dir, "tls.crt", "tls.key")).To(Succeed())
	ports := make([]int, 3)
	for i := range ports {
		ports[i], err = process.FreePort()
		Expect(err).NotTo(HaveOccurred())
	}
	p := &process.Process{
		Name: "manager-secure-metrics",
		Path: managerBin,
		Args: []string{
			"--kubeconfig", kubeconfig,
			"--webhook-port", strconv.Itoa(ports[0]), "--webhook-cert-dir", dir,
			"--metrics-bind-address", process.HostPort(ports[1]), "--metrics-cert-dir", certDir,
			"--health-probe-bind-address", process.HostPort(ports[2]),
		},
		LogPath: filepath.Join(dir, "manager.log"),
	}
	Expect(p.Start()).To(Succeed())
	DeferCleanup(func() { _ = p.Stop(10 * time.Second) })
	Expect(process.WaitFor(p, time.Minute, func() error {
		resp, err := http.Get("http://" + process.HostPort(ports[2]) + "/readyz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})).To(Succeed())
	return process.HostPort(ports[1])
}
