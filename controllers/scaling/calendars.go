package scaling

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/phalanks/phalanks-operator/internal/schedule"
)

// LabelHolidayCalendar is the label ("true") of a ConfigMap that is a holiday calendar,
// in the operator's namespace (--scaling-calendar-namespace), which every namespace
// shares, or in the workload's: the name of the ConfigMap is the name of the calendar,
// each data entry a schedule in the usual grammar (usually a list of absolute ranges)
// under a key that names it. A schedule element holidays:<name> contains what the
// calendar contains.
const LabelHolidayCalendar = annotationPrefix + "holiday-calendar"

// AnnotationShadowCalendars on a Namespace names, comma-separated, the calendars of that
// namespace that replace the shared calendars of the same names for the objects in it.
//
// A calendar decides when workloads sleep, and anyone who may create a ConfigMap in a
// namespace may label one. So a calendar of the namespace is used only when no shared
// calendar has its name, unless the Namespace itself, which only those who may change
// Namespaces can annotate, names it here: a tenant's ConfigMap never changes when the
// platform's workloads in the tenant's namespace sleep.
const AnnotationShadowCalendars = annotationPrefix + "shadow-calendars"

// ShadowCalendars returns the calendars a Namespace lets its own replace.
func ShadowCalendars(ns *corev1.Namespace) []string {
	return splitList(ns.Annotations[AnnotationShadowCalendars])
}

// calendarSelector selects the ConfigMaps the operator reads: its cache lists and
// watches these alone, so no other ConfigMap ever reaches it.
var calendarSelector = labels.SelectorFromSet(labels.Set{LabelHolidayCalendar: "true"})

// Calendars looks holiday calendars up for schedules and keeps each parsed until its
// ConfigMap changes. Reader is the scaling cache in the operator and the user's own
// client in kubectl phalanks.
type Calendars struct {
	reader    client.Reader
	namespace string
	defaults  schedule.Defaults

	mu     sync.Mutex
	parsed map[types.UID]parsedCalendar
}

type parsedCalendar struct {
	resourceVersion string
	schedule        *schedule.Schedule
	err             error
}

// NewCalendars returns calendars read through reader; operatorNamespace holds those
// every namespace shares (empty: none). d gives the zone and week frame of entries that
// name none, as for any schedule.
func NewCalendars(reader client.Reader, operatorNamespace string, d schedule.Defaults) *Calendars {
	d.Calendars = nil
	return &Calendars{reader: reader, namespace: operatorNamespace, defaults: d, parsed: map[types.UID]parsedCalendar{}}
}

// In returns the calendars the schedules of objects in namespace see; shadow are the
// calendars of that namespace that replace the shared ones (ShadowCalendars).
func (c *Calendars) In(ctx context.Context, namespace string, shadow []string) schedule.Calendars {
	return calendarsIn{ctx: ctx, c: c, namespace: namespace, shadow: shadow}
}

type calendarsIn struct {
	ctx       context.Context //nolint:containedctx // schedule.Calendars has no context; this one lives for one decision
	c         *Calendars
	namespace string
	shadow    []string
}

// Calendar implements schedule.Calendars: the shared calendar of that name, else the
// namespace's; the namespace's first if the Namespace lets it shadow the shared one.
func (in calendarsIn) Calendar(name string) (*schedule.Schedule, error) {
	order := []string{in.c.namespace, in.namespace}
	if slices.Contains(in.shadow, name) {
		order = []string{in.namespace, in.c.namespace}
	}
	var forbidden error
	for i, ns := range order {
		if ns == "" || i == 1 && ns == order[0] {
			continue
		}
		cm := &corev1.ConfigMap{}
		err := in.c.reader.Get(in.ctx, types.NamespacedName{Namespace: ns, Name: name}, cm)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case apierrors.IsForbidden(err) && forbidden == nil:
			// Only kubectl phalanks, with a user's own credentials, meets this: the
			// user's view goes on without what the user may not read.
			forbidden = fmt.Errorf("holiday calendar %q: read ConfigMap %s/%s: %w", name, ns, name, err)
			continue
		case err != nil:
			return nil, fmt.Errorf("holiday calendar %q: read ConfigMap %s/%s: %w", name, ns, name, err)
		case cm.Labels[LabelHolidayCalendar] != "true":
			continue
		}
		return in.c.parse(cm)
	}
	if forbidden != nil {
		return nil, forbidden
	}
	var searched []string
	for _, ns := range []string{in.namespace, in.c.namespace} {
		if ns != "" && !slices.Contains(searched, ns) {
			searched = append(searched, ns)
		}
	}
	return nil, fmt.Errorf("unknown holiday calendar %q: no ConfigMap %q labelled %s=true in namespace %s",
		name, name, LabelHolidayCalendar, strings.Join(searched, " or "))
}

func (c *Calendars) parse(cm *corev1.ConfigMap) (*schedule.Schedule, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.parsed[cm.UID]; ok && p.resourceVersion == cm.ResourceVersion {
		return p.schedule, p.err
	}
	s, err := schedule.ParseCalendar(cm.Name, cm.Data, c.defaults)
	if err != nil {
		err = fmt.Errorf("%w (ConfigMap %s/%s)", err, cm.Namespace, cm.Name)
	}
	c.parsed[cm.UID] = parsedCalendar{resourceVersion: cm.ResourceVersion, schedule: s, err: err}
	return s, err
}

// forget drops a calendar's parsed copy once its ConfigMap is gone.
func (c *Calendars) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.parsed, uid)
}

// slimConfigMap keeps what calendars read: identity, labels and data.
func slimConfigMap(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	meta := slimMeta(cm.ObjectMeta)
	meta.Annotations = nil
	meta.Labels = cm.Labels
	return &corev1.ConfigMap{ObjectMeta: meta, Data: cm.Data}, nil
}

func configMapObject() client.Object { return &corev1.ConfigMap{} }

// usesCalendar reports whether any scheduling annotation names the calendar.
func usesCalendar(annotations map[string]string, name string) bool {
	for _, k := range userKeys {
		for _, ref := range schedule.References(annotations[k]) {
			if ref == name {
				return true
			}
		}
	}
	return false
}

// calendarHandler re-decides every object of kind k whose schedule may name a calendar
// that changed: those whose own annotations, whose Namespace's or whose operator
// defaults name it, in the calendar's namespace, or in every namespace for a calendar
// in the operator's.
func calendarHandler(k *kind, s *scaler) handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, cm client.Object) []reconcile.Request {
		name := cm.GetName()
		var opts []client.ListOption
		if cm.GetNamespace() != s.calendarNamespace() {
			opts = append(opts, client.InNamespace(cm.GetNamespace()))
		}
		list := k.newList()
		if err := s.cache.List(ctx, list, opts...); err != nil {
			return nil
		}
		byDefaults := usesCalendar(s.current().defaults, name)
		namespaces := map[string]bool{}
		var reqs []reconcile.Request
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			obj, ok := o.(client.Object)
			if !ok {
				return nil
			}
			uses, seen := namespaces[obj.GetNamespace()]
			if !seen {
				ns := &corev1.Namespace{}
				uses = s.cache.Get(ctx, types.NamespacedName{Name: obj.GetNamespace()}, ns) == nil && usesCalendar(ns.Annotations, name)
				namespaces[obj.GetNamespace()] = uses
			}
			if uses || byDefaults || k.extraLayer != nil || usesCalendar(obj.GetAnnotations(), name) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
			}
			return nil
		})
		return reqs
	})
}

// calendarPredicate passes calendar changes (the cache holds labelled ConfigMaps only)
// and drops a deleted calendar's parsed copy.
func calendarPredicate(c *Calendars) predicate.TypedFuncs[client.Object] {
	return predicate.TypedFuncs[client.Object]{
		DeleteFunc: func(e event.TypedDeleteEvent[client.Object]) bool {
			c.forget(e.Object.GetUID())
			return true
		},
		GenericFunc: func(event.TypedGenericEvent[client.Object]) bool { return false },
	}
}

// anyCalendar accepts every well-formed calendar name as an empty calendar: the flags
// are checked at start, before any calendar can be read.
type anyCalendar struct{}

func (anyCalendar) Calendar(string) (*schedule.Schedule, error) { return &schedule.Schedule{}, nil }
