package cluster_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/phalanks/phalanks-operator/test/harness/cluster"
)

func startCluster(t *testing.T) (*cluster.Cluster, kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Several fake nodes: each is untainted while kwok already writes its status.
	c, err := cluster.Start(ctx, cluster.Options{Dir: t.TempDir(), Aggregation: true, Nodes: 3})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c, cs
}

func deployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:latest"}}},
			},
		},
	}
}

// One cluster serves every check: starting it costs most of the test's time.
func TestLocalCluster(t *testing.T) {
	g := NewWithT(t)
	c, cs := startCluster(t)
	ctx := t.Context()

	t.Run("every fake node is Ready and schedulable", func(t *testing.T) {
		g := NewWithT(t)
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(nodes.Items).To(HaveLen(3))
		for _, n := range nodes.Items {
			g.Expect(n.Spec.Taints).To(BeEmpty(), "node %s", n.Name)
			g.Expect(n.Status.Conditions).To(ContainElement(And(
				HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))), "node %s", n.Name)
		}
	})

	t.Run("a Deployment becomes Available with every replica", func(t *testing.T) {
		g := NewWithT(t)
		_, err := cs.AppsV1().Deployments("default").Create(ctx, deployment("web", 3), metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func(g Gomega) {
			d, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Status.AvailableReplicas).To(BeEquivalentTo(3))
			g.Expect(d.Status.Conditions).To(ContainElement(And(
				HaveField("Type", appsv1.DeploymentAvailable),
				HaveField("Status", corev1.ConditionTrue))))
		}).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	})

	t.Run("deleting an owner garbage-collects its dependents", func(t *testing.T) {
		g := NewWithT(t)
		owner, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		dep := deployment("owned", 1)
		dep.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}
		_, err = cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cs.CoreV1().ConfigMaps("default").Delete(ctx, "owner", metav1.DeleteOptions{})).To(Succeed())
		g.Eventually(func() bool {
			_, err := cs.AppsV1().Deployments("default").Get(ctx, "owned", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(BeTrue())
	})

	t.Run("with aggregation on, kube-apiserver publishes the front-proxy CA for aggregated API servers", func(t *testing.T) {
		g := NewWithT(t)
		cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cm.Data).To(HaveKeyWithValue("requestheader-client-ca-file", ContainSubstring("BEGIN CERTIFICATE")))
		g.Expect(cm.Data).To(HaveKeyWithValue("requestheader-allowed-names", `["front-proxy-client"]`))
	})

	t.Run("kube-apiserver restarts on the same address with the same data", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(c.StopAPIServer()).To(Succeed())
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		g.Expect(err).To(HaveOccurred())
		g.Expect(c.StartAPIServer()).To(Succeed())
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(3)))
	})

	g.Expect(c.Healthy()).To(Succeed())
}
