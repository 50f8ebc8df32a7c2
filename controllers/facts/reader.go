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

// SplitReader reads each object either from the informer cache or live from the API
// server. The controller decides on cached facts, which a watch keeps within
// milliseconds of the cluster, and reads live what must not be even that old: the
// holder node's state right before a destructive step, and pods, which it never
// caches (their number grows with the cluster, the controller's memory must not).
// Everything the cache does not hold (a Lease in a Trident namespace a request
// overrides, say) is read live too.
type SplitReader struct {
	Cache client.Reader
	Live  client.Reader
	// Cached reports whether obj, in namespace (empty for cluster-scoped objects and
	// lists across namespaces), is read from Cache.
	Cached func(obj runtime.Object, namespace string) bool
	// TrustCacheMisses makes a NotFound from Cache final. The detector sets it: what
	// the cache has not seen yet, its next scan sees, and confirming every miss live
	// would cost a GET per scan for each Lease that is not named after a PV (Trident's
	// own leader-election Leases) and for each holder node that is gone.
	TrustCacheMisses bool
}

var _ client.Reader = SplitReader{}

func (r SplitReader) pick(obj runtime.Object, namespace string) client.Reader {
	if r.Cached != nil && r.Cached(obj, namespace) {
		return r.Cache
	}
	return r.Live
}

// Get implements client.Reader. A NotFound from the cache is confirmed live: the
// informer can lag behind an object created just before the request (a PV and its
// request applied together), and a cache miss is no proof of absence; a request
// rejected as target-unresolved on it would stay rejected. Only absent objects pay
// the extra read.
func (r SplitReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if r.Cached == nil || !r.Cached(obj, key.Namespace) {
		return r.Live.Get(ctx, key, obj, opts...)
	}
	err := r.Cache.Get(ctx, key, obj, opts...)
	if apierrors.IsNotFound(err) && !r.TrustCacheMisses {
		return r.Live.Get(ctx, key, obj, opts...)
	}
	return err
}

// List implements client.Reader.
func (r SplitReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := &client.ListOptions{}
	o.ApplyOptions(opts)
	return r.pick(list, o.Namespace).List(ctx, list, opts...)
}

// RetryReader retries the reads of Reader that failed for a reason that says
// nothing about the object: a 5xx, a 429, a server or client timeout, a connection
// reset or refused. A reconcile re-reads several objects live before a destructive
// step, and gives up (back to the work queue, with a growing backoff) at the
// first failed read; under an API server that fails one call in five, the chance
// that five reads in a row succeed is one in three, and the backoff then grows to
// minutes (make chaos, R2, saw a storm of 20 take over ten minutes). Reads are
// idempotent, so a few quick retries here are safe; client-go itself retries only
// the answers that carry Retry-After.
type RetryReader struct {
	Reader client.Reader
	// Backoff bounds the retries; zero means DefaultReadBackoff.
	Backoff wait.Backoff
}

// DefaultReadBackoff is four attempts over about a third of a second.
var DefaultReadBackoff = wait.Backoff{Steps: 4, Duration: 40 * time.Millisecond, Factor: 2.5, Jitter: 0.2}

var _ client.Reader = RetryReader{}

func (r RetryReader) backoff() wait.Backoff {
	if r.Backoff.Steps == 0 {
		return DefaultReadBackoff
	}
	return r.Backoff
}

// Get implements client.Reader.
func (r RetryReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return r.retry(ctx, func() error { return r.Reader.Get(ctx, key, obj, opts...) })
}

// List implements client.Reader.
func (r RetryReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.retry(ctx, func() error { return r.Reader.List(ctx, list, opts...) })
}

// retry calls read until it succeeds, fails for a reason that is not transient,
// or the backoff's steps are spent, and returns its last error. It is not
// client-go's retry.OnError, which turns an error that wraps context.Canceled (a
// read during the manager's shutdown) into the last retriable error, nil when
// there was none: the caller then decoded an empty Node as the holder, which
// classified as Unreachable (found by make chaos R4: a SIGTERMed leader failed a
// node-shutdown request with holder-state-changed).
func (r RetryReader) retry(ctx context.Context, read func() error) error {
	b := r.backoff()
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

// Transient reports whether err is a failure of the call rather than an answer
// about the object, and ctx still allows a retry.
func Transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch {
	case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsServerTimeout(err),
		apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err), apierrors.IsUnexpectedServerError(err):
		return true
	case utilnet.IsConnectionReset(err), utilnet.IsConnectionRefused(err), utilnet.IsProbableEOF(err), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Code >= 500
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
