package olmv1_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/test/harness/replicas"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
	"github.com/phalanks/phalanks-operator/test/olm"
	"github.com/phalanks/phalanks-operator/test/olmv1"
)

// docsFieldOwner applies what docs/install-olm.md gives, as one user would: applying the
// documented ClusterExtension again drops what the suite added to it before.
const docsFieldOwner = "phalanks-olmv1-docs"

// docsSection is the heading of docs/install-olm.md's OLM v1 section.
const docsSection = "## Installing with OLM v1"

// docsObject returns the one object of kind among the YAML blocks of docs/install-olm.md's OLM v1
// section.
func docsObject(kind string) *unstructured.Unstructured {
	GinkgoHelper()
	section := docsOLMv1()
	var found []*unstructured.Unstructured
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(section, -1) {
		dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(m[1]), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				Expect(err).To(MatchError(io.EOF), "a YAML block of docs/install-olm.md's OLM v1 section")
				break
			}
			if u.GetKind() == kind {
				found = append(found, u)
			}
		}
	}
	Expect(found).To(HaveLen(1), "docs/install-olm.md's OLM v1 section gives one %s", kind)
	return found[0]
}

func nested(u *unstructured.Unstructured, fields ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, fields...)
	return s
}

// apply applies u server-side as docsFieldOwner.
func apply(u *unstructured.Unstructured) {
	GinkgoHelper()
	Expect(k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(docsFieldOwner), client.ForceOwnership)).
		To(Succeed(), "apply %s %s", u.GetKind(), u.GetName())
}

// warningRecorder keeps the warnings the API server sends.
type warningRecorder struct {
	mu       sync.Mutex
	messages []string
}

func (w *warningRecorder) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, message string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.messages = append(w.messages, message)
}

// applyWithWarnings applies u as apply does and returns the API server's warnings.
func applyWithWarnings(u *unstructured.Unstructured) []string {
	GinkgoHelper()
	cfg := rest.CopyConfig(local.Config)
	w := &warningRecorder{}
	cfg.WarningHandlerWithContext = w
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	check(err)
	Expect(c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(docsFieldOwner), client.ForceOwnership)).To(Succeed())
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.messages
}

func get(gvk schema.GroupVersionKind, namespace, name string) *unstructured.Unstructured {
	GinkgoHelper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, u)).To(Succeed())
	return u
}

func conditionsOf(g Gomega, u *unstructured.Unstructured) []metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var conds []metav1.Condition
	for _, r := range raw {
		m, _ := r.(map[string]any)
		var c metav1.Condition
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c)).To(Succeed())
		conds = append(conds, c)
	}
	return conds
}

// setCatalogImage points the ClusterCatalog at another catalog image and waits until it
// serves it.
func setCatalogImage(image string) {
	GinkgoHelper()
	Expect(k8s.Patch(ctx, get(clusterCatalogGVK, "", catalogName), client.RawPatch(types.MergePatchType,
		fmt.Appendf(nil, `{"spec":{"source":{"image":{"ref":%q}}}}`, image)))).To(Succeed())
	expectCatalogServing(image)
}

// expectCatalogServing waits until the ClusterCatalog serves image: Serving, unpacked
// from image, resolved to a digest.
func expectCatalogServing(image string) {
	GinkgoHelper()
	repo := image[:strings.LastIndex(image, ":")]
	Eventually(func(g Gomega) {
		alive()
		cc := get(clusterCatalogGVK, "", catalogName)
		conds := conditionsOf(g, cc)
		g.Expect(meta.FindStatusCondition(conds, "Serving")).To(HaveValue(HaveField("Status", metav1.ConditionTrue)), "ClusterCatalog %s: %v", catalogName, conds)
		g.Expect(meta.FindStatusCondition(conds, "Progressing")).To(HaveValue(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", "Succeeded"))),
			"ClusterCatalog %s: %v", catalogName, conds)
		g.Expect(nested(cc, "status", "resolvedSource", "image", "ref")).To(HavePrefix(repo + "@sha256:"))
		g.Expect(nested(cc, "spec", "source", "image", "ref")).To(Equal(image))
		g.Expect(meta.FindStatusCondition(conds, "Progressing").ObservedGeneration).To(Equal(cc.GetGeneration()))
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
}

// catalogContent fetches the ClusterCatalog's whole content from catalogd's HTTPS
// endpoint (status.urls.base), verifying catalogd's certificate against OLM v1's CA.
func catalogContent() string {
	GinkgoHelper()
	base := nested(get(clusterCatalogGVK, "", catalogName), "status", "urls", "base")
	Expect(base).To(HavePrefix("https://catalogd-service." + olmv1.Namespace + ".svc/"))
	ca := &corev1.Secret{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: olmv1.CertManagerNamespace, Name: "olmv1-ca"}, ca)).To(Succeed())
	pool := x509.NewCertPool()
	Expect(pool.AppendCertsFromPEM(ca.Data["ca.crt"])).To(BeTrue(), "olmv1-ca's ca.crt")
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	var body []byte
	Eventually(func(g Gomega) {
		resp, err := hc.Get(base + "/api/v1/all")
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		body, err = io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	return string(body)
}

// extensionConditions returns the ClusterExtension's conditions.
func extensionConditions(g Gomega) []metav1.Condition {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(clusterExtensionGVK)
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: extension}, u)).To(Succeed())
	return conditionsOf(g, u)
}

func installedVersion() string {
	GinkgoHelper()
	return nested(get(clusterExtensionGVK, "", extension), "status", "install", "bundle", "version")
}

// expectInstalled waits until the ClusterExtension has installed r: its bundle recorded,
// Installed, and Progressing done for the current generation.
func expectInstalled(r *olm.Release) {
	GinkgoHelper()
	By("installing " + r.CSVName() + " through the ClusterExtension")
	Eventually(func(g Gomega) {
		alive()
		ce := &unstructured.Unstructured{}
		ce.SetGroupVersionKind(clusterExtensionGVK)
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: extension}, ce)).To(Succeed())
		conds := conditionsOf(g, ce)
		progressing := meta.FindStatusCondition(conds, "Progressing")
		g.Expect(nested(ce, "status", "install", "bundle", "name")).To(Equal(r.CSVName()), "ClusterExtension %s: %v", extension, conds)
		g.Expect(nested(ce, "status", "install", "bundle", "version")).To(Equal(r.Version))
		g.Expect(meta.FindStatusCondition(conds, "Installed")).To(HaveValue(HaveField("Status", metav1.ConditionTrue)), "ClusterExtension %s: %v", extension, conds)
		g.Expect(progressing).To(HaveValue(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", "Succeeded"),
			HaveField("ObservedGeneration", ce.GetGeneration()))), "ClusterExtension %s: %v", extension, conds)
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
}

func bundleName(r *olm.Release) string { return r.CSVName() }

// deploymentName is the name of the release's operator Deployment.
func deploymentName(r *olm.Release) string {
	return r.CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Name
}

// expectConfiguredByConfigMap checks that every operator pod of the release read the
// configuration ConfigMap at its start: its start log lists the setting.
func expectConfiguredByConfigMap(r *olm.Release) {
	GinkgoHelper()
	dep := &appsv1.Deployment{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: deploymentName(r)}, dep)).To(Succeed())
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	Expect(err).NotTo(HaveOccurred())
	pods := &corev1.PodList{}
	Expect(k8s.List(ctx, pods, client.InNamespace(installNamespace), client.MatchingLabelsSelector{Selector: sel})).To(Succeed())
	Expect(pods.Items).NotTo(BeEmpty())
	for _, pod := range pods.Items {
		Expect(podLog(pod.Namespace, pod.Name)).To(ContainSubstring(`"msg":"settings from the configuration ConfigMap","configMap":"phalanks-operator-config","flags":["operator-replicas","scaling-grace-period","storagebucket-proxy"]`),
			"pod %s/%s read the configuration ConfigMap at its start", pod.Namespace, pod.Name)
	}
}

// expectOperatorReplicas waits until the release's operator Deployment runs n
// replicas, all available, each a live member of the StorageBucket ring.
func expectOperatorReplicas(r *olm.Release, n int32) {
	GinkgoHelper()
	Eventually(func() error {
		alive()
		return replicas.Check(ctx, k8s, installNamespace, deploymentName(r), n)
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
}

// watchReplicas reads the operator Deployment's spec.replicas every half second until
// the spec ends; the function it returns gives the lowest count read so far.
func watchReplicas(name string) func() int32 {
	var (
		mu     sync.Mutex
		lowest int32 = math.MaxInt32
	)
	wctx, cancel := context.WithCancel(ctx)
	DeferCleanup(cancel)
	go func() {
		defer GinkgoRecover()
		for wctx.Err() == nil {
			dep := &appsv1.Deployment{}
			if err := k8s.Get(wctx, client.ObjectKey{Namespace: installNamespace, Name: name}, dep); err == nil && dep.Spec.Replicas != nil {
				mu.Lock()
				lowest = min(lowest, *dep.Spec.Replicas)
				mu.Unlock()
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	return func() int32 {
		mu.Lock()
		defer mu.Unlock()
		return lowest
	}
}

// expectPodsOf waits until the release's operator Deployment runs its image, and its
// pods — as many as its replicas, of its current template — are Running and Ready.
func expectPodsOf(r *olm.Release) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		alive()
		dep := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: deploymentName(r)}, dep)).To(Succeed())
		g.Expect(dep.Spec.Template.Spec.Containers).To(ContainElement(HaveField("Image", r.Image)))
		g.Expect(dep.Status.ObservedGeneration).To(Equal(dep.Generation))
		replicas := *dep.Spec.Replicas
		g.Expect(dep.Status.UpdatedReplicas).To(Equal(replicas), "Deployment %s/%s status %+v", installNamespace, dep.Name, dep.Status)
		g.Expect(dep.Status.AvailableReplicas).To(Equal(replicas), "Deployment %s/%s status %+v", installNamespace, dep.Name, dep.Status)
		sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
		g.Expect(err).NotTo(HaveOccurred())
		pods := &corev1.PodList{}
		g.Expect(k8s.List(ctx, pods, client.InNamespace(installNamespace), client.MatchingLabelsSelector{Selector: sel})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(int(replicas)))
		for _, pod := range pods.Items {
			g.Expect(pod.DeletionTimestamp).To(BeNil())
			g.Expect(pod.Spec.Containers).To(ContainElement(HaveField("Image", r.Image)))
			g.Expect(pod.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.PodReady), HaveField("Status", corev1.ConditionTrue))),
				"pod %s/%s is not Ready: %+v", installNamespace, pod.Name, pod.Status.ContainerStatuses)
		}
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
	ns := &corev1.Namespace{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: installNamespace}, ns)).To(Succeed())
	Expect(ns.Labels).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "restricted"), "the pods were admitted under restricted Pod Security")
}

// expectCertificateReady waits until the cert-manager Certificate is Ready and its
// Secret holds a certificate and key.
func expectCertificateReady(key client.ObjectKey) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		alive()
		cert := &unstructured.Unstructured{}
		cert.SetGroupVersionKind(schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"})
		g.Expect(k8s.Get(ctx, key, cert)).To(Succeed())
		conds := conditionsOf(g, cert)
		g.Expect(meta.FindStatusCondition(conds, "Ready")).To(HaveValue(HaveField("Status", metav1.ConditionTrue)), "Certificate %s: %v", key, conds)
		secret := &corev1.Secret{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: nested(cert, "spec", "secretName")}, secret)).To(Succeed())
		g.Expect(secret.Data).To(And(HaveKey("tls.crt"), HaveKey("tls.key"), HaveKey("ca.crt")))
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
}

// expectWebhookCertificate checks the conversion webhook's wiring under OLM v1 with
// cert-manager: the StorageBucket CRD converts through the release's webhook Service,
// asks cert-manager's CA injector for the CA of a Certificate in the install namespace,
// and carries exactly the CA of that Certificate's Secret.
func expectWebhookCertificate(r *olm.Release) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		alive()
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: storageBucketCRD}, crd)).To(Succeed())
		g.Expect(crd.Spec.Conversion).To(HaveValue(HaveField("Strategy", apiextensionsv1.WebhookConverter)))
		cc := crd.Spec.Conversion.Webhook.ClientConfig
		g.Expect(cc.Service).To(HaveValue(And(HaveField("Namespace", installNamespace), HaveField("Name", deploymentName(r)+"-service"))))
		from := crd.Annotations["cert-manager.io/inject-ca-from"]
		ns, name, ok := strings.Cut(from, "/")
		g.Expect(ok).To(BeTrue(), "CRD %s asks cert-manager to inject a CA: annotation %q", storageBucketCRD, from)
		g.Expect(ns).To(Equal(installNamespace))
		expectCertificateReady(client.ObjectKey{Namespace: ns, Name: name})
		cert := get(schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}, ns, name)
		secret := &corev1.Secret{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: nested(cert, "spec", "secretName")}, secret)).To(Succeed())
		g.Expect(bytes.TrimSpace(cc.CABundle)).To(Equal(bytes.TrimSpace(secret.Data["ca.crt"])), "the CRD trusts the CA of the webhook's certificate")
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
}

func podLog(namespace, name string) string {
	GinkgoHelper()
	data, err := cs.CoreV1().Pods(namespace).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred(), "log of pod %s/%s", namespace, name)
	return string(data)
}

func kubectl(args ...string) string {
	GinkgoHelper()
	bin, err := tools.Path("kubectl")
	check(err)
	// A discovery cache of its own each time: kubectl's default one (~/.kube/cache) would
	// remember API versions of an earlier moment, or an earlier cluster on the same port.
	cache, err := os.MkdirTemp(dir, "kubectl-cache-")
	check(err)
	defer func() { _ = os.RemoveAll(cache) }()
	cmd := exec.Command(bin, append([]string{"--kubeconfig", local.Kubeconfig, "--cache-dir", cache}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "kubectl %s: %s", strings.Join(args, " "), stderr.String())
	GinkgoWriter.Printf("$ kubectl %s\n%s", strings.Join(args, " "), out)
	return string(out)
}

// expectReconciled asserts the operator's work on a kind within reconcileTimeout.
func expectReconciled(what string, check func(g Gomega)) {
	GinkgoHelper()
	Eventually(check).WithTimeout(reconcileTimeout).WithPolling(poll).Should(Succeed(), what)
}

func storageBucketReady(namespace, name string) func(g Gomega) {
	return func(g Gomega) {
		sb := &phalanksv1beta1.StorageBucket{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, sb)).To(Succeed())
		ready := meta.FindStatusCondition(sb.Status.Conditions, phalanksv1beta1.ConditionReady)
		g.Expect(ready).NotTo(BeNil(), "StorageBucket %s/%s has no Ready condition; status %+v", namespace, name, sb.Status)
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "StorageBucket %s/%s Ready: %s: %s", namespace, name, ready.Reason, ready.Message)
		g.Expect(ready.ObservedGeneration).To(Equal(sb.Generation))
	}
}

func fooDeploymentAvailable(namespace, name string) func(g Gomega) {
	return func(g Gomega) {
		foo := &phalanksv1alpha1.Foo{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, foo)).To(Succeed())
		dep := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: foo.Spec.DeploymentName}, dep)).To(Succeed())
		g.Expect(metav1.GetControllerOf(dep)).To(HaveValue(HaveField("UID", foo.UID)))
		g.Expect(foo.Spec.Replicas).NotTo(BeNil())
		g.Expect(dep.Status.AvailableReplicas).To(Equal(*foo.Spec.Replicas), "Deployment %s/%s status %+v", namespace, dep.Name, dep.Status)
		g.Expect(foo.Status.AvailableReplicas).To(Equal(*foo.Spec.Replicas), "Foo %s/%s status %+v", namespace, name, foo.Status)
	}
}

// samples are the CSV's alm-examples, in samplesNamespace.
func samples(r *olm.Release) []*unstructured.Unstructured {
	GinkgoHelper()
	examples, err := bundle.ALMExamples(r.CSV)
	check(err)
	Expect(examples).NotTo(BeEmpty())
	for _, obj := range examples {
		obj.SetNamespace(samplesNamespace)
	}
	return examples
}

// expectSamplesReady waits until every StorageBucket sample is Ready and every Foo
// sample's Deployment Available.
func expectSamplesReady(examples []*unstructured.Unstructured) {
	GinkgoHelper()
	for _, obj := range examples {
		switch obj.GetKind() {
		case "StorageBucket":
			expectReconciled("sample StorageBucket "+obj.GetName()+" Ready", storageBucketReady(samplesNamespace, obj.GetName()))
		case "Foo":
			expectReconciled("sample Foo "+obj.GetName()+" owns an Available Deployment", fooDeploymentAvailable(samplesNamespace, obj.GetName()))
		}
	}
}

func storedVersions() []string {
	GinkgoHelper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: storageBucketCRD}, crd)).To(Succeed())
	return crd.Status.StoredVersions
}

// snapshot reads every user object in every version its kind serves, keyed by
// "<kind>/<name>@<version>", as spec JSON: what must survive an upgrade unchanged.
func snapshot() map[string]string {
	GinkgoHelper()
	out, err := readSnapshot()
	check(err)
	return out
}

// readSnapshot is snapshot returning read errors, for Eventually to retry them (the
// conversion webhook is briefly away while the manager rolls over). It covers the
// StorageBuckets of userNamespace and every sample: StorageBuckets through both served
// versions, Foos with the identity of the Deployment they own.
func readSnapshot() (map[string]string, error) {
	out := map[string]string{}
	add := func(key string, v any) error {
		data, err := json.Marshal(v)
		out[key] = string(data)
		return err
	}
	var errs []error
	for _, ns := range []string{userNamespace, samplesNamespace} {
		betas := &phalanksv1beta1.StorageBucketList{}
		if err := k8s.List(ctx, betas, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for _, beta := range betas.Items {
			key := ns + "/" + beta.Name
			alpha := &phalanksv1alpha1.StorageBucket{}
			errs = append(errs, k8s.Get(ctx, client.ObjectKeyFromObject(&beta), alpha),
				add("StorageBucket/"+key+"@v1beta1", beta.Spec), add("StorageBucket/"+key+"@v1alpha1", alpha.Spec))
		}
	}
	foos := &phalanksv1alpha1.FooList{}
	errs = append(errs, k8s.List(ctx, foos, client.InNamespace(samplesNamespace)))
	for _, foo := range foos.Items {
		dep := &appsv1.Deployment{}
		errs = append(errs, k8s.Get(ctx, client.ObjectKey{Namespace: samplesNamespace, Name: foo.Spec.DeploymentName}, dep),
			add("Foo/"+foo.Name, foo.Spec), add("Foo/"+foo.Name+"/Deployment", dep.UID))
	}
	return out, errors.Join(errs...)
}

func putObject(bucket, name, content string) error {
	c, err := s3.Client()
	if err != nil {
		return err
	}
	_, err = c.PutObject(ctx, bucket, name, strings.NewReader(content), int64(len(content)), miniogo.PutObjectOptions{})
	return err
}

func getObject(bucket, name string) (string, error) {
	c, err := s3.Client()
	if err != nil {
		return "", err
	}
	obj, err := c.GetObject(ctx, bucket, name, miniogo.GetObjectOptions{})
	if err != nil {
		return "", err
	}
	defer func() { _ = obj.Close() }()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(obj)
	return buf.String(), err
}

func bucketExists(name string) (bool, error) {
	c, err := s3.Client()
	if err != nil {
		return false, err
	}
	return c.BucketExists(ctx, name)
}
