package controllers

// The guards' view of the other requests, read from the informer cache through field
// indexes, and the slot table that makes the cluster-wide cap exact while several
// reconciles run at once.
//
// A decision needs only the requests that can stop it: the ones running on the same
// Lease or node (one remediation per Lease and node), the disruptive ones running
// anywhere (the cap), and the ones already waiting for a slot (first come, first
// served). Listing every request for each decision made a storm of N requests cost
// O(N^2) reads; the indexes make each decision read only those few.
//
// The cache lags behind the controller's own writes by a watch event. Two decisions
// that both read "two running, cap three" before either's status patch reaches the
// cache would both start. The slot table closes that gap: a decision reads the
// guards and, if it starts a playbook, reserves its slot in one critical section,
// and the reservation counts as running until this process writes the request out
// of Running.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
)

// IndexGuard is the field index of the requests the guards look up. A request has a
// key for each guard it takes part in:
//   - running: "running"; on a Lease: "lease/<namespace>/<name>"; on a node:
//     "node/<name>";
//   - running a disruptive playbook, which holds a slot of the cap: "slot";
//   - waiting for a slot: "waiting-slot";
//   - waiting for another remediation on its Lease or node: "waiting/lease/..." and
//     "waiting/node/...", so that the one that stops wakes exactly those.
const IndexGuard = "remediator.io/guard"

const (
	keyRunning     = "running"
	keySlot        = "slot"
	keyWaitingSlot = "waiting-slot"
)

func leaseKey(ns, name string) string { return "lease/" + ns + "/" + name }
func nodeKey(name string) string      { return "node/" + name }

// guardKeys are the index keys of one request in the guards' view.
func guardKeys(rr *v1alpha1.RemediationRequest, playbooks remediations.Playbooks) []string {
	var targets []string
	if f := rr.Status.Facts; f != nil {
		if f.Lease != nil && f.Lease.Name != "" {
			targets = append(targets, leaseKey(f.Lease.Namespace, f.Lease.Name))
		}
		if f.Node != nil && f.Node.Name != "" {
			targets = append(targets, nodeKey(f.Node.Name))
		}
	}
	switch {
	case rr.Status.Phase == v1alpha1.PhaseRunning:
		keys := append(targets, keyRunning)
		if rr.Status.Decision == nil || playbooks.Disruptive(rr.Status.Decision.Playbook) {
			keys = append(keys, keySlot)
		}
		return keys
	case waitsForSlot(rr):
		return []string{keyWaitingSlot}
	case waitsForGuard(rr):
		keys := make([]string, 0, len(targets))
		for _, t := range targets {
			keys = append(keys, "waiting/"+t)
		}
		return keys
	}
	return nil
}

// waitsForSlot: the request is allowed but waits for a slot of the cap.
func waitsForSlot(rr *v1alpha1.RemediationRequest) bool {
	if rr.Status.Phase != v1alpha1.PhaseWaiting {
		return false
	}
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
	return c != nil && c.Reason == v1alpha1.ReasonWaitingForSlot
}

// IndexRequests registers IndexGuard on the manager's cache of unstructured requests.
func IndexRequests(ctx context.Context, indexer client.FieldIndexer, playbooks remediations.Playbooks) error {
	return indexer.IndexField(ctx, NewUnstructuredRequest(), IndexGuard, func(o client.Object) []string {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return nil
		}
		rr := guardView(u)
		return guardKeys(&rr, playbooks)
	})
}

// slotTable holds the requests this process moved to Running and has not yet
// written out of it, by UID. It is the exact half of the guards' view; the cache is
// the other half (requests a previous leader started, or whose Running state the
// cache already holds).
type slotTable struct {
	mu   sync.Mutex
	held map[types.UID]v1alpha1.RemediationRequest
}

// release drops a reservation: the request was written out of Running, or the write
// that would have made it Running failed.
func (t *slotTable) release(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.held, uid)
}

// reserveLocked records that rr is Running from now on; t.mu must be held, since
// the guards were read under it. The reservation keeps rr's resourceVersion, the one
// the decision was computed from, so that a cache that has moved past it is told
// from one that has not seen the decision yet.
func (t *slotTable) reserveLocked(rr *v1alpha1.RemediationRequest) {
	if t.held == nil {
		t.held = map[types.UID]v1alpha1.RemediationRequest{}
	}
	view := v1alpha1.RemediationRequest{ObjectMeta: *rr.ObjectMeta.DeepCopy(), Status: *rr.Status.DeepCopy()}
	view.Status.Phase = v1alpha1.PhaseRunning
	t.held[rr.UID] = view
}

// snapshot returns the reservations.
func (t *slotTable) snapshot() []v1alpha1.RemediationRequest {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.heldLocked()
}

// heldLocked returns the reservations; t.mu must be held.
func (t *slotTable) heldLocked() []v1alpha1.RemediationRequest {
	out := make([]v1alpha1.RemediationRequest, 0, len(t.held))
	for _, rr := range t.held {
		out = append(out, rr)
	}
	return out
}

// listGuard lists the requests in scope under one index key, in the guards' view.
func (r *RemediationRequestReconciler) listGuard(ctx context.Context, key string) ([]v1alpha1.RemediationRequest, error) {
	list, err := ListRequests(ctx, r.Client, client.MatchingFields{IndexGuard: key})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list, func(o v1alpha1.RemediationRequest) bool { return !r.inScope(o.Namespace) }), nil
}

// guardOthers is the guards' view of the other requests that can hold rr back, with
// facts f: those running on the same Lease or node, the disruptive ones running, and
// those waiting for a slot, from the cache, overlaid with this process's
// reservations (a reservation is Running even where the cache does not show it yet).
// The caller holds r.slots.mu: a reservation of a request that is gone is dropped.
func (r *RemediationRequestReconciler) guardOthers(ctx context.Context, f *v1alpha1.Facts, held []v1alpha1.RemediationRequest) ([]v1alpha1.RemediationRequest, error) {
	keys := []string{keySlot, keyWaitingSlot}
	if f != nil && f.Lease != nil && f.Lease.Name != "" {
		keys = append(keys, leaseKey(f.Lease.Namespace, f.Lease.Name))
	}
	if f != nil && f.Node != nil && f.Node.Name != "" {
		keys = append(keys, nodeKey(f.Node.Name))
	}
	at := map[types.UID]int{}
	var out []v1alpha1.RemediationRequest
	for _, k := range keys {
		list, err := r.listGuard(ctx, k)
		if err != nil {
			return nil, err
		}
		for _, o := range list {
			if _, seen := at[o.UID]; !seen {
				at[o.UID] = len(out)
				out = append(out, o)
			}
		}
	}
	relevant := map[string]bool{}
	for _, k := range keys {
		relevant[k] = true
	}
	for _, h := range held {
		if i, ok := at[h.UID]; ok {
			out[i] = h
			continue
		}
		// Only a reservation that can hold this request back is looked at: in a storm
		// of Lease releases nearly every request holds one, and checking each against
		// the cache on every decision made the storm quadratic again.
		if !slices.ContainsFunc(guardKeys(&h, r.Playbooks), func(k string) bool { return relevant[k] }) {
			continue
		}
		// Not in the lists: the cache does not show it Running yet, or it is gone
		// (deleted without this process writing it out of Running). A gone request
		// holds no slot.
		u := NewUnstructuredRequest()
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: h.Namespace, Name: h.Name}, u)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && u.GetUID() != h.UID):
			delete(r.slots.held, h.UID)
		case err == nil && movedOn(u, &h):
			// The cache has seen the request move on from the version it was decided on,
			// and out of Running: the reservation's own release is a moment away (its
			// status write's watch event can arrive before the write returns), and
			// counting it would hold back the request that event woke.
			delete(r.slots.held, h.UID)
		case err != nil:
			return nil, fmt.Errorf("reading request %s/%s: %w", h.Namespace, h.Name, err)
		case r.inScope(h.Namespace):
			out = append(out, h)
		}
	}
	slices.SortFunc(out, olderFirst)
	return out, nil
}

// olderFirst orders requests by creation time, then namespace/name: the order
// waiting requests are served in.
func olderFirst(a, b v1alpha1.RemediationRequest) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
}

// wake maps a request that stopped running to the requests that may go now: those
// waiting for another remediation on its Lease or node, and, when it held a slot,
// the oldest requests waiting for a slot, as many as there are free slots. No other
// waiting request is woken, so a freed slot does not make every waiting request
// gather its facts again.
func (r *RemediationRequestReconciler) wake(ctx context.Context, o client.Object) []reconcile.Request {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	stopped := guardView(u)
	var out []reconcile.Request
	add := func(list []v1alpha1.RemediationRequest) {
		for _, w := range list {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: w.Namespace, Name: w.Name}})
		}
	}
	log := func(err error) {
		// The periodic recheck of conflict waiters, and the next stop, still wake them.
		ctrl.LoggerFrom(ctx).Error(err, "Listing waiting requests to wake them")
	}
	if f := stopped.Status.Facts; f != nil {
		var keys []string
		if f.Lease != nil && f.Lease.Name != "" {
			keys = append(keys, "waiting/"+leaseKey(f.Lease.Namespace, f.Lease.Name))
		}
		if f.Node != nil && f.Node.Name != "" {
			keys = append(keys, "waiting/"+nodeKey(f.Node.Name))
		}
		for _, k := range keys {
			list, err := r.listGuard(ctx, k)
			if err != nil {
				log(err)
				continue
			}
			add(list)
		}
	}
	if stopped.Status.Decision != nil && !r.Playbooks.Disruptive(stopped.Status.Decision.Playbook) {
		return out
	}
	held := r.slots.snapshot()
	heldUID := map[types.UID]bool{}
	for _, h := range held {
		heldUID[h.UID] = true
	}
	waiting, err := r.listGuard(ctx, keyWaitingSlot)
	if err != nil {
		log(err)
		return out
	}
	if len(waiting) == 0 {
		return out
	}
	free := len(waiting)
	if r.MaxConcurrent > 0 {
		running, err := r.listGuard(ctx, keySlot)
		if err != nil {
			log(err)
			return out
		}
		taken := map[types.UID]bool{}
		for _, rr := range running {
			taken[rr.UID] = true
		}
		for _, h := range held {
			// The stopped request's own reservation, or another's that stopped at the
			// same moment, may not be released yet.
			if h.UID != stopped.UID && r.Playbooks.Disruptive(decidedPlaybook(&h)) && !r.reservationMovedOn(ctx, &h) {
				taken[h.UID] = true
			}
		}
		// At least the oldest: should the count be off, it decides again and waits.
		free = max(1, r.MaxConcurrent-len(taken))
	}
	// A request this process just started still shows as waiting in the cache: it
	// has its slot, and the next one in line is woken instead.
	waiting = slices.DeleteFunc(waiting, func(w v1alpha1.RemediationRequest) bool {
		_, started := heldUID[w.UID]
		return started || w.Status.ObservedGeneration != w.Generation
	})
	slices.SortFunc(waiting, olderFirst)
	add(waiting[:min(free, len(waiting))])
	return out
}

// movedOn: the cache shows the reserved request past the version it was decided on
// and out of Running.
func movedOn(u *unstructured.Unstructured, h *v1alpha1.RemediationRequest) bool {
	return u.GetResourceVersion() != h.ResourceVersion && phaseOf(u) != v1alpha1.PhaseRunning
}

// reservationMovedOn reads the reserved request from the cache and applies movedOn;
// a request gone from the cache has moved on too.
func (r *RemediationRequestReconciler) reservationMovedOn(ctx context.Context, h *v1alpha1.RemediationRequest) bool {
	u := NewUnstructuredRequest()
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: h.Namespace, Name: h.Name}, u); err != nil {
		return apierrors.IsNotFound(err)
	}
	return u.GetUID() != h.UID || movedOn(u, h)
}

func decidedPlaybook(rr *v1alpha1.RemediationRequest) string {
	if rr.Status.Decision == nil {
		return ""
	}
	return rr.Status.Decision.Playbook
}

// slotsTaken reports whether an allowed disruptive playbook must wait for the cap:
// when the other running disruptive requests (returned sorted) and the requests that
// have waited longer (ahead) fill it. Waiting requests are served oldest first, so a
// newcomer cannot take the slot an older request is waiting for.
func slotsTaken(others []v1alpha1.RemediationRequest, self *v1alpha1.RemediationRequest, maxConcurrent int, playbooks remediations.Playbooks) (wait bool, running []string, ahead int) {
	if maxConcurrent <= 0 {
		return false, nil, 0
	}
	for i := range others {
		o := &others[i]
		switch {
		case o.UID == self.UID:
		case o.Status.Phase == v1alpha1.PhaseRunning && playbooks.Disruptive(decidedPlaybook(o)):
			running = append(running, o.Namespace+"/"+o.Name)
		case waitsForSlot(o) && o.Status.ObservedGeneration == o.Generation && olderFirst(*o, *self) < 0:
			// A waiting request whose spec changed since (or that cannot be decoded any
			// more) holds no place in line: it is decided again before it may start.
			ahead++
		}
	}
	if len(running)+ahead < maxConcurrent {
		return false, nil, 0
	}
	slices.Sort(running)
	return true, running, ahead
}

// describeAhead renders how many requests wait for a slot before this one.
func describeAhead(ahead int) string {
	if ahead == 0 {
		return ""
	}
	return fmt.Sprintf(" %d request(s) that came earlier wait for a slot before it;", ahead)
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
