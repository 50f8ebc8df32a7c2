// Package requests reads RemediationRequests as the controller's runnables do, backs
// off a failing reconcile the same way in each, and bounds what they write (bounded.go).
package requests

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Requests are cached and listed typed. RemediationRequestList decodes each item
// apart (v1alpha1.AnnotationUndecodable): a list decoded in one go fails on one
// request the Go type cannot hold (an overflowing duration, a CRD without its
// schema), and an informer whose list fails never syncs, so that one request would
// stop every other from being decided. A watch event the Go type cannot hold ends
// the watch with a decoding error, and the informer lists again, which marks it.
// No playbook runs for such a request (DecodeError): the reconciler and fix
// verification write nothing to it, and admission grants it no slot but gives back
// one it holds. The guards still count it by what of its status could be decoded.
// The watch it ends is started again after the reflector's backoff (under a second
// at first, longer while such events repeat), during which the cache of requests
// stands still.

// GVK is the RemediationRequest kind.
var GVK = v1alpha1.GroupVersion.WithKind("RemediationRequest")

// EventUndecodable is the Warning reason on a request the controller cannot decode.
const EventUndecodable = "Undecodable"

// ViewOf is the guards' view of o, a request exactly as an informer delivered it to
// a watch's predicate or handler or to an index function: the caller's own copy.
// Anything else is a wiring error that would have every guard count nothing, so it
// panics.
func ViewOf(o client.Object) v1alpha1.RemediationRequest {
	return *typed(o).DeepCopy()
}

// typed is o as a request; anything else panics (ViewOf).
func typed(o client.Object) *v1alpha1.RemediationRequest {
	rr, ok := o.(*v1alpha1.RemediationRequest)
	if !ok {
		panic(fmt.Sprintf("requests: a %T where a *v1alpha1.RemediationRequest was expected", o))
	}
	return rr
}

// InScope reports whether namespace ns is one of namespaces; none means all.
func InScope(namespaces []string, ns string) bool {
	return len(namespaces) == 0 || slices.Contains(namespaces, ns)
}

// List lists the requests, undecodable ones marked (DecodeError), sorted by OlderFirst.
func List(ctx context.Context, reader client.Reader, opts ...client.ListOption) ([]v1alpha1.RemediationRequest, error) {
	out, _, err := ListAt(ctx, reader, opts...)
	return out, err
}

// ListAt is List, with the resourceVersion the list was read at.
func ListAt(ctx context.Context, reader client.Reader, opts ...client.ListOption) ([]v1alpha1.RemediationRequest, string, error) {
	list := &v1alpha1.RemediationRequestList{}
	if err := reader.List(ctx, list, opts...); err != nil {
		return nil, "", fmt.Errorf("listing requests: %w", err)
	}
	slices.SortFunc(list.Items, OlderFirst)
	return list.Items, list.ResourceVersion, nil
}

// OlderFirst orders requests by creation time, then namespace/name: waiting
// requests are served in this order.
func OlderFirst(a, b v1alpha1.RemediationRequest) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
}

// PhaseOf is o's status.phase; o is a request as ViewOf takes it.
func PhaseOf(o client.Object) v1alpha1.Phase {
	return typed(o).Status.Phase
}

// MaxRetryDelay caps the backoff of a failing reconcile. The work queue's default
// grows to 1,000 s: after a flaky API server recovered (make chaos, R2) a request
// waited minutes, with a stuck Lease blocking a volume all that time.
const MaxRetryDelay = 30 * time.Second

// RateLimiter is controller-runtime's default with the per-request backoff capped
// at MaxRetryDelay; 10 retries per second overall (burst 100) keep a storm of failing
// requests from hammering the API server.
func RateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, MaxRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
