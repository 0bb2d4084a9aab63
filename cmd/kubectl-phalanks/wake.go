package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

// FieldManager owns what the plugin writes: a wake's exclude-until, a sleep's
// force-downtime. With server-side apply, each wake or sleep replaces the one before (a
// key the plugin owns and no longer applies goes), and a key someone else set is
// never overwritten: the apply conflicts and nothing changes.
const FieldManager = "kubectl-phalanks"

// kindAliases are the short names kubectl users type.
var kindAliases = map[string]string{
	"deploy": "Deployment", "deployment": "Deployment", "deployments": "Deployment",
	"sts": "StatefulSet", "statefulset": "StatefulSet", "statefulsets": "StatefulSet",
	"cj": "CronJob", "cronjob": "CronJob", "cronjobs": "CronJob",
	"job": "Job", "jobs": "Job",
	"ds": "DaemonSet", "daemonset": "DaemonSet", "daemonsets": "DaemonSet",
	"hpa": "HorizontalPodAutoscaler", "horizontalpodautoscaler": "HorizontalPodAutoscaler", "horizontalpodautoscalers": "HorizontalPodAutoscaler",
	"so": "ScaledObject", "scaledobject": "ScaledObject", "scaledobjects": "ScaledObject",
}

func wakeOrSleep(ctx context.Context, cmd string, args []string, out, errOut *printer, now time.Time) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	var c common
	c.bind(fs)
	length := fs.Duration("for", time.Hour, "How long: the operator honours it until then, and it needs no cleanup.")
	cancel := fs.Bool("cancel", false, "End what an earlier wake or sleep set, now.")
	pos, err := parse(fs, args, errOut)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("%s takes one target, NAMESPACE or NAMESPACE/KIND/NAME", cmd)
	}
	if *length <= 0 && !*cancel {
		return usagef("--for must be positive")
	}
	parts := strings.Split(pos[0], "/")
	if len(parts) != 1 && len(parts) != 3 || slicesHasEmpty(parts) {
		return usagef("target %q: want NAMESPACE or NAMESPACE/KIND/NAME", pos[0])
	}
	cl, _, insp, err := c.inspector(ctx, errOut, now)
	if err != nil {
		return err
	}
	targets, err := findTargets(ctx, insp, cmd, parts)
	if err != nil {
		return err
	}
	for _, p := range insp.Problems() {
		errOut.ln("warning:", p)
	}

	until := now.Add(*length).UTC().Truncate(time.Second)
	annotations := map[string]string{scaling.AnnotationExcludeUntil: until.Format(time.RFC3339)}
	if cmd == "sleep" {
		annotations = map[string]string{scaling.AnnotationForceDowntime: "until " + until.Format(time.RFC3339)}
	}
	if *cancel {
		annotations = nil
	}
	failed := 0
	for _, t := range targets {
		name := t.Namespace + "/" + t.Kind + "/" + t.Name
		gvk, _ := insp.GroupVersionKind(t.Kind)
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace(t.Namespace)
		u.SetName(t.Name)
		// The UID read is a precondition: an object deleted since is not re-created as a
		// stub of annotations (which a loosely typed custom resource would accept), and
		// one re-created since is not written for the one read.
		u.SetUID(t.UID)
		u.SetAnnotations(annotations)
		if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager)); err != nil {
			failed++
			switch {
			case apierrors.HasStatusCause(err, metav1.CauseTypeFieldManagerConflict):
				errOut.f("%s: not changed: someone else set the annotation (%v); remove it, then try again\n", name, err)
			case apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err):
				errOut.f("%s: not changed: it was deleted or replaced since it was read (%v)\n", name, err)
			default:
				errOut.f("%s: %v\n", name, err)
			}
			continue
		}
		after, ok, err := insp.Object(ctx, t.Kind, types.NamespacedName{Namespace: t.Namespace, Name: t.Name})
		switch {
		case err != nil:
			failed++
			errOut.f("%s: set, but could not read it back: %v\n", name, err)
		case *cancel:
			state := "no longer under scheduled scaling"
			if ok {
				state = after.State + ": " + after.Why
			}
			out.f("%s: %s ended; now %s\n", name, cmd, state)
		case cmd == "wake" && ok && after.State == "excluded":
			out.f("%s: awake until %s (%s); the operator restores it if it is down\n",
				name, local(until, now), scaling.AnnotationExcludeUntil)
		case cmd == "sleep" && ok && after.State == "down":
			out.f("%s: asleep until %s (%s); the operator scales it down if it is up\n",
				name, local(until, now), scaling.AnnotationForceDowntime)
		case cmd == "sleep" && ok && after.State == "grace":
			// New workloads run for the grace period first, asleep or not.
			out.f("%s: asleep until %s (%s), once its grace period is over: %s\n",
				name, local(until, now), scaling.AnnotationForceDowntime, after.Why)
		default:
			failed++
			why := "it is not under scheduled scaling"
			if ok {
				why = after.State + ": " + after.Why
			}
			errOut.f("%s: set, but it has no effect: %s\n", name, why)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%s: %d of %d not done", cmd, failed, len(targets))
	}
	return nil
}

func slicesHasEmpty(parts []string) bool {
	for _, p := range parts {
		if p == "" {
			return true
		}
	}
	return false
}

// findTargets returns the objects a wake or sleep applies to: one, or every object in
// the namespace under scheduled scaling.
func findTargets(ctx context.Context, insp *scaling.Inspector, cmd string, parts []string) ([]scaling.Status, error) {
	if len(parts) == 1 {
		all, err := insp.Inspect(ctx, parts[0])
		if err != nil {
			return nil, err
		}
		var targets []scaling.Status
		for _, st := range all {
			// Objects that another controller or KEDA scales are left to them.
			if st.State != "owned" && st.State != "delegated" {
				targets = append(targets, st)
			}
		}
		if len(targets) == 0 {
			return nil, fmt.Errorf("nothing in namespace %s is under scheduled scaling (that you may list)", parts[0])
		}
		return targets, nil
	}
	kind, err := kindName(insp, parts[1])
	if err != nil {
		return nil, err
	}
	key := types.NamespacedName{Namespace: parts[0], Name: parts[2]}
	st, ok, err := insp.Object(ctx, kind, key)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%s %s not found", kind, key)
	case err != nil:
		return nil, err
	case !ok && cmd == "wake":
		return nil, fmt.Errorf("%s %s is not under scheduled scaling: nothing to wake", kind, key)
	}
	return []scaling.Status{st}, nil
}

// kindName resolves what the user typed (deploy, statefulsets, Rollout,
// rollouts.argoproj.io) to a Kind the operator scales.
func kindName(insp *scaling.Inspector, typed string) (string, error) {
	if k, ok := kindAliases[strings.ToLower(typed)]; ok {
		typed = k
	}
	for _, k := range insp.Kinds() {
		lower := strings.ToLower(k)
		r := insp.Resource(k)
		plural, _, _ := strings.Cut(r, ".")
		if strings.EqualFold(typed, k) || strings.EqualFold(typed, r) || strings.EqualFold(typed, plural) || strings.EqualFold(typed, lower+"s") {
			return k, nil
		}
	}
	return "", errors.New("scheduled scaling does not scale " + typed + " (kinds: " + strings.Join(insp.Kinds(), ", ") + ")")
}
