package sharding

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// ServerSideSupported asks the API server whether it applies KEP-5866 shard selectors
// to resource: a server with the ShardedListAndWatch feature refuses an invalid
// selector ("invalid shard selector"), one without ignores the field and lists. The answer
// holds until the API server restarts with other feature gates.
func ServerSideSupported(ctx context.Context, c metadata.Interface, resource schema.GroupVersionResource) (bool, error) {
	_, err := c.Resource(resource).List(ctx, metav1.ListOptions{
		Limit:         1,
		ShardSelector: "shardRange(object.metadata.uid, 'not-a-hash', 'not-a-hash')",
	})
	switch {
	case err == nil:
		return false, nil
	case strings.Contains(err.Error(), "invalid shard selector"):
		return true, nil
	default:
		return false, fmt.Errorf("ask the API server whether it shards lists of %s: %w", resource.Resource, err)
	}
}

// Narrowed wraps the list and watch of an informer so that it holds only the objects
// of the member's slots, through the API server's shard selector.
//
// What the informer holds was listed with one snapshot of the slots, and every watch
// that continues it must use that snapshot's selector: a watch opened with a newer one
// would continue a list of other slots, and the objects of the new ones would stay
// unseen until a later relist. The snapshot is taken where the informer lists: at a
// LIST, or at a watch that streams the list itself (sendInitialEvents, what client-go
// v0.37's reflectors do by default).
//
// When the owned slots change, the watch hands the informer over to the new ones
// itself, without a relist: at the last resourceVersion the informer has seen, it lists
// the slots given away and those taken (ResourceVersionMatch Exact), sends a deletion
// for each object of the first and an addition for each of the second, and watches the
// new slots from that resourceVersion on. Both lists are of the same instant as what
// the informer holds, and the watch continues from it, so nothing is missed or seen
// twice. A relist would cost the whole share, and the informer waits before each one
// for client-go's back-off, which grows with every relist within two minutes up to a
// minute; a ring that changes often (a rolling update, repeated faults) would leave
// the objects of taken slots unseen that long.
//
// Where the handover cannot be done (no resourceVersion is known yet, a stream that has
// not finished its list, or the API server no longer has that resourceVersion), the
// watch ends with "expired" and the informer lists again with the new slots; so does a
// watch that continues from a resourceVersion (after the API server's timeout, a 429, a
// restart) when there was no list yet.
//
// Used only when ServerSideSupported; otherwise the informer holds every object and
// the controller filters with the same slot function.
type Narrowed struct {
	Member *Member
	Inner  cache.ListerWatcherWithContext

	mu     sync.Mutex
	listed *snapshot // the slots of what the informer holds: its last list, or the last handover
}

// snapshot is the owned set at one instant and the channel closed at its next change.
type snapshot struct {
	owned   Set
	changed <-chan struct{}
}

// current reports whether the slots are still those of the snapshot.
func (s *snapshot) current() bool {
	select {
	case <-s.changed:
		return false
	default:
		return true
	}
}

var (
	_ cache.ListerWatcherWithContext = (*Narrowed)(nil)
	_ cache.ListerWatcher            = (*Narrowed)(nil)
)

// List is ListWithContext without a context, for informers that do not pass one (the
// WithContext forms are used when present).
func (n *Narrowed) List(opts metav1.ListOptions) (runtime.Object, error) {
	return n.ListWithContext(context.Background(), opts)
}

// Watch is WatchWithContext without a context.
func (n *Narrowed) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return n.WatchWithContext(context.Background(), opts)
}

// ListWithContext lists the objects of the owned slots and keeps the snapshot for the
// watch that follows.
func (n *Narrowed) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	s := n.snapshot()
	n.setListed(s)
	opts.ShardSelector = s.owned.Selector()
	return n.Inner.ListWithContext(ctx, opts)
}

// WatchWithContext watches the objects of the owned slots: a watch that lists itself
// (sendInitialEvents) those of now, keeping the snapshot as a list does; one that
// continues from a resourceVersion those of what the informer holds, handed over to the
// current slots first when they changed since.
func (n *Narrowed) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	stream := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	var s *snapshot
	if stream {
		s = n.snapshot()
		n.setListed(s)
	} else {
		n.mu.Lock()
		s = n.listed
		n.mu.Unlock()
		if s == nil {
			return nil, apierrors.NewResourceExpired("no list of the owned shard slots to continue")
		}
	}
	w := &narrowedWatch{n: n, opts: opts, held: s, rv: opts.ResourceVersion, out: make(chan watch.Event), stop: make(chan struct{})}
	// A stream's resourceVersion is known at its end of the initial events.
	w.rvKnown = !stream && w.rv != "" && w.rv != "0"
	if s.current() {
		inner, err := w.open(ctx, s.owned)
		if err != nil {
			return nil, err // the reflector's back-off, as for any watch
		}
		w.inner = inner
	} else if !w.rvKnown {
		return nil, apierrors.NewResourceExpired("the owned shard slots changed since the last list")
	}
	ctx, w.cancel = context.WithCancel(ctx)
	go w.run(ctx)
	return w, nil
}

// snapshot takes the owned slots of now.
func (n *Narrowed) snapshot() *snapshot {
	owned, changed := n.Member.Owned()
	return &snapshot{owned: owned, changed: changed}
}

func (n *Narrowed) setListed(s *snapshot) {
	n.mu.Lock()
	n.listed = s
	n.mu.Unlock()
}

// IsWatchListSemanticsUnSupported passes on what the wrapped ListerWatcher says about
// watch-list streams.
func (n *Narrowed) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(n.Inner)
}

// narrowedWatch forwards the watch of the slots the informer holds, and when they
// change, hands the informer over to the new ones (Narrowed).
type narrowedWatch struct {
	n    *Narrowed
	opts metav1.ListOptions
	// held is the snapshot of the slots whose objects the informer holds, inner the
	// watch of them (nil while a handover is due).
	held  *snapshot
	inner watch.Interface
	// rv is the resourceVersion of what the informer holds, once rvKnown: the last
	// event forwarded, or where a continued watch started.
	rv      string
	rvKnown bool
	// template is an object of the informer's type, for the bookmark after a handover.
	template runtime.Object

	out    chan watch.Event
	stop   chan struct{}
	closed atomic.Bool
	cancel context.CancelFunc
}

// open watches the objects of slots from the watch's resourceVersion.
func (w *narrowedWatch) open(ctx context.Context, slots Set) (watch.Interface, error) {
	opts := w.opts
	opts.ShardSelector = slots.Selector()
	if w.rvKnown {
		opts.ResourceVersion, opts.SendInitialEvents, opts.ResourceVersionMatch = w.rv, nil, ""
	}
	return w.n.Inner.WatchWithContext(ctx, opts)
}

func (w *narrowedWatch) run(ctx context.Context) {
	defer close(w.out)
	defer func() {
		if w.inner != nil {
			w.inner.Stop()
		}
	}()
	for {
		if w.inner == nil {
			if !w.rvKnown {
				w.send(expired("the owned shard slots changed before the watch's list ended"))
				return
			}
			if err := w.handOver(ctx); err != nil {
				if ctx.Err() == nil {
					w.send(expired(fmt.Sprintf("the owned shard slots changed, and handing them over failed: %v", err)))
				}
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-w.held.changed:
			w.inner.Stop()
			w.inner = nil
		case e, ok := <-w.inner.ResultChan():
			if !ok {
				return // the reflector watches again from the last resourceVersion
			}
			w.note(e)
			if !w.send(e) {
				return
			}
		}
	}
}

// note keeps the resourceVersion and the type of what the informer has been sent.
func (w *narrowedWatch) note(e watch.Event) {
	if e.Type == watch.Error {
		return
	}
	o, err := meta.Accessor(e.Object)
	if err != nil {
		return
	}
	w.template = e.Object
	switch {
	case e.Type == watch.Bookmark && o.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true":
		w.rv, w.rvKnown = o.GetResourceVersion(), true
	case w.rvKnown:
		w.rv = o.GetResourceVersion()
	}
}

// handOver moves the informer from the held slots to the owned ones at the
// resourceVersion it holds: deletions of the objects of the slots given away and
// additions of those of the slots taken, both listed at that resourceVersion, then a
// bookmark of it (the additions carry older ones), and a watch of the owned slots from
// it.
func (w *narrowedWatch) handOver(ctx context.Context) error {
	to := w.n.snapshot()
	lost, gained := w.held.owned&^to.owned, to.owned&^w.held.owned
	var events []watch.Event
	for _, part := range []struct {
		slots Set
		kind  watch.EventType
	}{{lost, watch.Deleted}, {gained, watch.Added}} {
		if part.slots == 0 {
			continue
		}
		items, err := w.listAt(ctx, part.slots)
		if err != nil {
			return err
		}
		for _, o := range items {
			events = append(events, watch.Event{Type: part.kind, Object: o})
		}
	}
	inner, err := w.open(ctx, to.owned)
	if err != nil {
		return err
	}
	for _, e := range events {
		w.template = e.Object
		if !w.send(e) {
			inner.Stop()
			return ctx.Err()
		}
	}
	if len(events) > 0 {
		if !w.send(watch.Event{Type: watch.Bookmark, Object: w.bookmark()}) {
			inner.Stop()
			return ctx.Err()
		}
	}
	// The informer holds the owned slots' objects now; a watch that continues this one
	// continues them.
	w.held, w.inner = to, inner
	w.n.setListed(to)
	return nil
}

// listAt lists the objects of slots at the watch's resourceVersion.
func (w *narrowedWatch) listAt(ctx context.Context, slots Set) ([]runtime.Object, error) {
	list, err := w.n.Inner.ListWithContext(ctx, metav1.ListOptions{
		ShardSelector: slots.Selector(), ResourceVersion: w.rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact,
	})
	if err != nil {
		return nil, fmt.Errorf("list shard slots %s at resourceVersion %s: %w", slots, w.rv, err)
	}
	return meta.ExtractList(list)
}

// bookmark is a bookmark event's object at the watch's resourceVersion, of the type of
// the objects sent.
func (w *narrowedWatch) bookmark() runtime.Object {
	o := reflect.New(reflect.TypeOf(w.template).Elem()).Interface().(runtime.Object)
	if a, err := meta.Accessor(o); err == nil {
		a.SetResourceVersion(w.rv)
	}
	return o
}

func expired(message string) watch.Event {
	status := apierrors.NewResourceExpired(message).ErrStatus
	return watch.Event{Type: watch.Error, Object: &status}
}

// send passes e on unless the watch was stopped.
func (w *narrowedWatch) send(e watch.Event) bool {
	select {
	case w.out <- e:
		return true
	case <-w.stop:
		return false
	}
}

func (w *narrowedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *narrowedWatch) Stop() {
	if w.closed.CompareAndSwap(false, true) {
		close(w.stop)
		w.cancel()
	}
}
