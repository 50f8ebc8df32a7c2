package facts

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// flakyReader fails the first failures calls with err, then succeeds.
type flakyReader struct {
	err      error
	failures int
	calls    int
}

func (f *flakyReader) Get(ctx context.Context, _ client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	f.calls++
	if err := ctx.Err(); err != nil {
		// What client-go's rate limiter answers a cancelled context with.
		return fmt.Errorf("client rate limiter Wait returned an error: %w", err)
	}
	if f.calls <= f.failures {
		return f.err
	}
	return nil
}

func (f *flakyReader) List(ctx context.Context, _ client.ObjectList, _ ...client.ListOption) error {
	f.calls++
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("client rate limiter Wait returned an error: %w", err)
	}
	if f.calls <= f.failures {
		return f.err
	}
	return nil
}

func TestRetryReader(t *testing.T) {
	gr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	fast := wait.Backoff{Steps: 4, Duration: 1}
	cases := []struct {
		name      string
		err       error
		failures  int
		wantErr   bool
		wantCalls int
	}{
		{"a 500 is retried", apierrors.NewInternalError(errors.New("etcdserver: leader changed")), 2, false, 3},
		{"a 503 is retried", apierrors.NewServiceUnavailable("overloaded"), 1, false, 2},
		{"a 504 is retried", apierrors.NewTimeoutError("slow", 0), 1, false, 2},
		{"a 429 is retried", apierrors.NewTooManyRequests("slow down", 1), 1, false, 2},
		{"a connection reset is retried", fmt.Errorf("read tcp: %w", syscall.ECONNRESET), 1, false, 2},
		{"a refused connection is retried", fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED), 1, false, 2},
		{"retries end after the backoff's steps", apierrors.NewInternalError(errors.New("down")), 10, true, 4},
		{"NotFound is an answer, not retried", apierrors.NewNotFound(gr, "pvc-1"), 1, true, 1},
		{"Forbidden is an answer, not retried", apierrors.NewForbidden(gr, "pvc-1", errors.New("rbac")), 1, true, 1},
		{"a conflict is an answer, not retried", apierrors.NewConflict(gr, "pvc-1", errors.New("changed")), 1, true, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, list := range []bool{false, true} {
				f := &flakyReader{err: tc.err, failures: tc.failures}
				r := RetryReader{Reader: f, Backoff: fast}
				var err error
				if list {
					err = r.List(context.Background(), &coordinationv1.LeaseList{})
				} else {
					err = r.Get(context.Background(), client.ObjectKey{Namespace: "trident", Name: "pvc-1"}, &coordinationv1.Lease{})
				}
				assert.Equal(t, tc.wantErr, err != nil, "list %v: err %v", list, err)
				assert.Equal(t, tc.wantCalls, f.calls, "list %v", list)
			}
		})
	}
}

func TestRetryReaderStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &flakyReader{err: apierrors.NewInternalError(errors.New("down")), failures: 10}
	err := RetryReader{Reader: f}.Get(ctx, client.ObjectKey{Name: "n"}, &coordinationv1.Lease{})
	require.ErrorIs(t, err, context.Canceled, "a read under a cancelled context must fail, never return an empty object")
	assert.Equal(t, 1, f.calls, "a cancelled reconcile must not retry")
}

// TestSplitReaderConfirmsACacheMissLive: an object the cache does not have yet (its
// informer lags behind a PV created just before the request) is read live before it
// counts as absent; an object absent from both stays NotFound.
func TestSplitReaderConfirmsACacheMissLive(t *testing.T) {
	gr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	notFound := &flakyReader{err: apierrors.NewNotFound(gr, "pvc-1"), failures: 1 << 30}
	live := &flakyReader{}
	r := SplitReader{Cache: notFound, Live: live, Cached: func(runtime.Object, string) bool { return true }}
	require.NoError(t, r.Get(context.Background(), client.ObjectKey{Namespace: "trident", Name: "pvc-1"}, &coordinationv1.Lease{}))
	assert.Equal(t, 1, notFound.calls, "the cache is read first")
	assert.Equal(t, 1, live.calls, "a cache miss is confirmed live")

	gone := &flakyReader{err: apierrors.NewNotFound(gr, "pvc-2"), failures: 1 << 30}
	r.Live = gone
	err := r.Get(context.Background(), client.ObjectKey{Namespace: "trident", Name: "pvc-2"}, &coordinationv1.Lease{})
	assert.True(t, apierrors.IsNotFound(err), "absent from both: %v", err)

	// A hit is not read again.
	live.calls = 0
	r = SplitReader{Cache: &flakyReader{}, Live: live, Cached: func(runtime.Object, string) bool { return true }}
	require.NoError(t, r.Get(context.Background(), client.ObjectKey{Namespace: "trident", Name: "pvc-3"}, &coordinationv1.Lease{}))
	assert.Zero(t, live.calls)
}
