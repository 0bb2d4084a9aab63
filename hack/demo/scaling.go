package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/test/harness/samples"
)

// The scheduled-scaling sample's schedule is working hours; the demo cannot wait for
// the evening, so it gives the sample a downtime window that opens shortly after the
// sample is applied and closes shortly after that, and expects to see the Deployment
// go down to zero and come back to its replicas.
const (
	demoDowntimeLead   = 30 * time.Second
	demoDowntimeLength = 30 * time.Second
)

func init() {
	adapters[samples.DeploymentKind] = adaptScheduledSample
	expectations[samples.DeploymentKind] = expectScheduledFlip
}

// scheduledSamples remembers, per sample, its window and whether it was seen down.
var scheduledSamples = struct {
	sync.Mutex
	window   map[string][2]time.Time
	seenDown map[string]bool
}{window: map[string][2]time.Time{}, seenDown: map[string]bool{}}

func scheduled(obj *unstructured.Unstructured) bool {
	a := obj.GetAnnotations()
	_, up := a[scaling.AnnotationUptime]
	_, down := a[scaling.AnnotationDowntime]
	return up || down
}

func adaptScheduledSample(_ context.Context, e samples.Env, obj *unstructured.Unstructured) error {
	if err := samples.SetContainerImages(obj, e.Image); err != nil {
		return err
	}
	if !scheduled(obj) {
		return nil
	}
	start := time.Now().Add(demoDowntimeLead).Truncate(time.Second)
	end := start.Add(demoDowntimeLength)
	a := obj.GetAnnotations()
	delete(a, scaling.AnnotationUptime)
	a[scaling.AnnotationDowntime] = start.UTC().Format(time.RFC3339) + "-" + end.UTC().Format(time.RFC3339)
	obj.SetAnnotations(a)
	scheduledSamples.Lock()
	defer scheduledSamples.Unlock()
	scheduledSamples.window[obj.GetName()] = [2]time.Time{start, end}
	return nil
}

func expectScheduledFlip(ctx context.Context, e samples.Env, obj *unstructured.Unstructured) (bool, string, error) {
	if !scheduled(obj) {
		return true, "exists", nil
	}
	replicas, _, err := unstructured.NestedInt64(obj.Object, "spec", "replicas")
	if err != nil {
		return false, "", err
	}
	dep := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, dep); err != nil {
		return false, "", err
	}
	pods, ready, err := samples.PodCounts(ctx, e.Client, dep.Namespace, dep.Spec.Selector)
	if err != nil {
		return false, "", err
	}
	saved := obj.GetAnnotations()[scaling.AnnotationOriginalReplicas]
	scheduledSamples.Lock()
	defer scheduledSamples.Unlock()
	w := scheduledSamples.window[obj.GetName()]
	clock := func(t time.Time) string { return t.Local().Format(time.TimeOnly) }
	switch {
	case replicas == 0 && saved != "" && pods > 0:
		return false, fmt.Sprintf("scaled down to 0, %s replicas saved; %d pods terminating", saved, pods), nil
	case replicas == 0 && saved != "":
		scheduledSamples.seenDown[obj.GetName()] = true
		return false, fmt.Sprintf("scaled down to 0, %s replicas saved, every pod gone; back up at %s", saved, clock(w[1])), nil
	case scheduledSamples.seenDown[obj.GetName()] && saved == "" && int64(ready) == replicas:
		return true, fmt.Sprintf("pods gone at %s and back, %d Ready, at %s", clock(w[0]), ready, clock(w[1])), nil
	default:
		return false, fmt.Sprintf("%d replicas, %d pods Ready; downtime %s-%s", replicas, ready, clock(w[0]), clock(w[1])), nil
	}
}
