package remediationrequest

// The guards' view of the other requests, read from the informer cache through field
// indexes: only those that can stop a decision (running on the same Lease or node,
// holding a slot, in line for one), so that a storm of N requests does not cost
// O(N^2) reads.
//
// The cache lags behind writes by a watch event, so nothing here grants a slot: that
// is admission's, from a live List. The cache serves the policy's conflict rule and
// the floor's re-check before every destructive call; a conflict it has not seen yet
// between two Lease releases costs nothing, since both deletions carry the Lease's
// UID and resourceVersion as preconditions and the second finds it gone.

import (
	"context"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/controllers/requests"
	"github.com/remediator/remediator/remediations"
)

// IndexGuard is the field index of the requests the guards look up. A request has a
// key for each guard it takes part in:
//   - running: "running"; on a Lease: "lease/<namespace>/<name>"; on a node:
//     "node/<name>";
//   - holding a slot of the cap: "slot"; in line for one: "waiting-slot";
//   - held by the pause (waiting, or a playbook holding before its next step): "paused";
//   - waiting for another remediation on its Lease or node: "waiting/lease/..." and
//     "waiting/node/...", so that the one that stops wakes exactly those.
const IndexGuard = "remediator.io/guard"

const (
	keyPaused      = "paused"
	keyRunning     = "running"
	keySlot        = "slot"
	keyWaitingSlot = "waiting-slot"
)

func leaseKey(ns, name string) string { return "lease/" + ns + "/" + name }
func nodeKey(name string) string      { return "node/" + name }

// targetKeys are the keys of the Lease and the node in facts f.
func targetKeys(f *v1alpha1.Facts) []string {
	var keys []string
	if f != nil && f.Lease != nil && f.Lease.Name != "" {
		keys = append(keys, leaseKey(f.Lease.Namespace, f.Lease.Name))
	}
	if f != nil && f.Node != nil && f.Node.Name != "" {
		keys = append(keys, nodeKey(f.Node.Name))
	}
	return keys
}

// guardKeys are the index keys of one request in the guards' view.
func guardKeys(rr *v1alpha1.RemediationRequest, playbooks remediations.Playbooks) []string {
	targets := targetKeys(rr.Status.Facts)
	var keys []string
	switch lifecycle.StateOf(rr, playbooks) {
	case lifecycle.HoldsSlot:
		keys = append(keys, keySlot)
	case lifecycle.InLine:
		keys = append(keys, keyWaitingSlot)
	}
	if lifecycle.HeldByPause(rr) {
		keys = append(keys, keyPaused)
	}
	switch {
	case rr.Status.Phase == v1alpha1.PhaseRunning:
		keys = append(keys, keyRunning)
		keys = append(keys, targets...)
	case lifecycle.Waits(rr, v1alpha1.WaitingForPolicy):
		for _, t := range targets {
			keys = append(keys, "waiting/"+t)
		}
	}
	return keys
}

// IndexRequests registers IndexGuard on the manager's cache of requests.
func IndexRequests(ctx context.Context, indexer client.FieldIndexer, playbooks remediations.Playbooks) error {
	return indexer.IndexField(ctx, &v1alpha1.RemediationRequest{}, IndexGuard, func(o client.Object) []string {
		rr := requests.ViewOf(o)
		return guardKeys(&rr, playbooks)
	})
}

// listGuard lists the requests in scope under one index key, in the guards' view.
func (r *Reconciler) listGuard(ctx context.Context, key string) ([]v1alpha1.RemediationRequest, error) {
	list, err := requests.List(ctx, r.Client, client.MatchingFields{IndexGuard: key})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list, func(o v1alpha1.RemediationRequest) bool { return !requests.InScope(r.Namespaces, o.Namespace) }), nil
}

// guardOthers is the guards' view of the other requests that can hold a request
// with facts f back: those running on the same Lease or node, those holding a slot
// and those in line for one, from the cache, sorted oldest first.
func (r *Reconciler) guardOthers(ctx context.Context, f *v1alpha1.Facts) ([]v1alpha1.RemediationRequest, error) {
	var out []v1alpha1.RemediationRequest
	for _, k := range append([]string{keySlot, keyWaitingSlot}, targetKeys(f)...) {
		list, err := r.listGuard(ctx, k)
		if err != nil {
			return nil, err
		}
		out = append(out, list...)
	}
	// A request listed under two keys sorts next to itself.
	slices.SortFunc(out, requests.OlderFirst)
	return slices.CompactFunc(out, func(a, b v1alpha1.RemediationRequest) bool { return a.UID == b.UID }), nil
}

// wake maps a request that stopped running to the requests waiting for another
// remediation on its Lease or node: they may go now. Slots are admission's.
func (r *Reconciler) wake(ctx context.Context, o client.Object) []reconcile.Request {
	var keys []string
	for _, t := range targetKeys(requests.ViewOf(o).Status.Facts) {
		keys = append(keys, "waiting/"+t)
	}
	// The periodic recheck of waiting requests, and the next stop, still wake them
	// should a list fail.
	return r.guarded(ctx, "Listing waiting requests to wake them", keys...)
}

// guarded maps index keys to the requests listed under them, for a watch's handler.
// A list that fails is logged with what and left out: each caller says what still
// reconciles those requests.
func (r *Reconciler) guarded(ctx context.Context, what string, keys ...string) []reconcile.Request {
	var out []reconcile.Request
	for _, k := range keys {
		list, err := r.listGuard(ctx, k)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, what, "key", k)
			continue
		}
		for _, rr := range list {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rr.Namespace, Name: rr.Name}})
		}
	}
	return out
}

// writeLog remembers, per request, the resourceVersion this process's last status
// patch was computed from. A cache that still holds that version has not seen the
// patch yet: acting on it would act on a journal older than the one just written.
type writeLog struct {
	mu   sync.Mutex
	from map[types.UID]string
}

func (w *writeLog) wrote(uid types.UID, from string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.from == nil {
		w.from = map[types.UID]string{}
	}
	w.from[uid] = from
}

// behind reports whether the cache's version rv of the request is the one the last
// patch was computed from. Once the cache has moved past it, the entry goes.
func (w *writeLog) behind(uid types.UID, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	from, ok := w.from[uid]
	if ok && from == rv {
		return true
	}
	delete(w.from, uid)
	return false
}
