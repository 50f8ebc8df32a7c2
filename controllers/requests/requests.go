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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Requests are read unstructured and decoded one by one: a typed informer decodes all
// at once, so one request the Go type cannot hold (an overflowing duration, a CRD
// without its schema) would stop every other from being decided.

// GVK is the RemediationRequest kind.
var GVK = v1alpha1.GroupVersion.WithKind("RemediationRequest")

// EventUndecodable is the Warning reason on a request the controller cannot decode.
const EventUndecodable = "Undecodable"

// NewUnstructured returns an empty unstructured RemediationRequest.
func NewUnstructured() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(GVK)
	return u
}

// Decode decodes one request; the error names what could not be decoded.
func Decode(u *unstructured.Unstructured) (*v1alpha1.RemediationRequest, error) {
	rr := &v1alpha1.RemediationRequest{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), rr); err != nil {
		return nil, fmt.Errorf("decoding RemediationRequest %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return rr, nil
}

// GuardView decodes a request's metadata and status, so that one whose spec cannot
// be decoded still counts as running; failing that, only its phase is kept.
func GuardView(u *unstructured.Unstructured) v1alpha1.RemediationRequest {
	if rr, err := Decode(u); err == nil {
		return *rr
	}
	rr := v1alpha1.RemediationRequest{}
	partial := map[string]any{"metadata": u.Object["metadata"], "status": u.Object["status"]}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(partial, &rr); err != nil {
		rr = v1alpha1.RemediationRequest{}
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"metadata": u.Object["metadata"]}, &rr)
		rr.Status.Phase = PhaseOf(u)
	}
	return rr
}

// ViewOf is GuardView of o, an unstructured request exactly as an informer delivered
// it to a watch's predicate or handler or to an index function, never changed since;
// any other object is the zero request, which no guard, line or window counts.
//
// Each watch event of a request goes through the index functions, predicates and
// handlers of three controllers, each of which takes this view: decoding it each
// time was about seven decodes per event, 7 % of the controller's CPU in a storm. So
// the view of a version (a UID and a resourceVersion, which the API server never
// gives two contents) is remembered (views) and each caller gets its own deep copy.
// An object without both is decoded every time.
func ViewOf(o client.Object) v1alpha1.RemediationRequest {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return v1alpha1.RemediationRequest{}
	}
	key := viewKey{uid: u.GetUID(), rv: u.GetResourceVersion()}
	if key.uid == "" || key.rv == "" {
		return decodeView(u)
	}
	if v, ok := views.Get(key); ok {
		return *v.(*v1alpha1.RemediationRequest).DeepCopy()
	}
	rr := decodeView(u)
	views.Add(key, rr.DeepCopy())
	return rr
}

// decodeView is the decode ViewOf makes, a variable for the tests that count its
// calls (none of which runs in parallel).
var decodeView = GuardView

// viewKey identifies a version of a request as the API server stored it.
type viewKey struct {
	uid types.UID
	rv  string
}

// views remembers the views ViewOf decoded last. A version's views are taken close
// together, as its watch event goes through the handlers (each behind by at most its
// backlog of events), so a few hundred entries, a few megabytes, serve the watches;
// a version whose entry was evicted is decoded again.
var views = lru.New(256)

// InScope reports whether namespace ns is one of namespaces; none means all.
func InScope(namespaces []string, ns string) bool {
	return len(namespaces) == 0 || slices.Contains(namespaces, ns)
}

// List lists the requests in the guards' view (GuardView), sorted by OlderFirst.
func List(ctx context.Context, reader client.Reader, opts ...client.ListOption) ([]v1alpha1.RemediationRequest, error) {
	out, _, err := ListAt(ctx, reader, opts...)
	return out, err
}

// ListAt is List, with the resourceVersion the list was read at.
func ListAt(ctx context.Context, reader client.Reader, opts ...client.ListOption) ([]v1alpha1.RemediationRequest, string, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(GVK.GroupVersion().WithKind("RemediationRequestList"))
	if err := reader.List(ctx, list, opts...); err != nil {
		return nil, "", fmt.Errorf("listing requests: %w", err)
	}
	out := make([]v1alpha1.RemediationRequest, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, GuardView(&list.Items[i]))
	}
	slices.SortFunc(out, OlderFirst)
	return out, list.GetResourceVersion(), nil
}

// OlderFirst orders requests by creation time, then namespace/name: waiting
// requests are served in this order.
func OlderFirst(a, b v1alpha1.RemediationRequest) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
}

// PhaseOf reads status.phase without decoding the rest of the object.
func PhaseOf(o client.Object) v1alpha1.Phase {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	p, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	return v1alpha1.Phase(p)
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
