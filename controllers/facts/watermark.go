package facts

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
)

// Watermarks records how far each informer of the cache has caught up: the newest
// resourceVersion it has applied, per kind of object. Each kind it follows is watched
// in one stream, across all namespaces (wiring.CacheOptions, and its test, hold every
// followed kind to that): a kind watched namespace by namespace would be several
// streams, each at its own point, and a mark moved by one would vouch for another.
// The API server's resourceVersions are its storage's revisions, one counter for
// every object it stores, and a watch delivers its changes in that order; an
// informer updates its store before it calls its handlers. So once the handler has
// seen version V of any object of a kind, in any namespace, the cache holds every
// change to that kind up to V, deletions included: it is at least as new as a live
// read made when V was written. One stream across namespaces is also a busier one:
// a storm's own Lease deletions in the Trident namespace move the mark its reads of
// node Leases wait on.
//
// A request's own resourceVersion is such a point. A read of the cache that Covers it
// is as good as a live read made when the request was last written, and a miss there
// is an absence then, not an informer that has not caught up (or one whose watch is
// broken and whose cache is minutes old). A resourceVersion that is not a number
// (an API server that is not backed by etcd) covers nothing: every read it would
// have vouched for is made live.
type Watermarks struct {
	mu    sync.Mutex
	marks map[string]uint64
	// advanced is closed, and replaced, each time a mark moves: WaitCovers waits on it.
	advanced chan struct{}
}

// NewWatermarks returns empty watermarks: nothing is covered until the informers
// report.
func NewWatermarks() *Watermarks {
	return &Watermarks{marks: map[string]uint64{}, advanced: make(chan struct{})}
}

// KindOf is the key Watermarks keep obj's kind under: its Go type, as the cache
// keeps one informer per type.
func KindOf(obj runtime.Object) string { return fmt.Sprintf("%T", obj) }

// Handler is the informer event handler that moves the marks of obj's kind.
func (w *Watermarks) Handler(kind string) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(kind, obj) },
		UpdateFunc: func(_, obj any) { w.observe(kind, obj) },
		DeleteFunc: func(obj any) {
			// A tombstone's object is the last version the informer saw, not the
			// deletion: it proves nothing newer.
			if _, ok := obj.(toolscache.DeletedFinalStateUnknown); !ok {
				w.observe(kind, obj)
			}
		},
	}
}

func (w *Watermarks) observe(kind string, obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if rv <= w.marks[kind] {
		return
	}
	w.marks[kind] = rv
	close(w.advanced)
	w.advanced = make(chan struct{})
}

// Covers reports whether the cache of kind holds every change up to resourceVersion
// rv, in every namespace.
func (w *Watermarks) Covers(kind, rv string) bool {
	ok, _, _ := w.covers(kind, rv)
	return ok
}

func (w *Watermarks) covers(kind, rv string) (bool, uint64, <-chan struct{}) {
	if w == nil {
		return false, 0, nil
	}
	want, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return false, 0, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	mark := w.marks[kind]
	return mark >= want, mark, w.advanced
}

// WaitCovers waits for Covers(kind, rv), and reports whether it came. It
// gives up once the mark has not moved for quiet, or after bound in all (at least
// quiet). A mark that moves without reaching rv is a watch delivering changes older
// than the request: behind, and catching up, where a live read would be answered as
// slowly as the watch; so each move restarts the quiet wait, until bound. A mark
// that does not move is a kind nobody is changing (kubelets renew their node Leases
// every 10 s, so in a cluster of many nodes that cache moves many times a second),
// or a broken watch: then the read is made live.
func (w *Watermarks) WaitCovers(ctx context.Context, kind, rv string, quiet, bound time.Duration) bool {
	ok, mark, advanced := w.covers(kind, rv)
	if ok || advanced == nil || quiet <= 0 {
		return ok
	}
	deadline := time.Now().Add(max(quiet, bound))
	t := time.NewTimer(quiet)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			ok, _, _ := w.covers(kind, rv)
			return ok
		case <-advanced:
			var moved uint64
			if ok, moved, advanced = w.covers(kind, rv); ok {
				return true
			}
			if moved > mark {
				// Behind but moving: wait another quiet, within the bound.
				mark = moved
				t.Reset(min(quiet, time.Until(deadline)))
			}
		}
	}
}

// asOfKey carries the resourceVersion of the request being gathered for.
type asOfKey struct{}

// AsOf returns ctx carrying the resourceVersion of the request the reads are made
// for: SplitReader weighs the cache against it.
func AsOf(ctx context.Context, rv string) context.Context {
	return context.WithValue(ctx, asOfKey{}, rv)
}

func asOf(ctx context.Context) string {
	rv, _ := ctx.Value(asOfKey{}).(string)
	return rv
}
