package facts

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// recordLeaseAge records in lf the Trident Lease l's times and when its current hold
// began (HeldSince), its age at now and why: the one rule the age gates, the scan
// and the retained events count from.
func recordLeaseAge(lf *v1alpha1.LeaseFacts, l *coordinationv1.Lease, now time.Time) {
	created := l.CreationTimestamp
	lf.CreationTimestamp = &created
	if l.Spec.AcquireTime != nil {
		lf.AcquireTime = &metav1.Time{Time: l.Spec.AcquireTime.Time}
	}
	began, from := holdBegan(l, now)
	lf.HeldSince = &metav1.Time{Time: began}
	lf.AgeSeconds = ageSeconds(now, began)
	lf.AgeFrom = from
}

// holdBegan is when the current hold on a Trident Lease began, by the API server's
// clock only: its creationTimestamp, or the server's time of a later re-acquisition
// (a new acquireTime or holderIdentity: the newest managedFields entry owning either).
// The acquireTime itself is the holder's clock, and a slow one would make a fresh
// hold look old. Without managedFields a re-acquisition cannot be ruled out, and the
// hold counts from now.
func holdBegan(l *coordinationv1.Lease, now time.Time) (time.Time, string) {
	created := l.CreationTimestamp.Time
	acquired := ptr.Deref(l.Spec.AcquireTime, metav1.MicroTime{}).Time
	if created.IsZero() { // hand-made input: the API server always sets it
		return now, "now: the Lease has no creationTimestamp, and the holder's acquireTime does not count"
	}
	wrote, manager, ok := lastHolderWrite(l.ManagedFields)
	switch {
	case !ok:
		return now, fmt.Sprintf("now: the Lease was read without managedFields, which hold the API server's time of the holder's last write, "+
			"so a re-acquisition since its creationTimestamp %s cannot be ruled out; the holder's acquireTime does not count", stamp(created))
	case wrote.After(created):
		return wrote, fmt.Sprintf("the holder's last write of acquireTime or holderIdentity, at %s by the API server's clock (field manager %q): "+
			"a re-acquisition after its creationTimestamp %s; the holder's acquireTime does not count", stamp(wrote), manager, stamp(created))
	case acquired.IsZero():
		return created, fmt.Sprintf("creationTimestamp %s, set by the API server; the Lease has no acquireTime", stamp(created))
	case acquired.After(created):
		return created, fmt.Sprintf("creationTimestamp %s, set by the API server, with no later write by the holder; acquireTime %s, set by the holder's clock, does not count",
			stamp(created), stamp(acquired))
	case acquired.Equal(created):
		return created, fmt.Sprintf("creationTimestamp %s, set by the API server, equal to acquireTime", stamp(created))
	}
	return created, fmt.Sprintf("creationTimestamp %s, set by the API server; acquireTime %s, set by the holder's clock, is earlier and does not count", stamp(created), stamp(acquired))
}

// lastHolderWrite is the newest server-set time among the managedFields entries that
// own spec.acquireTime or spec.holderIdentity, and its manager (first by name on a tie).
func lastHolderWrite(entries []metav1.ManagedFieldsEntry) (at time.Time, manager string, ok bool) {
	for _, mf := range entries {
		if mf.Time == nil || mf.Subresource != "" || mf.FieldsV1 == nil || !ownsHolderFields(mf.FieldsV1.Raw) {
			continue
		}
		t := mf.Time.Time
		if !ok || t.After(at) || (t.Equal(at) && mf.Manager < manager) {
			at, manager, ok = t, mf.Manager, true
		}
	}
	return at, manager, ok
}

// ownsHolderFields reports whether a managedFields entry's field set, when it parses,
// holds spec.acquireTime or spec.holderIdentity.
func ownsHolderFields(raw []byte) bool {
	var fields struct {
		Spec map[string]json.RawMessage `json:"f:spec"`
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return false
	}
	_, acquire := fields.Spec["f:acquireTime"]
	_, holder := fields.Spec["f:holderIdentity"]
	return acquire || holder
}

// stamp renders a time in UTC with its fractional digits (acquireTime is a MicroTime).
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// retainedEvents records lease's age at now (recordLeaseAge), then counts the
// LeaseRetained Warnings on this Lease's UID last seen since its hold began
// (HeldSince): only those are evidence that the current holder's operation failed.
// The others are counted apart, so status shows what was set aside.
func (g *Gatherer) retainedEvents(ctx context.Context, lease *coordinationv1.Lease, lf *v1alpha1.LeaseFacts, now time.Time) error {
	recordLeaseAge(lf, lease, now)
	events := &corev1.EventList{}
	if err := g.Reader.List(ctx, events, client.InNamespace(lease.Namespace), client.MatchingFields{
		"involvedObject.kind": "Lease",
		"involvedObject.name": lease.Name,
		"reason":              g.Config.RetainedEventReason,
		"type":                corev1.EventTypeWarning,
	}); err != nil {
		return fmt.Errorf("listing %s events of Lease %s/%s: %w", g.Config.RetainedEventReason, lease.Namespace, lease.Name, err)
	}
	// Event timestamps have whole seconds: one of the second the hold began counts.
	began := lf.HeldSince.Truncate(time.Second)
	var last time.Time
	for i := range events.Items {
		ev := &events.Items[i]
		seen := EventLastSeen(ev)
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
