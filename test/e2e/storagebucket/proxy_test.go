package storagebucket_test

import (
	"context"
	"net"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/phalanks/phalanks-operator/test/harness/fwdproxy"
)

var _ = Describe("The manager behind an egress proxy (HTTP_PROXY)", func() {
	It("denies an endpoint whose name only the proxy can resolve, unless told to trust the proxy", func() {
		ctx := context.Background()
		p := startPlatform(nil)
		_, port, _ := net.SplitHostPort(p.s3.Endpoint)
		name := "minio.only-the-proxy-knows.test:" + port
		proxy := fwdproxy.StartForTest(GinkgoT(), map[string]string{name: p.s3.Endpoint})
		env := []string{"HTTP_PROXY=" + proxy.URL.String(), "HTTPS_PROXY=" + proxy.URL.String(), "NO_PROXY="}

		sb := storageBucket("team", "proxied", "proxied-bucket", p.s3)
		sb.Spec.Endpoint = "http://" + name
		Expect(p.c.Create(ctx, sb)).To(Succeed())
		m := startManagerWith(managerSpec{name: "manager", kubeconfig: p.kubeconfig, env: env})
		eventuallyReady(p.c, sb, metav1.ConditionFalse, "EndpointNotAllowed", time.Minute)
		Expect(proxy.Requests()).To(BeZero(), "the proxy was asked for a name the operator could not check")
		Expect(m.proc.Stop(30 * time.Second)).To(Succeed())

		startManagerWith(managerSpec{name: "trusting", kubeconfig: p.kubeconfig, env: env,
			flags: []string{"--storagebucket-endpoint-allow-unresolvable-via-proxy"}})
		eventuallyReady(p.c, sb, metav1.ConditionTrue, "BucketReady", time.Minute)
		Expect(proxy.Requests()).To(BeNumerically(">", 0))
	})
})
