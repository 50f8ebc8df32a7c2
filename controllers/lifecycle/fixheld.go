package lifecycle

// The fix window: after a request Succeeded, package verification watches its Lease
// or node for the incident to come back and keeps the verdict in ConditionFixHeld.
// Finish opens the window in the same status write that records the success, so
// that a success costs one write, not two.

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Watched names the incident whose return a fix window watches for; "" when the
// decision recorded nothing to watch (a release whose facts name no Lease).
func Watched(rr *v1alpha1.RemediationRequest) string {
	f := rr.Status.Facts
	switch rr.Spec.Remediation {
	case v1alpha1.RemediationReregisterCSIDriver:
		driver := ""
		if f != nil {
			driver = f.DriverName
		}
		return fmt.Sprintf("deregistration of %s from CSINode %s", driver, rr.Spec.Target.Node)
	case v1alpha1.RemediationReleaseLUKSLease:
		if f == nil || f.Lease == nil || f.Lease.Name == "" {
			return ""
		}
		return fmt.Sprintf("Lease %s/%s retained again by node %s", f.Lease.Namespace, f.Lease.Name, f.Lease.HolderIdentity)
	}
	return ""
}

// WatchingMessage is FixHeld's message while the window [start, until) is open.
func WatchingMessage(rr *v1alpha1.RemediationRequest, start, until time.Time) string {
	return fmt.Sprintf("Watching for %s from %s until %s", Watched(rr), Stamp(start), Stamp(until))
}

// Stamp renders a time as the messages show it.
func Stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// openFixWindow sets FixHeld Unknown (Verifying) on a request that Succeeded at now,
// for window (zero: fixes are not verified); the window starts at the second
// status.outcome.finishedAt records.
func openFixWindow(rr *v1alpha1.RemediationRequest, now time.Time, window time.Duration) {
	if window <= 0 || Watched(rr) == "" {
		return
	}
	start := now.Truncate(time.Second)
	setCondition(rr, v1alpha1.ConditionFixHeld, metav1.ConditionUnknown, v1alpha1.ReasonVerifying,
		WatchingMessage(rr, start, start.Add(window)))
}
