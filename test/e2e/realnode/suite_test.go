// Package realnode_test runs the operator as its users run it, on the local cluster's
// real node: its image, deployed with `make deploy` (config/default, the webhook
// certificate kept by the operator itself) into a restricted namespace, with Foo's, the
// samples' and the scheduled workloads' pods really running; its certificate renewed
// under load; scraped by a Prometheus the Prometheus Operator runs (`make
// deploy-monitoring`); and removed with `make undeploy`. It needs root (the node runs in
// a sandbox of private namespaces; see test/harness/sandbox) and the operator image in
// the OCI layout `make docker-build` writes (make test builds it first).
package realnode_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/imagebuild"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/deploy"
	"github.com/phalanks/phalanks-operator/test/harness/images"
	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/prometheus"
	"github.com/phalanks/phalanks-operator/test/harness/report"
	"github.com/phalanks/phalanks-operator/test/harness/sandbox"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

func TestMain(m *testing.M) {
	if err := sandbox.Enter(); err != nil {
		fmt.Fprintln(os.Stderr, "test/e2e/realnode:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

func TestRealNode(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "The operator on a real node")
}

const (
	// operatorNamespace and operatorDeployment are where config/default puts the
	// operator (its namespace and namePrefix).
	operatorNamespace  = "phalanks-system"
	operatorDeployment = "phalanks-controller-manager"
	// scalingGracePeriod replaces the manager's default of 15 minutes, in which it leaves
	// a new workload alone.
	scalingGracePeriod = "5s"

	// podTimeout bounds pods starting, becoming Ready or going away on a loaded machine.
	podTimeout       = 3 * time.Minute
	reconcileTimeout = 2 * time.Minute
	poll             = 500 * time.Millisecond
)

var (
	ctx    context.Context
	dir    string
	local  *cluster.Cluster
	k8s    client.Client
	cs     kubernetes.Interface
	s3     *minio.Server
	scheme = newScheme()
	// testApp is the image users' workloads run in these specs.
	testApp string
	// operatorImage is the IMG make deploy deploys: the image make docker-build built,
	// in the node's registry.
	operatorImage string
	// monitoringImages are the Prometheus Operator's and Prometheus's images.
	monitoringImages *prometheus.Images
)

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(s))
	utilruntime.Must(phalanksv1beta1.AddToScheme(s))
	return s
}

var _ = BeforeSuite(func() {
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(context.Background())
	DeferCleanup(cancel)
	var err error
	dir, err = os.MkdirTemp("", "phalanks-realnode-e2e-")
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("logs and data in %s (kept if the suite fails)\n", dir)

	By("starting the local cluster with a real node, its registry mirroring quay.io")
	start := time.Now()
	local, err = cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), RealNode: true, Mirrors: []string{prometheus.Registry}})
	check(err)
	DeferCleanup(func() { check(local.Shutdown()) })
	k8s, err = client.New(local.Config, client.Options{Scheme: scheme})
	check(err)
	cs, err = kubernetes.NewForConfig(local.Config)
	check(err)
	GinkgoWriter.Printf("cluster and node ready in %s\n", time.Since(start).Round(time.Millisecond))

	By("starting MinIO on the node's address, where pods reach it")
	minioDir := filepath.Join(dir, "minio")
	Expect(os.MkdirAll(minioDir, 0o700)).To(Succeed())
	s3, err = minio.Start(minio.Options{Dir: minioDir, Host: cluster.NodeIP})
	check(err)
	DeferCleanup(s3.Stop)
	By("starting a company's network beside it: an egress proxy and a MinIO over TLS signed by a CA of its own")
	startEgress()

	By("pushing the operator image (as make docker-build built it), testapp and the monitoring stack's images to the node's registry")
	start = time.Now()
	operatorImage = pushOperatorImage()
	app, err := images.TestApp(ctx, filepath.Join(dir, "build"))
	check(err)
	_, err = local.Push(ctx, "phalanks-e2e/testapp:1", app)
	check(err)
	testApp = cluster.RegistryHost + "/phalanks-e2e/testapp:1"
	monitoringImages, err = prometheus.BuildImages(ctx)
	check(err)
	check(monitoringImages.Push(ctx, local.Push))
	GinkgoWriter.Printf("images pushed in %s\n", time.Since(start).Round(time.Millisecond))

	By("installing the Prometheus Operator from its bundle.yaml, and a Prometheus it runs")
	start = time.Now()
	installPrometheus()
	GinkgoWriter.Printf("Prometheus Operator and Prometheus running in %s\n", time.Since(start).Round(time.Millisecond))
})

// pushOperatorImage pushes the image make docker-build wrote into the OCI layout (under
// the name config/manager deploys) to the node's registry, and returns its reference
// there: the IMG the suite deploys.
func pushOperatorImage() string {
	GinkgoHelper()
	ref, err := deploy.Image()
	check(err)
	layout := os.Getenv("IMAGE_LAYOUT")
	if layout == "" {
		root, err := tools.RepoRoot()
		check(err)
		layout = filepath.Join(root, "bin", "images")
	}
	img, err := imagebuild.ReadLayout(layout, ref)
	if err != nil {
		Fail(fmt.Sprintf("the operator image %s is not in the OCI layout %s (`make docker-build` writes it; make test runs it first): %v", ref, layout, err))
	}
	const repository = "phalanks-e2e/phalanks-operator:e2e"
	_, err = local.Push(ctx, repository, img)
	check(err)
	return cluster.RegistryHost + "/" + repository
}

// expectOperatorAvailable waits until the operator's Deployment is Available with all
// its replicas Ready pods of its current template, and no other pod.
func expectOperatorAvailable() {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		alive()
		dep := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, dep)).To(Succeed())
		g.Expect(dep.Spec.Replicas).NotTo(BeNil())
		g.Expect(dep.Status.ObservedGeneration).To(Equal(dep.Generation), "Deployment %s not observed yet", dep.Name)
		g.Expect(dep.Status.Replicas).To(Equal(*dep.Spec.Replicas), "Deployment %s status %+v; %s", dep.Name, dep.Status, podsSummary(operatorNamespace))
		g.Expect(dep.Status.UpdatedReplicas).To(Equal(*dep.Spec.Replicas), "Deployment %s status %+v", dep.Name, dep.Status)
		g.Expect(dep.Status.AvailableReplicas).To(Equal(*dep.Spec.Replicas), "Deployment %s status %+v; %s", dep.Name, dep.Status, podsSummary(operatorNamespace))
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
}

// podsSummary describes a namespace's pods, for failure messages.
func podsSummary(namespace string) string {
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(namespace)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s", p.Name, p.Status.Phase)
		for _, s := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " [%s ready=%t restarts=%d", s.Name, s.Ready, s.RestartCount)
			if s.State.Waiting != nil {
				fmt.Fprintf(&b, " waiting %s: %s", s.State.Waiting.Reason, s.State.Waiting.Message)
			}
			b.WriteString("]")
		}
		b.WriteString("; ")
	}
	return b.String()
}

// alive stops a wait early when a component of the cluster has exited.
func alive() {
	if err := local.Healthy(); err != nil {
		StopTrying(err.Error()).Now()
	}
}

// check fails the spec with err's message alone: harness errors quote component logs.
func check(err error) {
	GinkgoHelper()
	if err != nil {
		Fail(err.Error())
	}
}

// The data folder is named on failure and removed on success, after every process has
// stopped.
var _ = ReportAfterSuite("logs", func(r Report) {
	if dir == "" {
		return
	}
	if !r.SuiteSucceeded {
		fmt.Fprintf(os.Stderr, "test/e2e/realnode: the suite failed; component logs are in %s\n", filepath.Join(dir, "cluster", "logs"))
		return
	}
	_ = os.RemoveAll(dir)
})

// The failures once more at the end of the output, where CI shows its tail.
var _ = report.FailuresLast()
