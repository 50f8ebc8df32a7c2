package main

// Judging a campaign: every subject's terminal state against the runbook, and every
// destructive call the API server ran against what was safe at that moment.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
)

// Verdict is what one campaign (or one part of it) found. Every list is a violation.
type Verdict struct {
	Requests int `json:"requests"`
	Correct  int `json:"correct"`
	Calls    int `json:"destructiveCalls"`
	// Wrong: a terminal state other than the runbook's, or a Succeeded request
	// without the calls its playbook makes.
	Wrong []string `json:"wrong,omitempty"`
	// Unsafe: a Lease deleted whose holder was not proven down or drained then, or a
	// destructive call a request's branch never makes.
	Unsafe []string `json:"unsafe,omitempty"`
	// Repeated: a destructive call that ran more than once for one request.
	Repeated []string `json:"repeated,omitempty"`
	// Leaks: a node left cordoned, a finalizer left on a request.
	Leaks []string `json:"leaks,omitempty"`
	// Stray: a destructive call on an object no request of the campaign targets.
	Stray []string `json:"stray,omitempty"`
}

func (v *Verdict) add(o Verdict) {
	v.Requests += o.Requests
	v.Correct += o.Correct
	v.Calls += o.Calls
	v.Wrong = append(v.Wrong, o.Wrong...)
	v.Unsafe = append(v.Unsafe, o.Unsafe...)
	v.Repeated = append(v.Repeated, o.Repeated...)
	v.Leaks = append(v.Leaks, o.Leaks...)
	v.Stray = append(v.Stray, o.Stray...)
}

// Violations counts every violation.
func (v *Verdict) Violations() int {
	return len(v.Wrong) + len(v.Unsafe) + len(v.Repeated) + len(v.Leaks) + len(v.Stray)
}

// judge reads the audit log from offset and checks subjects.
func (h *harness) judge(ctx context.Context, subjects []*subject, offset int64) (Verdict, error) {
	calls, podGone, err := h.audit.calls(offset)
	if err != nil {
		return Verdict{}, err
	}
	v := Verdict{Requests: len(subjects), Calls: len(calls)}
	byKey := map[*subject]map[string][]call{}
	for _, c := range calls {
		owner := ownerOf(subjects, c)
		if owner == nil {
			v.Stray = append(v.Stray, fmt.Sprintf("%s at %s by %s: no request of the campaign targets it", c.key(), c.At.Format("15:04:05.000"), c.Agent))
			continue
		}
		if byKey[owner] == nil {
			byKey[owner] = map[string][]call{}
		}
		byKey[owner][c.key()] = append(byKey[owner][c.key()], c)
	}
	for _, s := range subjects {
		sc := &subjectCheck{v: &v, s: s, ok: true, want: s.expected(), got: byKey[s]}
		if err := h.checkCalls(ctx, sc, podGone); err != nil {
			return v, err
		}
		if err := h.checkState(ctx, sc); err != nil {
			return v, err
		}
		if err := h.checkNode(ctx, sc); err != nil {
			return v, err
		}
		if sc.ok {
			v.Correct++
		}
	}
	for _, l := range [][]string{v.Wrong, v.Unsafe, v.Repeated, v.Leaks, v.Stray} {
		sort.Strings(l)
	}
	return v, nil
}

// subjectCheck is the judging of one subject: its violations go to v, and ok
// says whether it had none.
type subjectCheck struct {
	v    *Verdict
	s    *subject
	ok   bool
	want []string          // the calls the subject's branch makes
	got  map[string][]call // the subject's calls in the audit log, by key
}

func (sc *subjectCheck) fail(list *[]string, format string, args ...any) {
	*list = append(*list, sc.s.RR.Name+" ("+sc.s.Branch.Name+"): "+fmt.Sprintf(format, args...))
	sc.ok = false
}

// checkCalls checks the subject's destructive calls: none repeated, none its
// branch never makes, none unsafe or out of order, and its Lease kept where the
// branch keeps it.
func (h *harness) checkCalls(ctx context.Context, sc *subjectCheck, podGone map[string]time.Time) error {
	s, v, got := sc.s, sc.v, sc.got
	for _, k := range sortedKeys(got) {
		cs := got[k]
		if n := certain(cs); n > 1 {
			sc.fail(&v.Repeated, "%s ran %d times", k, n)
		}
		if !slices.Contains(sc.want, k) {
			sc.fail(&v.Unsafe, "%s: a call branch %s never makes", k, s.Branch.Name)
			continue
		}
		if cs[0].Kind == callDeleteLease {
			if why := h.unsafeDelete(s, cs[0], podGone); why != "" {
				sc.fail(&v.Unsafe, "%s: %s", k, why)
			}
		}
	}
	if why := outOfOrder(s, got); why != "" {
		sc.fail(&v.Unsafe, "%s", why)
	}
	// Not only the audit log: a branch that never deletes the Lease (a holder
	// that came back mid-playbook among them) must end with the very Lease that
	// was staged still in place, whoever would have removed it. A delete the
	// audit log shows is already counted above, once.
	if s.Lease != "" && !slices.Contains(s.Branch.Calls, callDeleteLease) && len(got[callDeleteLease+" "+s.Lease]) == 0 {
		why, err := h.leaseKept(ctx, s)
		if err != nil {
			return err
		}
		if why != "" {
			sc.fail(&v.Unsafe, "%s", why)
		}
	}
	return nil
}

// checkState checks the subject's request: gone if it was deleted, else
// terminal without finalizers, in the runbook's phase, for the runbook's reason.
func (h *harness) checkState(ctx context.Context, sc *subjectCheck) error {
	s, v := sc.s, sc.v
	rr, err := h.settled(ctx, s)
	switch {
	case s.Deleted && apierrors.IsNotFound(err):
	case s.Deleted && err == nil:
		sc.fail(&v.Leaks, "deleted, still there with finalizers %v (phase %s)", rr.Finalizers, rr.Status.Phase)
	case err != nil:
		return fmt.Errorf("reading %s: %w", s.RR.Name, err)
	default:
		if len(rr.Finalizers) > 0 {
			sc.fail(&v.Leaks, "terminal with finalizers %v", rr.Finalizers)
		}
		d := rr.Status.Decision
		rule, playbook := "", ""
		if d != nil {
			rule, playbook = d.Rule, d.Playbook
		}
		if rr.Status.Phase != s.Branch.Phase || rule != s.Branch.Rule || playbook != s.Branch.Playbook {
			sc.fail(&v.Wrong, "phase %s rule %q playbook %q, want %s %q %q (%s)", rr.Status.Phase, rule, playbook,
				s.Branch.Phase, s.Branch.Rule, s.Branch.Playbook, condMessage(rr))
		} else if c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionSucceeded); len(s.Branch.FailReasons) > 0 && (c == nil || !slices.Contains(s.Branch.FailReasons, c.Reason)) {
			sc.fail(&v.Wrong, "failed, but not with %s (%s)", strings.Join(s.Branch.FailReasons, " or "), condMessage(rr))
		} else if s.Branch.Recheck && (d.RecheckAt == nil || d.RecheckAt.Time.Sub(s.LeaseCreated.Add(youngGate)).Abs() > 5*time.Second) {
			sc.fail(&v.Wrong, "rejected without the recheck when the Lease is %s old, within 5 s (recheckAt %v, Lease created %s)", youngGate, d.RecheckAt, s.LeaseCreated.Format(time.TimeOnly))
		} else if s.Branch.Phase == v1alpha1.PhaseSucceeded {
			for _, k := range sc.want {
				if len(sc.got[k]) == 0 {
					sc.fail(&v.Wrong, "Succeeded without %s in the audit log", k)
				}
			}
		}
	}
	return nil
}

// checkNode checks that the subject's node, if it has one, is not left cordoned.
func (h *harness) checkNode(ctx context.Context, sc *subjectCheck) error {
	s := sc.s
	if s.Node != "" {
		n, err := h.node(ctx, s.Node)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return err
		case n.Spec.Unschedulable || n.Annotations[remediations.CordonedByAnnotation] != "":
			sc.fail(&sc.v.Leaks, "node %s left cordoned (unschedulable %v, %s=%q)", s.Node, n.Spec.Unschedulable,
				remediations.CordonedByAnnotation, n.Annotations[remediations.CordonedByAnnotation])
		}
	}
	return nil
}

// youngGate is the age from which the campaign's policies treat a healthy
// holder's Lease without LeaseRetained events as stuck: the runbook's 600 s
// (#HealthyStuckLeaseAgeSeconds) raised to a day, so that no campaign outlasts it
// and sees a young Lease turn into a stuck one mid-run.
const youngGate = 24 * time.Hour

// certain counts the calls the API server answered with success.
func certain(cs []call) int {
	n := 0
	for _, c := range cs {
		if !c.Uncertain {
			n++
		}
	}
	return n
}

// playbookOrder is the order in which a playbook's calls must have run: a
// healthy holder is cordoned before its pods are evicted, its Lease is deleted
// only after that, and it is uncordoned last; a node plugin is restarted only
// on a cordoned node.
var playbookOrder = map[*branch][]string{
	brMove:   {callCordon, callEvict, callDeleteLease, callUncordon},
	brPlugin: {callCordon, callEvict, callUncordon},
}

// outOfOrder says which of a subject's calls ran before a call that must come
// first, or "".
func outOfOrder(s *subject, got map[string][]call) string {
	order := playbookOrder[s.Branch]
	first := map[string]time.Time{}
	for _, cs := range got {
		for _, c := range cs {
			if t, ok := first[c.Kind]; !ok || c.At.Before(t) {
				first[c.Kind] = c.At
			}
		}
	}
	for i, later := range order {
		tl, ok := first[later]
		if !ok {
			continue
		}
		for _, earlier := range order[:i] {
			if te, ok := first[earlier]; ok && te.After(tl) {
				return fmt.Sprintf("%s at %s ran before %s at %s", later, tl.Format("15:04:05.000"), earlier, te.Format("15:04:05.000"))
			}
			if _, ok := first[earlier]; !ok && !s.Deleted && (earlier != callEvict || len(s.Pods) > 0) {
				return fmt.Sprintf("%s ran without %s before it", later, earlier)
			}
		}
	}
	return ""
}

// settled reads a subject's request once its finalizer had the time to go: the
// finalizer is released by a patch of its own after the terminal status write.
// A deleted request must be gone.
func (h *harness) settled(ctx context.Context, s *subject) (*v1alpha1.RemediationRequest, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		rr := &v1alpha1.RemediationRequest{}
		err := h.k8s.Get(ctx, client.ObjectKeyFromObject(s.RR), rr)
		done := (s.Deleted && apierrors.IsNotFound(err)) || (!s.Deleted && err == nil && len(rr.Finalizers) == 0)
		if done || time.Now().After(deadline) || (err != nil && !apierrors.IsNotFound(err)) {
			return rr, err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// unsafeDelete says why a Lease delete was unsafe when it ran, or "".
func (h *harness) unsafeDelete(s *subject, c call, podGone map[string]time.Time) string {
	switch s.Branch {
	case brShutdown:
		return "" // the holder is shut down and tainted out-of-service for the whole campaign
	case brFenced:
		if c.At.Before(s.LeaseCreated.Add(h.gate)) {
			return fmt.Sprintf("deleted at %s, before the Lease (created %s) was %s old", c.At.Format("15:04:05.000"), s.LeaseCreated.Format("15:04:05"), h.gate)
		}
		return ""
	case brMove:
		var running []string
		for _, p := range s.Pods {
			if t, ok := podGone[p]; !ok || t.After(c.At) {
				running = append(running, p)
			}
		}
		if len(running) > 0 {
			return fmt.Sprintf("deleted at %s while pods %s on the healthy holder %s were not gone", c.At.Format("15:04:05.000"), strings.Join(running, ", "), s.Node)
		}
		return ""
	}
	return "branch " + s.Branch.Name + " never deletes the Lease"
}

// leaseKept says why a subject's staged Lease is no longer in place, or "".
func (h *harness) leaseKept(ctx context.Context, s *subject) (string, error) {
	ns, name, _ := strings.Cut(s.Lease, "/")
	l, err := h.cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("Lease %s is gone, although branch %s never deletes it", s.Lease, s.Branch.Name), nil
	case err != nil:
		return "", fmt.Errorf("reading Lease %s: %w", s.Lease, err)
	case s.LeaseUID != "" && l.UID != s.LeaseUID:
		return fmt.Sprintf("Lease %s was deleted and re-created (uid %s, staged %s), although branch %s never deletes it", s.Lease, l.UID, s.LeaseUID, s.Branch.Name), nil
	}
	return "", nil
}

// ownerOf attributes a call to the subject whose playbook makes it, else to any
// subject whose object it names.
func ownerOf(subjects []*subject, c call) *subject {
	var any *subject
	for _, s := range subjects {
		if slices.Contains(s.expected(), c.key()) {
			return s
		}
		if any == nil && s.owns(c) {
			any = s
		}
	}
	return any
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func condMessage(rr *v1alpha1.RemediationRequest) string {
	for _, c := range rr.Status.Conditions {
		if c.Type == v1alpha1.ConditionSucceeded || c.Type == v1alpha1.ConditionProgressing {
			return c.Reason + ": " + c.Message
		}
	}
	return "no condition"
}
