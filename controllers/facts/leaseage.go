package facts

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// leaseAge measures a Trident Lease's age from the later of its creationTimestamp,
// which the API server sets, and its acquireTime, which the holder writes from its own
// clock. Taking the later one means that a holder whose clock runs slow (an
// acquireTime before the Lease even existed) can only make the Lease look younger,
// never old enough to pass the runbook's age gate early. from says which timestamp
// counted, in words, for status.facts.lease.ageFrom.
func leaseAge(l *coordinationv1.Lease, now time.Time) (age int64, from string) {
	created := l.CreationTimestamp.Time
	var acquired time.Time
	if l.Spec.AcquireTime != nil {
		acquired = l.Spec.AcquireTime.Time
	}
	switch {
	case created.IsZero() && acquired.IsZero():
		// The API server always sets creationTimestamp; this guards hand-made input.
		return 0, "neither creationTimestamp nor acquireTime is set"
	case created.IsZero():
		return ageSeconds(now, acquired), fmt.Sprintf("acquireTime %s, set by the holder's clock; creationTimestamp is not set", stamp(acquired))
	case acquired.IsZero():
		return ageSeconds(now, created), fmt.Sprintf("creationTimestamp %s, set by the API server; the Lease has no acquireTime", stamp(created))
	case acquired.After(created):
		return ageSeconds(now, acquired), fmt.Sprintf("acquireTime %s, later than creationTimestamp %s", stamp(acquired), stamp(created))
	case acquired.Equal(created):
		return ageSeconds(now, created), fmt.Sprintf("creationTimestamp %s, set by the API server, equal to acquireTime", stamp(created))
	}
	return ageSeconds(now, created), fmt.Sprintf("creationTimestamp %s, set by the API server; acquireTime %s, set by the holder's clock, is earlier and does not count", stamp(created), stamp(acquired))
}

// stamp renders a time in UTC, with as many fractional digits as it has (acquireTime
// is a MicroTime), so that messages are the same on every controller.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// retainedEvents counts the LeaseRetained Warning events Trident emitted on this
// incarnation of the Lease. Only an event that names this Lease's UID and was last
// seen at or after the later of its creation and acquisition is evidence that the
// current holder's operation failed: an event without a UID, or of an earlier Lease
// of the same name, or from before this holder acquired it, says nothing about the
// operation now holding it. Those are counted apart, so status shows what was set
// aside.
func (g *Gatherer) retainedEvents(ctx context.Context, lease *coordinationv1.Lease, lf *v1alpha1.LeaseFacts) error {
	events := &corev1.EventList{}
	if err := g.Reader.List(ctx, events, client.InNamespace(lease.Namespace), client.MatchingFields{
		"involvedObject.kind": "Lease",
		"involvedObject.name": lease.Name,
		"reason":              g.Config.RetainedEventReason,
		"type":                corev1.EventTypeWarning,
	}); err != nil {
		return fmt.Errorf("listing %s events of Lease %s/%s: %w", g.Config.RetainedEventReason, lease.Namespace, lease.Name, err)
	}
	// core/v1 Event timestamps have whole seconds: an event of the second the hold
	// began counts.
	began := lf.HeldSince().Truncate(time.Second)
	var last time.Time
	for i := range events.Items {
		ev := &events.Items[i]
		seen := eventLastSeen(ev)
		if ev.InvolvedObject.UID == "" || ev.InvolvedObject.UID != lease.UID || seen.Before(began) {
			lf.IgnoredRetainedEvents += eventCount(ev)
			continue
		}
		lf.RetainedEvents += eventCount(ev)
		if lf.LastRetainedAt == nil || seen.After(last) || (seen.Equal(last) && ev.Message > lf.LastRetainedMessage) {
			last = seen
			at := metav1.NewTime(seen)
			lf.LastRetainedAt = &at
			lf.LastRetainedMessage = ev.Message
		}
	}
	return nil
}
