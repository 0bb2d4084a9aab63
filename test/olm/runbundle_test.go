package olm_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/test/harness/samples"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
	"github.com/phalanks/phalanks-operator/test/olm"
)

const (
	// sdkNamespace is where operator-sdk run bundle installs the operator.
	sdkNamespace = "sdk-run"
	// samplesNamespace holds the CSV's alm-examples, pointed at MinIO.
	samplesNamespace = "samples"
)

// itRunsTheOperatorSDKInstallCommands follows the install itself with the commands
// docs/install-olm.md gives for operator-sdk: cleanup of an OLM install, run bundle of the
// previous release's bundle image, run bundle-upgrade to the current one, cleanup again.
func itRunsTheOperatorSDKInstallCommands() {
	It("removes the Subscription's install with operator-sdk cleanup, keeping the buckets in S3", func() {
		operatorSDK("cleanup", bundle.PackageName, "--namespace", installNamespace, "--timeout", "5m")
		expectUninstalledBySDK(installNamespace, current)
		for _, b := range []string{"created-as-v1beta1", "created-as-v1alpha1"} {
			Expect(getObject(b, "user-data.txt")).To(Equal("written before the operator was installed"),
				"bucket %s is kept (deletionPolicy Retain)", b)
		}
	})

	var before map[string]sampleState

	It("installs the previous release with operator-sdk run bundle from its bundle image, and the samples become Ready", func() {
		kubectl("create", "namespace", sdkNamespace)
		operatorSDK("run", "bundle", olm.PrivateRegistry(previous.BundleImage), "--namespace", sdkNamespace,
			"--index-image", indexImage, "--security-context-config", "restricted", "--timeout", "5m")
		expectSDKInstalled(previous)

		By("creating the CSV's alm-examples, pointed at MinIO")
		Expect(k8s.Create(ctx, samples.Namespace(samplesNamespace))).To(Succeed())
		examples, err := bundle.ALMExamples(previous.CSV)
		check(err)
		Expect(examples).NotTo(BeEmpty())
		for _, obj := range examples {
			obj.SetNamespace(samplesNamespace)
			switch obj.GetKind() {
			case "StorageBucket":
				check(samples.PointAtMinIO(ctx, k8s, s3, obj))
			case "Foo":
				check(unstructured.SetNestedField(obj.Object, testAppImage, "spec", "image"))
			}
			createWhileTheWebhookIsRouted(obj)
		}
		Eventually(func(g Gomega) {
			alive()
			before = sampleStates(g, examples)
		}).WithTimeout(reconcileTimeout).WithPolling(poll).Should(Succeed())
	})

	It("upgrades to the next release with operator-sdk run bundle-upgrade, losing nothing", func() {
		operatorSDK("run", "bundle-upgrade", olm.PrivateRegistry(current.BundleImage), "--namespace", sdkNamespace,
			"--security-context-config", "restricted", "--timeout", "5m")
		expectSDKInstalled(current)
		Eventually(func(g Gomega) {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: sdkNamespace, Name: previous.CSVName()}, &operatorsv1alpha1.ClusterServiceVersion{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the replaced CSV %s is deleted: %v", previous.CSVName(), err)
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

		By("keeping every sample's status, every StorageBucket readable in both versions, and Foo's Deployments untouched")
		examples, err := bundle.ALMExamples(previous.CSV)
		check(err)
		for _, obj := range examples {
			obj.SetNamespace(samplesNamespace)
		}
		Eventually(func(g Gomega) {
			alive()
			g.Expect(sampleStates(g, examples)).To(Equal(before))
		}).WithTimeout(reconcileTimeout).WithPolling(poll).Should(Succeed())
	})

	It("removes the run bundle install with operator-sdk cleanup", func() {
		operatorSDK("cleanup", bundle.PackageName, "--namespace", sdkNamespace, "--timeout", "5m")
		expectUninstalledBySDK(sdkNamespace, current)
		Eventually(func(g Gomega) {
			srcs := &operatorsv1alpha1.CatalogSourceList{}
			g.Expect(k8s.List(ctx, srcs, client.InNamespace(sdkNamespace))).To(Succeed())
			g.Expect(srcs.Items).To(BeEmpty(), "run bundle's CatalogSource is deleted")
			ogs := &operatorsv1.OperatorGroupList{}
			g.Expect(k8s.List(ctx, ogs, client.InNamespace(sdkNamespace))).To(Succeed())
			g.Expect(ogs.Items).To(BeEmpty(), "run bundle's OperatorGroup is deleted")
			pods := &corev1.PodList{}
			g.Expect(k8s.List(ctx, pods, client.InNamespace(sdkNamespace))).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty(), "the registry and operator pods are gone")
		}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())

		By("deleting only the bucket whose StorageBucket asks for it (deletionPolicy Delete)")
		examples, err := bundle.ALMExamples(current.CSV)
		check(err)
		for _, obj := range examples {
			if obj.GetKind() != "StorageBucket" {
				continue
			}
			sb, err := samples.AsHub(obj)
			check(err)
			exists, err := bucketExists(sb.Spec.BucketName)
			check(err)
			Expect(exists).To(Equal(sb.Spec.DeletionPolicy != phalanksv1beta1.DeletionDelete),
				"bucket %s of StorageBucket %s (deletionPolicy %q)", sb.Spec.BucketName, obj.GetName(), sb.Spec.DeletionPolicy)
		}
	})
}

// sampleState is what an upgrade must not change about a sample: a StorageBucket's Ready
// condition, as first written (so a flap in between shows as a new transition time), and
// its spec read through both served versions; a Foo's Deployment's identity and generation.
type sampleState struct {
	Ready       metav1.Condition
	SpecV1beta1 string
	SpecAlpha   string
	Deployment  types.UID
	Generation  int64
}

// sampleStates reads the state of every example; a StorageBucket that is not Ready for
// its generation, or a Foo whose Deployment is not Available, fails g.
func sampleStates(g Gomega, examples []*unstructured.Unstructured) map[string]sampleState {
	out := map[string]sampleState{}
	for _, obj := range examples {
		key := client.ObjectKey{Namespace: samplesNamespace, Name: obj.GetName()}
		switch obj.GetKind() {
		case "StorageBucket":
			beta := &phalanksv1beta1.StorageBucket{}
			g.Expect(k8s.Get(ctx, key, beta)).To(Succeed())
			ready := meta.FindStatusCondition(beta.Status.Conditions, phalanksv1beta1.ConditionReady)
			g.Expect(ready).NotTo(BeNil(), "StorageBucket %s has no Ready condition", key)
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "StorageBucket %s: %s: %s", key, ready.Reason, ready.Message)
			g.Expect(ready.ObservedGeneration).To(Equal(beta.Generation))
			alpha := &phalanksv1alpha1.StorageBucket{}
			g.Expect(k8s.Get(ctx, key, alpha)).To(Succeed(), "StorageBucket %s read as v1alpha1 through the conversion webhook", key)
			out["StorageBucket/"+key.Name] = sampleState{Ready: *ready, SpecV1beta1: toJSON(g, beta.Spec), SpecAlpha: toJSON(g, alpha.Spec)}
		case "Foo":
			foo := &phalanksv1alpha1.Foo{}
			g.Expect(k8s.Get(ctx, key, foo)).To(Succeed())
			dep := &appsv1.Deployment{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: samplesNamespace, Name: foo.Spec.DeploymentName}, dep)).To(Succeed())
			g.Expect(metav1.IsControlledBy(dep, foo)).To(BeTrue())
			g.Expect(dep.Status.AvailableReplicas).To(Equal(*dep.Spec.Replicas), "Deployment %s/%s status %+v", samplesNamespace, dep.Name, dep.Status)
			g.Expect(foo.Status.AvailableReplicas).To(Equal(*dep.Spec.Replicas))
			out["Foo/"+key.Name] = sampleState{Deployment: dep.UID, Generation: dep.Generation}
		}
	}
	return out
}

// expectSDKInstalled waits until the release's CSV, installed by operator-sdk run bundle
// (or bundle-upgrade) in sdkNamespace, has Succeeded, and its Deployment runs the
// release's image on every replica, Ready.
// createWhileTheWebhookIsRouted creates obj, and tries again only while the API server
// cannot reach the conversion webhook yet. The operator's pods serve it before they turn
// Ready, but the Service routes to them only once kube-proxy has seen the Ready
// endpoints, a moment after the Deployment is available and OLM marks the CSV
// Succeeded; a v1alpha1 sample created in between meets "connection refused". Any other
// error fails at once.
func createWhileTheWebhookIsRouted(obj client.Object) {
	GinkgoHelper()
	Eventually(func() error {
		alive()
		err := k8s.Create(ctx, obj)
		if err != nil && !strings.Contains(err.Error(), "conversion webhook") {
			return StopTrying("creating " + obj.GetObjectKind().GroupVersionKind().Kind + " " + obj.GetName()).Wrap(err)
		}
		return err
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), "%s %s", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName())
}

func expectSDKInstalled(r *olm.Release) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		alive()
		csv := &operatorsv1alpha1.ClusterServiceVersion{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: sdkNamespace, Name: r.CSVName()}, csv)).To(Succeed())
		g.Expect(csv.Status.Phase).To(Equal(operatorsv1alpha1.CSVPhaseSucceeded), "CSV %s/%s: %s: %s", sdkNamespace, r.CSVName(), csv.Status.Reason, csv.Status.Message)
		dep := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: sdkNamespace, Name: deploymentName(r)}, dep)).To(Succeed())
		g.Expect(dep.Spec.Template.Spec.Containers).To(ContainElement(HaveField("Image", r.Image)))
		g.Expect(dep.Status.ObservedGeneration).To(Equal(dep.Generation))
		g.Expect(dep.Status.UpdatedReplicas).To(Equal(*dep.Spec.Replicas))
		g.Expect(dep.Status.AvailableReplicas).To(Equal(*dep.Spec.Replicas), "Deployment %s/%s status %+v", sdkNamespace, dep.Name, dep.Status)
		g.Expect(dep.Status.Replicas).To(Equal(*dep.Spec.Replicas), "no pod of the previous release is left")
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
}

// expectUninstalledBySDK waits until operator-sdk cleanup has removed, from namespace,
// the release's CSV, Subscription, Deployment and pods, and the owned CRDs.
func expectUninstalledBySDK(namespace string, r *olm.Release) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		for _, obj := range []client.Object{
			&operatorsv1alpha1.ClusterServiceVersion{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: r.CSVName()}},
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: deploymentName(r)}},
		} {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s/%s: %v", obj, namespace, obj.GetName(), err)
		}
		subs := &operatorsv1alpha1.SubscriptionList{}
		g.Expect(k8s.List(ctx, subs, client.InNamespace(namespace))).To(Succeed())
		g.Expect(subs.Items).To(BeEmpty())
		for _, crd := range r.CSV.Spec.CustomResourceDefinitions.Owned {
			err := k8s.Get(ctx, client.ObjectKey{Name: crd.Name}, &apiextensionsv1.CustomResourceDefinition{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "CRD %s: %v", crd.Name, err)
		}
		pods := &corev1.PodList{}
		g.Expect(k8s.List(ctx, pods, client.InNamespace(namespace), client.HasLabels{"control-plane"})).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty(), "the operator's pods go with its Deployment")
	}).WithTimeout(installTimeout).WithPolling(poll).Should(Succeed())
}

// operatorSDK runs the operator-sdk CLI against the cluster, trusting the cluster's CA
// (which signed the local registry's TLS certificate) as a user trusts a private
// registry's: SSL_CERT_FILE. A failure fails the spec with the command's output.
func operatorSDK(args ...string) string {
	GinkgoHelper()
	bin, err := tools.Path("operator-sdk")
	check(err)
	cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", local.Kubeconfig)...)
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+local.CAFile())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	GinkgoWriter.Printf("$ operator-sdk %s\n%s", strings.Join(args, " "), out.String())
	Expect(err).NotTo(HaveOccurred(), "operator-sdk %s:\n%s", strings.Join(args, " "), out.String())
	return out.String()
}

func bucketExists(name string) (bool, error) {
	c, err := s3.Client()
	if err != nil {
		return false, err
	}
	return c.BucketExists(ctx, name)
}

func toJSON(g Gomega, v any) string {
	data, err := json.Marshal(v)
	g.Expect(err).NotTo(HaveOccurred())
	return string(data)
}
