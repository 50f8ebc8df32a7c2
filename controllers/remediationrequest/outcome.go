package remediationrequest

// The durable record of each terminal outcome: status.outcome, and one log line.
//
// The record goes out in the very status write that makes the phase terminal
// (lifecycle.Derive); the line is logged only after that write succeeded with a new
// record. A restart, a stale cache or a later reconcile finds the record there and
// logs nothing: the status is the guard, not the process's memory. A crash between
// the write and the log loses the line (at most once); status and Events keep the rest.

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/remediator/remediator/api/v1alpha1"
)

// OutcomeLogMessage is the message of the outcome's log line, the string to search
// the controller's logs for (docs/api.md, "History").
const OutcomeLogMessage = "Remediation outcome recorded"

// commitUnknown is the log's commit when the request carries no
// remediator.io/git-commit annotation.
const commitUnknown = "unknown: no " + v1alpha1.AnnotationGitCommit + " annotation (not applied by remediator sync)"

// logOutcome logs the record the status write from before to after wrote, if it
// wrote one: called only after the write succeeded.
func logOutcome(ctx context.Context, before, after *v1alpha1.RemediationRequest) {
	o := after.Status.Outcome
	if o == nil || (before.Status.Outcome != nil && *before.Status.Outcome == *o) {
		return
	}
	commit := cmp.Or(o.Commit, commitUnknown)
	rule, playbook := "", ""
	if d := after.Status.Decision; d != nil {
		rule, playbook = d.Rule, d.Playbook
	}
	message := ""
	if c := meta.FindStatusCondition(after.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		message = c.Message
	}
	ctrl.LoggerFrom(ctx).Info(OutcomeLogMessage,
		"remediation", string(after.Spec.Remediation), "result", string(o.Result), "reason", o.Reason,
		"commit", commit, "rule", rule, "playbook", playbook, "steps", stepDurations(after.Status.Steps),
		"finishedAt", o.FinishedAt.UTC().Format(time.RFC3339), "generation", o.Generation, "message", message)
}

// stepDurations renders the journal as "name state duration" per step, the duration
// from startedAt to completedAt ("-" for a step that did not run to an end).
func stepDurations(steps []v1alpha1.StepStatus) []string {
	out := make([]string, 0, len(steps))
	for _, st := range steps {
		d := "-"
		if st.StartedAt != nil && st.CompletedAt != nil {
			d = st.CompletedAt.Sub(st.StartedAt.Time).String()
		}
		out = append(out, fmt.Sprintf("%s %s %s", st.Name, st.State, d))
	}
	return out
}
