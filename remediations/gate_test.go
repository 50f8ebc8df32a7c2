package remediations

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestGate: every way a destructive step can be held back, through the one gate,
// with what to do. The window's two cases used to be answered in two places that
// disagreed: an edited spec whose window was closed ended Failed, a window that
// simply closed ended Waiting; both wait now.
func TestGate(t *testing.T) {
	playbooks, err := DefaultPlaybooks()
	require.NoError(t, err)
	nightly := &v1alpha1.MaintenanceWindow{Schedule: "0 2 * * *", Duration: metav1.Duration{Duration: time.Hour}} // factsAt is 03:00: closed
	hourly := &v1alpha1.MaintenanceWindow{Schedule: "0 * * * *", Duration: metav1.Duration{Duration: time.Hour}}  // open
	running := func(edit func(*v1alpha1.RemediationRequest), done ...string) *v1alpha1.RemediationRequest {
		rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "r", Generation: 1, CreationTimestamp: metav1.NewTime(requestAt)}}
		rr.Spec = v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease, MaintenanceWindow: hourly}
		rr.Status.Phase = v1alpha1.PhaseRunning
		rr.Status.Facts = leaseFacts(v1alpha1.NodeHealthy)
		rr.Status.Decision = &v1alpha1.Decision{Allowed: true, Playbook: "healthy-move-workload", Generation: 1}
		for _, name := range playbooks["healthy-move-workload"].Steps {
			rr.Status.Steps = append(rr.Status.Steps, v1alpha1.StepStatus{Name: name, State: v1alpha1.StepPending})
		}
		for i := range done {
			rr.Status.Steps[i].State = v1alpha1.StepSucceeded
		}
		if edit != nil {
			edit(rr)
			rr.Generation++ // an edit of the spec since the decision
		}
		return rr
	}
	unreachable := func(rr *v1alpha1.RemediationRequest) {
		rr.Status.Facts = leaseFacts(v1alpha1.NodeUnreachable)
		rr.Status.Decision.Playbook = "fenced-unreachable"
		rr.Status.Steps = []v1alpha1.StepStatus{{Name: v1alpha1.StepDeleteLease, State: v1alpha1.StepPending}}
	}
	cases := []struct {
		name     string
		rr       *v1alpha1.RemediationRequest
		step     string
		starting bool
		fresh    *v1alpha1.Facts
		conflict []string
		paused   string
		want     Action
		says     string
	}{
		{name: "open window, floor holds", rr: running(nil), step: "cordon", starting: true},
		{name: "a wait's start passes the gate", rr: running(func(rr *v1alpha1.RemediationRequest) { rr.Spec.MaintenanceWindow = nightly }, "cordon", "deleteAffectedPods"),
			step: "waitPodsGone", starting: true},
		{name: "paused: even a wait does not start", rr: running(nil, "cordon", "deleteAffectedPods"), step: "waitPodsGone", starting: true,
			paused: "Remediator is paused by alice", want: ActionHold, says: "paused by alice"},
		{name: "paused: a destructive step under way does not act", rr: running(nil, "cordon"), step: "deleteAffectedPods", fresh: leaseFacts(v1alpha1.NodeHealthy, "web-0"),
			paused: "Remediator is paused by alice", want: ActionHold},
		{name: "spec switched to DryRun", rr: running(func(rr *v1alpha1.RemediationRequest) { rr.Spec.Mode = v1alpha1.ModeDryRun }), step: "cordon", starting: true,
			want: ActionAbort, says: "spec.mode is now DryRun"},
		{name: "fencing withdrawn", rr: running(unreachable), step: "deleteLease", fresh: leaseFacts(v1alpha1.NodeUnreachable),
			want: ActionAbort, says: "spec.fencing no longer confirms that holder node node-a was fenced"},
		{name: "fencing points elsewhere", rr: running(func(rr *v1alpha1.RemediationRequest) { unreachable(rr); rr.Spec.Fencing = fenced("node-z").Fencing }),
			step: "deleteLease", starting: true, want: ActionAbort, says: `spec.fencing now names node "node-z"`},
		{name: "window made invalid", rr: running(func(rr *v1alpha1.RemediationRequest) {
			rr.Spec.MaintenanceWindow = &v1alpha1.MaintenanceWindow{Schedule: "0 2 30 2 *", Duration: metav1.Duration{Duration: time.Hour}}
		}), step: "cordon", starting: true, want: ActionAbort, says: "spec.maintenanceWindow is invalid"},
		{name: "window closed before the step starts", rr: running(func(rr *v1alpha1.RemediationRequest) { rr.Spec.MaintenanceWindow = nightly }),
			step: "cordon", starting: true, want: ActionWait, says: "The maintenance window closed before step cordon"},
		{name: "window closed by a spec edit: waits too", rr: running(func(rr *v1alpha1.RemediationRequest) { rr.Spec.MaintenanceWindow = nightly }, "cordon"),
			step: "deleteAffectedPods", starting: true, want: ActionWait},
		{name: "window closed after the eviction: finishes, with a note", rr: running(func(rr *v1alpha1.RemediationRequest) { rr.Spec.MaintenanceWindow = nightly }, "cordon", "deleteAffectedPods", "waitPodsGone"),
			step: "deleteLease", starting: true, says: "closed after the affected pods were evicted; step deleteLease starts all the same"},
		{name: "a step under way is not stopped by its window", rr: running(func(rr *v1alpha1.RemediationRequest) { rr.Spec.MaintenanceWindow = nightly }, "cordon"),
			step: "deleteAffectedPods", fresh: leaseFacts(v1alpha1.NodeHealthy, "web-0")},
		{name: "another remediation on the node", rr: running(nil, "cordon"), step: "deleteAffectedPods", fresh: leaseFacts(v1alpha1.NodeHealthy, "web-0"),
			conflict: []string{"remediator/other (Running, on node node-a)"}, want: ActionFail, says: "concurrent-remediation"},
		{name: "the Lease changed hands", rr: running(nil, "cordon", "deleteAffectedPods", "waitPodsGone"), step: "deleteLease",
			fresh: func() *v1alpha1.Facts {
				f := leaseFacts(v1alpha1.NodeHealthy)
				f.Lease.HolderIdentity = "node-b"
				return f
			}(), want: ActionFail, says: "lease-changed"},
		{name: "a journal that is not the playbook's", rr: running(func(rr *v1alpha1.RemediationRequest) { rr.Status.Steps = rr.Status.Steps[3:] }), step: "deleteLease",
			fresh: leaseFacts(v1alpha1.NodeHealthy), want: ActionFail, says: "playbook-mismatch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &Execution{RR: tc.rr, Playbooks: playbooks, Now: factsAt, Paused: tc.paused, freshFacts: tc.fresh, freshConflicts: tc.conflict}
			stop, note := Gate(r, tc.step, tc.starting)
			if tc.want == "" {
				require.Nil(t, stop, "%+v", stop)
				if tc.says != "" {
					assert.Contains(t, note, tc.says)
				}
				return
			}
			require.NotNil(t, stop)
			assert.Equal(t, tc.want, stop.Action, stop.Message)
			assert.Contains(t, stop.Message, tc.says)
			if tc.want == ActionWait {
				assert.Equal(t, time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC), stop.Opens.UTC())
			}
		})
	}
}
