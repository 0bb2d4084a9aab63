package scaling_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

var scaledObjectGVK = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}

const noFight = "0 resets, HPA written by the operator: false"

// newScaledObject creates a KEDA ScaledObject for a Deployment, validated by KEDA's CRD.
func newScaledObject(t *testing.T, ns, name, target string, minReplicas, maxReplicas int32) *unstructured.Unstructured {
	t.Helper()
	so := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": ns, "name": name, "annotations": map[string]any{"team": "web"}},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"name": target},
			"minReplicaCount": int64(minReplicas),
			"maxReplicaCount": int64(maxReplicas),
			"triggers": []any{map[string]any{
				"type": "cpu", "metricType": "Utilization", "metadata": map[string]any{"value": "80"},
			}},
		},
	}}
	so.SetGroupVersionKind(scaledObjectGVK)
	expect(t).Expect(admin.Create(context.Background(), so)).To(Succeed())
	return so
}

// keda plays KEDA's operator for one ScaledObject, as KEDA v2 behaves: it keeps an HPA
// keda-hpa-<name>, controlled by the ScaledObject, at the ScaledObject's bounds (and
// puts back any other minReplicas: that is the fight the operator must not start); with
// autoscaling.keda.sh/paused-replicas set it deletes the HPA and scales the target to
// that count through /scale; when the annotation goes, it creates the HPA again.
type keda struct {
	so     *unstructured.Unstructured
	target *appsv1.Deployment
	hpa    *autoscalingv2.HorizontalPodAutoscaler
	// minReplicas and maxReplicas are the ScaledObject's bounds.
	minReplicas, maxReplicas int32

	mu sync.Mutex
	// resets counts HPAs put back after someone else changed them.
	resets int
	// writtenByUs: the operator's field manager was seen on the HPA.
	writtenByUs bool
}

func simulateKEDA(t *testing.T, so *unstructured.Unstructured, target *appsv1.Deployment, minReplicas, maxReplicas int32) *keda {
	k := &keda{so: so, target: target, minReplicas: minReplicas, maxReplicas: maxReplicas, hpa: &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: so.GetNamespace(), Name: "keda-hpa-" + so.GetName()},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if err := k.step(ctx); err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) {
				t.Logf("simulated KEDA: %v", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return k
}

func (k *keda) step(ctx context.Context) error {
	so := k.so.DeepCopy()
	if err := admin.Get(ctx, client.ObjectKeyFromObject(k.so), so); err != nil {
		return err
	}
	minReplicas, maxReplicas := k.minReplicas, k.maxReplicas
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	err := admin.Get(ctx, client.ObjectKeyFromObject(k.hpa), hpa)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if exists {
		k.mu.Lock()
		k.writtenByUs = k.writtenByUs || writtenBy(scaling.FieldManager)(hpa)
		k.mu.Unlock()
	}

	if paused, ok := so.GetAnnotations()["autoscaling.keda.sh/paused-replicas"]; ok {
		n, err := strconv.ParseInt(paused, 10, 32)
		if err != nil {
			return err
		}
		count := int32(n)
		if exists {
			if err := admin.Delete(ctx, hpa); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
		scale := &autoscalingv1.Scale{}
		if err := admin.SubResource("scale").Get(ctx, k.target, scale); err != nil {
			return err
		}
		if scale.Spec.Replicas != count {
			scale.Spec.Replicas = count
			return admin.SubResource("scale").Update(ctx, k.target, client.WithSubResourceBody(scale), client.FieldOwner("keda-operator"))
		}
		return nil
	}

	if !exists {
		hpa = &autoscalingv2.HorizontalPodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.hpa.Namespace, Name: k.hpa.Name, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: scaledObjectGVK.GroupVersion().String(), Kind: "ScaledObject", Name: so.GetName(), UID: so.GetUID(),
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}}},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: k.target.Name},
				MinReplicas:    ptr.To(minReplicas), MaxReplicas: maxReplicas,
				Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
					Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](80)},
				}}},
			},
		}
		return admin.Create(ctx, hpa, client.FieldOwner("keda-operator"))
	}
	if ptr.Deref(hpa.Spec.MinReplicas, 1) != minReplicas || hpa.Spec.MaxReplicas != maxReplicas {
		hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas = ptr.To(minReplicas), maxReplicas
		k.mu.Lock()
		k.resets++
		k.mu.Unlock()
		return admin.Update(ctx, hpa, client.FieldOwner("keda-operator"))
	}
	return nil
}

// fights reports what the simulated KEDA had to put back, and whether the operator
// wrote its HPA.
func (k *keda) fights() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return fmt.Sprintf("%d resets, HPA written by the operator: %v", k.resets, k.writtenByUs)
}

func (k *keda) hpaExists(g Gomega) bool {
	err := admin.Get(context.Background(), client.ObjectKeyFromObject(k.hpa), &autoscalingv2.HorizontalPodAutoscaler{})
	g.Expect(client.IgnoreNotFound(err)).To(Succeed())
	return err == nil
}

func annotations(obj client.Object) func(Gomega) map[string]string {
	return func(g Gomega) map[string]string { return live(obj)(g).GetAnnotations() }
}

// TestAKEDAWorkloadIsPausedThroughItsScaledObject annotates a Deployment that KEDA
// scales: the schedule pauses its ScaledObject (paused-replicas) instead of writing
// the Deployment or KEDA's HPA, KEDA holds the Deployment at the downtime count, and
// after the downtime the pause is lifted and KEDA autoscales again. Nothing the
// operator does makes KEDA put anything back.
func TestAKEDAWorkloadIsPausedThroughItsScaledObject(t *testing.T) {
	g := expect(t)
	ns := newNamespace(t, nil)
	web := newDeployment(t, ns, "web", 3, nil)
	so := newScaledObject(t, ns, "web", "web", 2, 5)
	sim := simulateKEDA(t, so, web, 2, 5)
	g.Eventually(sim.hpaExists).WithTimeout(timeout).Should(BeTrue())
	startOperator(t, scaling.Options{})

	spec, next := downtimeForAnHour()
	annotate(g, web, map[string]string{scaling.AnnotationDowntime: spec, scaling.AnnotationDowntimeReplicas: "1"})
	g.Eventually(annotations(so)).WithTimeout(timeout).Should(And(
		HaveKeyWithValue(scaling.KEDAPausedReplicas, "1"),
		HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "1"),
		HaveKeyWithValue(scaling.AnnotationNextTransition, next),
		HaveKeyWithValue("team", "web"),
	))
	g.Eventually(notes(so, scaling.ReasonScaleDown)).WithTimeout(timeout).Should(ContainElement(ContainSubstring("paused")))
	g.Eventually(notes(web, scaling.ReasonScaledThroughAutoscaler)).WithTimeout(timeout).Should(ContainElement(ContainSubstring("KEDA ScaledObject web")))
	g.Eventually(func(g Gomega) *int32 { return live(web)(g).Spec.Replicas }).WithTimeout(timeout).Should(HaveValue(BeEquivalentTo(1)),
		"KEDA holds the paused workload at the downtime count")
	g.Eventually(sim.hpaExists).WithTimeout(timeout).Should(BeFalse())
	g.Expect(writtenBy(scaling.FieldManager)(live(web)(g))).To(BeFalse(), "the workload is KEDA's to scale")

	annotate(g, web, map[string]string{scaling.AnnotationDowntime: "", scaling.AnnotationDowntimeReplicas: ""})
	g.Eventually(annotations(so)).WithTimeout(timeout).Should(And(
		Not(HaveKey(scaling.KEDAPausedReplicas)), Not(HaveKey(scaling.AnnotationOriginalReplicas)),
		Not(HaveKey(scaling.AnnotationNextTransition)), HaveKeyWithValue("team", "web"),
	))
	g.Eventually(sim.hpaExists).WithTimeout(timeout).Should(BeTrue(), "KEDA autoscales again")
	g.Consistently(sim.fights).WithTimeout(3 * time.Second).Should(Equal(noFight))
}

// TestAKEDAScaledObjectPausedByTheUserStaysPaused: a ScaledObject already paused is
// left paused, during a downtime and after it; one annotated itself is paused by its
// own schedule, with the count downtime-replicas gives.
func TestAKEDAScaledObjectPausedByTheUserStaysPaused(t *testing.T) {
	g := expect(t)
	ns := newNamespace(t, nil)
	web := newDeployment(t, ns, "web", 2, nil)
	so := newScaledObject(t, ns, "web", "web", 1, 5)
	annotate(g, so, map[string]string{scaling.KEDAPausedReplicas: "2"})
	api := newDeployment(t, ns, "api", 2, nil)
	own := newScaledObject(t, ns, "api", "api", 1, 5)
	startOperator(t, scaling.Options{})

	spec, next := downtimeForAnHour()
	annotate(g, web, map[string]string{scaling.AnnotationDowntime: spec})
	annotate(g, own, map[string]string{scaling.AnnotationDowntime: spec, scaling.AnnotationDowntimeReplicas: "0"})
	g.Eventually(annotations(own)).WithTimeout(timeout).Should(And(
		HaveKeyWithValue(scaling.KEDAPausedReplicas, "0"), HaveKeyWithValue(scaling.AnnotationNextTransition, next)))
	g.Eventually(notes(web, scaling.ReasonScaledThroughAutoscaler)).WithTimeout(timeout).ShouldNot(BeEmpty())
	g.Consistently(annotations(so)).WithTimeout(5 * time.Second).Should(And(
		HaveKeyWithValue(scaling.KEDAPausedReplicas, "2"), Not(HaveKey(scaling.AnnotationOriginalReplicas))))

	annotate(g, web, map[string]string{scaling.AnnotationDowntime: ""})
	annotate(g, own, map[string]string{scaling.AnnotationDowntime: "", scaling.AnnotationDowntimeReplicas: ""})
	g.Eventually(annotations(own)).WithTimeout(timeout).ShouldNot(HaveKey(scaling.KEDAPausedReplicas))
	g.Consistently(annotations(so)).WithTimeout(3 * time.Second).Should(HaveKeyWithValue(scaling.KEDAPausedReplicas, "2"))
	g.Expect(writtenBy(scaling.FieldManager)(live(api)(g))).To(BeFalse())
}

// TestWithoutScaledObjectsKEDAsAutoscalerIsStillNeverWritten turns ScaledObject support
// off: the workload that KEDA's HPA targets is then reported and not scaled, and the
// HPA, which its ScaledObject controls, is never written, so KEDA has nothing to put
// back. (Before, the operator lowered its minReplicas and KEDA reset it, in a loop.)
func TestWithoutScaledObjectsKEDAsAutoscalerIsStillNeverWritten(t *testing.T) {
	g := expect(t)
	ns := newNamespace(t, nil)
	web := newDeployment(t, ns, "web", 3, nil)
	so := newScaledObject(t, ns, "web", "web", 2, 5)
	sim := simulateKEDA(t, so, web, 2, 5)
	g.Eventually(sim.hpaExists).WithTimeout(timeout).Should(BeTrue())
	var resources []string
	for _, r := range scaling.DefaultResources {
		if r != "scaledobjects.keda.sh" {
			resources = append(resources, r)
		}
	}
	startOperator(t, scaling.Options{Resources: resources})

	for _, count := range []string{"1", "0"} {
		annotate(g, web, map[string]string{scaling.AnnotationDowntime: "always", scaling.AnnotationDowntimeReplicas: count})
		g.Eventually(notes(web, scaling.ReasonAutoscalerNotWritable)).WithTimeout(timeout).Should(ContainElement(
			ContainSubstring("belongs to KEDA ScaledObject web")))
		g.Consistently(sim.fights).WithTimeout(5 * time.Second).WithPolling(time.Second).Should(Equal(noFight))
		g.Expect(live(web)(g).Spec.Replicas).To(HaveValue(BeEquivalentTo(3)))
	}
}
