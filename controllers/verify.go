package controllers

// Verifying the fix: for VerifyFixFor after a request Succeeded, the controller
// re-reads the same Lease or node and says in ConditionFixHeld whether the incident
// came back. It only reads (through the decision's gatherer) and only writes the
// request's status and an Event: a fix that did not hold calls for an operator to
// find the cause, never for the playbook to run again.
//
// The window is counted from status.outcome.finishedAt (else the Succeeded
// condition's lastTransitionTime), both in status, so that a restarted controller
// goes on with the window the previous one began. The request is reconciled while
// the window lasts: requeued at most verifyPoll apart and at the window's end, and
// at once when a watched Lease, LeaseRetained event or CSINode of its target changes
// (the verifying/... keys of IndexGuard). Ready is left alone: it says the playbook
// succeeded, which stays true; FixHeld=False, the Warning Event, the metric and the
// RemediationFixDidNotHold alert say that the incident is back.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/remediator/remediator/api/v1alpha1"
)

// DefaultVerifyFixFor is --verify-fix-for's default.
const DefaultVerifyFixFor = 15 * time.Minute

// verifyPoll bounds the time between two checks: a node-plugin pod turning Ready (a
// part of the CSI verdict) is not watched, and a Lease reaches the stuck age without
// any event.
const verifyPoll = time.Minute

// fixNotHeld counts the requests whose FixHeld turned False.
var fixNotHeld = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "remediator_fix_not_held_total",
	Help: "Succeeded requests whose incident came back within --verify-fix-for (FixHeld=False: the Lease retained again by the same holder, or the driver deregistered again), by remediation.",
}, []string{"remediation"})

// registerVerifyMetrics registers fixNotHeld with a series per remediation from the
// start, so that an alert on its increase sees the first one.
func registerVerifyMetrics() error {
	if err := metrics.Registry.Register(fixNotHeld); err != nil {
		return err
	}
	for _, r := range []v1alpha1.Remediation{v1alpha1.RemediationReleaseLUKSLease, v1alpha1.RemediationReregisterCSIDriver} {
		fixNotHeld.WithLabelValues(string(r))
	}
	return nil
}

// verdict is ConditionFixHeld at one check, and when to check again.
type verdict struct {
	status          metav1.ConditionStatus
	reason, message string
	// until is when the verdict becomes final if nothing comes back: the window's
	// end, or later while a Lease re-taken within it is not yet proven stuck.
	until time.Time
}

// verifying reports whether rr is in its verification window: Succeeded, with
// FixHeld Unknown.
func verifying(rr *v1alpha1.RemediationRequest) bool {
	if rr.Status.Phase != v1alpha1.PhaseSucceeded {
		return false
	}
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionFixHeld)
	return c != nil && c.Status == metav1.ConditionUnknown
}

// verifyStart is when the window of a Succeeded request began: its outcome's
// finishedAt, else the Succeeded condition's last transition; zero when neither.
func verifyStart(rr *v1alpha1.RemediationRequest) time.Time {
	if o := rr.Status.Outcome; o != nil && o.Result == v1alpha1.PhaseSucceeded {
		return o.FinishedAt.Time
	}
	if c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionSucceeded); c != nil && c.Status == metav1.ConditionTrue {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

// verifyFix is the phase that watches a Succeeded request's target for its window.
// The reconcile that makes the request Succeeded starts the window (at s.now, the
// time setOutcome records too); the verdict is set once and then kept.
func (r *RemediationRequestReconciler) verifyFix(ctx context.Context, s *scope) (ctrl.Result, error) {
	rr := s.rr
	if r.VerifyFixFor <= 0 || rr.Status.Phase != v1alpha1.PhaseSucceeded {
		return ctrl.Result{}, nil
	}
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionFixHeld)
	if c != nil && c.Status != metav1.ConditionUnknown {
		return ctrl.Result{}, nil
	}
	target := verifyTarget(rr)
	if target == nil {
		return ctrl.Result{}, nil
	}
	if s.base.Status.Phase != v1alpha1.PhaseSucceeded {
		// This reconcile ended the playbook: the window opens now, with the time
		// setOutcome records, and the first look is the next reconcile's, so that a
		// read that fails cannot fail the reconcile that records the success.
		start := s.now.Truncate(time.Second)
		v := judgeFix(rr, nil, start, start.Add(r.VerifyFixFor), s.now, 0)
		r.setCondition(rr, v1alpha1.ConditionFixHeld, v.status, v.reason, v.message)
		return ctrl.Result{RequeueAfter: min(r.VerifyFixFor, verifyPoll)}, nil
	}
	start := verifyStart(rr)
	if start.IsZero() || (c == nil && !s.now.Before(start.Add(r.VerifyFixFor))) {
		// Succeeded before this controller verified fixes, and its window is over:
		// nothing was watched, so nothing is claimed.
		return ctrl.Result{}, nil
	}
	g := r.gatherer(r.Gatherer)
	// The pods on the holder that use the volume decide nothing here.
	g.SkipAffectedPods = true
	f, err := g.Gather(ctx, target)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("gathering facts to verify the fix: %w", err)
	}
	v := judgeFix(rr, f, start, start.Add(r.VerifyFixFor), s.now, r.gates().Effective().HealthyStuckLeaseAge)
	r.setCondition(rr, v1alpha1.ConditionFixHeld, v.status, v.reason, v.message)
	if v.status != metav1.ConditionUnknown {
		ctrl.LoggerFrom(ctx).Info("Fix verified", "fixHeld", v.status, "reason", v.reason)
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: max(min(v.until.Sub(s.now), verifyPoll), time.Second)}, nil
}

// verifyTarget is the request whose facts the verification gathers: the released
// Lease by its name (a pod or claim target may be gone after the playbook moved
// it), or the target node; nil when the decision recorded neither.
func verifyTarget(rr *v1alpha1.RemediationRequest) *v1alpha1.RemediationRequest {
	o := rr.DeepCopy()
	switch rr.Spec.Remediation {
	case v1alpha1.RemediationReleaseLUKSLease:
		f := rr.Status.Facts
		if f == nil || f.Lease == nil || f.Lease.Name == "" {
			return nil
		}
		o.Spec.Target = v1alpha1.Target{PersistentVolume: f.Lease.Name}
		o.Spec.TridentNamespace = f.Lease.Namespace
		return o
	case v1alpha1.RemediationReregisterCSIDriver:
		return o
	}
	return nil
}

// releasedLeaseUID is the UID of the Lease the playbook deleted: the deleteLease
// step's, else the decision's.
func releasedLeaseUID(rr *v1alpha1.RemediationRequest) string {
	for _, st := range rr.Status.Steps {
		if st.Name == v1alpha1.StepDeleteLease && st.ObjectUID != "" {
			return st.ObjectUID
		}
	}
	if f := rr.Status.Facts; f != nil && f.Lease != nil {
		return f.Lease.UID
	}
	return ""
}

// judgeFix is the verdict on facts f gathered at now, for a window [start, end).
// stuck is the safety floor's healthy stuck age: the age from which a Lease without
// a LeaseRetained event counts as stuck (remediations' provenStuck).
func judgeFix(rr *v1alpha1.RemediationRequest, f *v1alpha1.Facts, start, end, now time.Time, stuck time.Duration) verdict {
	until := end
	switch {
	case f == nil:
		// Nothing read yet.
	case rr.Spec.Remediation == v1alpha1.RemediationReleaseLUKSLease:
		if v, ok := leaseAgain(rr, f, end, stuck, &until); ok {
			return v
		}
	case rr.Spec.Remediation == v1alpha1.RemediationReregisterCSIDriver:
		if v, ok := driverAgain(f); ok {
			return v
		}
	}
	if !now.Before(until) {
		return verdict{status: metav1.ConditionTrue, reason: v1alpha1.ReasonNoRecurrence, until: until,
			message: fmt.Sprintf("No %s from %s to %s", incidentOf(rr), stamp(start), stamp(until))}
	}
	return verdict{status: metav1.ConditionUnknown, reason: v1alpha1.ReasonVerifying, until: until,
		message: fmt.Sprintf("Watching for %s from %s until %s", incidentOf(rr), stamp(start), stamp(until))}
}

// incidentOf names what the verification watches for, from the decision's facts
// (verifyTarget made sure they name the Lease).
func incidentOf(rr *v1alpha1.RemediationRequest) string {
	f := rr.Status.Facts
	if rr.Spec.Remediation == v1alpha1.RemediationReregisterCSIDriver {
		driver := ""
		if f != nil {
			driver = f.DriverName
		}
		return fmt.Sprintf("deregistration of %s from CSINode %s", driver, rr.Spec.Target.Node)
	}
	return fmt.Sprintf("Lease %s/%s retained again by node %s", f.Lease.Namespace, f.Lease.Name, f.Lease.HolderIdentity)
}

// leaseAgain: the Lease of the released name is held again, as a new Lease, by the
// holder it was released from, since before the window ended, and is retained: a
// LeaseRetained Warning names its UID (the gatherer counts only those since its hold
// began), or it is stuck-old. A re-taken Lease not yet proven stuck extends *until
// to the time it would be, so that a re-take late in the window is judged too. A
// Lease taken by another node is that node's operation, not this incident.
func leaseAgain(rr *v1alpha1.RemediationRequest, f *v1alpha1.Facts, end time.Time, stuck time.Duration, until *time.Time) (verdict, bool) {
	was := rr.Status.Facts.Lease
	l := f.Lease
	if l == nil || !l.Exists || l.UID == releasedLeaseUID(rr) || l.HolderIdentity == "" || l.HolderIdentity != was.HolderIdentity {
		return verdict{}, false
	}
	if l.HeldSince == nil {
		return verdict{}, false
	}
	held := l.HeldSince.Time
	if !held.Before(end) {
		return verdict{}, false
	}
	age := time.Duration(l.AgeSeconds) * time.Second
	var evidence string
	switch {
	case l.RetainedEvents > 0:
		evidence = fmt.Sprintf("%d LeaseRetained Warning event(s) name it, the last: %q", l.RetainedEvents, l.LastRetainedMessage)
	case age >= stuck:
		evidence = fmt.Sprintf("it is %s old, past the safety floor's %s for a Lease without LeaseRetained events", age, stuck)
	default:
		if t := held.Add(stuck); t.After(*until) {
			*until = t
		}
		return verdict{}, false
	}
	return verdict{status: metav1.ConditionFalse, reason: v1alpha1.ReasonLeaseRetainedAgain, message: fmt.Sprintf(
		"Lease %s/%s was taken again by node %s (UID %s, held since %s) and is retained: %s. Releasing it did not fix the cause: "+
			"investigate the root cause on node %s (the cryptsetup error in the Lease's events, the trident-main logs) instead of repeating the playbook",
		l.Namespace, l.Name, l.HolderIdentity, l.UID, stamp(held), evidence, l.HolderIdentity)}, true
}

// driverAgain: the node's CSINode lacks the driver again while a Ready, not
// terminating node-plugin pod runs there, remediator scan's DeregisteredDriver. A
// plugin pod being replaced (none Ready) is a rollout, which registers again.
func driverAgain(f *v1alpha1.Facts) (verdict, bool) {
	cf := f.CSI
	if f.Node == nil || !f.Node.Exists || cf == nil || cf.DriverRegistered {
		return verdict{}, false
	}
	var ready []string
	for _, p := range cf.PluginPods {
		if p.Ready && p.DeletionTimestamp == nil {
			ready = append(ready, p.String())
		}
	}
	if len(ready) == 0 {
		return verdict{}, false
	}
	return verdict{status: metav1.ConditionFalse, reason: v1alpha1.ReasonDriverDeregisteredAgain, message: fmt.Sprintf(
		"CSINode %s does not list %s again while node-plugin pod(s) run there: %s. Restarting the plugin did not fix the cause: "+
			"investigate why the registration is dropped (overlapping node-plugin pods, the trident-operator recreating its DaemonSet, the driver-registrar's logs) instead of repeating the playbook",
		f.Node.Name, f.DriverName, strings.Join(ready, ", "))}, true
}

// stamp renders a time as the messages show it.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// announceFixHeld emits the Warning Event and counts the metric when the status
// write from before to after turned FixHeld False: called only after the write
// succeeded, so that a retried or stale reconcile does not announce twice.
func (r *RemediationRequestReconciler) announceFixHeld(before, after *v1alpha1.RemediationRequest) {
	c := meta.FindStatusCondition(after.Status.Conditions, v1alpha1.ConditionFixHeld)
	if c == nil || c.Status != metav1.ConditionFalse {
		return
	}
	if b := meta.FindStatusCondition(before.Status.Conditions, v1alpha1.ConditionFixHeld); b != nil && b.Status == metav1.ConditionFalse {
		return
	}
	fixNotHeld.WithLabelValues(string(after.Spec.Remediation)).Inc()
	r.Recorder.Event(after, corev1.EventTypeWarning, v1alpha1.EventFixNotHeld, c.Message)
}

// verifyKeys are the IndexGuard keys of a request in its verification window: its
// Lease, or its node, under "verifying/".
func verifyKeys(rr *v1alpha1.RemediationRequest) []string {
	f := rr.Status.Facts
	if !verifying(rr) || f == nil {
		return nil
	}
	switch {
	case rr.Spec.Remediation == v1alpha1.RemediationReleaseLUKSLease && f.Lease != nil && f.Lease.Name != "":
		return []string{"verifying/" + leaseKey(f.Lease.Namespace, f.Lease.Name)}
	case rr.Spec.Remediation == v1alpha1.RemediationReregisterCSIDriver && rr.Spec.Target.Node != "":
		return []string{"verifying/" + nodeKey(rr.Spec.Target.Node)}
	}
	return nil
}

// verifyingOn maps a watched object to the requests verifying a fix on it: a
// Trident Lease, a LeaseRetained event (by the Lease it is about), a CSINode.
func (r *RemediationRequestReconciler) verifyingOn(ctx context.Context, o client.Object) []reconcile.Request {
	var key string
	switch o := o.(type) {
	case *coordinationv1.Lease:
		key = leaseKey(o.Namespace, o.Name)
	case *corev1.Event:
		if o.InvolvedObject.Kind != "Lease" {
			return nil
		}
		key = leaseKey(o.Namespace, o.InvolvedObject.Name)
	case *storagev1.CSINode:
		key = nodeKey(o.Name)
	default:
		return nil
	}
	// The window's periodic check (verifyPoll) still sees them should the list fail.
	return r.guarded(ctx, "Listing the requests verifying a fix", "verifying/"+key)
}
