package realnode_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/internal/memlimit"
	"github.com/phalanks/phalanks-operator/test/harness/certs"
	"github.com/phalanks/phalanks-operator/test/harness/deploy"
	"github.com/phalanks/phalanks-operator/test/harness/monitoring"
	"github.com/phalanks/phalanks-operator/test/harness/prometheus"
)

const (
	monitoringNamespace = "monitoring"
	prometheusName      = "phalanks-e2e"
	// shippedPool is the scrape pool of config/prometheus's ServiceMonitor.
	shippedPool = "serviceMonitor/phalanks-system/phalanks-controller-manager-metrics-monitor/0"
	scraperSA   = "phalanks-metrics-scraper"
)

// promAPI is the API of the Prometheus the Prometheus Operator runs.
var promAPI *prometheus.API

// installPrometheus installs the Prometheus Operator as its bundle.yaml does, and a
// Prometheus that selects every ServiceMonitor and PrometheusRule and evaluates every
// five seconds.
func installPrometheus() {
	GinkgoHelper()
	bundle, err := prometheus.OperatorBundle(ctx)
	check(err)
	path := filepath.Join(dir, "prometheus-operator-bundle.yaml")
	Expect(os.WriteFile(path, bundle, 0o600)).To(Succeed())
	kubectl("apply", "--server-side", "-f", path)
	Eventually(func(g Gomega) {
		alive()
		dep := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "prometheus-operator"}, dep)).To(Succeed())
		g.Expect(dep.Status.AvailableReplicas).To(BeEquivalentTo(1), podsSummary("default"))
	}).WithTimeout(podTimeout).WithPolling(time.Second).Should(Succeed())

	objs, err := deploy.Decode(fmt.Appendf(nil, prometheusManifests, monitoringNamespace, prometheusName,
		monitoringImages.PrometheusVersion, prometheus.Registry+"/"+monitoringImages.Prometheus))
	check(err)
	for _, o := range objs {
		Expect(k8s.Create(ctx, o)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
	}
	var ip string
	Eventually(func(g Gomega) {
		alive()
		pod := &corev1.Pod{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: monitoringNamespace, Name: "prometheus-" + prometheusName + "-0"}, pod)).To(Succeed(),
			podsSummary(monitoringNamespace))
		g.Expect(podReady(pod)).To(BeTrue(), podsSummary(monitoringNamespace))
		ip = pod.Status.PodIP
	}).WithTimeout(podTimeout).WithPolling(time.Second).Should(Succeed())
	promAPI = &prometheus.API{URL: "http://" + net.JoinHostPort(ip, "9090")}
}

// prometheusManifests: the monitoring namespace, Prometheus's service account and what it
// may read to discover and scrape targets, and the Prometheus resource.
const prometheusManifests = `
apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: prometheus
  namespace: %[1]s
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: e2e-prometheus
rules:
- apiGroups: [""]
  resources: [services, endpoints, pods]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: e2e-prometheus
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: e2e-prometheus
subjects:
- kind: ServiceAccount
  name: prometheus
  namespace: %[1]s
---
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  version: %[3]s
  image: %[4]s
  replicas: 1
  serviceAccountName: prometheus
  serviceMonitorSelector: {}
  serviceMonitorNamespaceSelector: {}
  ruleSelector: {}
  ruleNamespaceSelector: {}
  scrapeInterval: 5s
  evaluationInterval: 5s
  resources:
    requests:
      memory: 128Mi
`

func monitoringSpecs() bool {
	return Describe("make deploy-monitoring, with the Prometheus Operator", Ordered, func() {
		It("scrapes every replica through the shipped ServiceMonitor over verified TLS, with the scraper's token", func() {
			Eventually(func(g Gomega) {
				alive()
				targets, err := promAPI.Targets(ctx)
				g.Expect(err).NotTo(HaveOccurred())
				var pool []prometheus.Target
				for _, t := range targets {
					if t.ScrapePool == shippedPool {
						pool = append(pool, t)
					}
				}
				g.Expect(pool).To(HaveLen(2), "one target per replica")
				for _, t := range pool {
					g.Expect(t.Health).To(Equal("up"), "%s: %s", t.ScrapeURL, t.LastError)
					g.Expect(t.ScrapeURL).To(HavePrefix("https://"))
				}
			}).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())

			By("with a configuration that verifies the certificate for the metrics Service and sends a token")
			job := shippedScrapeConfig()
			Expect(job.TLSConfig.InsecureSkipVerify).To(BeFalse())
			Expect(job.TLSConfig.CAFile).NotTo(BeEmpty())
			Expect(job.TLSConfig.ServerName).To(Equal(metricsServerName))
			Expect(job.Authorization.Type).To(Equal("Bearer"))
			Expect(job.Authorization.Credentials+job.Authorization.CredentialsFile).NotTo(BeEmpty(), "no token")
		})

		It("shows the target down with a CA that did not sign the certificate, and without a token", func() {
			other, err := certs.NewCA("not-the-operators-ca")
			check(err)
			Expect(k8s.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "e2e-other-ca", Namespace: operatorNamespace},
				Data:       map[string][]byte{"ca.crt": other.CertPEM},
			})).To(Succeed())
			wrongCA := shippedServiceMonitor("e2e-wrong-ca")
			setEndpoint(wrongCA, func(ep map[string]any) {
				_ = unstructured.SetNestedField(ep, "e2e-other-ca", "tlsConfig", "ca", "secret", "name")
			})
			noToken := shippedServiceMonitor("e2e-no-token")
			setEndpoint(noToken, func(ep map[string]any) { delete(ep, "authorization") })
			for _, sm := range []*unstructured.Unstructured{wrongCA, noToken} {
				Expect(k8s.Create(ctx, sm)).To(Succeed())
				DeferCleanup(func() { _ = k8s.Delete(context.Background(), sm) })
			}
			for pool, cause := range map[string]string{
				"serviceMonitor/phalanks-system/e2e-wrong-ca/0": "certificate signed by unknown authority",
				"serviceMonitor/phalanks-system/e2e-no-token/0": "401 Unauthorized",
			} {
				Eventually(func(g Gomega) {
					alive()
					targets, err := promAPI.Targets(ctx)
					g.Expect(err).NotTo(HaveOccurred())
					n := 0
					for _, t := range targets {
						if t.ScrapePool != pool {
							continue
						}
						n++
						g.Expect(t.Health).To(Equal("down"), "%s is %s", t.ScrapeURL, t.Health)
						g.Expect(t.LastError).To(ContainSubstring(cause))
					}
					g.Expect(n).To(Equal(2), "targets of %s", pool)
				}).WithTimeout(3*time.Minute).WithPolling(2*time.Second).Should(Succeed(), pool)
			}
			Expect(promAPI.Query(ctx, `up{job=~"e2e-wrong-ca|e2e-no-token"} == 1`)).To(BeEmpty())
		})

		It("answers a query for phalanks_storagebucket_up with the samples' buckets", func() {
			var want []string
			sbs := &phalanksv1beta1.StorageBucketList{}
			Expect(k8s.List(ctx, sbs, client.InNamespace(samplesNamespace))).To(Succeed())
			for _, sb := range sbs.Items {
				want = append(want, sb.Name)
			}
			Expect(want).To(HaveLen(3), "config/samples has three StorageBuckets")
			Eventually(func(g Gomega) {
				alive()
				result, err := promAPI.Query(ctx, fmt.Sprintf(`phalanks_storagebucket_up{storagebucket_namespace=%q}`, samplesNamespace))
				g.Expect(err).NotTo(HaveOccurred())
				var got []string
				for _, s := range result {
					got = append(got, s.Metric["storagebucket"])
					g.Expect(s.Value[1]).To(Equal("1"), "%s is not Ready", s.Metric["storagebucket"])
					g.Expect(s.Metric).To(HaveKeyWithValue("job", "phalanks-controller-manager-metrics-service"))
				}
				g.Expect(got).To(ConsistOf(want))
			}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		})

		It("gives each replica's garbage collector a soft limit of 0.9 of its container's memory limit", func() {
			dep := &appsv1.Deployment{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, dep)).To(Succeed())
			var limit int64
			for _, c := range dep.Spec.Template.Spec.Containers {
				if c.Name == "manager" {
					limit = c.Resources.Limits.Memory().Value()
				}
			}
			Expect(limit).To(BeNumerically(">", 0), "the manager container has no memory limit")
			// Read from the kubelet's cgroup through the runtime's metrics, not from the
			// Deployment: a process that ignored its cgroup would report no limit.
			want := fmt.Sprint(memlimit.Soft(limit, 0.9))
			Eventually(func(g Gomega) {
				alive()
				result, err := promAPI.Query(ctx, `go_gc_gomemlimit_bytes{job="phalanks-controller-manager-metrics-service"}`)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(result).To(HaveLen(int(*dep.Spec.Replicas)))
				for _, s := range result {
					g.Expect(s.Value[1]).To(Equal(want), "%s", s.Metric["pod"])
				}
			}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		})

		It("follows its configuration ConfigMap in every replica: a live change applied at once (a namespace excluded now gets its workload back), a restart-only one reported, a bad one refused", func() {
			dep := &appsv1.Deployment{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, dep)).To(Succeed())
			replicas := int(*dep.Spec.Replicas)
			// each returns every replica's value of a metric once all replicas report it.
			each := func(g Gomega, metric string) []string {
				result, err := promAPI.Query(ctx, metric+`{job="phalanks-controller-manager-metrics-service"}`)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(result).To(HaveLen(replicas), metric)
				var values []string
				for _, s := range result {
					values = append(values, fmt.Sprint(s.Value[1]))
				}
				return values
			}
			reasons := func(g Gomega) []string {
				list := &eventsv1.EventList{}
				g.Expect(k8s.List(ctx, list, client.InNamespace(operatorNamespace))).To(Succeed())
				var out []string
				for _, e := range list.Items {
					if e.Regarding.Kind == "ConfigMap" && e.Regarding.Name == "phalanks-operator-config" {
						out = append(out, e.Reason+": "+e.Note)
					}
				}
				return out
			}
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "phalanks-operator-config"},
				Data:       map[string]string{"zap-log-level": "debug", "storagebucket-tick": "2s"},
			}
			By("creating it while the replicas run: the log level is live, --storagebucket-tick waits for a restart")
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			DeferCleanup(func() { _ = k8s.Delete(context.Background(), cm) })
			var hash string
			Eventually(func(g Gomega) {
				alive()
				hashes := each(g, "phalanks_config_hash")
				g.Expect(hashes[0]).NotTo(Equal("0"))
				g.Expect(hashes).To(HaveEach(hashes[0]), "replicas disagree")
				hash = hashes[0]
				g.Expect(each(g, "phalanks_config_restart_required")).To(HaveEach("1"))
				g.Expect(each(g, "phalanks_config_last_reload_successful")).To(HaveEach("1"))
				g.Expect(reasons(g)).To(ContainElements(
					ContainSubstring("ConfigurationApplied: Applied: --zap-log-level"),
					ContainSubstring("RestartRequired:")))
			}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())

			By("a live setting of scheduled scaling: a namespace excluded now has its workload restored at once")
			const live = "config-live"
			Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: live}})).To(Succeed())
			DeferCleanup(func() {
				_ = k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: live}})
			})
			held := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: live,
					Annotations: map[string]string{scaling.AnnotationDowntime: "always", scaling.AnnotationGracePeriod: "0"}},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To[int32](1),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "held"}},
					Template: podTemplate("held"),
				},
			}
			Expect(k8s.Create(ctx, held)).To(Succeed())
			Eventually(func(g Gomega) *int32 {
				alive()
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(held), held)).To(Succeed())
				return held.Spec.Replicas
			}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(HaveValue(BeEquivalentTo(0)), "held down by its annotation")
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
			cm.Data["scaling-exclude-namespaces"] = strings.Join(append(scaling.DefaultExcludeNamespaces(operatorNamespace), live), ",")
			Expect(k8s.Update(ctx, cm)).To(Succeed())
			Eventually(func(g Gomega) {
				alive()
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(held), held)).To(Succeed())
				g.Expect(held.Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
				g.Expect(held.Status.ReadyReplicas).To(BeEquivalentTo(1), "its pod runs on the node again")
				g.Expect(reasons(g)).To(ContainElement(ContainSubstring("ConfigurationApplied: Applied: --scaling-exclude-namespaces")))
				g.Expect(each(g, "phalanks_config_hash")).To(HaveEach(Not(Equal(hash))), "every replica accepted the change")
			}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
			hash = each(Default, "phalanks_config_hash")[0]

			By("a value the flag does not accept: refused, the last good configuration kept")
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
			// Not a flag the Deployment passes (the suite's pass --scaling-grace-period):
			// a flag wins over its key, which is then not read at all.
			cm.Data["storagebucket-status-heartbeat"] = "soon"
			Expect(k8s.Update(ctx, cm)).To(Succeed())
			Eventually(func(g Gomega) {
				alive()
				g.Expect(each(g, "phalanks_config_last_reload_successful")).To(HaveEach("0"))
				g.Expect(each(g, "phalanks_config_hash")).To(HaveEach(hash), "a refused change replaced the accepted hash")
				g.Expect(reasons(g)).To(ContainElement(ContainSubstring(`InvalidConfiguration: Refused, the operator keeps its last good configuration: ConfigMap ` +
					operatorNamespace + `/phalanks-operator-config key storagebucket-status-heartbeat="soon"`)))
			}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())

			By("deleting it: every replica back to no ConfigMap, nothing waiting for a restart")
			Expect(k8s.Delete(ctx, cm)).To(Succeed())
			Eventually(func(g Gomega) {
				alive()
				g.Expect(each(g, "phalanks_config_hash")).To(HaveEach("0"))
				g.Expect(each(g, "phalanks_config_restart_required")).To(HaveEach("0"))
				g.Expect(each(g, "phalanks_config_last_reload_successful")).To(HaveEach("1"))
			}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		})

		It("loads the alerting rules, which evaluate without error, none of them firing", func() {
			groups, err := monitoring.RuleGroups(ctx)
			check(err)
			Eventually(func(g Gomega) {
				alive()
				loaded, err := promAPI.Rules(ctx)
				g.Expect(err).NotTo(HaveOccurred())
				byName := map[string]prometheus.RuleGroup{}
				for _, lg := range loaded {
					byName[lg.Name] = lg
				}
				for _, want := range groups {
					lg, ok := byName[want.Name]
					g.Expect(ok).To(BeTrue(), "rule group %s not loaded", want.Name)
					g.Expect(lg.Rules).To(HaveLen(len(want.Rules)))
					for _, r := range lg.Rules {
						g.Expect(r.Health).To(Equal("ok"), "%s: %s", r.Name, r.LastError)
					}
				}
			}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
			firing, err := promAPI.Query(ctx, `ALERTS{alertname=~"Phalanks.*", alertstate="firing"}`)
			Expect(err).NotTo(HaveOccurred())
			Expect(firing).To(BeEmpty(), "alerts firing on a healthy operator")
		})

		It("names in its dashboards and alerts only metrics the running manager exports, and every query evaluates", func() {
			By("making the manager report a failed probe, an invalid schedule and a workload held down, so that every metric has a series")
			const ns = "monitoring-checks"
			Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
			Expect(k8s.Create(ctx, &phalanksv1beta1.StorageBucket{
				ObjectMeta: metav1.ObjectMeta{Name: "missing", Namespace: ns},
				Spec: phalanksv1beta1.StorageBucketSpec{
					BucketName: "no-such-bucket", Endpoint: s3.URL, InsecureAllowHTTP: true, Region: s3.Region,
					HealthCheck: phalanksv1beta1.HealthCheck{Interval: &metav1.Duration{Duration: 10 * time.Second}, Timeout: &metav1.Duration{Duration: 2 * time.Second}},
				},
			})).To(Succeed())
			Expect(k8s.Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "bad-schedule", Namespace: ns,
					Annotations: map[string]string{scaling.AnnotationUptime: "Mon-Fri 25:00-26:00"}},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To[int32](1),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "bad-schedule"}},
					Template: podTemplate("bad-schedule"),
				},
			})).To(Succeed())
			// The savings series exist from the first scale-down a replica observes.
			Expect(k8s.Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "held-down", Namespace: ns,
					Annotations: map[string]string{scaling.AnnotationDowntime: "always", scaling.AnnotationGracePeriod: "0"}},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To[int32](1),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "held-down"}},
					Template: podTemplate("held-down"),
				},
			})).To(Succeed())

			queries, err := monitoring.AllQueries(ctx)
			check(err)
			Eventually(func(g Gomega) {
				alive()
				exported := scrapeMetricNames(g)
				for _, name := range []string{
					"phalanks_storagebucket_probe_failures_total", "phalanks_scaling_invalid_schedules_total", "phalanks_scaling_replicas_scaled_down",
				} {
					g.Expect(exported).To(HaveKey(name), "the manager has not reported it yet")
				}
				for _, q := range queries {
					names, err := promAPI.MetricNames(ctx, q.Expr)
					g.Expect(err).NotTo(HaveOccurred(), "%s: %s", q.Source, q.Expr)
					g.Expect(names).NotTo(BeEmpty(), "%s names no metric: %s", q.Source, q.Expr)
					for _, n := range names {
						if n == "up" || n == "ALERTS" {
							continue // Prometheus's own series, about the scrapes and the alerts
						}
						g.Expect(exported).To(HaveKey(n), "%s names %s, which the manager does not export", q.Source, n)
					}
					_, err = promAPI.Query(ctx, q.Expr)
					g.Expect(err).NotTo(HaveOccurred(), "%s does not evaluate: %s", q.Source, q.Expr)
				}
			}).WithTimeout(2 * time.Minute).WithPolling(5 * time.Second).Should(Succeed())
		})
	})
}

// scrapedConfig is what of Prometheus's configuration the specs check.
type scrapedConfig struct {
	JobName   string `json:"job_name"`
	TLSConfig struct {
		CAFile             string `json:"ca_file"`
		ServerName         string `json:"server_name"`
		InsecureSkipVerify bool   `json:"insecure_skip_verify"`
	} `json:"tls_config"`
	Authorization struct {
		Type string `json:"type"`
		// Credentials reads "<secret>": Prometheus does not show it.
		Credentials     string `json:"credentials"`
		CredentialsFile string `json:"credentials_file"`
	} `json:"authorization"`
}

// shippedScrapeConfig returns the scrape configuration the Prometheus Operator generated
// from the shipped ServiceMonitor, as Prometheus runs it.
func shippedScrapeConfig() scrapedConfig {
	GinkgoHelper()
	raw, err := promAPI.Config(ctx)
	Expect(err).NotTo(HaveOccurred())
	var cfg struct {
		ScrapeConfigs []scrapedConfig `json:"scrape_configs"`
	}
	Expect(yaml.Unmarshal([]byte(raw), &cfg)).To(Succeed())
	for _, c := range cfg.ScrapeConfigs {
		if c.JobName == shippedPool {
			return c
		}
	}
	Fail("Prometheus runs no job " + shippedPool)
	return scrapedConfig{}
}

// shippedServiceMonitor returns a copy of config/prometheus's ServiceMonitor under
// another name, whose targets carry their own job label.
func shippedServiceMonitor(name string) *unstructured.Unstructured {
	GinkgoHelper()
	objs, err := deploy.Render(ctx, "config/prometheus")
	check(err)
	for _, o := range objs {
		if o.GetKind() != "ServiceMonitor" {
			continue
		}
		sm := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": o.GetAPIVersion(), "kind": o.GetKind(),
			"metadata": map[string]any{"name": name, "namespace": o.GetNamespace()},
			"spec":     o.Object["spec"],
		}}
		setEndpoint(sm, func(ep map[string]any) {
			ep["relabelings"] = []any{map[string]any{"targetLabel": "job", "replacement": name, "action": "replace"}}
		})
		return sm
	}
	Fail("config/prometheus renders no ServiceMonitor")
	return nil
}

// setEndpoint changes the first endpoint of a ServiceMonitor.
func setEndpoint(sm *unstructured.Unstructured, change func(map[string]any)) {
	GinkgoHelper()
	endpoints, _, err := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	Expect(err).NotTo(HaveOccurred())
	Expect(endpoints).NotTo(BeEmpty())
	ep := endpoints[0].(map[string]any)
	change(ep)
	endpoints[0] = ep
	Expect(unstructured.SetNestedSlice(sm.Object, endpoints, "spec", "endpoints")).To(Succeed())
}

// scrapeMetricNames scrapes every replica's /metrics as the ServiceMonitor does (TLS
// verified with the rotator's CA, the scraper's token) and returns the metric names of
// the samples they export, together.
func scrapeMetricNames(g Gomega) map[string]bool {
	token := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: scraperSA + "-token"}, token)).To(Succeed())
	g.Expect(token.Data["token"]).NotTo(BeEmpty())
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: certPool(certSecret().Data["ca.crt"]), ServerName: metricsServerName, MinVersion: tls.VersionTLS12,
	}}}
	names := map[string]bool{}
	pods := operatorPods()
	for _, p := range pods {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(p.Status.PodIP, fmt.Sprint(metricsPort))+"/metrics", nil)
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+string(token.Data["token"]))
		resp, err := hc.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK), string(body))
		sc := bufio.NewScanner(strings.NewReader(string(body)))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name := line[:strings.IndexAny(line, "{ ")]
			names[name] = true
		}
	}
	return names
}
