package storagebucket_test

import (
	"context"
	"net/http"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/apiproxy"
)

var _ = Describe("A credentials Secret fixed while the first pass of its StorageBucket reads it", func() {
	It("is probed again with the fixed key pair at once, not an interval later", func() {
		ctx := context.Background()
		p := startPlatform(nil)
		Expect(p.s3.MakeBucket(ctx, "fixed-secret", miniogo.MakeBucketOptions{})).To(Succeed())
		// Applied with a typo in the secret key, fixed a moment later.
		sec := credentialsSecret("team", p.s3)
		sec.Name = "fixed-credentials"
		sec.StringData["AWS_SECRET_ACCESS_KEY"] = "a-typo"
		Expect(p.c.Create(ctx, sec)).To(Succeed())
		m := startManagerWith(managerSpec{name: "replica", kubeconfig: p.kubeconfig, viaAPIProxy: true})

		By("holding the answer of the pass's read of the Secret's data")
		held, release := make(chan struct{}, 1), make(chan struct{})
		m.apiProxy.Set(func(r *http.Request) apiproxy.Action {
			if resource, name := apiproxy.Resource(r); r.Method == http.MethodGet && resource == "secrets" && name == sec.Name && !apiproxy.IsWatch(r) {
				select {
				case held <- struct{}{}:
				default:
				}
				return apiproxy.Action{HoldAnswer: release}
			}
			return apiproxy.Action{}
		})
		sb := storageBucket("team", "fixed-secret", "fixed-secret", p.s3)
		sb.Spec.ManagementPolicy = phalanksv1beta1.ManagementObserve
		sb.Spec.CredentialsSecretRef.Name = sec.Name
		// A probe an hour from now: a change missed waits for it.
		sb.Spec.HealthCheck.Interval = &metav1.Duration{Duration: time.Hour}
		Expect(p.c.Create(ctx, sb)).To(Succeed())
		Eventually(held).WithTimeout(time.Minute).Should(Receive())

		By("fixing the Secret meanwhile; the manager's Secret informer sees the change before the read's answer arrives")
		streamed := m.apiProxy.Streamed("secrets")
		Expect(p.c.Get(ctx, client.ObjectKeyFromObject(sec), sec)).To(Succeed())
		sec.Data["AWS_SECRET_ACCESS_KEY"] = []byte(p.s3.SecretKey)
		Expect(p.c.Update(ctx, sec)).To(Succeed())
		Eventually(func() int64 { return m.apiProxy.Streamed("secrets") }).WithTimeout(30 * time.Second).Should(BeNumerically(">", streamed))
		m.apiProxy.Set(nil)
		close(release)

		By("the pass probed with the old key pair; the bucket is probed again with the new one at once")
		eventuallyReady(p.c, sb, metav1.ConditionTrue, "BucketReady", 30*time.Second)
	})
})
