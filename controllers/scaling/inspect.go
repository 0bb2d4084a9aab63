package scaling

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Inspector decides objects as the operator does, from what a client may read, and
// writes nothing. kubectl phalanks runs it with the user's own credentials: it needs no
// endpoint of the operator, and shows only what the user may list.
type Inspector struct {
	c      client.Client
	gather *gatherer
	kinds  []*kind
	// Problems says what could not be read (a kind or namespace the user may not list or
	// get), once each.
	problems []string
	mu       sync.Mutex
}

// Status is an object as the operator sees it.
type Status struct {
	Kind, Namespace, Name string
	// UID is the object's, as read: a write made on this Status carries it, so that it
	// never lands on an object deleted (and perhaps re-created) since.
	UID types.UID
	// State is up, down, override, grace, excluded, owned, delegated, blocked or invalid.
	State string
	// Level is the replica count (for kinds that run or stop, 1 or 0).
	Level int32
	// Saved is the count the operator holds to restore, if any.
	Saved *int32
	// Next is the next scheduled transition; zero if none.
	Next time.Time
	// Why says what the state rests on, or what the operator reports.
	Why string
	// Pending: the operator has yet to carry the decision out (it lags behind, runs in
	// dry-run, or does not run).
	Pending bool
	// ReplicasDown are the replicas held below the saved count; CPUMilli and MemoryBytes
	// what one of their pods requested at the scale-down; DownSince when that was.
	ReplicasDown          int32
	CPUMilli, MemoryBytes int64
	DownSince             time.Time
}

// NewInspector returns an Inspector deciding with o (the operator's flags) at now.
// scaledObjects says whether KEDA's ScaledObjects are served; extra are kinds scaled
// through /scale (from --scaling-resources), as discovery found them.
func NewInspector(c client.Client, o Options, now time.Time, scaledObjects bool, extra map[string]schema.GroupVersionKind) (*Inspector, error) {
	p, err := o.newPolicy()
	if err != nil {
		return nil, err
	}
	i := &Inspector{c: c}
	reader := &listingReader{Client: c, lists: map[string]client.ObjectList{}, gets: map[string]gotObject{}}
	i.gather = &gatherer{reader: reader, client: c, policy: func() *policy { return p }, calendars: NewCalendars(reader, o.CalendarNamespace, p.scheduleDefaults),
		now: func() time.Time { return now }, keda: func() bool { return scaledObjects }}
	resources := o.Resources
	if resources == nil {
		resources = DefaultResources
	}
	for _, r := range resources {
		switch j := slices.IndexFunc(builtinKinds, func(k *kind) bool { return k.resource == r }); {
		case r == pdbResource:
			// Budgets follow their workloads: they have no schedule to show.
		case j >= 0:
			i.kinds = append(i.kinds, builtinKinds[j])
		case r == "scaledobjects."+kedaGroup && scaledObjects:
			i.kinds = append(i.kinds, scaledObjectKind(i.findTarget))
		case extra[r].Kind != "":
			i.kinds = append(i.kinds, scaleKind(extra[r], r))
		}
	}
	return i, nil
}

// Problems lists what could not be read.
func (i *Inspector) Problems() []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return slices.Clone(i.problems)
}

func (i *Inspector) problem(format string, args ...any) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if p := fmt.Sprintf(format, args...); !slices.Contains(i.problems, p) {
		i.problems = append(i.problems, p)
	}
}

// Inspect returns every object in namespace (every namespace if empty) that scheduled
// scaling concerns, by kind, namespace and name. A kind the client may not list is
// left out and named in Problems; any other error stops it.
func (i *Inspector) Inspect(ctx context.Context, namespace string) ([]Status, error) {
	var out []Status
	for _, k := range i.kinds {
		list := k.newList()
		if err := i.c.List(ctx, list, client.InNamespace(namespace)); err != nil {
			if apierrors.IsForbidden(err) || meta.IsNoMatchError(err) {
				i.problem("cannot list %s%s: %s", k.resource, where(namespace), reason(err))
				continue
			}
			return nil, fmt.Errorf("list %s: %w", k.resource, err)
		}
		var objs []client.Object
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			if obj, ok := o.(client.Object); ok && (k.skip == nil || !k.skip(obj)) && obj.GetDeletionTimestamp().IsZero() {
				objs = append(objs, obj)
			}
			return nil
		})
		for _, obj := range objs {
			st, ok, err := i.inspect(ctx, k, obj)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, st)
			}
		}
	}
	slices.SortFunc(out, func(a, b Status) int {
		return strings.Compare(a.Namespace+"\x00"+a.Kind+"\x00"+a.Name, b.Namespace+"\x00"+b.Kind+"\x00"+b.Name)
	})
	return out, nil
}

// Object inspects one object of the kind named (a Kind, as Status names it). For an
// object that scheduled scaling leaves alone it returns false, and a Status that only
// identifies it.
func (i *Inspector) Object(ctx context.Context, kindName string, key types.NamespacedName) (Status, bool, error) {
	j := slices.IndexFunc(i.kinds, func(k *kind) bool { return strings.EqualFold(k.name, kindName) })
	if j < 0 {
		return Status{}, false, fmt.Errorf("scheduled scaling does not scale %q", kindName)
	}
	obj := i.kinds[j].newObject()
	if err := i.c.Get(ctx, key, obj); err != nil {
		return Status{}, false, err
	}
	return i.inspect(ctx, i.kinds[j], obj)
}

// Kinds lists the Kinds inspected.
func (i *Inspector) Kinds() []string {
	var out []string
	for _, k := range i.kinds {
		out = append(out, k.name)
	}
	return out
}

func (i *Inspector) inspect(ctx context.Context, k *kind, obj client.Object) (Status, bool, error) {
	in, err := i.gather.gather(ctx, k, obj)
	if err != nil {
		if apierrors.IsForbidden(err) {
			i.problem("cannot read all of %s %s/%s: %s", k.name, obj.GetNamespace(), obj.GetName(), reason(err))
			return Status{}, false, nil
		}
		return Status{}, false, err
	}
	if !in.managed() {
		return identity(k, obj), false, nil
	}
	st, ok := statusOf(client.ObjectKeyFromObject(obj), in, decide(in))
	if !ok {
		return identity(k, obj), false, nil
	}
	st.UID = obj.GetUID()
	return st, true, nil
}

// identity is the Status of an object scheduled scaling leaves alone: who it is.
func identity(k *kind, obj client.Object) Status {
	return Status{Kind: k.name, Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID()}
}

// statusOf reports the decision about an object as kubectl phalanks shows it; false for
// an object that scheduled scaling leaves alone.
func statusOf(key types.NamespacedName, in inputs, d decision) (Status, bool) {
	if d.state == stateUnmanaged && d.workload == nil && d.hpa == nil {
		return Status{}, false
	}
	st := Status{Kind: in.kind.name, Namespace: key.Namespace, Name: key.Name, State: string(d.state), Level: in.workload.level,
		Next: d.next, ReplicasDown: d.savings.replicas, CPUMilli: d.savings.cpuMilli, MemoryBytes: d.savings.memoryBytes, DownSince: d.savings.since}
	if d.state == stateUnmanaged {
		// No schedule applies any more, and what was saved is to be restored.
		st.State = string(stateUp)
	}
	if n, ok, err := savedCount(in.workload.annotations, AnnotationOriginalReplicas); ok && err == nil {
		st.Saved = &n
	}
	st.Pending = (d.workload != nil && d.workload.level != in.workload.level) || d.hpa != nil
	if st.Pending {
		// What the savings will be, not what they are.
		st.ReplicasDown, st.CPUMilli, st.MemoryBytes, st.DownSince = 0, 0, 0, time.Time{}
	}
	st.Why = why(in, d)
	return st, true
}

// why says in a sentence what a decision rests on.
func why(in inputs, d decision) string {
	from := ""
	if d.from != "" {
		from = " (schedule of " + d.from + ")"
	}
	var note string
	for _, e := range d.events {
		if e.reason != ReasonScheduleReadAsPeers {
			note = e.note
			break
		}
	}
	switch {
	case d.state == stateInvalid && (d.workload != nil || d.hpa != nil):
		return note + "; that counts as no schedule, and the operator has yet to restore it"
	case d.state == stateDown && d.workload != nil && d.workload.level != in.workload.level:
		return "downtime" + from + "; the operator has yet to scale it down"
	case d.state == stateDown && d.hpa != nil:
		return "downtime" + from + "; the operator has yet to lower its autoscaler's minReplicas"
	case d.state == stateDown:
		saved, _, _ := savedCount(in.workload.annotations, AnnotationOriginalReplicas)
		if in.kind.onOff {
			return "downtime" + from + "; " + in.kind.stopped
		}
		if saved > 0 {
			return fmt.Sprintf("downtime%s; %d to restore", from, saved)
		}
		return "downtime" + from
	case d.workload != nil || d.hpa != nil:
		return "the operator has yet to restore it: " + note
	case d.state == stateUp || d.state == stateUnmanaged:
		return "uptime" + from
	case d.state == stateExcluded && in.namespaceExcluded:
		return "its namespace is excluded from scheduled scaling by the operator's flags"
	case d.state == stateExcluded:
		return "excluded (exclude or exclude-until)"
	}
	return note
}

func where(namespace string) string {
	if namespace == "" {
		return " in any namespace"
	}
	return " in namespace " + namespace
}

func reason(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return string(status.Status().Reason)
	}
	return err.Error()
}

// findTarget reads the workload a ScaledObject scales, for its schedule.
func (i *Inspector) findTarget(ctx context.Context, reader client.Reader, namespace string, ref scaleTarget) (client.Object, *kind, bool) {
	for _, k := range i.kinds {
		if k.gvk.GroupKind() == ref.groupKind() {
			obj := k.newObject()
			if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.name}, obj); err == nil {
				return obj, k, true
			}
		}
	}
	return nil, nil, false
}

// listingReader is the user's client with what the operator's cache adds: autoscalers
// listed by target (hpaTargetIndex), filtered here, and each list read once per
// namespace; a namespace it may not get reads as one without annotations.
type listingReader struct {
	client.Client
	mu    sync.Mutex
	lists map[string]client.ObjectList
	gets  map[string]gotObject
}

// Get implements client.Reader, reading each object once: a Namespace the user may
// not get counts as one without annotations.
func (r *listingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gvk, err := r.GroupVersionKindFor(obj)
	if err != nil {
		return err
	}
	id := gvk.String() + "/" + key.String()
	r.mu.Lock()
	got, seen := r.gets[id]
	r.mu.Unlock()
	if !seen {
		got.obj = obj.DeepCopyObject().(client.Object)
		got.err = r.Client.Get(ctx, key, got.obj, opts...)
		if _, isNamespace := obj.(*corev1.Namespace); isNamespace && apierrors.IsForbidden(got.err) {
			got.obj.SetName(key.Name)
			got.err = nil
		}
		r.mu.Lock()
		r.gets[id] = got
		r.mu.Unlock()
	}
	if got.err != nil {
		return got.err
	}
	copied := reflect.ValueOf(got.obj.DeepCopyObject())
	if copied.Type() != reflect.TypeOf(obj) {
		return fmt.Errorf("read %s into %T", id, obj)
	}
	reflect.ValueOf(obj).Elem().Set(copied.Elem())
	return nil
}

type gotObject struct {
	obj client.Object
	err error
}

// List implements client.Reader.
func (r *listingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := &client.ListOptions{}
	lo.ApplyOptions(opts)
	target, byTarget := "", false
	if lo.FieldSelector != nil {
		target, byTarget = lo.FieldSelector.RequiresExactMatch(hpaTargetIndex)
	}
	gvk, err := r.GroupVersionKindFor(list)
	if err != nil {
		return err
	}
	key := gvk.String() + "/" + lo.Namespace
	r.mu.Lock()
	cached, ok := r.lists[key]
	r.mu.Unlock()
	if !ok {
		cached = list.DeepCopyObject().(client.ObjectList)
		if err := r.Client.List(ctx, cached, client.InNamespace(lo.Namespace)); err != nil {
			if !apierrors.IsForbidden(err) {
				return err
			}
			// As if there were none: the user's view.
			_ = meta.SetList(cached, nil)
		}
		r.mu.Lock()
		r.lists[key] = cached
		r.mu.Unlock()
	}
	items, err := meta.ExtractList(cached)
	if err != nil {
		return err
	}
	var keep []runtime.Object
	for _, item := range items {
		if h, ok := item.(*autoscalingv2.HorizontalPodAutoscaler); ok && byTarget && !slices.Contains(hpaTargets(h), target) {
			continue
		}
		keep = append(keep, item.DeepCopyObject())
	}
	return meta.SetList(list, keep)
}

// GroupVersionKind returns the group, version and kind of a Kind inspected.
func (i *Inspector) GroupVersionKind(kindName string) (schema.GroupVersionKind, bool) {
	for _, k := range i.kinds {
		if k.name == kindName {
			return k.gvk, true
		}
	}
	return schema.GroupVersionKind{}, false
}

// Resource returns the <plural>.<group> of a Kind inspected.
func (i *Inspector) Resource(kindName string) string {
	for _, k := range i.kinds {
		if k.name == kindName {
			return k.resource
		}
	}
	return ""
}
