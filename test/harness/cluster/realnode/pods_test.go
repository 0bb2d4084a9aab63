package realnode_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/phalanks/phalanks-operator/test/harness/cluster"
	"github.com/phalanks/phalanks-operator/test/harness/images"
	"github.com/phalanks/phalanks-operator/test/harness/sandbox"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// envSecond marks the copy of this test that runs the second node.
const envSecond = "PHALANKS_REALNODE_SECOND"

// One node serves every check: starting it costs most of the test's time. A second node
// runs the same checks at the same time, in a copy of this test in a sandbox of its own
// (go test runs packages in parallel, and engineers share machines): neither may see or
// disturb the other.
func TestRealNodeRunsPods(t *testing.T) {
	g := NewWithT(t)
	var ignore []int
	if os.Getenv(envSecond) == "" {
		second, out := startSecondNode(t)
		ignore = append(ignore, second.Process.Pid)
		defer func() {
			err := second.Wait()
			g.Expect(err).NotTo(HaveOccurred(), "the second node's test failed:\n%s", out)
			t.Logf("the second node's test:\n%s", out)
		}()
	}
	before := snapshot(t, ignore...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, RealNode: true, Mirrors: []string{"quay.io"}, ClusterDNS: true})
	g.Expect(err).NotTo(HaveOccurred())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			c.Stop()
		}
	})
	t.Logf("control plane and real node ready in %s", time.Since(start).Round(time.Millisecond))
	cs, err := kubernetes.NewForConfig(c.Config)
	g.Expect(err).NotTo(HaveOccurred())

	app, err := images.TestApp(ctx, filepath.Join(dir, "build"))
	g.Expect(err).NotTo(HaveOccurred())
	// Pushed under a mirrored registry's path, run by that registry's name.
	_, err = c.Push(ctx, "phalanks/testapp:1", app)
	g.Expect(err).NotTo(HaveOccurred())
	const image = "quay.io/phalanks/testapp:1"

	const ns = "restricted"
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	t.Run("Pod Security admission refuses a root pod in a restricted namespace", func(t *testing.T) {
		g := NewWithT(t)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: ns},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
		}
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		g.Expect(err).To(MatchError(ContainSubstring("violates PodSecurity \"restricted")))
	})

	var clusterIP string
	t.Run("a restricted Deployment's pods run from the local registry, become Ready and serve through a Service", func(t *testing.T) {
		g := NewWithT(t)
		start := time.Now()
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, webDeployment(ns, image, 2), metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "web"},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(images.TestAppPort)}},
			},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		clusterIP = svc.Spec.ClusterIP
		g.Eventually(func(g Gomega) {
			d, err := cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Status.AvailableReplicas).To(BeEquivalentTo(2), "Deployment status %+v", d.Status)
		}).WithTimeout(3 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		t.Logf("2 replicas Available in %s", time.Since(start).Round(time.Millisecond))

		// Through kube-proxy's rules, from this process (in the node's network namespace).
		// A new connection each time, for kube-proxy to pick a backend each time.
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		seen := map[string]bool{}
		g.Eventually(func(g Gomega) {
			resp, err := hc.Get("http://" + clusterIP + "/")
			g.Expect(err).NotTo(HaveOccurred())
			defer func() { _ = resp.Body.Close() }()
			body, err := io.ReadAll(resp.Body)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(body)).To(HavePrefix("testapp web-"))
			seen[strings.TrimSpace(string(body))] = true
			g.Expect(seen).To(HaveLen(2), "both pods answer through the Service")
		}).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	})

	t.Run("processes in the sandbox resolve the Service's name through /etc/hosts", func(t *testing.T) {
		g := NewWithT(t)
		hc := &http.Client{Timeout: 5 * time.Second}
		g.Eventually(func(g Gomega) {
			addrs, err := net.LookupHost("web." + ns + ".svc")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(addrs).To(ConsistOf(clusterIP))
			resp, err := hc.Get("http://web." + ns + ".svc.cluster.local/")
			g.Expect(err).NotTo(HaveOccurred())
			_ = resp.Body.Close()
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	})

	t.Run("kubectl logs and exec reach the pod through kube-apiserver and the kubelet", func(t *testing.T) {
		g := NewWithT(t)
		logs := kubectl(t, c, "logs", "--namespace", ns, "deployment/web")
		g.Expect(logs).To(ContainSubstring("serving on :8080"))
		// From inside a pod: the pod network, the Service, and kube-apiserver through the
		// kubernetes Service.
		out := kubectl(t, c, "exec", "--namespace", ns, "deployment/web", "--", "/testapp", "get", "http://"+clusterIP+"/")
		g.Expect(out).To(HavePrefix("testapp web-"))
	})

	t.Run("pods resolve Services by name through the cluster DNS, and reach the local registry", func(t *testing.T) {
		g := NewWithT(t)
		// The search path of the pod's namespace completes the short name; the long one
		// resolves as it is.
		for _, name := range []string{"web", "web." + ns + ".svc", "web." + ns + ".svc." + cluster.ClusterDomain} {
			out := kubectl(t, c, "exec", "--namespace", ns, "deployment/web", "--", "/testapp", "get", "http://"+name+"/")
			g.Expect(out).To(HavePrefix("testapp web-"), "GET http://%s/ from a pod", name)
		}
		out, err := kubectlErr(c, "exec", "--namespace", ns, "deployment/web", "--", "/testapp", "get", "http://nothing."+ns+".svc/")
		g.Expect(err).To(HaveOccurred(), "a name no Service has does not resolve: %s", out)
		g.Expect(out).To(ContainSubstring("no such host"))
		out = kubectl(t, c, "exec", "--namespace", ns, "deployment/web", "--", "/testapp", "get", "http://"+cluster.PodRegistryHost+"/v2/phalanks/testapp/tags/list")
		g.Expect(out).To(ContainSubstring(`"1"`), "the registry's tags of the test image, as a pod reads them")
	})

	t.Run("scaling down terminates pods at once (the app stops on SIGTERM)", func(t *testing.T) {
		g := NewWithT(t)
		start := time.Now()
		_, err := cs.AppsV1().Deployments(ns).Patch(ctx, "web", "application/merge-patch+json", []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func(g Gomega) {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods.Items).To(HaveLen(1))
		}).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		t.Logf("pod gone in %s", time.Since(start).Round(time.Millisecond))
	})

	g.Expect(c.Healthy()).To(Succeed())
	// Stopped with a pod running: the teardown must still leave nothing behind.
	stopped = true
	g.Expect(c.Shutdown()).To(Succeed())
	// A process of either node may still be on its way out (the second node's teardown
	// runs beside this one); one that stays is left behind.
	g.Eventually(func() state { return snapshot(t, ignore...) }).WithTimeout(10 * time.Second).Should(Equal(before))
}

// startSecondNode runs this test again, in a sandbox of its own nested in this one.
func startSecondNode(t *testing.T) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestRealNodeRunsPods$", "-test.v")
	cmd.Env = append(sandbox.Environ(), envSecond+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

func webDeployment(ns, image string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:  "app",
						Image: image,
						Ports: []corev1.ContainerPort{{ContainerPort: images.TestAppPort}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(images.TestAppPort)}},
							PeriodSeconds: 1,
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							ReadOnlyRootFilesystem:   ptr.To(true),
						},
					}},
				},
			},
		},
	}
}

func kubectl(t *testing.T, c *cluster.Cluster, args ...string) string {
	t.Helper()
	out, err := kubectlErr(c, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// kubectlErr runs kubectl and returns its combined output and error.
func kubectlErr(c *cluster.Cluster, args ...string) (string, error) {
	bin, err := tools.Path("kubectl")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}
