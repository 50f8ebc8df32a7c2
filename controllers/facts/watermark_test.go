package facts

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func nodeLease(name, rv string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name, ResourceVersion: rv}}
}

func TestWatermarks(t *testing.T) {
	kind := KindOf(&coordinationv1.Lease{})
	w := NewWatermarks()
	h := w.Handler(kind)
	assert.False(t, w.Covers(kind, "100"), "nothing seen covers nothing")

	h.OnAdd(nodeLease("n1", "90"), true)
	h.OnUpdate(nodeLease("n1", "90"), nodeLease("n1", "120"))
	assert.True(t, w.Covers(kind, "100"), "an update past the request's version")
	assert.True(t, w.Covers(kind, "120"))
	assert.False(t, w.Covers(kind, "121"))
	assert.False(t, w.Covers(KindOf(&corev1.Node{}), "100"), "another kind is another watch")
	assert.False(t, w.Covers(kind, "not-a-number"), "an opaque version covers nothing")

	h.OnUpdate(nodeLease("n1", "120"), nodeLease("n1", "110"))
	assert.True(t, w.Covers(kind, "120"), "the mark never moves back")
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "kube-node-lease/n2", Obj: nodeLease("n2", "500")})
	assert.False(t, w.Covers(kind, "500"), "a tombstone proves nothing newer")
	h.OnDelete(nodeLease("n2", "500"))
	assert.True(t, w.Covers(kind, "500"), "a deletion seen is a change applied")

	var none *Watermarks
	assert.False(t, none.Covers(kind, "1"))
	assert.False(t, none.WaitCovers(context.Background(), kind, "1", time.Second, time.Second))
}

func TestWatermarksWaitCovers(t *testing.T) {
	kind := KindOf(&coordinationv1.Lease{})
	w := NewWatermarks()
	h := w.Handler(kind)
	go func() {
		time.Sleep(20 * time.Millisecond)
		h.OnAdd(nodeLease("n1", "5"), false)
		time.Sleep(20 * time.Millisecond)
		h.OnAdd(nodeLease("n2", "10"), false)
	}()
	assert.True(t, w.WaitCovers(context.Background(), kind, "10", 10*time.Second, 0), "caught up while waiting")
	start := time.Now()
	assert.False(t, w.WaitCovers(context.Background(), kind, "11", 50*time.Millisecond, time.Second))
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "waits its quiet time before giving up")
	assert.Less(t, time.Since(start), time.Second, "a mark that does not move is not waited on to the bound")
}

// TestWatermarksWaitOnAWatchBehind: a mark that moves without reaching the request is
// a watch behind, catching up: it is waited on past the quiet time, up to the bound;
// changes to another namespace's watch are not its moves. (A wait that gave up after
// the quiet time, moving or not, read live here: in a storm of 1,000 that loaded the
// API server, 0.4 GETs per request.)
func TestWatermarksWaitOnAWatchBehind(t *testing.T) {
	kind := KindOf(&coordinationv1.Lease{})
	const quiet = 60 * time.Millisecond

	t.Run("behind and moving: waited on until it catches up", func(t *testing.T) {
		w := NewWatermarks()
		h := w.Handler(kind)
		h.OnAdd(nodeLease("n", "1"), true)
		go func() {
			// Older changes every 30 ms for 300 ms, five quiet times, then the request's.
			for rv := 2; rv <= 11; rv++ {
				time.Sleep(quiet / 2)
				h.OnUpdate(nil, nodeLease("n", strconv.Itoa(rv)))
			}
			h.OnUpdate(nil, nodeLease("n", "100"))
		}()
		assert.True(t, w.WaitCovers(context.Background(), kind, "100", quiet, 5*time.Second))
	})

	t.Run("behind and moving: given up at the bound", func(t *testing.T) {
		w := NewWatermarks()
		h := w.Handler(kind)
		h.OnAdd(nodeLease("n", "1"), true)
		defer keepMoving(h, quiet/3)()
		start := time.Now()
		assert.False(t, w.WaitCovers(context.Background(), kind, "100000", quiet, 300*time.Millisecond))
		assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "waited to the bound")
		assert.Less(t, time.Since(start), 2*time.Second, "not past it")
	})

	t.Run("not moving: given up after the quiet time", func(t *testing.T) {
		w := NewWatermarks()
		w.Handler(kind).OnAdd(nodeLease("n", "1"), true)
		start := time.Now()
		assert.False(t, w.WaitCovers(context.Background(), kind, "100000", quiet, 5*time.Second))
		assert.Less(t, time.Since(start), time.Second, "gave up after the quiet time")
	})
}

// TestWatermarksOneWatchAcrossNamespaces: the kinds followed are each watched in one
// stream across namespaces, so a change in any namespace is that stream's progress:
// the storm's deletions of Trident Leases vouch for the cache of node Leases. (With a
// watch per namespace and a mark each, a node Lease read waited out its quiet time
// while the Trident namespace's watch moved, then read live: 0.3 GETs per request in
// a storm of 1,000.)
func TestWatermarksOneWatchAcrossNamespaces(t *testing.T) {
	kind := KindOf(&coordinationv1.Lease{})
	w := NewWatermarks()
	h := w.Handler(kind)
	h.OnAdd(nodeLease("n", "1"), true)
	tridentLease := func(rv string) *coordinationv1.Lease {
		l := nodeLease("pvc-1", rv)
		l.Namespace = "trident"
		return l
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		h.OnDelete(tridentLease("100"))
	}()
	start := time.Now()
	assert.True(t, w.WaitCovers(context.Background(), kind, "100", 5*time.Second, 5*time.Second),
		"a Trident Lease's deletion past the request vouches for the node Leases")
	assert.Less(t, time.Since(start), time.Second, "as soon as it is seen")
}

// keepMoving updates a node Lease through h every period, each with a higher
// resourceVersion, until the returned stop is called.
func keepMoving(h toolscache.ResourceEventHandler, period time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		for rv := 2; ; rv++ {
			select {
			case <-done:
				return
			case <-time.After(period):
			}
			h.OnUpdate(nil, nodeLease("moving", strconv.Itoa(rv)))
		}
	}()
	return func() { close(done) }
}

// TestSplitReaderWeighsTheCacheAgainstTheRequest: a miss is confirmed live unless
// the cache has caught up with the request's version or the kind is not confirmed;
// a Fresh object is read from the cache only once it has caught up.
func TestSplitReaderWeighsTheCacheAgainstTheRequest(t *testing.T) {
	gr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	kind := KindOf(&coordinationv1.Lease{})
	key := client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: "n1"}
	cached := func(runtime.Object, string) bool { return true }
	for name, tc := range map[string]struct {
		mark     string
		confirm  bool
		fresh    bool
		cacheHit bool
		wantLive int
	}{
		"a miss the cache cannot vouch for is confirmed":           {mark: "99", confirm: true, wantLive: 1},
		"a miss in a cache caught up with the request is final":    {mark: "100", confirm: true},
		"a miss of a kind not confirmed is final":                  {mark: "1", confirm: false},
		"a fresh object in a cache behind the request is live":     {mark: "99", fresh: true, cacheHit: true, wantLive: 1},
		"a fresh object in a cache caught up comes from the cache": {mark: "150", fresh: true, cacheHit: true},
		"a hit that need not be fresh comes from the cache":        {mark: "1", cacheHit: true},
	} {
		t.Run(name, func(t *testing.T) {
			w := NewWatermarks()
			w.Handler(kind).OnAdd(nodeLease("other", tc.mark), true)
			cache := &flakyReader{}
			if !tc.cacheHit {
				cache = &flakyReader{err: apierrors.NewNotFound(gr, "n1"), failures: 1 << 30}
			}
			live := &flakyReader{}
			r := SplitReader{Cache: cache, Live: live, Cached: cached, Marks: w, Wait: time.Millisecond,
				Confirm: func(runtime.Object, string) bool { return tc.confirm },
				Fresh:   func(runtime.Object, string) bool { return tc.fresh }}
			_ = r.Get(AsOf(context.Background(), "100"), key, &coordinationv1.Lease{})
			assert.Equal(t, tc.wantLive, live.calls)
		})
	}

	// Without marks nothing is vouched for: the reader behaves as before them.
	live := &flakyReader{}
	r := SplitReader{Cache: &flakyReader{err: apierrors.NewNotFound(gr, "n1"), failures: 1 << 30}, Live: live, Cached: cached}
	require.NoError(t, r.Get(AsOf(context.Background(), "100"), key, &coordinationv1.Lease{}))
	assert.Equal(t, 1, live.calls)
}
