package remediations

import (
	"fmt"
	"time"

	"github.com/remediator/remediator/api/v1alpha1"
)

// FencedAtTolerance is how far ahead of "now" spec.fencing.fencedAt may be and still
// state the present: the controller reads the API server's clock up to a second and
// a round trip low (facts.ServerClock), and facts record whole seconds. Such a
// statement counts from now, so a heartbeat after now still voids it.
const FencedAtTolerance = 5 * time.Second

// fencingFresh: a fencing statement describes the node when it was made; a node
// that renewed its Lease or posted Ready since came back, and may run again.
func fencingFresh(in FloorInput, n *v1alpha1.NodeFacts, now time.Time) *Violation {
	if at := in.Spec.Fencing.FencedAt; at != nil && at.After(now.Add(FencedAtTolerance)) {
		return violation(InvariantFencingStale, "spec.fencing.fencedAt %s is in the future (now %s)", at.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	made, from := fencingMade(in, now)
	if made.IsZero() {
		return violation(InvariantFencingStale, "the time of the fencing statement is unknown: neither spec.fencing.fencedAt nor the request's creation is set")
	}
	if n.HeartbeatSince(made) {
		return violation(InvariantFencingStale, "holder node %s gave a heartbeat at %s, after the fencing statement (%s, %s): it came back since it was fenced, so the statement no longer holds",
			n.Name, heartbeatString(n), from, made.UTC().Format(time.RFC3339))
	}
	return nil
}

// fencingMade is when the fencing statement was made, and what says so:
// spec.fencing.fencedAt (now, if it is ahead of now within FencedAtTolerance), else
// the request's creation.
func fencingMade(in FloorInput, now time.Time) (time.Time, string) {
	at := in.Spec.Fencing.FencedAt
	if at == nil {
		return in.Created, "the request's creation"
	}
	if at.After(now) {
		return now, "spec.fencing.fencedAt"
	}
	return at.Time, "spec.fencing.fencedAt"
}

// fencingEvidence: the runbook's alternatives to powering the holder off are to stop
// its Trident node container, or to check in its log that it is not running
// cryptsetup. A statement of either rests on the holder's trident-main log, read with
// the decision: it must have been read in full and show no LUKS operation on the
// volume running. A stopped container writes nothing, so any line after the statement
// voids TridentNodeContainerStopped; a line about the volume after it voids
// LogsVerified, which the operator checked before it was written. A statement of a
// shutdown rests on the node's silence (fencingFresh) instead.
func fencingEvidence(in FloorInput, n *v1alpha1.NodeFacts, now time.Time) *Violation {
	f := in.Spec.Fencing
	if !f.Method.RestsOnTheLog() {
		return nil
	}
	logs := holderLogs(in)
	switch {
	case logs == nil || logs.State == v1alpha1.LogUnread:
		why := "it was not read"
		if logs != nil {
			why = fmt.Sprintf("it could not be read in full (%s): %s", logSource(logs), logs.ReadError)
		}
		return violation(InvariantHolderNotFenced, "holder node %s is %s and spec.fencing.method %s rests on the trident-main log of its Trident node pod, but %s; a holder whose log cannot be read is fenced by shutting it down (method %s)",
			n.Name, n.State, f.Method, why, v1alpha1.FencingNodeShutdown)
	case logs.State == v1alpha1.LogRunning:
		return violation(InvariantHolderNotFenced, "holder node %s is %s and spec.fencing.method is %s, but the log of its Trident node pod (%s) shows the LUKS operation on the volume still running: %q",
			n.Name, n.State, f.Method, logSource(logs), logs.Line)
	}
	made, from := fencingMade(in, now)
	after, what := logs.NewestLineAt, "a line"
	if f.Method == v1alpha1.FencingLogsVerified {
		after, what = logs.NewestVolumeLineAt, "a line about the volume's LUKS operation"
	}
	if after != nil && after.After(made) {
		return violation(InvariantFencingStale, "the log of holder node %s's Trident node pod (%s) has %s at %s, after the fencing statement (%s, %s): spec.fencing.method %s no longer holds",
			n.Name, logSource(logs), what, after.UTC().Format(time.RFC3339), from, made.UTC().Format(time.RFC3339), f.Method)
	}
	return nil
}
