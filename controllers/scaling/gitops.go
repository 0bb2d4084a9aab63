package scaling

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A GitOps controller that applies a workload's replicas from Git puts them back during
// the downtime; the operator sees a manual change and keeps it until the next
// transition, so the environment stays up unnoticed. The field manager that last wrote
// the field tells a GitOps controller from a person, and the Warning event
// ReasonGitOpsConflict names the tool and its fix.

// ReasonGitOpsConflict is the reason of the Warning that a GitOps controller put the
// level back during the downtime.
const ReasonGitOpsConflict = "GitOpsConflict"

// gitOpsTool is a GitOps controller known by its field manager.
type gitOpsTool struct {
	name string
	// fix says how to keep the tool from applying the field; docs/scheduled-scaling.md
	// has the details under the anchor.
	fix, anchor string
}

// gitOpsTools are the field managers of the GitOps controllers users run most.
var gitOpsTools = func() map[string]gitOpsTool {
	argo := gitOpsTool{name: "Argo CD", anchor: "argo-cd",
		fix: "add an ignoreDifferences entry for /spec/replicas to the Application and the sync option RespectIgnoreDifferences=true, " +
			"or leave replicas out of the manifests in Git"}
	return map[string]gitOpsTool{
		// Argo CD's server-side apply manager, and the name its client-side apply shows.
		"argocd-controller":             argo,
		"argocd-application-controller": argo,
		"kustomize-controller": {name: "Flux (kustomize-controller)", anchor: "flux",
			fix: "leave replicas out of the manifests in Git, or add an ignore rule with paths [/spec/replicas] to the Kustomization's spec.ignore (kustomize-controller v1.9 and later)"},
		"helm-controller": {name: "Flux (helm-controller)", anchor: "flux",
			fix: "leave replicas out of the chart's manifests for this workload (as charts do when autoscaling is on), " +
				"or suspend the HelmRelease for the downtime; drift correction ignores it with spec.driftDetection.ignore paths [/spec/replicas]"},
	}
}()

// levelWriter is the field manager that last wrote a field, and how.
type levelWriter struct {
	manager   string
	operation metav1.ManagedFieldsOperationType
}

// lastWriter returns the manager, other than the operator, that most recently wrote the
// field at path (such as spec.replicas) according to managedFields.
func lastWriter(entries []metav1.ManagedFieldsEntry, path []string) (levelWriter, bool) {
	var best *metav1.ManagedFieldsEntry
	for i := range entries {
		e := &entries[i]
		if e.Manager == FieldManager || e.FieldsV1 == nil || e.Subresource != "" && e.Subresource != "scale" {
			continue
		}
		if !ownsPath(e.FieldsV1.GetRawBytes(), path) {
			continue
		}
		if best == nil || (e.Time != nil && (best.Time == nil || best.Time.Before(e.Time))) {
			best = e
		}
	}
	if best == nil {
		return levelWriter{}, false
	}
	return levelWriter{manager: best.Manager, operation: best.Operation}, true
}

// ownsPath reports whether a FieldsV1 set contains the field at path.
func ownsPath(raw []byte, path []string) bool {
	var set map[string]json.RawMessage
	if json.Unmarshal(raw, &set) != nil {
		return false
	}
	for i, p := range path {
		next, ok := set["f:"+p]
		if !ok {
			return false
		}
		if i == len(path)-1 {
			return true
		}
		set = nil
		if json.Unmarshal(next, &set) != nil {
			return false
		}
	}
	return false
}

// gitOpsNote is the Warning for a level a GitOps controller put back during the downtime.
func gitOpsNote(k traits, w levelWriter, field string) (eventSpec, bool) {
	tool, ok := gitOpsTools[w.manager]
	if !ok {
		return eventSpec{}, false
	}
	what := "put " + field + " back"
	if k.onOff {
		what = "changed " + field
	}
	return eventSpec{warning: true, reason: ReasonGitOpsConflict, action: "Skip", note: fmt.Sprintf(
		"%s (field manager %s) %s during the downtime, so it stays up until the next transition: %s "+
			"(docs/scheduled-scaling.md#%s)", tool.name, w.manager, what, tool.fix, tool.anchor)}, true
}

// writers remembers who last wrote each object's level, by UID and resourceVersion: a
// manual change is looked up once, not at every reconcile.
type writers struct {
	reader client.Reader
	mu     sync.Mutex
	seen   map[types.UID]writerAt
}

type writerAt struct {
	resourceVersion string
	writer          levelWriter
	found           bool
}

// of reads the object's managed fields from the API server (the cache drops them) and
// returns who last wrote its level.
func (w *writers) of(ctx context.Context, k *kind, obj client.Object) (levelWriter, bool, error) {
	w.mu.Lock()
	if s, ok := w.seen[obj.GetUID()]; ok && s.resourceVersion == obj.GetResourceVersion() {
		w.mu.Unlock()
		return s.writer, s.found, nil
	}
	w.mu.Unlock()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(k.gvk)
	if err := w.reader.Get(ctx, client.ObjectKeyFromObject(obj), u); err != nil {
		return levelWriter{}, false, fmt.Errorf("read the managed fields of %s %s: %w", k.name, obj.GetName(), err)
	}
	writer, found := lastWriter(u.GetManagedFields(), k.levelField)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) > 10000 {
		clear(w.seen)
	}
	w.seen[obj.GetUID()] = writerAt{resourceVersion: obj.GetResourceVersion(), writer: writer, found: found}
	return writer, found, nil
}
