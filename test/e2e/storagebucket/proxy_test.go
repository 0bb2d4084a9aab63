package storagebucket_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/test/harness/process"
	"github.com/phalanks/phalanks-operator/test/harness/tinyproxy"
)

var _ = Describe("The manager behind an egress proxy (HTTP_PROXY)", func() {
	It("denies an endpoint whose name only the proxy can resolve, unless told to trust the proxy", func() {
		ctx := context.Background()
		p := startPlatform(nil)
		s3 := netip.MustParseAddrPort(p.s3.Endpoint)
		// tinyproxy resolves the name with a hosts file of its own; the manager, outside
		// the proxy's mount namespace, reads the machine's.
		const name = "minio.only-the-proxy-knows.test"
		proxy := tinyproxy.StartForTest(GinkgoT(), tinyproxy.Options{
			Hosts: map[string]netip.Addr{name: s3.Addr()}, ConnectPorts: []int{int(s3.Port())}})
		_, err := net.DefaultResolver.LookupHost(ctx, name)
		Expect(err).To(HaveOccurred(), "%s resolves outside the proxy too", name)
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Printf("tinyproxy's log %s:\n%s", proxy.LogPath(), process.Tail(proxy.LogPath(), 60))
			}
		})
		env := []string{"HTTP_PROXY=" + proxy.URL.String(), "HTTPS_PROXY=" + proxy.URL.String(), "NO_PROXY="}

		sb := storageBucket("team", "proxied", "proxied-bucket", p.s3)
		sb.Spec.Endpoint = "http://" + net.JoinHostPort(name, strconv.Itoa(int(s3.Port())))
		Expect(p.c.Create(ctx, sb)).To(Succeed())
		m := startManagerWith(managerSpec{name: "manager", kubeconfig: p.kubeconfig, env: env})
		eventuallyReady(p.c, sb, metav1.ConditionFalse, "EndpointNotAllowed", time.Minute)
		Expect(proxy.Requests(name)).To(BeZero(), "the proxy was asked for a name the operator could not check")
		Expect(m.proc.Stop(30 * time.Second)).To(Succeed())

		startManagerWith(managerSpec{name: "trusting", kubeconfig: p.kubeconfig, env: env,
			flags: []string{"--storagebucket-endpoint-allow-unresolvable-via-proxy"}})
		eventuallyReady(p.c, sb, metav1.ConditionTrue, "BucketReady", time.Minute)
		Expect(proxy.Requests(name)).To(BeNumerically(">", 0))
	})

	It("reaches endpoints through --storagebucket-proxy alone, the environment's proxy unused, except those --storagebucket-no-proxy names", func() {
		ctx := context.Background()
		p := startPlatform(nil)
		s3 := netip.MustParseAddrPort(p.s3.Endpoint)
		const proxied, direct = "proxied.only-the-proxy-knows.test", "direct.only-the-proxy-knows.test"
		proxy := tinyproxy.StartForTest(GinkgoT(), tinyproxy.Options{
			Hosts: map[string]netip.Addr{proxied: s3.Addr(), direct: s3.Addr()}, ConnectPorts: []int{int(s3.Port())}})
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Printf("tinyproxy's log %s:\n%s", proxy.LogPath(), process.Tail(proxy.LogPath(), 60))
			}
		})
		// Nothing listens there: a request that followed the environment would fail.
		env := []string{"HTTP_PROXY=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9", "NO_PROXY="}

		buckets := map[string]*phalanksv1beta1.StorageBucket{}
		for _, name := range []string{proxied, direct} {
			sb := storageBucket("team", strings.Split(name, ".")[0], strings.Split(name, ".")[0]+"-bucket", p.s3)
			sb.Spec.Endpoint = "http://" + net.JoinHostPort(name, strconv.Itoa(int(s3.Port())))
			Expect(p.c.Create(ctx, sb)).To(Succeed())
			buckets[name] = sb
		}
		startManagerWith(managerSpec{name: "manager", kubeconfig: p.kubeconfig, env: env, flags: []string{
			"--storagebucket-proxy=" + proxy.URL.String(), "--storagebucket-no-proxy=" + direct,
			"--storagebucket-endpoint-allow-unresolvable-via-proxy"}})
		eventuallyReady(p.c, buckets[proxied], metav1.ConditionTrue, "BucketReady", time.Minute)
		Expect(proxy.Requests(proxied)).To(BeNumerically(">", 0))
		By("the name --storagebucket-no-proxy lists goes direct, where it does not resolve: not through either proxy")
		eventuallyReady(p.c, buckets[direct], metav1.ConditionFalse, "DNSFailure", time.Minute)
		Expect(proxy.Requests(direct)).To(BeZero())
	})
})
