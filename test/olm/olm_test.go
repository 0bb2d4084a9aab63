package olm_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/replicas"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
	"github.com/phalanks/phalanks-operator/test/olm"
)

const (
	// installNamespace is where the Subscription installs the operator.
	installNamespace = "phalanks-operator"
	// userNamespace holds the users' objects: an AllNamespaces install serves it too.
	userNamespace = "team-a"
	// catalogSource names our CatalogSource in OLM's global catalog namespace.
	catalogSource    = "phalanks-operator"
	storageBucketCRD = "storagebuckets.phalanks.io"

	// installTimeout bounds each step of OLM's work (resolve, install plan, CSV phases);
	// on a loaded 2-core machine one step takes seconds to a minute.
	installTimeout = 5 * time.Minute
	// reconcileTimeout bounds the operator's own work on an object.
	reconcileTimeout = 2 * time.Minute
	poll             = time.Second
)

// expectReconciled asserts the operator's work on a kind: check must pass within
// reconcileTimeout.
func expectReconciled(what string, check func(g Gomega)) {
	GinkgoHelper()
	Eventually(check).WithTimeout(reconcileTimeout).WithPolling(poll).Should(Succeed(), what)
}

var _ = Describe("phalanks-operator installed and upgraded through OLM", Ordered, func() {
	// Each manager pod runs with exactly the RBAC OLM created from the CSV's permissions; a
	// request it does not allow shows in its log. The uninstall deletes that RBAC while the
	// pod is still terminating, so only pods that are not being deleted are checked.
	AfterEach(func() {
		pods := &corev1.PodList{}
		Expect(k8s.List(ctx, pods, client.InNamespace(installNamespace))).To(Succeed())
		sdkPods := &corev1.PodList{}
		Expect(k8s.List(ctx, sdkPods, client.InNamespace(sdkNamespace), client.HasLabels{"control-plane"})).To(Succeed())
		for _, p := range append(pods.Items, sdkPods.Items...) {
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				continue
			}
			log := podLog(p.Namespace, p.Name)
			var denied []string
			for line := range strings.Lines(log) {
				if strings.Contains(line, "is forbidden") {
					denied = append(denied, line)
				}
			}
			Expect(denied).To(BeEmpty(), "pod %s/%s: requests the bundle's RBAC does not allow", p.Namespace, p.Name)
		}
	})

	It("lists the package in packagemanifests with its channel and current CSV", func() {
		Expect(k8s.Create(ctx, &operatorsv1alpha1.CatalogSource{
			ObjectMeta: metav1.ObjectMeta{Name: catalogSource, Namespace: olm.Namespace},
			Spec: operatorsv1alpha1.CatalogSourceSpec{
				SourceType:  operatorsv1alpha1.SourceTypeGrpc,
				Image:       previousCatalog,
				DisplayName: "Phalanks (end-to-end test)",
				Publisher:   "Phalanks",
			},
		})).To(Succeed())
		Eventually(catalogSourceReady(previousCatalog)).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

		Eventually(packageManifestHead(previous)).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
		Expect(kubectl("get", "packagemanifests", "--namespace", installNamespace, "--field-selector", "metadata.name="+bundle.PackageName,
			"--output", "custom-columns=NAME:.metadata.name,CATALOG:.status.catalogSource,CHANNEL:.status.defaultChannel,CURRENT CSV:.status.channels[0].currentCSV",
		)).To(MatchRegexp(`(?m)^%s\s+%s\s+%s\s+%s\s*$`, bundle.PackageName, catalogSource, bundle.Channel, previous.CSVName()))
	})

	It("installs through an AllNamespaces OperatorGroup and a Subscription: InstallPlan, CSV Succeeded, CRDs with webhook conversion", func() {
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: installNamespace}})).To(Succeed())
		// No targetNamespaces and no selector: the AllNamespaces install mode.
		og := &operatorsv1.OperatorGroup{ObjectMeta: metav1.ObjectMeta{Name: "phalanks-operator", Namespace: installNamespace}}
		Expect(k8s.Create(ctx, og)).To(Succeed())
		Eventually(func(g Gomega) {
			alive()
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(og), og)).To(Succeed())
			g.Expect(og.Status.Namespaces).To(Equal([]string{metav1.NamespaceAll}), "OperatorGroup %s/%s targets every namespace", installNamespace, og.Name)
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
		// The configuration ConfigMap, created before the install as docs/configuration.md
		// tells OLM users to: OLM neither owns nor replaces it.
		Expect(k8s.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: installNamespace, Name: "phalanks-operator-config"},
			Data:       configMapSettings,
		})).To(Succeed())
		createTrustedCA()
		Expect(k8s.Create(ctx, subscription())).To(Succeed())

		expectInstalled(previous)

		By("configuring the operator through the Subscription's spec.config.env and the configuration ConfigMap")
		expectConfiguredBySubscription(previous)
		By("running the replicas the ConfigMap asks for, each a member of the StorageBucket ring")
		expectOperatorReplicas(previous, 3)

		By("having unpacked the bundle image with a Job on the node")
		expectBundleUnpacked(previous)

		By("keeping minKubeVersion on the installed CSV, where OLM checks it against the server")
		want := previous.CSV.Spec.MinKubeVersion
		Expect(want).NotTo(BeEmpty(), "the bundle declares a minKubeVersion")
		csv := getCSV(previous.CSVName())
		Expect(csv.Spec.MinKubeVersion).To(Equal(want))
		Expect(csv.Status.RequirementStatus).To(ContainElement(And(
			HaveField("Kind", "ClusterServiceVersion"),
			HaveField("Status", operatorsv1alpha1.RequirementStatusReasonPresent),
			HaveField("Message", ContainSubstring("minKubeVersion (%s)", want)))),
			"OLM evaluated minKubeVersion against the server version")

		Expect(storedVersions()).To(Equal([]string{"v1beta1"}))
	})

	It("converts StorageBuckets between v1alpha1 and v1beta1 through OLM's webhook wiring, served by our manager", func() {
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: userNamespace}})).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "minio-credentials", Namespace: userNamespace,
				Labels: map[string]string{phalanksv1beta1.LabelSecretAllowed: "true"}},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": s3.AccessKey, "AWS_SECRET_ACCESS_KEY": s3.SecretKey},
		})).To(Succeed())
		for _, b := range []string{"created-as-v1beta1", "created-as-v1alpha1"} {
			Expect(s3.MakeBucket(ctx, b, miniogo.MakeBucketOptions{})).To(Succeed())
			_, err := putObject(b, "user-data.txt", "written before the operator was installed")
			check(err)
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

		By("running our operator image as the pod of OLM's Deployment")
		expectPodOf(previous)

		Eventually(func(g Gomega) {
			alpha := &phalanksv1alpha1.StorageBucket{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(beta), alpha)).To(Succeed())
			g.Expect(alpha.Spec.Endpoint).To(Equal(s3.Endpoint), "v1alpha1 shows the endpoint without scheme")
			g.Expect(alpha.Spec.Insecure).To(BeTrue())
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
				IntervalSeconds: 10,
			},
		}
		Expect(k8s.Create(ctx, alpha)).To(Succeed())
		read := &phalanksv1beta1.StorageBucket{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(alpha), read)).To(Succeed())
		Expect(read.Spec.Endpoint).To(Equal("http://"+s3.Endpoint), "v1beta1 adds the scheme")
		Expect(read.Spec.InsecureAllowHTTP).To(BeTrue())
		Expect(read.Spec.CredentialsSecretRef).To(HaveField("Name", "minio-credentials"))
		Expect(read.Spec.HealthCheck.IntervalDuration()).To(Equal(10 * time.Second))
		createCompanyCABucket()
	})

	It("reconciles StorageBuckets against the MinIO inside the network namespace to Ready, and the company's through its proxy and CA", func() {
		for _, name := range []string{"created-as-v1beta1", "created-as-v1alpha1", companyCABucket} {
			expectReconciled("StorageBucket "+userNamespace+"/"+name+" Ready", storageBucketReady(name))
		}
		expectThroughTheProxy()
	})

	It("reconciles a Foo into its Deployment", func() {
		Expect(k8s.Create(ctx, &phalanksv1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: userNamespace},
			Spec:       phalanksv1alpha1.FooSpec{DeploymentName: "web", Replicas: ptr.To[int32](2), Image: testAppImage},
		})).To(Succeed())
		expectReconciled("Foo "+userNamespace+"/web owns an Available Deployment with 2 replicas", fooDeploymentAvailable("web", 2))
	})

	It("upgrades through the Subscription to the next release and keeps every object in both versions", func() {
		before := snapshot()

		By("pointing the CatalogSource at the catalog image whose channel holds previous → current")
		Expect(upgradeChannel).To(ConsistOf(
			declcfg.ChannelEntry{Name: previous.CSVName()},
			declcfg.ChannelEntry{Name: current.CSVName(), Replaces: previous.CSVName(), SkipRange: fmt.Sprintf(">=%s <%s", previous.Version, current.Version)},
		))
		Eventually(func(g Gomega) {
			src := &operatorsv1alpha1.CatalogSource{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: olm.Namespace, Name: catalogSource}, src)).To(Succeed())
			src.Spec.Image = upgradeCatalog
			g.Expect(k8s.Update(ctx, src)).To(Succeed())
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
		Eventually(catalogSourceReady(upgradeCatalog)).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
		Eventually(packageManifestHead(current)).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

		csv := expectInstalled(current)
		expectBundleUnpacked(current)
		Expect(csv.Spec.Replaces).To(Equal(previous.CSVName()), "OLM records the channel's replaces edge on the installed CSV")
		By("deleting the replaced CSV")
		Eventually(func(g Gomega) {
			old := &operatorsv1alpha1.ClusterServiceVersion{}
			err := k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: previous.CSVName()}, old)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "CSV %s/%s: phase %s (%s)", installNamespace, previous.CSVName(), old.Status.Phase, old.Status.Message)
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

		By("rolling the operator's pod over to the new release's image, still configured by the Subscription and the ConfigMap")
		expectConfiguredBySubscription(current)
		By("running the ConfigMap's three replicas again, which OLM set back to one, and keeping them: OLM and the operator do not fight")
		expectOperatorReplicas(current, 3)
		Consistently(func(g Gomega) {
			alive()
			g.Expect(replicas.Check(ctx, k8s, installNamespace, deploymentName(current), 3)).To(Succeed())
			csv := &operatorsv1alpha1.ClusterServiceVersion{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: current.CSVName()}, csv)).To(Succeed())
			g.Expect(csv.Status.Phase).To(Equal(operatorsv1alpha1.CSVPhaseSucceeded), "CSV %s: %s", csv.Status.Reason, csv.Status.Message)
		}).WithTimeout(30 * time.Second).WithPolling(poll).Should(Succeed())

		By("reading every object as before, in every served version")
		Eventually(func(g Gomega) { g.Expect(readSnapshot("")).To(Equal(before)) }).
			WithTimeout(reconcileTimeout).WithPolling(poll).Should(Succeed())
		Expect(storedVersions()).To(Equal([]string{"v1beta1"}), "both releases store v1beta1 (docs/api-versions.md)")

		for _, name := range []string{"created-as-v1beta1", "created-as-v1alpha1", companyCABucket} {
			expectReconciled("StorageBucket "+userNamespace+"/"+name+" Ready after the upgrade", storageBucketReady(name))
		}
		expectReconciled("Foo "+userNamespace+"/web still owns its Available Deployment after the upgrade", fooDeploymentAvailable("web", 2))

		// For a while after an upgrade OLM keeps working on it: the CSV can drop back to
		// InstallReady or Installing and return to Succeeded, and the catalog operator can
		// execute the completed InstallPlan once more from its cache, creating a CSV
		// deleted in that moment anew (seen in CI, uninstalling within a second of the
		// upgrade). The next spec starts once OLM has settled.
		By("letting OLM settle: the CSV stays Succeeded for " + settleWindow.String())
		expectSettled(current)
	})

	itRunsTheScorecard()

	var beforeUninstall map[string]string

	It("uninstalls, deleting the Subscription and the CSV, and leaves the users' objects and data intact", func() {
		beforeUninstall = snapshot()
		By("running the commands docs/install-olm.md gives")
		for _, args := range uninstallCommands(deploymentName(current)) {
			Expect(docsOLM()).To(ContainSubstring("kubectl "+strings.Join(args, " ")), "docs/install-olm.md gives the command")
			out := kubectl(args...)
			if args[0] == "delete" {
				Expect(out).To(ContainSubstring("deleted"))
			}
		}
		By("leaving no webhook Service or certificate Secret for a later install to reuse")
		for _, obj := range []client.Object{
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: installNamespace, Name: deploymentName(current) + "-service"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: installNamespace, Name: deploymentName(current) + "-service-cert"}},
		} {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s/%s after the documented wait: %v", obj, obj.GetNamespace(), obj.GetName(), err)
		}
		Eventually(func(g Gomega) {
			csv := &operatorsv1alpha1.ClusterServiceVersion{}
			err := k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: current.CSVName()}, csv)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "CSV %s/%s: phase %s", installNamespace, current.CSVName(), csv.Status.Phase)
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

		By("removing the operator's Deployment with its CSV")
		depName := deploymentName(current)
		Eventually(func(g Gomega) {
			dep := &appsv1.Deployment{}
			err := k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: depName}, dep)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Deployment %s/%s still exists (deleting: %v)", installNamespace, depName, dep.DeletionTimestamp != nil)
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
		Eventually(func(g Gomega) {
			pods := &corev1.PodList{}
			g.Expect(k8s.List(ctx, pods, client.InNamespace(installNamespace))).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty(), "the operator's pod goes with its Deployment")
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

		By("turning StorageBucket conversion off rather than leaving it pointing at a deleted Service")
		Eventually(func(g Gomega) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: storageBucketCRD}, crd)).To(Succeed())
			g.Expect(crd.Spec.Conversion).To(HaveValue(HaveField("Strategy", apiextensionsv1.NoneConverter)), "CRD %s conversion %+v", storageBucketCRD, crd.Spec.Conversion)
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

		By("keeping the CRDs, every object and its spec in the stored version")
		for _, crd := range current.CSV.Spec.CustomResourceDefinitions.Owned {
			Expect(k8s.Get(ctx, client.ObjectKey{Name: crd.Name}, &apiextensionsv1.CustomResourceDefinition{})).To(Succeed(), "CRD %s", crd.Name)
		}
		Expect(readSnapshot("v1alpha1")).To(Equal(withoutVersion(beforeUninstall, "v1alpha1")))
		Expect(storedVersions()).To(Equal([]string{"v1beta1"}))

		By("keeping the buckets and their contents in S3")
		for _, b := range []string{"created-as-v1beta1", "created-as-v1alpha1"} {
			Expect(getObject(b, "user-data.txt")).To(Equal("written before the operator was installed"))
		}

		By("serving v1alpha1 unconverted: the stored v1beta1 data without the fields only v1alpha1 has")
		// As on install, kube-apiserver applies the CRD's new conversion settings a moment
		// after they are written.
		Eventually(func(g Gomega) {
			alpha := &phalanksv1alpha1.StorageBucket{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: userNamespace, Name: "created-as-v1alpha1"}, alpha)).To(Succeed())
			g.Expect(alpha.Spec.Endpoint).To(Equal("http://"+s3.Endpoint), "the v1beta1 URL, not converted to host:port")
			g.Expect(alpha.Spec.SecretName).To(BeEmpty(), "v1beta1 keeps it in credentialsSecretRef")
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())

		// That view is wrong, and a write through it would lose what v1alpha1 cannot
		// express; it also makes OLM refuse a later install (see the next spec).
		By("stopping to serve v1alpha1 with the command docs/install-olm.md gives for after an uninstall")
		Expect(docsOLM()).To(ContainSubstring(stopServingV1alpha1), "docs/install-olm.md gives the patch")
		kubectl("patch", "crd", storageBucketCRD, "--type=json", "--patch="+stopServingV1alpha1)
		Eventually(func(g Gomega) {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: userNamespace, Name: "created-as-v1alpha1"}, &phalanksv1alpha1.StorageBucket{})
			g.Expect(err).To(Satisfy(apierrors.IsNotFound), "v1alpha1 is no longer served")
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
		Expect(readSnapshot("v1alpha1")).To(Equal(withoutVersion(beforeUninstall, "v1alpha1")))
	})

	// Before it replaces a CRD, OLM validates every existing object, listed in each version
	// the cluster's CRD serves, against the new schema of that version. Had v1alpha1 stayed
	// served without conversion, it would list the stored v1beta1 data, which fails the
	// v1alpha1 schema, and the InstallPlan with it. The bundle's CRD serves v1alpha1 again.
	It("installs again over the kept CRDs and objects, and every object reads as before in both versions", func() {
		Expect(k8s.Create(ctx, subscription())).To(Succeed())
		expectInstalled(current)
		expectPodOf(current)
		Eventually(func(g Gomega) { g.Expect(readSnapshot("")).To(Equal(beforeUninstall)) }).
			WithTimeout(reconcileTimeout).WithPolling(poll).Should(Succeed())
	})

	itRunsTheOperatorSDKInstallCommands()
})

// uninstallCommands are the kubectl commands docs/install-olm.md gives to uninstall: delete the
// Subscription and the CSV (found by the label OLM puts on the operator's objects), then
// wait until the garbage collector has removed the webhook Service and certificate Secret
// OLM made for the CSV's Deployment. An install started before they are gone reuses
// them, and the garbage collector then deletes them from under it.
func uninstallCommands(deployment string) [][]string {
	return [][]string{
		{"delete", "subscription", bundle.PackageName, "-n", installNamespace},
		{"delete", "csv", "-n", installNamespace, "-l", "operators.coreos.com/" + bundle.PackageName + "." + installNamespace},
		{"wait", "--for=delete", "-n", installNamespace, "--timeout=5m", "service/" + deployment + "-service", "secret/" + deployment + "-service-cert"},
	}
}

// stopServingV1alpha1 is the JSON patch docs/install-olm.md gives for after an uninstall: it
// stops serving v1alpha1 on the StorageBucket CRD, and checks that it patches v1alpha1.
const stopServingV1alpha1 = `[{"op":"test","path":"/spec/versions/0/name","value":"v1alpha1"},` +
	`{"op":"replace","path":"/spec/versions/0/served","value":false}]`

// docsYAMLBlock returns the first YAML code block of docs/install-olm.md after the heading that
// reads title: what the docs tell users to apply, as they would copy it.
func docsYAMLBlock(title string) string {
	GinkgoHelper()
	doc := docsOLM()
	i := strings.Index(doc, "\n## "+title+"\n")
	Expect(i).NotTo(BeNumerically("<", 0), "docs/install-olm.md has a section %q", title)
	rest := doc[i:]
	start := strings.Index(rest, "```yaml\n")
	Expect(start).NotTo(BeNumerically("<", 0), "section %q of docs/install-olm.md has a YAML block", title)
	rest = rest[start+len("```yaml\n"):]
	end := strings.Index(rest, "```")
	Expect(end).NotTo(BeNumerically("<", 0))
	return rest[:end]
}

func docsOLM() string {
	GinkgoHelper()
	root, err := tools.RepoRoot()
	check(err)
	data, err := os.ReadFile(filepath.Join(root, "docs", "install-olm.md"))
	check(err)
	return string(data)
}

// subscription subscribes to the stable channel of our package in our catalog, with
// automatic approval.
func subscription() *operatorsv1alpha1.Subscription {
	return &operatorsv1alpha1.Subscription{
		ObjectMeta: metav1.ObjectMeta{Name: bundle.PackageName, Namespace: installNamespace},
		Spec: &operatorsv1alpha1.SubscriptionSpec{
			CatalogSource:          catalogSource,
			CatalogSourceNamespace: olm.Namespace,
			Package:                bundle.PackageName,
			Channel:                bundle.Channel,
			InstallPlanApproval:    operatorsv1alpha1.ApprovalAutomatic,
			// The operator's settings, its proxy and the company CA, which OLM keeps
			// across upgrades.
			Config: egressConfig(),
		},
	}
}

// deploymentName is the name of the release's operator Deployment.
func deploymentName(r *olm.Release) string {
	return r.CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Name
}

// expectPodOf waits until OLM's Deployment for the release runs the release's operator
// image, and its pods — as many as its replicas, of the Deployment's current template,
// no other left — are Running and Ready on the node.
func expectPodOf(r *olm.Release) []corev1.Pod {
	GinkgoHelper()
	var pods corev1.PodList
	Eventually(func(g Gomega) {
		alive()
		dep := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: deploymentName(r)}, dep)).To(Succeed())
		g.Expect(dep.Spec.Template.Spec.Containers).To(ContainElement(HaveField("Image", r.Image)), "Deployment %s/%s runs %s's image", installNamespace, dep.Name, r.CSVName())
		g.Expect(dep.Status.ObservedGeneration).To(Equal(dep.Generation))
		g.Expect(dep.Spec.Replicas).NotTo(BeNil())
		replicas := *dep.Spec.Replicas
		g.Expect(dep.Status.UpdatedReplicas).To(Equal(replicas), "Deployment %s/%s status %+v", installNamespace, dep.Name, dep.Status)
		g.Expect(dep.Status.AvailableReplicas).To(Equal(replicas), "Deployment %s/%s status %+v", installNamespace, dep.Name, dep.Status)
		sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(k8s.List(ctx, &pods, client.InNamespace(installNamespace), client.MatchingLabelsSelector{Selector: sel})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(int(replicas)), "pods of Deployment %s/%s", installNamespace, dep.Name)
		for _, pod := range pods.Items {
			g.Expect(pod.DeletionTimestamp).To(BeNil())
			g.Expect(pod.Spec.Containers).To(ContainElement(HaveField("Image", r.Image)))
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
			g.Expect(pod.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.PodReady), HaveField("Status", corev1.ConditionTrue))),
				"pod %s/%s is not Ready: %+v", installNamespace, pod.Name, pod.Status.ContainerStatuses)
		}
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
	for _, pod := range pods.Items {
		GinkgoWriter.Printf("operator pod %s of %s on node %s, image %s\n", pod.Name, r.CSVName(), pod.Spec.NodeName, pod.Spec.Containers[0].Image)
	}
	return pods.Items
}

// subscriptionEnv is the setting the Subscription gives the operator, as
// docs/configuration.md tells users to: zap's console encoder instead of JSON, which
// every log line shows.
var subscriptionEnv = corev1.EnvVar{Name: "PHALANKS_ZAP_ENCODER", Value: "console"}

// configMapSettings are what the configuration ConfigMap in the install namespace sets:
// a setting read at start, which the operator's start log lists, and the operator's
// replica count, which OLM sets back to the CSV's (none: 1) at every upgrade.
var configMapSettings = map[string]string{"scaling-grace-period": "20m", "operator-replicas": "3"}

// expectConfiguredBySubscription checks that the release's operator pods run with the
// Subscription's spec.config (its variables, the CA's volume and mount), and that the operator took the setting: its log lines
// are zap's console lines ("<time>\tINFO\t<logger>\t…"), not JSON; and that each pod
// read the configuration ConfigMap at its start.
func expectConfiguredBySubscription(r *olm.Release) {
	GinkgoHelper()
	for _, pod := range expectPodOf(r) {
		Expect(pod.Spec.Containers[0].Env).To(ContainElements(egressConfig().Env), "pod %s/%s: OLM applied the Subscription's spec.config.env", pod.Namespace, pod.Name)
		Expect(pod.Spec.Containers[0].VolumeMounts).To(ContainElements(egressConfig().VolumeMounts), "pod %s/%s: OLM applied the Subscription's spec.config.volumeMounts", pod.Namespace, pod.Name)
		Expect(pod.Spec.Volumes).To(ContainElement(HaveField("Name", "trusted-ca")), "pod %s/%s: OLM applied the Subscription's spec.config.volumes", pod.Namespace, pod.Name)
		log := podLog(pod.Namespace, pod.Name)
		first, _, _ := strings.Cut(log, "\n")
		Expect(first).To(MatchRegexp(`^\d{4}-\d\d-\d\dT\S+\t(INFO|DEBUG|ERROR)\t`), "pod %s/%s logs in zap's console encoding", pod.Namespace, pod.Name)
		Expect(log).NotTo(ContainSubstring(`{"level":`), "pod %s/%s still logs JSON", pod.Namespace, pod.Name)
		Expect(log).To(MatchRegexp(`settings from the configuration ConfigMap\t\{"configMap": "phalanks-operator-config", "flags": \["operator-replicas", "scaling-grace-period"\]\}`),
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

// expectBundleUnpacked checks that OLM unpacked the release's bundle image with a Job on
// the node: the Job completed, and its pod ran the bundle image by digest.
func expectBundleUnpacked(r *olm.Release) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		jobs := &batchv1.JobList{}
		g.Expect(k8s.List(ctx, jobs, client.InNamespace(olm.Namespace), client.HasLabels{bundleUnpackRefLabel})).To(Succeed())
		var found bool
		for _, j := range jobs.Items {
			for _, c := range j.Spec.Template.Spec.InitContainers {
				if c.Image == r.Bundle.Image {
					found = true
					g.Expect(j.Status.Succeeded).To(BeEquivalentTo(1), "bundle unpack Job %s/%s status %+v", j.Namespace, j.Name, j.Status)
				}
			}
		}
		g.Expect(found).To(BeTrue(), "no bundle unpack Job ran %s", r.Bundle.Image)
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
}

// bundleUnpackRefLabel marks OLM's bundle unpack Jobs.
const bundleUnpackRefLabel = "operatorframework.io/bundle-unpack-ref"

// podLog returns a pod's log.
func podLog(namespace, name string) string {
	GinkgoHelper()
	data, err := cs.CoreV1().Pods(namespace).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred(), "log of pod %s/%s", namespace, name)
	return string(data)
}

// settleWindow is how long a CSV must stay Succeeded before OLM counts as settled.
const settleWindow = 5 * time.Second

// expectSettled waits until the release's CSV has been Succeeded, without interruption,
// for settleWindow.
func expectSettled(r *olm.Release) {
	GinkgoHelper()
	var since time.Time
	Eventually(func(g Gomega) {
		alive()
		csv := &operatorsv1alpha1.ClusterServiceVersion{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: r.CSVName()}, csv)).To(Succeed())
		if csv.Status.Phase != operatorsv1alpha1.CSVPhaseSucceeded {
			since = time.Time{}
			g.Expect(csv.Status.Phase).To(Equal(operatorsv1alpha1.CSVPhaseSucceeded), "CSV %s/%s: phase %s, reason %s: %s",
				installNamespace, r.CSVName(), csv.Status.Phase, csv.Status.Reason, csv.Status.Message)
		}
		if since.IsZero() {
			since = time.Now()
		}
		g.Expect(time.Since(since)).To(BeNumerically(">=", settleWindow), "CSV %s/%s Succeeded for %s", installNamespace, r.CSVName(), time.Since(since))
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
}

// expectInstalled waits for the Subscription to install the release: its InstallPlan
// completes, its CSV succeeds, the owned CRDs are established and the StorageBucket CRD
// converts through OLM's webhook Service. It returns the installed CSV.
func expectInstalled(r *olm.Release) *operatorsv1alpha1.ClusterServiceVersion {
	GinkgoHelper()
	By("resolving the Subscription to " + r.CSVName() + " and completing its InstallPlan")
	var planName string
	Eventually(func(g Gomega) {
		alive()
		sub := &operatorsv1alpha1.Subscription{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: bundle.PackageName}, sub)).To(Succeed())
		g.Expect(sub.Status.InstallPlanRef).NotTo(BeNil(), "Subscription %s/%s: state %q, no InstallPlan yet; conditions %v",
			installNamespace, bundle.PackageName, sub.Status.State, sub.Status.Conditions)
		g.Expect(sub.Status.CurrentCSV).To(Equal(r.CSVName()), "Subscription %s/%s: state %q", installNamespace, bundle.PackageName, sub.Status.State)
		planName = sub.Status.InstallPlanRef.Name
		plan := &operatorsv1alpha1.InstallPlan{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: planName}, plan)).To(Succeed())
		g.Expect(plan.Spec.ClusterServiceVersionNames).To(ContainElement(r.CSVName()), "InstallPlan %s/%s", installNamespace, planName)
		if plan.Status.Phase == operatorsv1alpha1.InstallPlanPhaseFailed {
			StopTrying(fmt.Sprintf("InstallPlan %s/%s failed (OLM does not retry a failed plan): %v", installNamespace, planName, plan.Status.Conditions)).Now()
		}
		g.Expect(plan.Status.Phase).To(Equal(operatorsv1alpha1.InstallPlanPhaseComplete), "InstallPlan %s/%s: phase %s, conditions %v",
			installNamespace, planName, plan.Status.Phase, plan.Status.Conditions)
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

	By("bringing CSV " + r.CSVName() + " to Succeeded")
	Eventually(func(g Gomega) {
		alive()
		csv := &operatorsv1alpha1.ClusterServiceVersion{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: r.CSVName()}, csv)).To(Succeed())
		g.Expect(csv.Status.Phase).To(Equal(operatorsv1alpha1.CSVPhaseSucceeded), "CSV %s/%s: phase %s, reason %s: %s",
			installNamespace, r.CSVName(), csv.Status.Phase, csv.Status.Reason, csv.Status.Message)
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
	Eventually(func(g Gomega) {
		sub := &operatorsv1alpha1.Subscription{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: bundle.PackageName}, sub)).To(Succeed())
		g.Expect(sub.Status.InstalledCSV).To(Equal(r.CSVName()), "Subscription %s/%s: state %q", installNamespace, bundle.PackageName, sub.Status.State)
		g.Expect(sub.Status.State).To(BeEquivalentTo(operatorsv1alpha1.SubscriptionStateAtLatest), "Subscription %s/%s", installNamespace, bundle.PackageName)
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

	By("establishing the owned CRDs")
	owned := r.CSV.Spec.CustomResourceDefinitions.Owned
	Expect(owned).NotTo(BeEmpty())
	for _, crd := range owned {
		Expect(crds.WaitEstablished(ctx, k8s, crd.Name, installTimeout)).To(Succeed())
	}

	// The catalog operator can re-apply the bundle's CRD (which has no conversion stanza)
	// after the CSV succeeded; OLM then patches it again within seconds.
	By("pointing StorageBucket conversion at OLM's webhook Service for the operator's Deployment")
	depName := r.CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Name
	Eventually(func(g Gomega) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: storageBucketCRD}, crd)).To(Succeed())
		g.Expect(crd.Spec.Conversion).NotTo(BeNil())
		g.Expect(crd.Spec.Conversion.Strategy).To(Equal(apiextensionsv1.WebhookConverter), "CRD %s conversion %+v", storageBucketCRD, crd.Spec.Conversion)
		cc := crd.Spec.Conversion.Webhook.ClientConfig
		g.Expect(cc.Service).To(HaveValue(And(
			HaveField("Namespace", installNamespace),
			HaveField("Name", depName+"-service"),
			HaveField("Path", HaveValue(Equal(bundle.ConversionPath))))))
		secret := &corev1.Secret{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: depName + "-service-cert"}, secret)).To(Succeed())
		g.Expect(cc.CABundle).NotTo(BeEmpty())
		g.Expect(bytes.TrimSpace(cc.CABundle)).To(Equal(bytes.TrimSpace(secret.Data["olmCAKey"])), "the CRD trusts the CA that issued the Secret's certificate")
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
	return getCSV(r.CSVName())
}

func getCSV(name string) *operatorsv1alpha1.ClusterServiceVersion {
	GinkgoHelper()
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: name}, csv)).To(Succeed())
	return csv
}

// catalogSourceReady checks that the CatalogSource serves the catalog image: OLM runs
// it as a registry pod on the node, and its connection to the pod's Service is READY.
func catalogSourceReady(image string) func(g Gomega) {
	return func(g Gomega) {
		alive()
		src := &operatorsv1alpha1.CatalogSource{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: olm.Namespace, Name: catalogSource}, src)).To(Succeed())
		g.Expect(src.Status.GRPCConnectionState).NotTo(BeNil(), "CatalogSource %s/%s: no connection state yet", olm.Namespace, catalogSource)
		g.Expect(src.Status.GRPCConnectionState.LastObservedState).To(Equal("READY"), "CatalogSource %s/%s", olm.Namespace, catalogSource)
		pods := &corev1.PodList{}
		g.Expect(k8s.List(ctx, pods, client.InNamespace(olm.Namespace), client.MatchingLabels{"olm.catalogSource": catalogSource})).To(Succeed())
		var serving []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Spec.Containers[0].Image == image {
				serving = append(serving, p.Name)
			}
		}
		g.Expect(serving).To(HaveLen(1), "registry pods of CatalogSource %s/%s running %s", olm.Namespace, catalogSource, image)
	}
}

// packageManifestHead checks that package-server lists our package from our catalog with
// the release as the stable channel's current CSV.
func packageManifestHead(r *olm.Release) func(g Gomega) {
	return func(g Gomega) {
		alive()
		pm := &unstructured.Unstructured{}
		pm.SetAPIVersion("packages.operators.coreos.com/v1")
		pm.SetKind("PackageManifest")
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: olm.Namespace, Name: bundle.PackageName}, pm)).To(Succeed())
		catalog, _, _ := unstructured.NestedString(pm.Object, "status", "catalogSource")
		g.Expect(catalog).To(Equal(catalogSource))
		defaultChannel, _, _ := unstructured.NestedString(pm.Object, "status", "defaultChannel")
		g.Expect(defaultChannel).To(Equal(bundle.Channel))
		channels, _, _ := unstructured.NestedSlice(pm.Object, "status", "channels")
		heads := map[string]any{}
		for _, c := range channels {
			m, _ := c.(map[string]any)
			heads[fmt.Sprint(m["name"])] = m["currentCSV"]
		}
		g.Expect(heads).To(Equal(map[string]any{bundle.Channel: r.CSVName()}), "PackageManifest %s channels", bundle.PackageName)
	}
}

func kubectl(args ...string) string {
	GinkgoHelper()
	bin, err := tools.Path("kubectl")
	check(err)
	cmd := exec.Command(bin, append([]string{"--kubeconfig", local.Kubeconfig}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "kubectl %s: %s", strings.Join(args, " "), stderr.String())
	GinkgoWriter.Printf("$ kubectl %s\n%s", strings.Join(args, " "), out)
	return string(out)
}

func storedVersions() []string {
	GinkgoHelper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: storageBucketCRD}, crd)).To(Succeed())
	return crd.Status.StoredVersions
}

func storageBucketReady(name string) func(g Gomega) {
	return func(g Gomega) {
		sb := &phalanksv1beta1.StorageBucket{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: userNamespace, Name: name}, sb)).To(Succeed())
		var ready *metav1.Condition
		for i := range sb.Status.Conditions {
			if sb.Status.Conditions[i].Type == phalanksv1beta1.ConditionReady {
				ready = &sb.Status.Conditions[i]
			}
		}
		g.Expect(ready).NotTo(BeNil(), "StorageBucket %s/%s has no Ready condition; status %+v", userNamespace, name, sb.Status)
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "StorageBucket %s/%s Ready: %s: %s", userNamespace, name, ready.Reason, ready.Message)
		g.Expect(ready.ObservedGeneration).To(Equal(sb.Generation), "StorageBucket %s/%s Ready is for generation %d of %d", userNamespace, name, ready.ObservedGeneration, sb.Generation)
	}
}

func fooDeploymentAvailable(name string, replicas int32) func(g Gomega) {
	return func(g Gomega) {
		foo := &phalanksv1alpha1.Foo{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: userNamespace, Name: name}, foo)).To(Succeed())
		dep := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: userNamespace, Name: foo.Spec.DeploymentName}, dep)).To(Succeed(),
			"Deployment %s/%s of Foo %s", userNamespace, foo.Spec.DeploymentName, name)
		g.Expect(metav1.GetControllerOf(dep)).To(HaveValue(HaveField("UID", foo.UID)), "Deployment %s/%s is controlled by Foo %s", userNamespace, dep.Name, name)
		g.Expect(dep.Spec.Replicas).To(HaveValue(Equal(replicas)))
		g.Expect(dep.Status.AvailableReplicas).To(Equal(replicas), "Deployment %s/%s status %+v", userNamespace, dep.Name, dep.Status)
		g.Expect(foo.Status.AvailableReplicas).To(Equal(replicas), "Foo %s/%s status %+v", userNamespace, name, foo.Status)
	}
}

// snapshot reads every user object in every version its kind serves, keyed by
// "<kind>/<name>@<version>", as spec JSON: what must survive an upgrade unchanged. A read
// error fails the spec.
func snapshot() map[string]string {
	GinkgoHelper()
	out, err := readSnapshot("")
	check(err)
	return out
}

// readSnapshot is snapshot without the views of one version, returning read errors (so
// that Eventually retries them: the conversion webhook is briefly away while the
// manager restarts).
func readSnapshot(skipVersion string) (map[string]string, error) {
	out := map[string]string{}
	add := func(key string, spec any) error {
		data, err := json.Marshal(spec)
		if err != nil {
			return err
		}
		out[key] = string(data)
		return nil
	}
	for _, name := range []string{"created-as-v1beta1", "created-as-v1alpha1"} {
		key := client.ObjectKey{Namespace: userNamespace, Name: name}
		beta := &phalanksv1beta1.StorageBucket{}
		if err := k8s.Get(ctx, key, beta); err != nil {
			return nil, err
		}
		if err := add("StorageBucket/"+name+"@v1beta1", beta.Spec); err != nil {
			return nil, err
		}
		if skipVersion != "v1alpha1" {
			alpha := &phalanksv1alpha1.StorageBucket{}
			if err := k8s.Get(ctx, key, alpha); err != nil {
				return nil, err
			}
			if err := add("StorageBucket/"+name+"@v1alpha1", alpha.Spec); err != nil {
				return nil, err
			}
		}
	}
	foo := &phalanksv1alpha1.Foo{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: userNamespace, Name: "web"}, foo); err != nil {
		return nil, err
	}
	return out, add("Foo/web@v1alpha1", foo.Spec)
}

// withoutVersion drops the StorageBucket views of one version from a snapshot (Foo has
// only v1alpha1 and needs no conversion).
func withoutVersion(s map[string]string, version string) map[string]string {
	out := map[string]string{}
	for k, v := range s {
		if strings.HasPrefix(k, "StorageBucket/") && strings.HasSuffix(k, "@"+version) {
			continue
		}
		out[k] = v
	}
	return out
}

func putObject(bucket, name, content string) (miniogo.UploadInfo, error) {
	c, err := s3.Client()
	if err != nil {
		return miniogo.UploadInfo{}, err
	}
	return c.PutObject(ctx, bucket, name, strings.NewReader(content), int64(len(content)), miniogo.PutObjectOptions{})
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
