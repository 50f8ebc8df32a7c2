package main

// The tracker watches the run's requests and Leases and stamps, on the bench's own
// clock, when each request was first seen decided, running and terminal, and when
// each Lease was deleted.

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/stage"
)

type requestTimes struct {
	// waited is when the request was first seen Waiting (for a slot, in the
	// disruptive storm).
	created, decided, waited, running, terminal time.Time
	phase                                       v1alpha1.Phase
}

type tracker struct {
	mu        sync.Mutex
	requests  map[string]*requestTimes
	leaseGone map[string]time.Time
	changed   chan struct{}
}

func newTracker() *tracker {
	return &tracker{requests: map[string]*requestTimes{}, leaseGone: map[string]time.Time{}, changed: make(chan struct{}, 1)}
}

func (t *tracker) notify() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

func (t *tracker) entry(name string) *requestTimes {
	e := t.requests[name]
	if e == nil {
		e = &requestTimes{}
		t.requests[name] = e
	}
	return e
}

// created records when the bench asked for a request.
func (t *tracker) created(name string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entry(name).created = at
}

func terminal(p v1alpha1.Phase) bool {
	return p == v1alpha1.PhaseSucceeded || p == v1alpha1.PhaseFailed || p == v1alpha1.PhaseRejected
}

func (t *tracker) observe(rr *v1alpha1.RemediationRequest, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entry(rr.Name)
	e.phase = rr.Status.Phase
	if rr.Status.Decision != nil && e.decided.IsZero() {
		e.decided = at
	}
	if rr.Status.Phase == v1alpha1.PhaseWaiting && e.waited.IsZero() && e.running.IsZero() {
		e.waited = at
	}
	if rr.Status.Phase == v1alpha1.PhaseRunning && e.running.IsZero() {
		e.running = at
	}
	if terminal(rr.Status.Phase) && e.terminal.IsZero() {
		e.terminal = at
		if e.running.IsZero() && rr.Status.Decision != nil && rr.Status.Decision.Playbook != "" {
			// Decided, run and finished between two watch events.
			e.running = at
		}
	}
	t.notify()
}

// watchRequests follows the run's requests until ctx ends, re-listing whenever the
// watch closes.
func (t *tracker) watchRequests(ctx context.Context, c client.WithWatch, runID string) {
	for ctx.Err() == nil {
		list := &v1alpha1.RemediationRequestList{}
		if err := c.List(ctx, list, client.InNamespace(requestNamespace), client.MatchingLabels{stage.Label: runID}); err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		now := time.Now()
		for i := range list.Items {
			t.observe(&list.Items[i], now)
		}
		w, err := c.Watch(ctx, &v1alpha1.RemediationRequestList{}, client.InNamespace(requestNamespace),
			client.MatchingLabels{stage.Label: runID}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if rr, ok := ev.Object.(*v1alpha1.RemediationRequest); ok && ev.Type != watch.Deleted {
				t.observe(rr, time.Now())
			}
		}
		w.Stop()
	}
}

// watchLeases stamps the deletion of the run's Trident Leases.
func (t *tracker) watchLeases(ctx context.Context, cs kubernetes.Interface, runID string) {
	for ctx.Err() == nil {
		w, err := cs.CoordinationV1().Leases(stage.TridentNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: stage.Label + "=" + runID})
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type == watch.Deleted {
				t.mu.Lock()
				if _, seen := t.leaseGone[l.Name]; !seen {
					t.leaseGone[l.Name] = time.Now()
				}
				t.mu.Unlock()
				t.notify()
			}
		}
		w.Stop()
	}
}

// waitFor blocks until cond holds (checked under the lock on every change) or the
// timeout passes; it reports whether cond held.
func (t *tracker) waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		t.mu.Lock()
		ok := cond()
		t.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-t.changed:
		case <-tick.C:
		}
	}
}

// counts returns how many of names are decided, running and terminal now.
func (t *tracker) counts(names []string) Point {
	t.mu.Lock()
	defer t.mu.Unlock()
	var p Point
	for _, n := range names {
		e := t.requests[n]
		if e == nil {
			continue
		}
		if !e.decided.IsZero() {
			p.Decided++
		}
		if e.phase == v1alpha1.PhaseRunning {
			p.Running++
		}
		if terminal(e.phase) {
			p.Terminal++
		}
	}
	return p
}
