package verification

// The verdict on a fix, from the facts alone.

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
)

// verdict is ConditionFixHeld at one check, and when to check again.
type verdict struct {
	status          metav1.ConditionStatus
	reason, message string
	// until is when the verdict becomes final: the window's end, or later while a
	// Lease re-taken within it is not yet proven stuck.
	until time.Time
}

// verifyTarget is the request whose facts are gathered: the released Lease by name
// (a pod or claim may be gone after the playbook moved it), or the target node; nil
// when the decision recorded neither.
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

// releasedLeaseUID is the deleted Lease's UID: the deleteLease step's, else the decision's.
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

// judgeFix is the verdict on facts f gathered at now, for a window [start, end);
// stuck is the safety floor's healthy stuck age.
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
			message: fmt.Sprintf("No %s from %s to %s", lifecycle.Watched(rr), lifecycle.Stamp(start), lifecycle.Stamp(until))}
	}
	return verdict{status: metav1.ConditionUnknown, reason: v1alpha1.ReasonVerifying, until: until,
		message: lifecycle.WatchingMessage(rr, start, until)}
}

// leaseAgain: the released name is held again, as a new Lease, by the same holder,
// since before the window ended, and is retained: a LeaseRetained Warning names its
// UID, or it is stuck-old. One not yet proven stuck extends *until to when it would
// be, so that a late re-take is judged too. A Lease taken by another node is that
// node's operation, not this incident.
func leaseAgain(rr *v1alpha1.RemediationRequest, f *v1alpha1.Facts, end time.Time, stuck time.Duration, until *time.Time) (verdict, bool) {
	was := rr.Status.Facts.Lease
	l := f.Lease
	if l == nil || !l.Exists || l.UID == releasedLeaseUID(rr) || l.HolderIdentity == "" || l.HolderIdentity != was.HolderIdentity ||
		l.HeldSince == nil || !l.HeldSince.Time.Before(end) {
		return verdict{}, false
	}
	held := l.HeldSince.Time
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
		l.Namespace, l.Name, l.HolderIdentity, l.UID, lifecycle.Stamp(held), evidence, l.HolderIdentity)}, true
}

// driverAgain: the CSINode lacks the driver again while a Ready, not terminating
// node-plugin pod runs there (scan's DeregisteredDriver); none Ready is a rollout.
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
