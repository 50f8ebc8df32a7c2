// Package admissionwatch checks the controller's admission from the API server's own
// order of changes: a watch of every RemediationRequest delivers each committed
// change in resourceVersion order, whatever the controller's cache or timing did.
// At every change it checks the two promises of admission (controllers/admission):
//
//   - the cap: never more requests hold a slot (Running a disruptive playbook, or
//     granted one) than --max-concurrent-remediations;
//   - the order: a request is never granted a slot while an older one (by creation
//     time, then namespace/name) that was already in line when admission read the
//     line, and that no slot holder's Lease or node blocks, is still in line.
//
// It reads status only, the way an auditor would; it shares no code with the
// controller's admission, so a bug there is not mirrored here. The benchmark's
// disruptive storm and the churn campaign (R4, leader kills) use it.
package admissionwatch

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Report is what the watch saw.
type Report struct {
	// MaxHeld is the most slots held at once.
	MaxHeld int
	// Grants are the slots granted, in the order they were committed.
	Grants []string
	// Violations are the broken promises, each with the resourceVersion it was seen at.
	Violations []string
	// Err is set when the watch could not follow every change (the checks are then
	// incomplete).
	Err error
}

// Checker follows the requests.
type Checker struct {
	cap        int
	disruptive func(playbook string) bool

	mu      sync.Mutex
	reqs    map[types.UID]*state
	report  Report
	stop    context.CancelFunc
	stopped chan struct{}
}

// state is what the checker knows of one request.
type state struct {
	key      string
	created  metav1.Time
	slot     slotState
	lease    string
	node     string
	inLineAt int64 // the resourceVersion at which it joined the line
}

type slotState int

const (
	none slotState = iota
	inLine
	holds
)

var resource = v1alpha1.GroupVersion.WithResource("remediationrequests")

// Start lists the requests and follows every change from there until Stop. cap is
// the controller's --max-concurrent-remediations (0: none); disruptive says which
// playbooks hold a slot.
func Start(ctx context.Context, cfg *rest.Config, maxConcurrent int, disruptive func(string) bool) (*Checker, error) {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	list, err := dc.Resource(resource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing requests: %w", err)
	}
	c := &Checker{cap: maxConcurrent, disruptive: disruptive, reqs: map[types.UID]*state{}, stopped: make(chan struct{})}
	rv, _ := strconv.ParseInt(list.GetResourceVersion(), 10, 64)
	for i := range list.Items {
		c.apply(watch.Added, &list.Items[i], rv)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return dc.Resource(resource).Watch(ctx, o)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watching requests: %w", err)
	}
	ctx, c.stop = context.WithCancel(ctx)
	go func() {
		defer close(c.stopped)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					c.fail(fmt.Errorf("the watch of requests ended early"))
					return
				}
				if ev.Type == watch.Error {
					c.fail(fmt.Errorf("the watch of requests failed: %v", ev.Object))
					return
				}
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				rv, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
				c.apply(ev.Type, u, rv)
			}
		}
	}()
	return c, nil
}

// Stop ends the watch and returns the report; it may be called more than once.
func (c *Checker) Stop() Report {
	c.stop()
	<-c.stopped
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.report
}

func (c *Checker) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.report.Err = cmp.Or(c.report.Err, err)
}

// listedAt reads the resourceVersion of the line a grant was chosen from, which the
// grant's message names.
var listedAt = regexp.MustCompile(`line as read at resourceVersion (\d+)`)

// apply takes one committed change and checks the promises at it.
func (c *Checker) apply(t watch.EventType, u *unstructured.Unstructured, rv int64) {
	rr := &v1alpha1.RemediationRequest{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), rr); err != nil {
		// A request the type cannot hold holds no slot the controller could grant.
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t == watch.Deleted {
		delete(c.reqs, rr.UID)
		return
	}
	old := c.reqs[rr.UID]
	cur := c.stateOf(rr)
	switch {
	case cur.slot == inLine && old != nil && old.slot == inLine:
		cur.inLineAt = old.inLineAt
	case cur.slot == inLine:
		cur.inLineAt = rv
	}
	c.reqs[rr.UID] = cur
	if cur.slot == holds && (old == nil || old.slot != holds) && grantedNow(rr) {
		c.report.Grants = append(c.report.Grants, cur.key)
		if m := listedAt.FindStringSubmatch(progressing(rr).Message); m != nil {
			at, _ := strconv.ParseInt(m[1], 10, 64)
			c.checkOrder(rr.UID, cur, at, rv)
		} else if t != watch.Added {
			c.report.Violations = append(c.report.Violations, fmt.Sprintf("at resourceVersion %d: %s was granted a slot without naming the line it was chosen from: %q", rv, cur.key, progressing(rr).Message))
		}
	}
	held := 0
	for _, s := range c.reqs {
		if s.slot == holds {
			held++
		}
	}
	c.report.MaxHeld = max(c.report.MaxHeld, held)
	if c.cap > 0 && held > c.cap {
		c.report.Violations = append(c.report.Violations, fmt.Sprintf("at resourceVersion %d: %d slots held, cap %d: %s", rv, held, c.cap, c.holders()))
	}
}

// checkOrder: at the grant of granted (chosen from the line as read at listed), no
// older request that was in line by then, and that no slot holder blocks, is still in
// line.
func (c *Checker) checkOrder(uid types.UID, granted *state, listed, rv int64) {
	for other, s := range c.reqs {
		if other == uid || s.slot != inLine || s.inLineAt > listed || !older(s, granted) || c.blocked(s) {
			continue
		}
		c.report.Violations = append(c.report.Violations, fmt.Sprintf("at resourceVersion %d: %s was granted a slot while %s, older and in line since resourceVersion %d (the line was read at %d), still waits",
			rv, granted.key, s.key, s.inLineAt, listed))
	}
}

// blocked: a slot holder works on the request's Lease or node, so admission passes
// it over.
func (c *Checker) blocked(s *state) bool {
	for _, h := range c.reqs {
		if h.slot == holds && h != s && ((s.lease != "" && h.lease == s.lease) || (s.node != "" && h.node == s.node)) {
			return true
		}
	}
	return false
}

func (c *Checker) holders() string {
	var out []string
	for _, s := range c.reqs {
		if s.slot == holds {
			out = append(out, s.key)
		}
	}
	slices.Sort(out)
	return fmt.Sprint(out)
}

func older(a, b *state) bool {
	if !a.created.Equal(&b.created) {
		return a.created.Before(&b.created)
	}
	return a.key < b.key
}

func progressing(rr *v1alpha1.RemediationRequest) metav1.Condition {
	if p := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing); p != nil {
		return *p
	}
	return metav1.Condition{}
}

// grantedNow: the request holds a slot because admission just granted it (not
// because it is Running, which follows a grant).
func grantedNow(rr *v1alpha1.RemediationRequest) bool {
	return rr.Status.Phase == v1alpha1.PhaseWaiting && progressing(rr).Reason == v1alpha1.ReasonAdmitted
}

func (c *Checker) stateOf(rr *v1alpha1.RemediationRequest) *state {
	s := &state{key: rr.Namespace + "/" + rr.Name, created: rr.CreationTimestamp}
	if f := rr.Status.Facts; f != nil {
		if f.Lease != nil && f.Lease.Name != "" {
			s.lease = f.Lease.Namespace + "/" + f.Lease.Name
		}
		if f.Node != nil {
			s.node = f.Node.Name
		}
	}
	playbook := ""
	if rr.Status.Decision != nil {
		playbook = rr.Status.Decision.Playbook
	}
	reason := progressing(rr).Reason
	switch {
	case rr.Status.Phase == v1alpha1.PhaseRunning && c.disruptive(playbook), grantedNow(rr):
		s.slot = holds
	case rr.Status.Phase == v1alpha1.PhaseWaiting && reason == v1alpha1.ReasonWaitingForSlot &&
		rr.Status.ObservedGeneration == rr.Generation && rr.DeletionTimestamp.IsZero():
		s.slot = inLine
	}
	return s
}
