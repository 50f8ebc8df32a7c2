package admission

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/remediations"
)

// TestAdmit: admission's choice from the requests' status alone: slots held by
// running disruptive playbooks and by grants not yet decided, the line served oldest
// first, a request on a busy Lease or node passed over, and a request whose spec
// changed since it joined kept out of line until it is decided again.
func TestAdmit(t *testing.T) {
	playbooks, err := remediations.DefaultPlaybooks()
	require.NoError(t, err)
	t0 := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	req := func(name string, age time.Duration, phase v1alpha1.Phase, reason, playbook, node string) v1alpha1.RemediationRequest {
		rr := v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: name, UID: types.UID(name),
			CreationTimestamp: metav1.NewTime(t0.Add(-age)), Generation: 1}}
		rr.Status.Phase, rr.Status.ObservedGeneration = phase, 1
		rr.Status.Decision = &v1alpha1.Decision{Playbook: playbook}
		rr.Status.Facts = &v1alpha1.Facts{Node: &v1alpha1.NodeFacts{Name: node}, Lease: &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-" + name}}
		if reason != "" {
			rr.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: reason}}
		}
		return rr
	}
	const disruptive, release = "healthy-move-workload", "node-shutdown"
	inLine := func(name string, age time.Duration, node string) v1alpha1.RemediationRequest {
		return req(name, age, v1alpha1.PhaseWaiting, v1alpha1.ReasonWaitingForSlot, disruptive, node)
	}
	running := func(name, playbook, node string) v1alpha1.RemediationRequest {
		return req(name, time.Hour, v1alpha1.PhaseRunning, v1alpha1.ReasonPlaybookRunning, playbook, node)
	}
	granted := req("granted", time.Hour, v1alpha1.PhaseWaiting, v1alpha1.ReasonAdmitted, disruptive, "node-g")
	edited := inLine("edited", 3*time.Hour, "node-e")
	edited.Generation = 2
	deleting := func(rr v1alpha1.RemediationRequest) v1alpha1.RemediationRequest {
		rr.DeletionTimestamp = &metav1.Time{Time: t0}
		rr.Finalizers = []string{"example.com/keep"}
		return rr
	}
	expired := req("expired", time.Hour, v1alpha1.PhaseWaiting, v1alpha1.ReasonSlotExpired, disruptive, "node-x")
	undecodable := func(rr v1alpha1.RemediationRequest) v1alpha1.RemediationRequest {
		rr.Spec = v1alpha1.RemediationRequestSpec{}
		rr.Annotations = map[string]string{v1alpha1.AnnotationUndecodable: `time: invalid duration "9999999999h"`}
		return rr
	}

	cases := []struct {
		name     string
		all      []v1alpha1.RemediationRequest
		reserved map[types.UID]string
		cap      int
		want     []string
		waiting  int
	}{
		{"oldest first up to the cap", []v1alpha1.RemediationRequest{inLine("young", time.Minute, "n1"), inLine("old", time.Hour, "n2"), inLine("mid", 10*time.Minute, "n3")}, nil, 2, []string{"old", "mid"}, 3},
		{"a running disruptive playbook holds a slot", []v1alpha1.RemediationRequest{running("r", disruptive, "n9"), inLine("old", time.Hour, "n2"), inLine("young", time.Minute, "n1")}, nil, 2, []string{"old"}, 2},
		{"a Lease release holds none", []v1alpha1.RemediationRequest{running("r", release, "n9"), inLine("old", time.Hour, "n2"), inLine("young", time.Minute, "n1")}, nil, 2, []string{"old", "young"}, 2},
		{"a grant not yet decided holds one", []v1alpha1.RemediationRequest{granted, inLine("old", time.Hour, "n2")}, nil, 1, nil, 1},
		{"cap reached", []v1alpha1.RemediationRequest{running("r1", disruptive, "n8"), running("r2", disruptive, "n9"), inLine("old", time.Hour, "n2")}, nil, 2, nil, 1},
		{"a request on a busy node is passed over, not in the way", []v1alpha1.RemediationRequest{running("r", disruptive, "n1"), inLine("old", time.Hour, "n1"), inLine("young", time.Minute, "n2")}, nil, 3, []string{"young"}, 2},
		{"two in line on one node: only the older", []v1alpha1.RemediationRequest{inLine("young", time.Minute, "n1"), inLine("old", time.Hour, "n1")}, nil, 3, []string{"old"}, 2},
		{"an edited request waits to be decided again", []v1alpha1.RemediationRequest{edited, inLine("old", time.Hour, "n2")}, nil, 1, []string{"old"}, 1},
		{"a grant not used by a request being deleted goes with it", []v1alpha1.RemediationRequest{deleting(granted), inLine("old", time.Hour, "n2")}, nil, 1, []string{"old"}, 1},
		{"a request deleted mid-run holds its slot until it is ended", []v1alpha1.RemediationRequest{deleting(running("r", disruptive, "n9")), inLine("old", time.Hour, "n2")}, nil, 1, nil, 1},
		{"a request being deleted leaves the line", []v1alpha1.RemediationRequest{deleting(inLine("old", time.Hour, "n2")), inLine("young", time.Minute, "n1")}, nil, 1, []string{"young"}, 1},
		{"a grant given back holds nothing and is not in line", []v1alpha1.RemediationRequest{expired, inLine("old", time.Hour, "n2")}, nil, 1, []string{"old"}, 1},
		{"a grant another admitter reserved holds a slot and is granted first", []v1alpha1.RemediationRequest{inLine("old", time.Hour, "n2"), inLine("young", time.Minute, "n1")}, map[types.UID]string{"young": "7"}, 1, []string{"young"}, 2},
		{"an undecodable request in line is passed over", []v1alpha1.RemediationRequest{undecodable(inLine("old", time.Hour, "n2")), inLine("young", time.Minute, "n1")}, nil, 1, []string{"young"}, 2},
		{"an undecodable request keeps the slot it holds", []v1alpha1.RemediationRequest{undecodable(running("r", disruptive, "n9")), inLine("old", time.Hour, "n2")}, nil, 1, nil, 1},
		{"no cap", []v1alpha1.RemediationRequest{running("r1", disruptive, "n8"), inLine("old", time.Hour, "n2"), inLine("young", time.Minute, "n1")}, nil, 0, []string{"old", "young"}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			grants, holders, waiting := Admit(tc.all, tc.reserved, tc.cap, playbooks)
			var got []string
			for _, g := range grants {
				got = append(got, g.Request.Name)
			}
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.waiting, waiting)
			for _, g := range grants {
				assert.Contains(t, lifecycle.Names(holders), g.Request.Namespace+"/"+g.Request.Name, "a grant holds a slot")
			}
		})
	}
}

// TestGrantExpiry: a slot holder gives its slot back a step timeout after its grant
// unless its playbook's first step has started; a request that holds no slot has no
// expiry.
func TestGrantExpiry(t *testing.T) {
	playbooks, err := remediations.DefaultPlaybooks()
	require.NoError(t, err)
	t0 := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	const timeout = 5 * time.Minute
	req := func(phase v1alpha1.Phase, reason string, admittedAt *time.Time, steps ...v1alpha1.StepState) v1alpha1.RemediationRequest {
		rr := v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "r", Generation: 1}}
		rr.Status.Phase, rr.Status.ObservedGeneration = phase, 1
		rr.Status.Decision = &v1alpha1.Decision{Playbook: v1alpha1.PlaybookHealthyMoveWorkload}
		rr.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: reason,
			LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}
		if admittedAt != nil {
			at := metav1.NewTime(*admittedAt)
			rr.Status.AdmittedAt = &at
		}
		for i, st := range steps {
			rr.Status.Steps = append(rr.Status.Steps, v1alpha1.StepStatus{Name: fmt.Sprint("step", i), State: st})
		}
		return rr
	}
	deleting := req(v1alpha1.PhaseWaiting, v1alpha1.ReasonAdmitted, &t0)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	cases := []struct {
		name   string
		rr     v1alpha1.RemediationRequest
		want   time.Time
		expire bool
	}{
		{"granted: from the grant", req(v1alpha1.PhaseWaiting, v1alpha1.ReasonAdmitted, &t0), t0.Add(timeout), true},
		{"granted before admittedAt existed: from the Progressing transition", req(v1alpha1.PhaseWaiting, v1alpha1.ReasonAdmitted, nil), t0.Add(-time.Hour + timeout), true},
		{"running, first step not started", req(v1alpha1.PhaseRunning, v1alpha1.ReasonPlaybookRunning, &t0, v1alpha1.StepPending, v1alpha1.StepPending), t0.Add(timeout), true},
		{"running, first step started", req(v1alpha1.PhaseRunning, v1alpha1.ReasonPlaybookRunning, &t0, v1alpha1.StepRunning, v1alpha1.StepPending), time.Time{}, false},
		{"running, held by the pause before its first step", req(v1alpha1.PhaseRunning, v1alpha1.ReasonPaused, &t0, v1alpha1.StepPending), t0.Add(timeout), true},
		{"in line", req(v1alpha1.PhaseWaiting, v1alpha1.ReasonWaitingForSlot, nil), time.Time{}, false},
		{"given back", req(v1alpha1.PhaseWaiting, v1alpha1.ReasonSlotExpired, nil), time.Time{}, false},
		{"granted, being deleted: no slot to give back", deleting, time.Time{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			at, ok := lifecycle.GrantExpiry(&tc.rr, playbooks, timeout)
			assert.Equal(t, tc.expire, ok)
			assert.True(t, tc.want.Equal(at), "expiry %s, want %s", at, tc.want)
		})
	}
}
