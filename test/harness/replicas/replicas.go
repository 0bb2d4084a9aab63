// Package replicas checks the operator's replica count as users see it: its
// Deployment's replicas, all available, each a live member of the StorageBucket ring.
package replicas

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/internal/sharding"
)

// liveWithin is how recently a ring member must have renewed its Lease to count as
// live: the default --storagebucket-shard-lease-duration.
const liveWithin = 15 * time.Second

// Check returns nil when the Deployment namespace/name runs n replicas, all available,
// and the live members of the StorageBucket ring in namespace are exactly its pods; else
// an error that says what it found.
func Check(ctx context.Context, c client.Reader, namespace, name string, n int32) error {
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, dep); err != nil {
		return err
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != n || dep.Status.Replicas != n || dep.Status.AvailableReplicas != n {
		return fmt.Errorf("deployment %s/%s: spec.replicas %v, status %d replicas, %d available; want %d", namespace, name,
			ptrString(dep.Spec.Replicas), dep.Status.Replicas, dep.Status.AvailableReplicas, n)
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return err
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return err
	}
	var names []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	leases := &coordinationv1.LeaseList{}
	if err := c.List(ctx, leases, client.InNamespace(namespace), client.HasLabels{sharding.RingLabel}); err != nil {
		return err
	}
	var members []string
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity != nil && l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) < liveWithin {
			members = append(members, *l.Spec.HolderIdentity)
		}
	}
	slices.Sort(names)
	slices.Sort(members)
	if !slices.Equal(names, members) {
		return fmt.Errorf("the ring's live members %q are not the Deployment's pods %q", members, names)
	}
	return nil
}

func ptrString(p *int32) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}
