package sharding

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// of the member's slots, through the API server's shard selector. When the owned
// slots change, the running watch ends with "expired", which makes the informer list
// again with the new selector: objects of new slots arrive as additions, objects of
// slots given away as deletions.
//
// What the informer holds was listed with one snapshot of the slots, and every watch
// that continues it must use that snapshot's selector: a watch opened with a newer one
// would continue a list of other slots, and the objects of the new ones would stay
// unseen until a later relist. The snapshot is taken where the informer lists: at a
// LIST, or at a watch that streams the list itself (sendInitialEvents, what client-go
// v0.37's reflectors do by default). A watch that continues from a resourceVersion (after a watch
// ended: the server's timeout, a 429, an API server restart) uses the snapshot of the
// last list; when there is none, or the slots changed since, it is answered "expired"
// and the informer lists again.
//
// Used only when ServerSideSupported; otherwise the informer holds every object and
// the controller filters with the same slot function.
type Narrowed struct {
	Member *Member
	Inner  cache.ListerWatcherWithContext

	mu     sync.Mutex
	listed *snapshot // the slots of the last list, streamed or not
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
	s := n.list()
	opts.ShardSelector = s.owned.Selector()
	return n.Inner.ListWithContext(ctx, opts)
}

// WatchWithContext watches the objects of the owned slots until they change: a watch
// that lists itself (sendInitialEvents) those of now, keeping the snapshot as a list
// does; one that continues a list those of that list, or, when they changed since, none
// ("expired", so that the informer lists again).
func (n *Narrowed) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	var s *snapshot
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		s = n.list()
	} else {
		n.mu.Lock()
		s = n.listed
		n.mu.Unlock()
		if s == nil || !s.current() {
			return nil, apierrors.NewResourceExpired("the owned shard slots changed since the last list")
		}
	}
	opts.ShardSelector = s.owned.Selector()
	w, err := n.Inner.WatchWithContext(ctx, opts)
	if err != nil {
		return nil, err
	}
	return newEndingWatch(w, s.changed), nil
}

// list takes and keeps the snapshot of a list.
func (n *Narrowed) list() *snapshot {
	owned, changed := n.Member.Owned()
	s := &snapshot{owned: owned, changed: changed}
	n.mu.Lock()
	n.listed = s
	n.mu.Unlock()
	return s
}

// IsWatchListSemanticsUnSupported passes on what the wrapped ListerWatcher says about
// watch-list streams.
func (n *Narrowed) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(n.Inner)
}

// endingWatch forwards a watch until a channel closes, then sends an "expired" error
// and ends, so the informer lists again.
type endingWatch struct {
	inner  watch.Interface
	out    chan watch.Event
	stop   chan struct{}
	closed atomic.Bool
}

func newEndingWatch(inner watch.Interface, end <-chan struct{}) *endingWatch {
	w := &endingWatch{inner: inner, out: make(chan watch.Event), stop: make(chan struct{})}
	go w.run(end)
	return w
}

func (w *endingWatch) run(end <-chan struct{}) {
	defer close(w.out)
	defer w.inner.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-end:
			expired := apierrors.NewResourceExpired("the owned shard slots changed")
			select {
			case w.out <- watch.Event{Type: watch.Error, Object: &expired.ErrStatus}:
			case <-w.stop:
			}
			return
		case e, ok := <-w.inner.ResultChan():
			if !ok {
				return
			}
			select {
			case w.out <- e:
			case <-w.stop:
				return
			}
		}
	}
}

func (w *endingWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *endingWatch) Stop() {
	if w.closed.CompareAndSwap(false, true) {
		close(w.stop)
	}
}
