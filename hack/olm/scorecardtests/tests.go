package scorecardtests

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
)

// fooCreatesDeployment: a Foo from the examples gets a Deployment of its deploymentName,
// controlled by the Foo, with the Foo's replica count.
func fooCreatesDeployment(ctx context.Context, env *Env, r *Report) error {
	examples, err := examplesOf(env, "Foo")
	if err != nil {
		return err
	}
	for _, ex := range examples {
		foo := instantiate(env, ex)
		// A fresh Deployment name, so an existing Deployment (which the Foo must not adopt)
		// cannot make the test pass or fail.
		if err := unstructured.SetNestedField(foo.Object, foo.GetName(), "spec", "deploymentName"); err != nil {
			return err
		}
		if err := env.Client.Create(ctx, foo); err != nil {
			return fmt.Errorf("create Foo %s: %w", foo.GetName(), err)
		}
		defer cleanup(env, foo)
		want, hasReplicas, _ := unstructured.NestedInt64(foo.Object, "spec", "replicas")
		start := time.Now()
		state, err := waitFor(ctx, env, func(ctx context.Context) (bool, string, error) {
			dep := &unstructured.Unstructured{}
			dep.SetGroupVersionKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: foo.GetName()}, dep)
			if apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("no Deployment %s yet", foo.GetName()), nil
			}
			if err != nil {
				return false, err.Error(), nil
			}
			if !controlledBy(dep, foo) {
				return false, fmt.Sprintf("Deployment %s is not controlled by Foo %s", dep.GetName(), foo.GetName()), nil
			}
			replicas, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas")
			if hasReplicas && replicas != want {
				return false, fmt.Sprintf("Deployment %s has %d replicas, the Foo wants %d", dep.GetName(), replicas, want), nil
			}
			return true, fmt.Sprintf("Foo %s created Deployment %s (%d replicas) and controls it", foo.GetName(), dep.GetName(), replicas), nil
		})
		if err != nil {
			return fmt.Errorf("foo %s: %w", foo.GetName(), err)
		}
		r.Logf("%s, after %s", state, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func controlledBy(obj, owner *unstructured.Unstructured) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller && ref.UID == owner.GetUID() {
			return true
		}
	}
	return false
}

// storageBucketTerminalCondition: every StorageBucket example, created in its own
// version, reaches a verdict: a Ready condition that is True or False (not Unknown) for
// its current generation, read in the storage version (older versions may not carry
// conditions). The examples point at real endpoints with credentials the cluster may not
// have, so False with a reason (say, missing credentials) is as much a verdict as True.
func storageBucketTerminalCondition(ctx context.Context, env *Env, r *Report) error {
	examples, err := examplesOf(env, "StorageBucket")
	if err != nil {
		return err
	}
	storage := ""
	for _, crd := range env.Bundle.V1CRDs {
		if crd.Spec.Names.Kind == "StorageBucket" {
			_, storage = servedVersionsOf(crd)
		}
	}
	if storage == "" {
		return fmt.Errorf("the bundle has no StorageBucket CRD with a storage version")
	}
	for _, ex := range examples {
		sb := instantiate(env, ex)
		if err := env.Client.Create(ctx, sb); err != nil {
			return fmt.Errorf("create StorageBucket %s: %w", sb.GetName(), err)
		}
		defer cleanup(env, sb)
		start := time.Now()
		state, err := waitFor(ctx, env, func(ctx context.Context) (bool, string, error) {
			live, err := getAs(ctx, env, sb, storage)
			if err != nil {
				return false, err.Error(), nil
			}
			return readyVerdict(live)
		})
		if err != nil {
			return fmt.Errorf("StorageBucket %s: %w", sb.GetName(), err)
		}
		r.Logf("StorageBucket %s: %s, after %s", sb.GetName(), state, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// readyVerdict reports whether an object's Ready condition is True or False for its
// current generation, and describes where it is.
func readyVerdict(u *unstructured.Unstructured) (bool, string, error) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		cond, _ := c.(map[string]any)
		if cond["type"] != "Ready" {
			continue
		}
		status, _ := cond["status"].(string)
		reason, _ := cond["reason"].(string)
		message, _ := cond["message"].(string)
		observed, _, _ := unstructured.NestedInt64(cond, "observedGeneration")
		desc := fmt.Sprintf("Ready=%s reason=%s: %s", status, reason, message)
		switch {
		case status != "True" && status != "False":
			return false, desc, nil
		case observed != 0 && observed != u.GetGeneration():
			return false, fmt.Sprintf("%s (for generation %d, object at %d)", desc, observed, u.GetGeneration()), nil
		case reason == "":
			return false, desc + " (no reason)", nil
		}
		return true, desc, nil
	}
	return false, "no Ready condition yet", nil
}

// servedVersions: every owned CRD is established and serves the versions the bundle
// declares; every example, created in its own version, reads back in each served version,
// and written back through every other served version it still reads back unchanged in
// its own. With one served version there is no conversion to exercise, and the log says
// so.
func servedVersions(ctx context.Context, env *Env, r *Report) error {
	examples, err := bundle.ALMExamples(env.Bundle.CSV)
	if err != nil {
		return err
	}
	for _, want := range env.Bundle.V1CRDs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: want.Name}, crd); err != nil {
			return fmt.Errorf("CRD %s: %w", want.Name, err)
		}
		if !established(crd) {
			return fmt.Errorf("CRD %s is not Established", crd.Name)
		}
		served, storage := servedVersionsOf(crd)
		for _, v := range want.Spec.Versions {
			if v.Served && !contains(served, v.Name) {
				return fmt.Errorf("the bundle's CRD %s serves %s, the cluster's serves only %v", crd.Name, v.Name, served)
			}
		}
		r.Logf("%s: serves %s (storage %s)", crd.Spec.Names.Kind, strings.Join(served, ", "), storage)
		for _, ex := range examples {
			if ex.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}) {
				continue
			}
			if err := roundTrip(ctx, env, r, ex, served); err != nil {
				return err
			}
		}
	}
	return nil
}

func roundTrip(ctx context.Context, env *Env, r *Report, example *unstructured.Unstructured, served []string) error {
	obj := instantiate(env, example)
	created := obj.GroupVersionKind()
	if err := env.Client.Create(ctx, obj); err != nil {
		return fmt.Errorf("create %s %s as %s: %w", created.Kind, obj.GetName(), created.Version, err)
	}
	defer cleanup(env, obj)
	sent := example.Object["spec"]
	check := func(through string) error {
		got, err := getAs(ctx, env, obj, created.Version)
		if err != nil {
			return err
		}
		var rewritten []string
		if !subset(sent, got.Object["spec"], "spec", &rewritten) {
			return fmt.Errorf("%s %s created as %s reads back with a different spec after %s:\nsent %v\ngot  %v",
				created.Kind, obj.GetName(), created.Version, through, sent, got.Object["spec"])
		}
		for _, w := range rewritten {
			r.Suggest("%s %s created as %s: after %s, %s (the same duration in other words; a client that compares text, such as a GitOps tool, sees a change)",
				created.Kind, obj.GetName(), created.Version, through, w)
		}
		return nil
	}
	if len(served) == 1 {
		if err := check("a read"); err != nil {
			return err
		}
		r.Logf("  %s: only %s is served; created and read back as %s with its spec intact (no conversion to exercise)",
			obj.GetName(), created.Version, created.Version)
		return nil
	}
	for _, v := range served {
		if v == created.Version {
			continue
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			other, err := getAs(ctx, env, obj, v)
			if err != nil {
				return err
			}
			return env.Client.Update(ctx, other)
		})
		if err != nil {
			return fmt.Errorf("read and write back %s %s as %s: %w", created.Kind, obj.GetName(), v, err)
		}
		if err := check("a write as " + v); err != nil {
			return err
		}
		r.Logf("  %s: created as %s, read and written back as %s, read as %s with its spec intact",
			obj.GetName(), created.Version, v, created.Version)
	}
	return nil
}

func getAs(ctx context.Context, env *Env, obj *unstructured.Unstructured, version string) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	gvk.Version = version
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), u); err != nil {
		return nil, fmt.Errorf("read %s %s as %s: %w", gvk.Kind, obj.GetName(), version, err)
	}
	if u.GroupVersionKind() != gvk {
		return nil, fmt.Errorf("read %s %s as %s: the API server answered with %s", gvk.Kind, obj.GetName(), version, u.GetAPIVersion())
	}
	return u, nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

func servedVersionsOf(crd *apiextensionsv1.CustomResourceDefinition) (served []string, storage string) {
	for _, v := range crd.Spec.Versions {
		if v.Served {
			served = append(served, v.Name)
		}
		if v.Storage {
			storage = v.Name
		}
	}
	return served, storage
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// subset reports whether every field set in want has the same value in got; got may hold
// more (defaults the API server filled in). Two strings that spell the same duration
// ("60s", "1m0s") are the same value; each such rewrite is added to rewritten.
func subset(want, got any, path string, rewritten *[]string) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !subset(v, g[k], path+"."+k, rewritten) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !subset(w[i], g[i], fmt.Sprintf("%s[%d]", path, i), rewritten) {
				return false
			}
		}
		return true
	case string:
		g, ok := got.(string)
		if ok && g != w && sameDuration(w, g) {
			*rewritten = append(*rewritten, fmt.Sprintf("%s was written %q and reads %q", path, w, g))
			return true
		}
		return ok && g == w
	case int64, float64, int32, int:
		w, wok := number(want)
		g, gok := number(got)
		return wok && gok && w == g
	default:
		return reflect.DeepEqual(want, got)
	}
}

func sameDuration(a, b string) bool {
	da, errA := time.ParseDuration(a)
	db, errB := time.ParseDuration(b)
	return errA == nil && errB == nil && da == db
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}
