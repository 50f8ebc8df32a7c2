package decisiontest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
)

// Case is one decision: a request, its facts, the other requests, the cap and the
// clock, and the phase and rule expected.
type Case struct {
	Name          string
	Request       *v1alpha1.RemediationRequest
	Facts         *v1alpha1.Facts
	Others        []v1alpha1.RemediationRequest
	MaxConcurrent int
	Now           time.Time
	WantPhase     v1alpha1.Phase
	WantRule      string
}

// Now is the table's clock: a Thursday at noon, outside a 02:00 window.
var Now = time.Date(2026, 11, 19, 12, 0, 0, 0, time.UTC)

const pv = "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e"

func request(name string, change func(*v1alpha1.RemediationRequestSpec)) *v1alpha1.RemediationRequest {
	rr := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: name, UID: "uid-request", Generation: 1, CreationTimestamp: metav1.NewTime(Now)},
		Spec: v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target:      v1alpha1.Target{PersistentVolume: pv},
			Reason:      "LeaseRetained: cryptsetup luksOpen failed (INC-4711)",
			Mode:        v1alpha1.ModeApply,
		},
	}
	if change != nil {
		change(&rr.Spec)
	}
	return rr
}

func fenced(node string) func(*v1alpha1.RemediationRequestSpec) {
	return func(s *v1alpha1.RemediationRequestSpec) {
		s.Fencing = &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: node}
	}
}

// leaseFacts are the facts of the Lease of pv held by kwok-node-2 in state, age
// seconds old, with events LeaseRetained events and the given pods on the holder.
func leaseFacts(state v1alpha1.NodeState, age int64, events int32, pods ...string) *v1alpha1.Facts {
	f := &v1alpha1.Facts{
		GatheredAt: metav1.NewTime(Now), TridentNamespace: "trident", DriverName: "csi.trident.netapp.io",
		Target: v1alpha1.TargetFacts{Ref: "PersistentVolume " + pv, Found: true, PersistentVolume: pv, PersistentVolumeClaim: "app/data"},
		Lease: &v1alpha1.LeaseFacts{Namespace: "trident", Name: pv, Exists: true, UID: "lease-uid", ResourceVersion: "4711",
			HolderIdentity: "kwok-node-2", AgeSeconds: age, RetainedEvents: events},
		Node: &v1alpha1.NodeFacts{Name: "kwok-node-2", Exists: state != v1alpha1.NodeNotFound, State: state, StateReason: "table", LeaseRenewAgeSeconds: -1},
	}
	for _, p := range pods {
		f.AffectedPods = append(f.AffectedPods, v1alpha1.PodFacts{Namespace: "app", Name: p, UID: p, Node: "kwok-node-2", Phase: "Running", Ready: true})
	}
	return f
}

func csiFacts(registered bool, pods ...string) *v1alpha1.Facts {
	f := &v1alpha1.Facts{
		GatheredAt: metav1.NewTime(Now), TridentNamespace: "trident", DriverName: "csi.trident.netapp.io",
		Target: v1alpha1.TargetFacts{Ref: "Node kwok-node-0", Found: true, Node: "kwok-node-0"},
		Node:   &v1alpha1.NodeFacts{Name: "kwok-node-0", Exists: true, State: v1alpha1.NodeHealthy, Ready: "True", StateReason: "table"},
		CSI:    &v1alpha1.CSIFacts{CSINodeExists: true, DriverRegistered: registered},
	}
	if registered {
		f.CSI.Drivers = []string{"csi.trident.netapp.io"}
	}
	for _, p := range pods {
		f.CSI.PluginPods = append(f.CSI.PluginPods, v1alpha1.PodFacts{Namespace: "trident", Name: p, UID: p, Node: "kwok-node-0", Phase: "Running", Ready: true})
	}
	return f
}

// running is another request whose playbook runs, with facts on the given Lease
// and node.
func running(name, lease, node string) v1alpha1.RemediationRequest {
	rr := v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: name, UID: types.UID("uid-other-" + name)}}
	rr.Status.Phase = v1alpha1.PhaseRunning
	rr.Status.Facts = &v1alpha1.Facts{Lease: &v1alpha1.LeaseFacts{Namespace: "trident", Name: lease}, Node: &v1alpha1.NodeFacts{Name: node}}
	return rr
}

// waitingForSlot is another request, created at created, that is allowed but waits
// for a slot of the cap.
func waitingForSlot(name string, created time.Time) v1alpha1.RemediationRequest {
	rr := v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: name, UID: types.UID("uid-other-" + name),
		CreationTimestamp: metav1.NewTime(created)}}
	rr.Status.Phase = v1alpha1.PhaseWaiting
	rr.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: "WaitingForRemediationSlot"}}
	return rr
}

// Cases returns the table, fresh on every call so that callers may change them.
func Cases() []Case {
	window := func(schedule string) func(*v1alpha1.RemediationRequestSpec) {
		return func(s *v1alpha1.RemediationRequestSpec) {
			s.MaintenanceWindow = &v1alpha1.MaintenanceWindow{Schedule: schedule, Duration: metav1.Duration{Duration: 2 * time.Hour}}
		}
	}
	dryRun := func(s *v1alpha1.RemediationRequestSpec) { s.Mode = v1alpha1.ModeDryRun }
	csi := func(s *v1alpha1.RemediationRequestSpec) {
		s.Remediation, s.Target = v1alpha1.RemediationReregisterCSIDriver, v1alpha1.Target{Node: "kwok-node-0"}
	}
	three := []v1alpha1.RemediationRequest{running("a", "pvc-a", "node-a"), running("b", "pvc-b", "node-b"), running("c", "pvc-c", "node-c")}
	cases := []Case{
		{Name: "shut-down holder", Request: request("shutdown", nil), Facts: leaseFacts(v1alpha1.NodeShutdown, 40, 0),
			WantPhase: v1alpha1.PhaseRunning, WantRule: "holder-shutdown"},
		{Name: "shut-down holder, dry run", Request: request("shutdown-dry", dryRun), Facts: leaseFacts(v1alpha1.NodeShutdown, 40, 0),
			WantPhase: v1alpha1.PhasePending, WantRule: "holder-shutdown"},
		{Name: "unreachable, not fenced", Request: request("unfenced", nil), Facts: leaseFacts(v1alpha1.NodeUnreachable, 3600, 0),
			WantPhase: v1alpha1.PhaseRejected, WantRule: "unreachable-not-fenced"},
		{Name: "unreachable, fencing names another node", Request: request("fenced-other", fenced("kwok-node-1")), Facts: leaseFacts(v1alpha1.NodeUnreachable, 3600, 0),
			WantPhase: v1alpha1.PhaseRejected, WantRule: "fencing-names-another-node"},
		{Name: "unreachable, fenced, Lease young", Request: request("fenced-young", fenced("kwok-node-2")), Facts: leaseFacts(v1alpha1.NodeUnreachable, 60, 0),
			WantPhase: v1alpha1.PhaseRejected, WantRule: "unreachable-lease-too-young"},
		{Name: "unreachable, fenced, Lease old", Request: request("fenced-old", fenced("kwok-node-2")), Facts: leaseFacts(v1alpha1.NodeUnreachable, 600, 0),
			WantPhase: v1alpha1.PhaseRunning, WantRule: "unreachable-fenced"},
		{Name: "holder node missing, not fenced", Request: request("gone", nil), Facts: leaseFacts(v1alpha1.NodeNotFound, 3600, 2),
			WantPhase: v1alpha1.PhaseRejected, WantRule: "holder-node-not-found"},
		{Name: "holder node missing, fenced, Lease old", Request: request("gone-fenced", fenced("kwok-node-2")), Facts: leaseFacts(v1alpha1.NodeNotFound, 3600, 2),
			WantPhase: v1alpha1.PhaseRunning, WantRule: "not-found-fenced"},
		{Name: "healthy, operation may be running", Request: request("healthy-young", nil), Facts: leaseFacts(v1alpha1.NodeHealthy, 60, 0, "web-0"),
			WantPhase: v1alpha1.PhaseRejected, WantRule: "healthy-operation-may-be-running"},
		{Name: "healthy, Lease stuck", Request: request("healthy-stuck", nil), Facts: leaseFacts(v1alpha1.NodeHealthy, 2400, 3, "web-0"),
			WantPhase: v1alpha1.PhaseRunning, WantRule: "healthy-lease-stuck"},
		{Name: "healthy, Lease stuck, claim unverified: the floor refuses", Request: request("healthy-unverified", nil),
			Facts: func() *v1alpha1.Facts {
				f := leaseFacts(v1alpha1.NodeHealthy, 2400, 3)
				f.Target.PersistentVolumeClaim = ""
				return f
			}(), WantPhase: v1alpha1.PhaseRejected, WantRule: "healthy-holder-pods-running"},
		{Name: "another request runs on the Lease", Request: request("conflict", nil), Facts: leaseFacts(v1alpha1.NodeShutdown, 40, 0),
			Others: []v1alpha1.RemediationRequest{running("first", pv, "kwok-node-9")}, WantPhase: v1alpha1.PhaseWaiting, WantRule: "one-remediation-at-a-time"},
		{Name: "cap reached", Request: request("capped", nil), Facts: leaseFacts(v1alpha1.NodeHealthy, 2400, 3, "web-0"), Others: three, MaxConcurrent: 3,
			WantPhase: v1alpha1.PhaseWaiting, WantRule: "healthy-lease-stuck"},
		{Name: "cap not reached", Request: request("uncapped", nil), Facts: leaseFacts(v1alpha1.NodeHealthy, 2400, 3, "web-0"), Others: three, MaxConcurrent: 4,
			WantPhase: v1alpha1.PhaseRunning, WantRule: "healthy-lease-stuck"},
		{Name: "cap reached, dry run", Request: request("capped-dry", dryRun), Facts: leaseFacts(v1alpha1.NodeHealthy, 2400, 3, "web-0"), Others: three, MaxConcurrent: 3,
			WantPhase: v1alpha1.PhasePending, WantRule: "healthy-lease-stuck"},
		// The cap limits disruptive playbooks: a Lease release for a holder proven down
		// is not held back by it (playbooks.yaml).
		{Name: "cap reached, shut-down holder is not capped", Request: request("shutdown-uncapped", nil), Facts: leaseFacts(v1alpha1.NodeShutdown, 40, 0), Others: three, MaxConcurrent: 3,
			WantPhase: v1alpha1.PhaseRunning, WantRule: "holder-shutdown"},
		// First come, first served: a free slot is kept for a request that came earlier
		// and waits for one.
		{Name: "slot free but an older request waits for it", Request: request("newcomer", nil), Facts: leaseFacts(v1alpha1.NodeHealthy, 2400, 3, "web-0"),
			Others: []v1alpha1.RemediationRequest{running("a", "pvc-a", "node-a"), running("b", "pvc-b", "node-b"), waitingForSlot("older", Now.Add(-time.Minute))}, MaxConcurrent: 3,
			WantPhase: v1alpha1.PhaseWaiting, WantRule: "healthy-lease-stuck"},
		{Name: "slot free and only younger requests wait", Request: request("first-in-line", nil), Facts: leaseFacts(v1alpha1.NodeHealthy, 2400, 3, "web-0"),
			Others: []v1alpha1.RemediationRequest{running("a", "pvc-a", "node-a"), running("b", "pvc-b", "node-b"), waitingForSlot("younger", Now.Add(time.Minute))}, MaxConcurrent: 3,
			WantPhase: v1alpha1.PhaseRunning, WantRule: "healthy-lease-stuck"},
		{Name: "window closed", Request: request("window", window("0 2 * * *")), Facts: leaseFacts(v1alpha1.NodeShutdown, 40, 0),
			WantPhase: v1alpha1.PhaseWaiting, WantRule: "holder-shutdown"},
		{Name: "window open", Request: request("window-open", window("0 11 * * *")), Facts: leaseFacts(v1alpha1.NodeShutdown, 40, 0),
			WantPhase: v1alpha1.PhaseRunning, WantRule: "holder-shutdown"},
		{Name: "window never opens", Request: request("window-never", window("0 2 30 2 *")), Facts: leaseFacts(v1alpha1.NodeShutdown, 40, 0),
			WantPhase: v1alpha1.PhaseRejected, WantRule: "invalid-maintenance-window"},
		{Name: "plugin deregistered, one plugin pod", Request: request("csi", csi), Facts: csiFacts(false, "trident-csi-abcde"),
			WantPhase: v1alpha1.PhaseRunning, WantRule: "driver-deregistered"},
		{Name: "plugin pods overlap", Request: request("csi-overlap", csi), Facts: csiFacts(false, "trident-csi-abcde", "trident-csi-2-fghij"),
			WantPhase: v1alpha1.PhaseRejected, WantRule: "plugin-pods-overlap"},
		{Name: "driver registered", Request: request("csi-ok", csi), Facts: csiFacts(true, "trident-csi-abcde"),
			WantPhase: v1alpha1.PhaseRejected, WantRule: "driver-registered"},
	}
	for i := range cases {
		cases[i].Now = Now
	}
	return cases
}

// Deciders returns the embedded policy and the shipped playbooks, which every run
// of the table uses.
func Deciders(t testing.TB) (*policies.Engine, remediations.Playbooks) {
	t.Helper()
	policy, err := policies.Embedded()
	require.NoError(t, err)
	playbooks, err := remediations.DefaultPlaybooks()
	require.NoError(t, err)
	return policy, playbooks
}
