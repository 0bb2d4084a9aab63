package webhooks_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/webhooks"
	"github.com/phalanks/phalanks-operator/test/harness/envtest"
	"github.com/phalanks/phalanks-operator/test/harness/report"
)

var k8s client.Client

func TestWebhooks(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Conversion webhook suite")
}

var _ = BeforeSuite(func() {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(phalanksv1alpha1.AddToScheme(scheme))
	utilruntime.Must(phalanksv1beta1.AddToScheme(scheme))

	env, err := envtest.Start(envtest.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	k8s = env.Client

	mgr, err := env.NewManager()
	Expect(err).NotTo(HaveOccurred())
	Expect(webhooks.Setup(mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	DeferCleanup(cancel)
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	Eventually(func() error {
		return mgr.GetWebhookServer().StartedChecker()(nil)
	}).Should(Succeed())
})

// The failures once more at the end of the output, where CI shows its tail.
var _ = report.FailuresLast()
