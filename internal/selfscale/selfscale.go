// Package selfscale keeps the operator's own Deployment at the replica count its
// configuration names, so that the count survives what installs and upgrades do to the
// Deployment: OLM v0 replaces the Deployment's spec at every upgrade, and OLM v1
// re-applies every field its manifest sets. The bundle's Deployment sets no replica
// count, so neither of them owns it, and the operator writes it through the Deployment's
// scale subresource.
//
// The Deployment is found from the operator's own Pod, by the controller owner
// references of the Pod and of its ReplicaSet, never by a name or a label, so that no
// other Deployment in the namespace is touched. A scale-up goes one replica at a time,
// each once the Deployment is Available with every replica up: OLM v0 reinstalls a CSV
// whose Deployment is not Available, which would set the count back.
package selfscale

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// MaxReplicas is the most replicas a setting may ask for: the StorageBucket ring has 64
// slots, so more replicas than that probe nothing.
const MaxReplicas = 64

// FieldManager writes the scale subresource.
const FieldManager = "phalanks-operator"

// ReasonScaled is the reason of the event on the Deployment at each step.
const ReasonScaled = "OperatorScaled"

const defaultPeriod = 10 * time.Second

// Options are what a Keeper reads and writes with.
type Options struct {
	// Reader reads the Pod, its ReplicaSet and the Deployment from the API server (not a
	// cache: the operator watches none of them); Writer writes the scale subresource.
	Reader client.Reader
	Writer client.SubResourceClient
	// Namespace and Pod name the operator's own Pod.
	Namespace, Pod string
	// Source names where the count comes from, in events.
	Source   string
	Recorder events.EventRecorder
	Log      logr.Logger
	// Period is how often the count is checked, besides every change of Replicas;
	// zero means 10 s.
	Period time.Duration
	Clock  clock.WithTicker
}

// Keeper keeps the Deployment that runs the operator's Pod at a replica count. It runs
// on the elected replica only.
type Keeper struct {
	Options
	replicas atomic.Int32
	wake     chan struct{}
	// deployment is the Deployment found, once found: the Pod's owners do not change.
	deployment *types.NamespacedName
	uid        types.UID
	// lastErr is the last error logged, so that one that persists is logged once.
	lastErr string
}

// New returns a Keeper of replicas (0: leave the count alone).
func New(o Options, replicas int) *Keeper {
	out := &Keeper{Options: o}
	out.wake = make(chan struct{}, 1)
	out.replicas.Store(bounded(replicas))
	if out.Period == 0 {
		out.Period = defaultPeriod
	}
	if out.Clock == nil {
		out.Clock = clock.RealClock{}
	}
	return out
}

// Set changes the count to keep (0: leave it alone) and looks at it at once.
func (k *Keeper) Set(replicas int) {
	k.replicas.Store(bounded(replicas))
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// bounded is replicas within 0 and MaxReplicas, which the setting's validation keeps it
// in anyway.
func bounded(replicas int) int32 {
	return int32(max(0, min(replicas, MaxReplicas)))
}

// NeedLeaderElection is true: one replica decides the count.
func (k *Keeper) NeedLeaderElection() bool { return true }

// Start keeps the count until ctx ends.
func (k *Keeper) Start(ctx context.Context) error {
	t := k.Clock.NewTicker(k.Period)
	defer t.Stop()
	for {
		err := k.Step(ctx)
		switch {
		case err != nil && ctx.Err() == nil && err.Error() != k.lastErr:
			k.Log.Error(err, "cannot keep the operator's replica count; retrying", "every", k.Period)
			k.lastErr = err.Error()
		case err == nil:
			k.lastErr = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-k.wake:
		}
	}
}

// Step moves the Deployment one step towards the count: down to it at once, or up by
// one replica once the Deployment is Available with every replica it has up. A
// Deployment scaled to zero is an operator paused on purpose, and is left so: the
// replica that sees it is on its way out.
func (k *Keeper) Step(ctx context.Context) error {
	want := k.replicas.Load()
	if want == 0 {
		return nil
	}
	dep, err := k.own(ctx)
	if err != nil {
		return err
	}
	have := int32(1)
	if dep.Spec.Replicas != nil {
		have = *dep.Spec.Replicas
	}
	next := want
	switch {
	case have == want, have == 0:
		return nil
	case have < want:
		if !settled(dep, have) {
			return nil
		}
		next = have + 1
	}
	scale := &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: dep.Name, UID: dep.UID, ResourceVersion: dep.ResourceVersion},
		Spec:       autoscalingv1.ScaleSpec{Replicas: next},
	}
	if err := k.Writer.Update(ctx, dep, client.WithSubResourceBody(scale), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("scale Deployment %s/%s from %d to %d replicas: %w", dep.Namespace, dep.Name, have, next, err)
	}
	note := fmt.Sprintf("Scaled from %d to %d replicas towards %d, as %s says", have, next, want, k.Source)
	k.Log.Info(note, "deployment", dep.Name)
	k.Recorder.Eventf(dep, nil, corev1.EventTypeNormal, ReasonScaled, "Scale", "%s", note)
	return nil
}

// settled reports whether the Deployment runs have replicas of its current template,
// all available, and says so in its Available condition.
func settled(dep *appsv1.Deployment, have int32) bool {
	if dep.Status.ObservedGeneration < dep.Generation || dep.Status.UpdatedReplicas != have ||
		dep.Status.AvailableReplicas != have || dep.Status.Replicas != have {
		return false
	}
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// errNotOwned says the operator's Pod is not run by a Deployment (kubectl run, a test).
var errNotOwned = errors.New("not run by a Deployment")

// own returns the Deployment that runs the operator's Pod, by the controller owner
// references of the Pod and its ReplicaSet.
func (k *Keeper) own(ctx context.Context) (*appsv1.Deployment, error) {
	dep := &appsv1.Deployment{}
	if k.deployment != nil {
		if err := k.Reader.Get(ctx, *k.deployment, dep); err != nil {
			return nil, fmt.Errorf("read the operator's Deployment: %w", err)
		}
		if dep.UID != k.uid {
			return nil, fmt.Errorf("the operator's Deployment %s was replaced by another of the same name", k.deployment.Name)
		}
		return dep, nil
	}
	pod := &corev1.Pod{}
	if err := k.Reader.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Pod}, pod); err != nil {
		return nil, fmt.Errorf("read the operator's Pod: %w", err)
	}
	rsRef := metav1.GetControllerOf(pod)
	if rsRef == nil || rsRef.Kind != "ReplicaSet" || rsRef.APIVersion != appsv1.SchemeGroupVersion.String() {
		return nil, fmt.Errorf("pod %s/%s: %w", k.Namespace, k.Pod, errNotOwned)
	}
	rs := &appsv1.ReplicaSet{}
	if err := k.Reader.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: rsRef.Name}, rs); err != nil {
		return nil, fmt.Errorf("read the operator's ReplicaSet: %w", err)
	}
	if rs.UID != rsRef.UID {
		return nil, fmt.Errorf("ReplicaSet %s is not the one that owns pod %s", rs.Name, k.Pod)
	}
	depRef := metav1.GetControllerOf(rs)
	if depRef == nil || depRef.Kind != "Deployment" || depRef.APIVersion != appsv1.SchemeGroupVersion.String() {
		return nil, fmt.Errorf("ReplicaSet %s/%s: %w", k.Namespace, rs.Name, errNotOwned)
	}
	key := types.NamespacedName{Namespace: k.Namespace, Name: depRef.Name}
	if err := k.Reader.Get(ctx, key, dep); err != nil {
		return nil, fmt.Errorf("read the operator's Deployment: %w", err)
	}
	if dep.UID != depRef.UID {
		return nil, fmt.Errorf("deployment %s is not the one that owns ReplicaSet %s", dep.Name, rs.Name)
	}
	k.deployment, k.uid = &key, dep.UID
	return dep, nil
}
