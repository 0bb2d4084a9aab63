// Package scaling_test checks scheduled scaling against the real HorizontalPodAutoscaler
// controller of a local control plane.
package scaling_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/test/harness/cluster"
)

// TestAnAutoscalerPausesWhileItsTargetIsScaledToZero scales an autoscaled Deployment
// to zero for a downtime and checks that kube-controller-manager's HPA controller
// reports scaling disabled and leaves the count at zero, then resumes after the
// restore: the operator and the autoscaler do not fight.
func TestAnAutoscalerPausesWhileItsTargetIsScaledToZero(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Dir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(c.Stop)

	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	k8s, err := client.New(c.Config, client.Options{Scheme: s})
	g.Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(scaling.SetupWithManager(mgr, scaling.Options{Concurrency: 1})).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	labels := map[string]string{"app": "web"}
	web := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	g.Expect(k8s.Create(ctx, web)).To(Succeed())
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    ptr.To[int32](2),
			MaxReplicas:    5,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ResourceMetricSourceType,
				Resource: &autoscalingv2.ResourceMetricSource{
					Name:   corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](80)},
				},
			}},
		},
	}
	g.Expect(k8s.Create(ctx, hpa)).To(Succeed())
	replicas := func(g Gomega) int32 {
		live := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(web), live)).To(Succeed())
		return ptr.Deref(live.Spec.Replicas, -1)
	}
	scalingActive := func(g Gomega) string {
		live := &autoscalingv2.HorizontalPodAutoscaler{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(hpa), live)).To(Succeed())
		for _, c := range live.Status.Conditions {
			if c.Type == autoscalingv2.ScalingActive {
				return string(c.Status) + "/" + c.Reason
			}
		}
		return ""
	}
	// The autoscaler has looked at its target (there is no metrics API here, so it
	// cannot compute a count, but it is active).
	g.Eventually(scalingActive).WithTimeout(2 * time.Minute).ShouldNot(BeEmpty())
	g.Expect(scalingActive(g)).NotTo(Equal("False/ScalingDisabled"))

	setDowntime := func(value string) {
		g.Eventually(func(g Gomega) {
			live := &appsv1.Deployment{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(web), live)).To(Succeed())
			a := live.GetAnnotations()
			if a == nil {
				a = map[string]string{}
			}
			if value == "" {
				delete(a, scaling.AnnotationDowntime)
			} else {
				a[scaling.AnnotationDowntime] = value
			}
			live.SetAnnotations(a)
			g.Expect(k8s.Update(ctx, live)).To(Succeed())
		}).Should(Succeed())
	}
	setDowntime("always")
	g.Eventually(replicas).WithTimeout(time.Minute).Should(BeEquivalentTo(0))
	g.Eventually(scalingActive).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Equal("False/ScalingDisabled"))
	g.Consistently(replicas).WithTimeout(5*time.Second).WithPolling(time.Second).Should(BeEquivalentTo(0),
		"the autoscaler must not scale a paused target back up")
	live := &autoscalingv2.HorizontalPodAutoscaler{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(hpa), live)).To(Succeed())
	g.Expect(live.Spec.MinReplicas).To(Equal(ptr.To[int32](2)), "the autoscaler itself is not touched")

	setDowntime("")
	g.Eventually(replicas).WithTimeout(time.Minute).Should(BeEquivalentTo(3))
	g.Eventually(scalingActive).WithTimeout(2 * time.Minute).WithPolling(time.Second).ShouldNot(Equal("False/ScalingDisabled"))
}
