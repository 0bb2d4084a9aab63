package storagebucket

import (
	"context"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Hooks for the specs of the external test package, which look into the reconciler's
// memory to show what it holds and what it lets go.

// CachedReferences returns "Kind namespace/name" of every referenced object whose data
// the reconciler holds.
func (r *Reconciler) CachedReferences() []string {
	var out []string
	for _, k := range r.refs.cached() {
		out = append(out, k.kind+" "+k.String())
	}
	sort.Strings(out)
	return out
}

// TrackedEndpoints returns the endpoints whose circuit breaker the reconciler holds.
func (r *Reconciler) TrackedEndpoints() []string {
	r.mem.mu.Lock()
	defer r.mem.mu.Unlock()
	var out []string
	for e := range r.mem.endpoints {
		out = append(out, e)
	}
	sort.Strings(out)
	return out
}

// Remembers reports whether the reconciler holds state or a schedule for uid.
func (r *Reconciler) Remembers(uid types.UID) bool {
	_, scheduled := r.sched.Due(uid)
	return r.mem.state(uid) != nil || scheduled
}

// SecretsWatched returns "namespace/name" of every Secret the reconciler's Secret
// informer holds.
func (r *Reconciler) SecretsWatched(ctx context.Context) []string {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(secretMetadata().GroupVersionKind())
	list.Kind = "SecretList"
	if err := r.refs.secrets.List(ctx, list); err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Namespace+"/"+s.Name)
	}
	return out
}
