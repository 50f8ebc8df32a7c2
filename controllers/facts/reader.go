package facts

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SplitReader reads each object from the informer cache or live from the API
// server. The controller decides on cached facts, and reads live only where the
// cache cannot show that it is as new as the request being gathered for (AsOf,
// Watermarks), and pods, which it never caches, as all the cache does not hold.
type SplitReader struct {
	Cache client.Reader
	Live  client.Reader
	// Cached reports whether obj, in namespace (empty for cluster-scoped objects and
	// lists across namespaces), is read from Cache.
	Cached func(obj runtime.Object, namespace string) bool
	// Marks are how far the cache's informers have caught up; nil: nowhere, so that
	// every Fresh read is live and every confirmed miss is confirmed.
	Marks *Watermarks
	// Fresh reports whether obj must be as new as the request (AsOf): it is read from
	// Cache only when Marks cover the request's resourceVersion within Wait, live
	// otherwise. nil: none.
	Fresh func(obj runtime.Object, namespace string) bool
	// Confirm reports whether a NotFound of obj from Cache is confirmed live, unless
	// Marks show within Wait that the cache holds every change up to the request: an
	// absence that would let a destructive step go ahead, or reject the request for
	// good (an object created with the request that the informer has not seen yet).
	// nil: every miss.
	Confirm func(obj runtime.Object, namespace string) bool
	// Wait bounds how long a read waits for the cache to catch up with the request
	// before it is made live, while the cache does not move; zero: not at all.
	Wait time.Duration
	// WaitBound bounds the wait of a cache that moves without catching up: a watch
	// behind, delivering older changes (Watermarks.WaitCovers). Below Wait: Wait.
	WaitBound time.Duration
	// TrustCacheMisses makes a NotFound from Cache final: the detector's next scan
	// (verification's next check) sees what the cache missed, and confirming every
	// miss would cost a GET per scan for each Lease not named after a PV and each
	// holder node gone.
	TrustCacheMisses bool
}

// Get implements client.Reader.
func (r SplitReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if r.Cached == nil || !r.Cached(obj, key.Namespace) {
		return r.Live.Get(ctx, key, obj, opts...)
	}
	if r.Fresh != nil && r.Fresh(obj, key.Namespace) && !r.caughtUp(ctx, obj) {
		return r.Live.Get(ctx, key, obj, opts...)
	}
	err := r.Cache.Get(ctx, key, obj, opts...)
	if apierrors.IsNotFound(err) && r.confirmMiss(ctx, obj, key.Namespace) {
		return r.Live.Get(ctx, key, obj, opts...)
	}
	return err
}

// confirmMiss reports whether a NotFound of obj in namespace from the cache is to be
// confirmed live.
func (r SplitReader) confirmMiss(ctx context.Context, obj runtime.Object, namespace string) bool {
	if r.TrustCacheMisses || (r.Confirm != nil && !r.Confirm(obj, namespace)) {
		return false
	}
	return !r.caughtUp(ctx, obj)
}

// caughtUp reports whether the cache of obj's kind holds every change up to the
// request being gathered for (AsOf), waiting for it within Wait and WaitBound.
func (r SplitReader) caughtUp(ctx context.Context, obj runtime.Object) bool {
	return r.Marks.WaitCovers(ctx, KindOf(obj), asOf(ctx), r.Wait, r.WaitBound)
}

// List implements client.Reader.
func (r SplitReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := &client.ListOptions{}
	o.ApplyOptions(opts)
	if r.Cached != nil && r.Cached(list, o.Namespace) {
		return r.Cache.List(ctx, list, opts...)
	}
	return r.Live.List(ctx, list, opts...)
}

// RetryReader retries the reads of Reader that failed for a reason that says nothing
// about the object (Transient). A reconcile gives up at its first failed read, back to
// the work queue with a growing backoff: with one call in five failing, five reads in
// a row succeed one time in three (make chaos, R2: a storm of 20 took over ten
// minutes). Reads are idempotent; client-go retries only answers with Retry-After.
type RetryReader struct {
	Reader client.Reader
	// Backoff bounds the retries; zero means DefaultReadBackoff.
	Backoff wait.Backoff
}

// DefaultReadBackoff is four attempts over about a third of a second.
var DefaultReadBackoff = wait.Backoff{Steps: 4, Duration: 40 * time.Millisecond, Factor: 2.5, Jitter: 0.2}

// Get implements client.Reader.
func (r RetryReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return r.retry(ctx, func() error { return r.Reader.Get(ctx, key, obj, opts...) })
}

// List implements client.Reader.
func (r RetryReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.retry(ctx, func() error { return r.Reader.List(ctx, list, opts...) })
}

// retry calls read until it succeeds, fails for good, or the backoff is spent, and
// returns its last error. Not client-go's retry.OnError, which returns nil for a
// context.Canceled read when no retriable error came before: an empty Node then
// classified as Unreachable (make chaos R4).
func (r RetryReader) retry(ctx context.Context, read func() error) error {
	b := r.Backoff
	if b.Steps == 0 {
		b = DefaultReadBackoff
	}
	for {
		err := read()
		if err == nil || !Transient(ctx, err) || b.Steps <= 1 {
			return err
		}
		t := time.NewTimer(b.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// Transient reports whether err is a failure of the call rather than an answer about
// the object (a 5xx, a 429, a timeout, a connection reset or refused), and ctx still
// allows a retry.
func Transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch {
	case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsServerTimeout(err),
		apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err), apierrors.IsUnexpectedServerError(err),
		utilnet.IsConnectionReset(err), utilnet.IsConnectionRefused(err), utilnet.IsProbableEOF(err), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Code >= 500
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
