package scaling

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/phalanks/phalanks-operator/internal/workers"
)

// pdbResource names PodDisruptionBudgets in --scaling-resources.
const pdbResource = "poddisruptionbudgets.policy"

// scaler sets up and links the controllers of every kind: those built in at start, and
// those named in --scaling-resources (KEDA ScaledObjects, kinds scaled through /scale)
// once the API server serves them.
type scaler struct {
	mgr   manager.Manager
	cache cache.Cache
	opts  Options
	// policy is the operator-wide policy every decision reads; Reconfigure replaces it.
	policy   atomic.Pointer[policy]
	recorder events.EventRecorder
	disco    discovery.DiscoveryInterface
	// calendars are the holiday calendars schedules name, read from the cache.
	calendars *Calendars
	// writers tells who changed an object's level, from its managed fields.
	writers *writers
	// gather reads the inputs of decisions from the cache.
	gather *gatherer
	// pacer spreads restores at --scaling-restore-rate.
	pacer *pacer
	// deps are the restores that wait for other workloads (wake-after).
	deps *dependencies

	mu sync.Mutex
	// controllers are the kinds set up, by group and kind.
	controllers map[schema.GroupKind]*kindController
	// scaledObjects is the ScaledObject controller once KEDA's CRD is served.
	scaledObjects *kindController
	// pending are the resources named but not served yet, and why a check failed.
	pending map[string]string
	// resyncs wake every controller to re-decide all its objects.
	resyncs []chan event.TypedGenericEvent[struct{}]

	limitsMu sync.Mutex
	// concurrency is --scaling-concurrency as Reconfigure last set it, and limits bound
	// each controller's reconciles by it.
	concurrency int
	limits      []*workers.Limit
}

// newLimit returns the concurrency limit of a controller being set up.
func (s *scaler) newLimit() *workers.Limit {
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	l := workers.New(s.concurrency, LiveConcurrencyUpTo)
	s.limits = append(s.limits, l)
	return l
}

// setConcurrency changes the limit of every controller, and of those set up later.
func (s *scaler) setConcurrency(n int) {
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	s.concurrency = n
	for _, l := range s.limits {
		l.Set(n)
	}
}

type kindController struct {
	kind *kind
	ctrl controller.Controller
}

func newScaler(mgr manager.Manager, o Options, p *policy) (*scaler, error) {
	c, err := newCache(mgr, o.Resources)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("add scaling cache: %w", err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("create discovery client: %w", err)
	}
	s := &scaler{
		mgr: mgr, cache: c, opts: o, disco: disco,
		calendars:   NewCalendars(c, o.CalendarNamespace, p.scheduleDefaults),
		writers:     &writers{reader: mgr.GetAPIReader(), seen: map[types.UID]writerAt{}},
		recorder:    mgr.GetEventRecorder(FieldManager),
		controllers: map[schema.GroupKind]*kindController{},
		pending:     map[string]string{},
		pacer:       newPacer(o.RestoreRate),
		deps:        newDependencies(),
		concurrency: o.Concurrency,
	}
	s.policy.Store(p)
	s.gather = s.gatherer()
	return s, nil
}

// current is the policy in force.
func (s *scaler) current() *policy { return s.policy.Load() }

// resync is a source that, each time resyncAll is called, enqueues every object the
// cache holds of the kind list lists.
func (s *scaler) resync(newList func() client.ObjectList) source.TypedSource[reconcile.Request] {
	ch := make(chan event.TypedGenericEvent[struct{}], 1)
	s.mu.Lock()
	s.resyncs = append(s.resyncs, ch)
	s.mu.Unlock()
	return source.Channel(ch, handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, _ struct{}) []reconcile.Request {
		return requestsFor(ctx, s.cache, newList())
	}))
}

// resyncAll has every controller re-decide all its objects. A resync not yet taken up
// already covers this one.
func (s *scaler) resyncAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.resyncs {
		select {
		case ch <- event.TypedGenericEvent[struct{}]{}:
		default:
		}
	}
}

// setup sets up the built-in kinds named in --scaling-resources now, and leaves the
// others to discovery once the manager runs.
func (s *scaler) setup() error {
	for _, r := range s.opts.Resources {
		switch i := slices.IndexFunc(builtinKinds, func(k *kind) bool { return k.resource == r }); {
		case i >= 0:
			if err := s.setupKind(builtinKinds[i]); err != nil {
				return err
			}
		case r == pdbResource:
			if err := s.setupPDB(); err != nil {
				return err
			}
		default:
			s.pending[r] = ""
		}
	}
	if len(s.pending) == 0 {
		return nil
	}
	if err := s.mgr.Add(manager.RunnableFunc(s.discover)); err != nil {
		return fmt.Errorf("add scaling discovery: %w", err)
	}
	return nil
}

// controllerName names a kind's controller in logs and metrics.
func controllerName(k *kind) string {
	if slices.Contains(builtinKinds, k) {
		return "scaling-" + strings.ToLower(k.name)
	}
	return "scaling-" + strings.ToLower(k.gvk.GroupKind().String())
}

// setupKind registers the controller of one kind and links it with the ScaledObject
// controller if both scale the same workloads.
func (s *scaler) setupKind(k *kind) error {
	// Exported from the start, so that a dashboard's query names a series before the
	// first restore.
	restoreLag.WithLabelValues(k.name)
	r := &reconciler{kind: k, s: s, wake: newWakeups(s.opts.Clock)}
	limit := s.newLimit()
	b := ctrl.NewControllerManagedBy(s.mgr).
		Named(controllerName(k)).
		WithOptions(controller.Options{MaxConcurrentReconciles: limit.Workers()}).
		WatchesRawSource(source.Kind(s.cache, k.newObject(), &handler.TypedEnqueueRequestForObject[client.Object]{}, objectPredicate(k, s))).
		WatchesRawSource(source.Kind[client.Object](s.cache, namespaceObject(), namespaceHandler(k, s.cache), namespacePredicate())).
		WatchesRawSource(source.Kind(s.cache, configMapObject(), calendarHandler(k, s), calendarPredicate(s.calendars))).
		WatchesRawSource(r.wake).
		WatchesRawSource(s.resync(k.newList))
	if k.autoscaled {
		b = b.WatchesRawSource(source.Kind[client.Object](s.cache, hpaObject(), hpaHandler(k), hpaPredicate()))
	}
	for _, dk := range []*kind{deployments, statefulSets} {
		if s.watchesDependencies(dk) {
			h, p := s.dependencyHandler(k, dk)
			b = b.WatchesRawSource(source.Kind(s.cache, dk.newObject(), h, p))
		}
	}
	c, err := b.Build(workers.Reconciler(limit, r))
	if err != nil {
		return fmt.Errorf("set up %s controller: %w", controllerName(k), err)
	}
	registerKind(k.name)

	s.mu.Lock()
	defer s.mu.Unlock()
	kc := &kindController{kind: k, ctrl: c}
	s.controllers[k.gvk.GroupKind()] = kc
	if s.scaledObjects != nil && k.autoscaled {
		return s.link(kc)
	}
	return nil
}

// link makes the ScaledObject controller and the controller of a kind they scale
// follow each other: a ScaledObject's change re-decides its target (which it takes
// over), a workload's change re-decides the ScaledObjects scaling it (whose schedule
// can come from it). Called with s.mu held.
func (s *scaler) link(kc *kindController) error {
	gk := kc.kind.gvk.GroupKind()
	toTarget := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, so client.Object) []reconcile.Request {
		if key, ok := targetRequest(so, gk); ok {
			return []reconcile.Request{{NamespacedName: key}}
		}
		return nil
	})
	if err := kc.ctrl.Watch(source.Kind(s.cache, s.scaledObjects.kind.newObject(), toTarget)); err != nil {
		return fmt.Errorf("watch ScaledObjects for %s: %w", gk, err)
	}
	toScaledObjects := handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		list := newScaledObjectList()
		if err := s.cache.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			if key, ok := targetRequest(&list.Items[i], gk); ok && key.Name == o.GetName() {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return reqs
	})
	if err := s.scaledObjects.ctrl.Watch(source.Kind(s.cache, kc.kind.newObject(), toScaledObjects, objectPredicate(kc.kind, s))); err != nil {
		return fmt.Errorf("watch %s for ScaledObjects: %w", gk, err)
	}
	return nil
}

// setupScaledObjects sets up the ScaledObject controller and links it with every kind
// it can scale.
func (s *scaler) setupScaledObjects() error {
	k := scaledObjectKind(s.findTarget)
	if err := s.setupKind(k); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scaledObjects = s.controllers[k.gvk.GroupKind()]
	for _, kc := range s.controllers {
		if kc.kind.autoscaled {
			if err := s.link(kc); err != nil {
				return err
			}
		}
	}
	return nil
}

// kedaActive reports whether ScaledObjects are watched.
func (s *scaler) kedaActive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scaledObjects != nil
}

// findTarget reads the workload a ScaledObject scales from the cache, if its kind is
// scaled.
func (s *scaler) findTarget(ctx context.Context, reader client.Reader, namespace string, ref scaleTarget) (client.Object, *kind, bool) {
	s.mu.Lock()
	kc := s.controllers[ref.groupKind()]
	s.mu.Unlock()
	if kc == nil {
		return nil, nil, false
	}
	obj := kc.kind.newObject()
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.name}, obj); err != nil {
		return nil, nil, false
	}
	return obj, kc.kind, true
}

// discover sets up the kinds named in --scaling-resources that the API server serves,
// now and whenever a CRD appears or changes. It runs on the leader, like the
// controllers it sets up.
func (s *scaler) discover(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("scaling-discovery")
	recheck := make(chan struct{}, 1)
	poke := func() {
		select {
		case recheck <- struct{}{}:
		default:
		}
	}
	crds := &metav1.PartialObjectMetadata{}
	crds.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	informer, err := s.cache.GetInformer(ctx, crds)
	if err != nil {
		return fmt.Errorf("watch CustomResourceDefinitions: %w", err)
	}
	reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
	})
	if err != nil {
		return fmt.Errorf("watch CustomResourceDefinitions: %w", err)
	}
	defer func() { _ = informer.RemoveEventHandler(reg) }()
	poke()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-recheck:
		}
		if err := s.checkPending(log); err != nil {
			return err
		}
	}
}

// checkPending looks each pending resource up and sets up those served.
func (s *scaler) checkPending(log logr.Logger) error {
	s.mu.Lock()
	var pending []string
	for r := range s.pending {
		pending = append(pending, r)
	}
	s.mu.Unlock()
	slices.Sort(pending)
	for _, r := range pending {
		gvk, hasScale, err := s.lookup(r)
		if err != nil {
			s.notePending(r, err.Error(), log)
			continue
		}
		switch {
		case r == "scaledobjects."+kedaGroup:
			if err := s.setupScaledObjects(); err != nil {
				return err
			}
		case !hasScale:
			s.notePending(r, "it has no /scale subresource, so it is not scaled", log)
			continue
		default:
			if err := s.setupKind(scaleKind(gvk, r)); err != nil {
				return err
			}
		}
		log.Info("scaling a kind the API server serves now", "resource", r, "kind", gvk.String())
		s.mu.Lock()
		delete(s.pending, r)
		s.mu.Unlock()
	}
	return nil
}

// notePending logs why a resource is not scaled (yet), once per reason.
func (s *scaler) notePending(r, why string, log logr.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[r] != why {
		s.pending[r] = why
		log.Info("not scaling a resource named in --scaling-resources", "resource", r, "reason", why)
	}
}

// lookup finds the preferred version and kind of "<plural>.<group>" and whether it
// serves /scale.
func (s *scaler) lookup(resource string) (schema.GroupVersionKind, bool, error) {
	plural, group, _ := strings.Cut(resource, ".")
	groups, err := s.disco.ServerGroups()
	if err != nil {
		return schema.GroupVersionKind{}, false, fmt.Errorf("discover API groups: %w", err)
	}
	var version string
	for _, g := range groups.Groups {
		if g.Name == group {
			version = g.PreferredVersion.GroupVersion
		}
	}
	if version == "" {
		return schema.GroupVersionKind{}, false, fmt.Errorf("the API server serves no group %q", group)
	}
	list, err := s.disco.ServerResourcesForGroupVersion(version)
	if err != nil {
		return schema.GroupVersionKind{}, false, fmt.Errorf("discover %s: %w", version, err)
	}
	gv, err := schema.ParseGroupVersion(version)
	if err != nil {
		return schema.GroupVersionKind{}, false, err
	}
	var gvk schema.GroupVersionKind
	hasScale := false
	for _, r := range list.APIResources {
		switch r.Name {
		case plural:
			gvk = gv.WithKind(r.Kind)
		case plural + "/scale":
			hasScale = true
		}
	}
	if gvk.Kind == "" {
		return schema.GroupVersionKind{}, false, fmt.Errorf("%s serves no resource %q", version, plural)
	}
	return gvk, hasScale, nil
}

// calendarNamespace is where the calendars every namespace shares live.
func (s *scaler) calendarNamespace() string { return s.opts.CalendarNamespace }
