package olmv1_test

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	harnesssamples "github.com/phalanks/phalanks-operator/test/harness/samples"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
	"github.com/phalanks/phalanks-operator/test/olmv1"
)

const (
	// installNamespace is the ClusterExtension's namespace, as docs/install-olm.md creates it.
	installNamespace = "phalanks-operator"
	// userNamespace holds the users' objects: an AllNamespaces install serves it too.
	userNamespace = "team-a"
	// samplesNamespace holds the CSV's alm-examples, pointed at MinIO.
	samplesNamespace = "samples"
	// extension and catalogName are the names docs/install-olm.md gives the ClusterExtension and
	// the ClusterCatalog.
	extension   = "phalanks-operator"
	catalogName = "phalanks"
	// missingInstaller is a service account that does not exist: v1.11 ignores
	// spec.serviceAccount, so naming it changes nothing but a warning.
	missingInstaller = "phalanks-installer-that-does-not-exist"
	storageBucketCRD = "storagebuckets.phalanks.io"
	certManagerGroup = "cert-manager.io"

	// installTimeout bounds each step of OLM v1's work (unpack, resolve, apply, roll out);
	// on a loaded 2-core machine one step takes seconds to a minute.
	installTimeout = 5 * time.Minute
	// reconcileTimeout bounds the operator's own work on an object.
	reconcileTimeout = 2 * time.Minute
	poll             = time.Second
)

var (
	clusterCatalogGVK   = olmGVK("ClusterCatalog")
	clusterExtensionGVK = olmGVK("ClusterExtension")
)

func olmGVK(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "olm.operatorframework.io", Version: "v1", Kind: kind}
}

var _ = Describe("phalanks-operator installed, upgraded and uninstalled through OLM v1", Ordered, func() {
	// Each manager pod runs with exactly the RBAC OLM v1 created from the CSV's
	// permissions; a request it does not allow shows in its log.
	AfterEach(func() {
		pods := &corev1.PodList{}
		Expect(k8s.List(ctx, pods, client.InNamespace(installNamespace))).To(Succeed())
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				continue
			}
			var denied []string
			for line := range strings.Lines(podLog(installNamespace, p.Name)) {
				if strings.Contains(line, "is forbidden") {
					denied = append(denied, line)
				}
			}
			Expect(denied).To(BeEmpty(), "pod %s/%s: requests the bundle's RBAC does not allow", installNamespace, p.Name)
		}
	})

	It("runs OLM v1 as its standard manifest ships it, under restricted Pod Security, with certificates from cert-manager", func() {
		ns := &corev1.Namespace{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: olmv1.Namespace}, ns)).To(Succeed())
		Expect(ns.Labels).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "restricted"))
		pods := &corev1.PodList{}
		Expect(k8s.List(ctx, pods, client.InNamespace(olmv1.Namespace))).To(Succeed())
		Expect(pods.Items).To(HaveLen(2))
		for _, p := range pods.Items {
			Expect(p.Spec.Containers[0].Image).To(HaveSuffix(":" + olmv1.Version))
			Expect(p.Spec.NodeName).NotTo(BeEmpty())
		}
		By("issuing OLM v1's own certificates through its cert-manager objects: the CA, catalogd's and operator-controller's")
		for _, c := range []client.ObjectKey{
			{Namespace: olmv1.CertManagerNamespace, Name: "olmv1-ca"},
			{Namespace: olmv1.Namespace, Name: "catalogd-service-cert"},
			{Namespace: olmv1.Namespace, Name: "operator-controller-cert"},
		} {
			expectCertificateReady(c)
		}
	})

	It("serves the committed catalog through the ClusterCatalog docs/install-olm.md gives, over TLS cert-manager issued", func() {
		By("applying the ClusterCatalog of docs/install-olm.md")
		cc := docsObject("ClusterCatalog")
		Expect(cc.GetName()).To(Equal(catalogName))
		Expect(nested(cc, "spec", "source", "image", "ref")).To(Equal(committedCatalogImage))
		apply(cc)
		expectCatalogServing(committedCatalogImage)

		By("labelling it with its name, through catalogd's mutating webhook, which cert-manager's CA injector gave its CA")
		got := get(clusterCatalogGVK, "", catalogName)
		Expect(got.GetLabels()).To(HaveKeyWithValue("olm.operatorframework.io/metadata.name", catalogName))

		By("serving the catalog's content, the deprecation included, from catalogd's HTTPS endpoint")
		all := catalogContent()
		Expect(all).To(ContainSubstring(`"schema":"olm.package"`))
		Expect(all).To(ContainSubstring(`"name":"` + first.CSVName() + `"`))
		Expect(all).To(ContainSubstring(`"schema":"olm.deprecations"`))
	})

	It("installs the first release, pinned, ignores spec.serviceAccount with a warning, and shows the release's deprecation", func() {
		By("creating the namespace docs/install-olm.md gives: restricted Pod Security")
		apply(docsObject("Namespace"))
		ce := docsObject("ClusterExtension")
		Expect(unstructured.SetNestedField(ce.Object, first.Version, "spec", "source", "catalog", "version")).To(Succeed())
		Expect(unstructured.SetNestedField(ce.Object, missingInstaller, "spec", "serviceAccount", "name")).To(Succeed())
		warnings := applyWithWarnings(ce)
		Expect(warnings).To(ContainElement(ContainSubstring("spec.serviceAccount is deprecated, ignored")))

		expectInstalled(first)
		Eventually(func(g Gomega) {
			alive()
			conds := extensionConditions(g)
			g.Expect(meta.FindStatusCondition(conds, "BundleDeprecated")).To(HaveValue(And(
				HaveField("Status", metav1.ConditionTrue), HaveField("Reason", "Deprecated"),
				HaveField("Message", Equal(deprecation))))) // the committed catalog's message
			g.Expect(meta.FindStatusCondition(conds, "Deprecated")).To(HaveValue(HaveField("Status", metav1.ConditionTrue)))
			g.Expect(meta.FindStatusCondition(conds, "PackageDeprecated")).To(HaveValue(HaveField("Status", metav1.ConditionFalse)))
			g.Expect(meta.FindStatusCondition(conds, "ChannelDeprecated")).To(HaveValue(HaveField("Status", metav1.ConditionFalse)))
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
		Expect(kubectl("get", "clusterextension", extension)).To(MatchRegexp(`(?m)^%s\s+%s\s+%s\s+True\s+True\s`, extension, bundleName(first), first.Version))
	})

	It("upgrades to the committed release once the documented ClusterExtension lifts the pin: preflight passes, restricted pods Ready, webhook certificate from cert-manager", func() {
		By("configuring the operator the only way OLM v1 allows: the configuration ConfigMap in the install namespace, a proxy for StorageBucket endpoints included")
		Expect(k8s.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: installNamespace, Name: "phalanks-operator-config"},
			Data: map[string]string{"scaling-grace-period": "20m", "operator-replicas": "3",
				"storagebucket-proxy": egressProxy.URL.String()},
		})).To(Succeed())
		By("applying the ClusterExtension of docs/install-olm.md, which has no version")
		ce := docsObject("ClusterExtension")
		Expect(nested(ce, "spec", "source", "catalog", "version")).To(BeEmpty())
		apply(ce)
		expectInstalled(previous)
		Eventually(func(g Gomega) {
			conds := extensionConditions(g)
			g.Expect(meta.FindStatusCondition(conds, "Deprecated")).To(HaveValue(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", "NotDeprecated"))))
			g.Expect(meta.FindStatusCondition(conds, "BundleDeprecated")).To(HaveValue(HaveField("Status", metav1.ConditionFalse)))
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
		expectPodsOf(previous)
		expectConfiguredByConfigMap(previous)
		expectWebhookCertificate(previous)
		By("running the three replicas the ConfigMap asks for, which the first release's CSV did not own")
		expectOperatorReplicas(previous, 3)
	})

	It("documents an installer service account (v1.10 and earlier) that may manage everything OLM v1 installed and grant everything it granted", func() {
		for _, kind := range installerObjects {
			apply(docsObject(kind))
		}
		expectInstallerCovers()
	})

	It("converts StorageBuckets between v1alpha1 and v1beta1, reads and writes, through the webhook", func() {
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: userNamespace}})).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "minio-credentials", Namespace: userNamespace,
				Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": s3.AccessKey, "AWS_SECRET_ACCESS_KEY": s3.SecretKey},
		})).To(Succeed())
		for _, b := range buckets {
			Expect(s3.MakeBucket(ctx, b, miniogo.MakeBucketOptions{})).To(Succeed())
			Expect(putObject(b, "user-data.txt", "written before the operator was installed")).To(Succeed())
		}
		beta := &phalanksv1beta1.StorageBucket{
			ObjectMeta: metav1.ObjectMeta{Name: "created-as-v1beta1", Namespace: userNamespace},
			Spec: phalanksv1beta1.StorageBucketSpec{
				BucketName:           "created-as-v1beta1",
				Endpoint:             s3.URL,
				InsecureAllowHTTP:    true,
				Region:               s3.Region,
				CredentialsSecretRef: &phalanksv1beta1.CredentialsSecretReference{Name: "minio-credentials"},
				HealthCheck: phalanksv1beta1.HealthCheck{
					Interval: &metav1.Duration{Duration: 10 * time.Second},
					Timeout:  &metav1.Duration{Duration: 5 * time.Second},
				},
			},
		}
		Expect(k8s.Create(ctx, beta)).To(Succeed())
		Eventually(func(g Gomega) {
			alpha := &phalanksv1alpha1.StorageBucket{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(beta), alpha)).To(Succeed())
			g.Expect(alpha.Spec.Endpoint).To(Equal(s3.Endpoint), "v1alpha1 shows the endpoint without scheme")
			g.Expect(alpha.Spec.SecretName).To(Equal("minio-credentials"))
			g.Expect(alpha.Spec.IntervalSeconds).To(BeEquivalentTo(10))
		}).WithTimeout(reconcileTimeout).WithPolling(poll).Should(Succeed(), "StorageBucket created as v1beta1, read as v1alpha1")

		alpha := &phalanksv1alpha1.StorageBucket{
			ObjectMeta: metav1.ObjectMeta{Name: "created-as-v1alpha1", Namespace: userNamespace},
			Spec: phalanksv1alpha1.StorageBucketSpec{
				BucketName:      "created-as-v1alpha1",
				Endpoint:        s3.Endpoint,
				Insecure:        true,
				Region:          s3.Region,
				SecretName:      "minio-credentials",
				IntervalSeconds: 30,
			},
		}
		Expect(k8s.Create(ctx, alpha)).To(Succeed())
		By("writing through v1alpha1: an update of the object created as v1alpha1")
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(alpha), alpha)).To(Succeed())
			alpha.Spec.IntervalSeconds = 10
			g.Expect(k8s.Update(ctx, alpha)).To(Succeed())
		}).WithTimeout(reconcileTimeout).WithPolling(poll).Should(Succeed())
		read := &phalanksv1beta1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(alpha), read)).To(Succeed())
		Expect(read.Spec.Endpoint).To(Equal("http://"+s3.Endpoint), "v1beta1 adds the scheme")
		Expect(read.Spec.CredentialsSecretRef).To(HaveField("Name", "minio-credentials"))
		Expect(read.Spec.HealthCheck.IntervalDuration()).To(Equal(10*time.Second), "the v1alpha1 update, stored as v1beta1")
	})

	It("reconciles StorageBuckets to Ready through the configured proxy, and the CSV's samples, pointed at MinIO", func() {
		for _, name := range buckets {
			expectReconciled("StorageBucket "+userNamespace+"/"+name+" Ready", storageBucketReady(userNamespace, name))
		}
		Expect(egressProxy.Requests(cluster.NodeIP)).To(BeNumerically(">", 0), "the probes of MinIO did not go through storagebucket-proxy")
		Expect(k8s.Create(ctx, harnesssamples.Namespace(samplesNamespace))).To(Succeed())
		examples := samples(previous)
		for _, obj := range examples {
			switch obj.GetKind() {
			case "StorageBucket":
				check(harnesssamples.PointAtMinIO(ctx, k8s, s3, obj))
			case "Foo":
				Expect(unstructured.SetNestedField(obj.Object, testAppImage, "spec", "image")).To(Succeed())
			}
			Expect(k8s.Create(ctx, obj)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
		}
		expectSamplesReady(examples)
	})

	It("puts back an installed object someone deleted, at once (drift detection through the tracking cache)", func() {
		svc := &corev1.Service{}
		key := client.ObjectKey{Namespace: installNamespace, Name: deploymentName(previous) + "-service"}
		Expect(k8s.Get(ctx, key, svc)).To(Succeed())
		uid := svc.UID
		Expect(k8s.Delete(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			alive()
			got := &corev1.Service{}
			g.Expect(k8s.Get(ctx, key, got)).To(Succeed())
			g.Expect(got.UID).NotTo(Equal(uid), "Service %s is the deleted one", key)
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), "operator-controller re-creates the webhook Service")
		// Repaired means serving: the conversion webhook answers through the new Service
		// (the node's kube-proxy programs its new address a moment after it exists).
		Eventually(func() error { _, err := readSnapshot(); return err }).
			WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), "StorageBuckets read through the re-created webhook Service")
	})

	var beforeUpgrade map[string]string

	It("upgrades to the next release when the catalog offers it, and keeps every object in both versions and every bucket's data", func() {
		beforeUpgrade = snapshot()
		// Neither release's Deployment sets a replica count, so the upgrade keeps the
		// operator's own.
		lowest := watchReplicas(deploymentName(previous))
		setCatalogImage(upgradeCatalogImage)
		expectInstalled(current)
		expectPodsOf(current)
		expectConfiguredByConfigMap(current)
		expectWebhookCertificate(current)
		expectOperatorReplicas(current, 3)
		Expect(lowest()).To(BeEquivalentTo(3), "the operator's replica count during the upgrade")
		Eventually(func(g Gomega) { g.Expect(readSnapshot()).To(Equal(beforeUpgrade)) }).
			WithTimeout(reconcileTimeout).WithPolling(poll).Should(Succeed())
		for _, name := range buckets {
			expectReconciled("StorageBucket "+userNamespace+"/"+name+" Ready after the upgrade", storageBucketReady(userNamespace, name))
			Expect(getObject(name, "user-data.txt")).To(Equal("written before the operator was installed"))
		}
		expectSamplesReady(samples(previous))
		Eventually(storedVersions).WithTimeout(reconcileTimeout).WithPolling(poll).Should(Equal([]string{"v1beta1"}),
			"the operator's storage migration leaves only the storage version")
	})

	It("refuses an upgrade whose StorageBucket CRD adds a required field, and keeps the installed release running", func() {
		crdBefore := &apiextensionsv1.CustomResourceDefinition{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: storageBucketCRD}, crdBefore)).To(Succeed())
		setCatalogImage(unsafeCatalogImage)
		Eventually(func(g Gomega) {
			alive()
			if v := installedVersion(); v == unsafe.Version {
				StopTrying("OLM v1 installed the unsafe release " + v).Now()
			}
			progressing := meta.FindStatusCondition(extensionConditions(g), "Progressing")
			g.Expect(progressing).NotTo(BeNil())
			g.Expect(progressing.Reason).To(Equal("Retrying"), "Progressing: %s", progressing.Message)
			g.Expect(progressing.Message).To(And(
				ContainSubstring(`validating upgrade for CRD "`+storageBucketCRD+`"`),
				ContainSubstring(newRequiredField)), "the preflight names the CRD and the field")
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
		kubectl("get", "clusterextension", extension, "-o", `jsonpath={range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}`)
		Expect(installedVersion()).To(Equal(current.Version))
		crdAfter := &apiextensionsv1.CustomResourceDefinition{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: storageBucketCRD}, crdAfter)).To(Succeed())
		Expect(crdAfter.Spec.Versions).To(Equal(crdBefore.Spec.Versions), "the CRD is left as it was")
		expectPodsOf(current)
		Expect(readSnapshot()).To(Equal(beforeUpgrade))

		By("settling again on the installed release once the catalog no longer offers the unsafe one")
		setCatalogImage(upgradeCatalogImage)
		expectInstalled(current)
	})

	It("uninstalls when the ClusterExtension is deleted: the CRDs go, with every StorageBucket and Foo and what the Foos own; the buckets and their data stay", func() {
		By("having data in the bucket of the sample that manages its bucket and deletes it with itself (deletionPolicy Delete, nonEmptyStrategy Fail): the operator's finalizer is on it")
		deleting := sampleWithDeletionPolicy(phalanksv1beta1.DeletionDelete)
		Expect(putObject(deleting.Spec.BucketName, "user-data.txt", "written while the operator managed the bucket")).To(Succeed())
		Expect(deleting.Finalizers).To(ContainElement(phalanksv1beta1.FinalizerBucketDeletion))
		sampleBuckets := map[string]bool{}
		for _, obj := range samples(current) {
			if obj.GetKind() == "StorageBucket" {
				sb := must(harnesssamples.AsHub(obj))
				sampleBuckets[sb.Spec.BucketName] = true
			}
		}

		By("running the command docs/install-olm.md gives")
		for _, args := range [][]string{{"delete", "clusterextension", extension}} {
			Expect(docsOLMv1()).To(ContainSubstring("kubectl "+strings.Join(args, " ")), "docs/install-olm.md gives the command")
			Expect(kubectl(args...)).To(ContainSubstring("deleted"))
		}
		Eventually(func(g Gomega) {
			alive()
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(clusterExtensionGVK)
			g.Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: extension}, u))).To(BeTrue(), "ClusterExtension %s still exists: %v", extension, u.Object["status"])
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

		By("deleting what it installed: the operator's Deployment and pods, its webhook Service and Certificate, the Foo CRD, every Foo and the Deployments they owned, every StorageBucket without the finalizer")
		Eventually(func(g Gomega) {
			for _, obj := range []client.Object{
				&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: installNamespace, Name: deploymentName(current)}},
				&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: installNamespace, Name: deploymentName(current) + "-service"}},
				&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "foos.phalanks.io"}},
			} {
				err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s/%s: %v", obj, obj.GetNamespace(), obj.GetName(), err)
			}
			for _, ns := range []string{installNamespace, samplesNamespace} {
				pods := &corev1.PodList{}
				g.Expect(k8s.List(ctx, pods, client.InNamespace(ns))).To(Succeed())
				g.Expect(pods.Items).To(BeEmpty(), "pods in %s: the operator's, and the sample Foo's Deployment's", ns)
			}
			deps := &appsv1.DeploymentList{}
			g.Expect(k8s.List(ctx, deps, client.InNamespace(samplesNamespace))).To(Succeed())
			g.Expect(deps.Items).To(BeEmpty(), "the sample Foo's Deployment goes with the Foo")
			certs := &unstructured.UnstructuredList{}
			certs.SetGroupVersionKind(schema.GroupVersionKind{Group: certManagerGroup, Version: "v1", Kind: "CertificateList"})
			g.Expect(k8s.List(ctx, certs, client.InNamespace(installNamespace))).To(Succeed())
			g.Expect(certs.Items).To(BeEmpty())
			list := &phalanksv1beta1.StorageBucketList{}
			g.Expect(k8s.List(ctx, list)).To(Succeed())
			var left []string
			for _, sb := range list.Items {
				left = append(left, sb.Namespace+"/"+sb.Name)
			}
			g.Expect(left).To(ConsistOf(samplesNamespace+"/"+deleting.Name), "every StorageBucket without the finalizer is gone")
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

		By("leaving the StorageBucket with the finalizer, and its CRD, Terminating: no operator runs to act on its deletion policy")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(deleting), deleting)).To(Succeed())
		Expect(deleting.DeletionTimestamp).NotTo(BeNil())
		Expect(deleting.Finalizers).To(ContainElement(phalanksv1beta1.FinalizerBucketDeletion))
		crd := &apiextensionsv1.CustomResourceDefinition{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: storageBucketCRD}, crd)).To(Succeed())
		Expect(crd.DeletionTimestamp).NotTo(BeNil())

		By("finishing with the commands docs/install-olm.md gives: listing what waits, removing the finalizer by hand")
		list := []string{"get", "storagebuckets", "-A", "-o", "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,FINALIZERS:.metadata.finalizers"}
		Expect(docsOLMv1()).To(ContainSubstring("kubectl " + strings.Join(list, " ")))
		Expect(kubectl(list...)).To(MatchRegexp(`(?m)^%s\s+%s\s+\[%s\]`, samplesNamespace, deleting.Name, phalanksv1beta1.FinalizerBucketDeletion))
		Expect(docsOLMv1()).To(ContainSubstring("kubectl patch storagebuckets.v1beta1.phalanks.io NAME -n NAMESPACE --type=json --patch='" + removeFinalizers + "'"))
		kubectl("patch", "storagebuckets.v1beta1.phalanks.io", deleting.Name, "-n", samplesNamespace, "--type=json", "--patch="+removeFinalizers)
		Eventually(func(g Gomega) {
			err := k8s.Get(ctx, client.ObjectKey{Name: storageBucketCRD}, &apiextensionsv1.CustomResourceDefinition{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "CRD %s: %v", storageBucketCRD, err)
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

		By("keeping every bucket and its data, the credentials Secrets and the namespaces")
		for _, name := range buckets {
			Expect(getObject(name, "user-data.txt")).To(Equal("written before the operator was installed"))
		}
		for name := range sampleBuckets {
			Expect(bucketExists(name)).To(BeTrue(), "the sample's bucket %s", name)
		}
		Expect(getObject(deleting.Spec.BucketName, "user-data.txt")).To(Equal("written while the operator managed the bucket"))
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: userNamespace, Name: "minio-credentials"}, &corev1.Secret{})).To(Succeed())
		for _, name := range []string{installNamespace, userNamespace, samplesNamespace} {
			ns := &corev1.Namespace{}
			Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, ns)).To(Succeed())
			Expect(ns.DeletionTimestamp).To(BeNil())
		}
	})
})

// buckets are the S3 buckets of the StorageBuckets the suite creates, named as they are.
var buckets = []string{"created-as-v1beta1", "created-as-v1alpha1"}

// sampleWithDeletionPolicy returns the one sample StorageBucket with the deletion policy.
func sampleWithDeletionPolicy(policy phalanksv1beta1.DeletionPolicy) *phalanksv1beta1.StorageBucket {
	GinkgoHelper()
	list := &phalanksv1beta1.StorageBucketList{}
	Expect(k8s.List(ctx, list, client.InNamespace(samplesNamespace))).To(Succeed())
	var found []*phalanksv1beta1.StorageBucket
	for i := range list.Items {
		if list.Items[i].Spec.DeletionPolicy == policy {
			found = append(found, &list.Items[i])
		}
	}
	Expect(found).To(HaveLen(1), "samples with deletionPolicy %s", policy)
	return found[0]
}

func must[T any](v T, err error) T {
	GinkgoHelper()
	check(err)
	return v
}

// removeFinalizers is the JSON patch docs/install-olm.md gives to let a StorageBucket go when no
// operator runs.
const removeFinalizers = `[{"op":"remove","path":"/metadata/finalizers"}]`

// docsOLMv1 returns docs/install-olm.md's OLM v1 section.
func docsOLMv1() string {
	GinkgoHelper()
	root, err := tools.RepoRoot()
	check(err)
	data, err := os.ReadFile(filepath.Join(root, "docs", "install-olm.md"))
	check(err)
	_, section, ok := strings.Cut(string(data), "\n"+docsSection+"\n")
	Expect(ok).To(BeTrue(), "docs/install-olm.md has a section %q", docsSection)
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	return section
}
