// Command cert-manager runs cert-manager v1.21.0's own controllers — issuers, cluster
// issuers, the CertificateRequest approver and its CA and self-signed signers, the
// Certificate controllers (trigger, key manager, request manager, issuing, readiness,
// revision manager) — and its CA injector, in one process, from cert-manager's library
// packages. It stands in for cert-manager's controller and cainjector binaries, which the
// Go module proxy does not serve (their modules, …/controller-binary and
// …/cainjector-binary, are refused), for OLM v1's end-to-end test: upstream's
// operator-controller manifest asks cert-manager for catalogd's, operator-controller's
// and every installed bundle's webhook certificates, and this issues them with
// cert-manager's own code from the cert-manager objects those manifests and
// operator-controller create.
//
// What it leaves out: cert-manager's webhook (admission validation of cert-manager
// objects; the CRDs' schemas still apply), the ACME, Vault and Venafi issuers, the
// ingress and Gateway shims, leader election (run one), metrics and health servers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// workers is cert-manager's default number of workers per controller.
const workers = 5

func main() {
	// A flag set of its own: controller-runtime registers --kubeconfig on the global one.
	flags := flag.NewFlagSet("cert-manager", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig of the cluster")
	clusterResourceNamespace := flags.String("cluster-resource-namespace", "cert-manager",
		"namespace of the Secrets ClusterIssuers refer to (cert-manager's --cluster-resource-namespace; its Helm chart sets cert-manager's own namespace)")
	// klog's flags, at cert-manager's Helm chart's verbosity (--v=2: what each controller
	// and the injector did).
	klog.InitFlags(flags)
	_ = flags.Set("v", "2")
	_ = flags.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *clusterResourceNamespace); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, clusterResourceNamespace string) error {
	ctx = logf.NewContext(ctx, logf.Log)
	// The CA injector logs through controller-runtime.
	ctrl.SetLogger(logf.Log)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(controller.Known())+1)
	go func() { errs <- runInjector(ctx, kubeconfig) }()
	n, err := runControllers(ctx, kubeconfig, clusterResourceNamespace, errs)
	if err != nil {
		return err
	}
	// The first component to end ends the process: each runs until ctx is done.
	err = <-errs
	cancel()
	for range n {
		err = errors.Join(err, <-errs)
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// runControllers starts every registered controller with cert-manager's defaults, as
// its controller binary does, and returns how many it started besides the injector.
func runControllers(ctx context.Context, kubeconfig, clusterResourceNamespace string, errs chan<- error) (int, error) {
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions: controller.IssuerOptions{
			ClusterResourceNamespace: clusterResourceNamespace,
		},
		CertificateOptions: controller.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return 0, fmt.Errorf("build the controller context: %w", err)
	}
	shared, err := factory.Build()
	if err != nil {
		return 0, fmt.Errorf("build the controller context: %w", err)
	}
	n := 0
	for name, construct := range controller.Known() {
		c, err := construct(factory)
		if err != nil {
			return n, fmt.Errorf("create controller %s: %w", name, err)
		}
		go func() {
			if err := c.Run(workers, ctx); err != nil {
				errs <- fmt.Errorf("controller %s: %w", name, err)
				return
			}
			errs <- context.Canceled
		}()
		n++
	}
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	return n, nil
}

// runInjector runs cert-manager's CA injector for webhook configurations, API services
// and CRDs, with Certificates as a data source, until ctx is done.
func runInjector(ctx context.Context, kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("read %s: %w", kubeconfig, err)
	}
	// The injector's field manager is its user agent's prefix, as in cert-manager's
	// cainjector: "cert-manager-cainjector".
	cfg = util.RestConfigWithUserAgent(cfg, "cainjector")
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(apiregistrationv1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// cainjector reads Secrets directly, never from a cache of every Secret.
		Cache:  cache.Options{ReaderFailOnMissingInformer: true},
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return fmt.Errorf("create the CA injector's manager: %w", err)
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	})
	if err != nil {
		return fmt.Errorf("set up the CA injector: %w", err)
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("CA injector: %w", err)
	}
	return context.Canceled
}
