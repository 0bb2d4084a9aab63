// Package managedcache is the working part of the boxcutter stand-in (see package
// boxcutter): the cache operator-controller's default Helm applier detects drift with. For
// each ClusterExtension the applier asks the cache to watch the kinds of the objects it
// installed (Watch), and the ClusterExtension controller receives those objects' events
// through a source of the cache (Source), so an installed object that someone edits or
// deletes is re-applied at once rather than at the next resync. When an extension goes
// (Free), informers no other extension needs are stopped.
//
// What it keeps in memory is a cache of the API server, keyed by the user's UID: a
// re-created ClusterExtension of the same name starts with no watches of its own.
package managedcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// SyncTimeout bounds how long Watch waits for a new informer's first list: an informer
// that cannot list (a kind whose CRD went away, a forbidden resource) would otherwise
// hold the caller forever.
const SyncTimeout = time.Minute

// TrackingCache is a cache whose informers follow what its users watch.
type TrackingCache interface {
	cache.Cache

	// Source returns a source that delivers the events of every informer the cache runs,
	// now or later, to handler, when every predicate lets them through.
	Source(handler handler.EventHandler, predicates ...predicate.Predicate) source.Source

	// Watch makes user watch exactly gvks, starting informers that are missing and
	// stopping those no user needs any more, and returns once the new informers have
	// listed their objects.
	Watch(ctx context.Context, user client.Object, gvks sets.Set[schema.GroupVersionKind]) error

	// Free forgets user's watches and stops the informers no other user needs.
	Free(ctx context.Context, user client.Object) error
}

// NewTrackingCache returns a TrackingCache over a controller-runtime cache built from
// config and opts. It runs (informers included) once started, as a manager Runnable.
func NewTrackingCache(log logr.Logger, config *rest.Config, opts cache.Options) (TrackingCache, error) {
	c, err := cache.New(config, opts)
	if err != nil {
		return nil, fmt.Errorf("create the tracking cache: %w", err)
	}
	return &trackingCache{
		Cache:     c,
		log:       log,
		users:     map[types.UID]sets.Set[schema.GroupVersionKind]{},
		informers: map[schema.GroupVersionKind]cache.Informer{},
	}, nil
}

type trackingCache struct {
	cache.Cache
	log logr.Logger

	// mu guards users, informers and sinks: an informer gets every sink's handler exactly
	// once, when it is started or when the sink is.
	mu        sync.Mutex
	users     map[types.UID]sets.Set[schema.GroupVersionKind]
	informers map[schema.GroupVersionKind]cache.Informer
	sinks     []*sink
}

func (c *trackingCache) Source(h handler.EventHandler, predicates ...predicate.Predicate) source.Source {
	return &trackingSource{cache: c, handler: h, predicates: predicates}
}

func (c *trackingCache) Watch(ctx context.Context, user client.Object, gvks sets.Set[schema.GroupVersionKind]) error {
	if user.GetUID() == "" {
		return fmt.Errorf("watch for %s: it has no UID", user.GetName())
	}
	started, err := c.track(ctx, user.GetUID(), gvks)
	if err != nil {
		return err
	}
	var errs []error
	for gvk, inf := range started {
		if err := waitSynced(ctx, inf); err != nil {
			errs = append(errs, fmt.Errorf("watch %s: %w", gvk, err))
		}
	}
	return errors.Join(errs...)
}

// track records user's kinds, starts the missing informers with every sink's handler,
// stops the unused ones, and returns the informers it started.
func (c *trackingCache) track(ctx context.Context, user types.UID, gvks sets.Set[schema.GroupVersionKind]) (map[schema.GroupVersionKind]cache.Informer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	started := map[schema.GroupVersionKind]cache.Informer{}
	for gvk := range gvks {
		if _, ok := c.informers[gvk]; ok {
			continue
		}
		inf, err := c.GetInformer(ctx, objectOf(gvk), cache.BlockUntilSynced(false))
		if err != nil {
			return nil, fmt.Errorf("start an informer for %s: %w", gvk, err)
		}
		for _, s := range c.sinks {
			if _, err := inf.AddEventHandler(s.funcs()); err != nil {
				return nil, fmt.Errorf("add an event handler to the informer for %s: %w", gvk, err)
			}
		}
		c.informers[gvk] = inf
		started[gvk] = inf
	}
	c.users[user] = gvks.Clone()
	return started, c.stopUnused(ctx)
}

func (c *trackingCache) Free(ctx context.Context, user client.Object) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.users, user.GetUID())
	return c.stopUnused(ctx)
}

// stopUnused stops the informers of kinds no user watches. Callers hold mu.
func (c *trackingCache) stopUnused(ctx context.Context) error {
	used := sets.New[schema.GroupVersionKind]()
	for _, gvks := range c.users {
		used = used.Union(gvks)
	}
	var errs []error
	for gvk := range c.informers {
		if used.Has(gvk) {
			continue
		}
		if err := c.RemoveInformer(ctx, objectOf(gvk)); err != nil {
			errs = append(errs, fmt.Errorf("stop the informer for %s: %w", gvk, err))
			continue
		}
		delete(c.informers, gvk)
		c.log.V(1).Info("stopped an informer no user needs", "gvk", gvk)
	}
	return errors.Join(errs...)
}

// waitSynced waits until inf has listed its objects, for at most SyncTimeout.
func waitSynced(ctx context.Context, inf cache.Informer) error {
	ctx, cancel := context.WithTimeout(ctx, SyncTimeout)
	defer cancel()
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("its informer did not list its objects: %w", context.Cause(ctx))
	}
	return nil
}

func objectOf(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

// trackingSource is a TrackingCache's source: started by a controller, it becomes a
// sink every informer of the cache delivers to.
type trackingSource struct {
	cache      *trackingCache
	handler    handler.EventHandler
	predicates []predicate.Predicate
}

func (s *trackingSource) Start(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	k := &sink{ctx: ctx, queue: queue, handler: s.handler, predicates: s.predicates}
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	for gvk, inf := range c.informers {
		if _, err := inf.AddEventHandler(k.funcs()); err != nil {
			return fmt.Errorf("add an event handler to the informer for %s: %w", gvk, err)
		}
	}
	c.sinks = append(c.sinks, k)
	return nil
}

func (s *trackingSource) String() string { return "managedcache.TrackingCache source" }

// sink turns one informer's notifications into a controller's events.
type sink struct {
	ctx        context.Context
	queue      workqueue.TypedRateLimitingInterface[reconcile.Request]
	handler    handler.EventHandler
	predicates []predicate.Predicate
}

func (k *sink) funcs() toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			o, ok := obj.(client.Object)
			if !ok {
				return
			}
			e := event.CreateEvent{Object: o}
			for _, p := range k.predicates {
				if !p.Create(e) {
					return
				}
			}
			k.handler.Create(k.ctx, e, k.queue)
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(client.Object)
			n, ok2 := newObj.(client.Object)
			if !ok1 || !ok2 {
				return
			}
			e := event.UpdateEvent{ObjectOld: o, ObjectNew: n}
			for _, p := range k.predicates {
				if !p.Update(e) {
					return
				}
			}
			k.handler.Update(k.ctx, e, k.queue)
		},
		DeleteFunc: func(obj any) {
			e := event.DeleteEvent{}
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				e.DeleteStateUnknown = true
				obj = tomb.Obj
			}
			o, ok := obj.(client.Object)
			if !ok {
				return
			}
			e.Object = o
			for _, p := range k.predicates {
				if !p.Delete(e) {
					return
				}
			}
			k.handler.Delete(k.ctx, e, k.queue)
		},
	}
}
