package remediations

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/api/v1alpha1"
)

// leaseFacts are the facts of a Lease held by node-a, whose state is given.
func leaseFacts(state v1alpha1.NodeState, pods ...string) *v1alpha1.Facts {
	f := &v1alpha1.Facts{
		TridentNamespace: "trident", DriverName: "csi.trident.netapp.io",
		Target: v1alpha1.TargetFacts{Found: true, PersistentVolume: "pvc-1", PersistentVolumeClaim: "app/data"},
		Lease:  &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1", Exists: true, UID: "lease-uid", ResourceVersion: "10", HolderIdentity: "node-a"},
		Node:   &v1alpha1.NodeFacts{Name: "node-a", Exists: state != v1alpha1.NodeNotFound, State: state, StateReason: "test"},
	}
	for _, p := range pods {
		f.AffectedPods = append(f.AffectedPods, v1alpha1.PodFacts{Namespace: "app", Name: p, UID: p + "-uid", Node: "node-a"})
	}
	return f
}

func csiFacts(registered bool, pods ...string) *v1alpha1.Facts {
	f := &v1alpha1.Facts{
		TridentNamespace: "trident", DriverName: "csi.trident.netapp.io",
		Target: v1alpha1.TargetFacts{Found: true, Node: "node-b"},
		Node:   &v1alpha1.NodeFacts{Name: "node-b", Exists: true, State: v1alpha1.NodeHealthy},
		CSI:    &v1alpha1.CSIFacts{CSINodeExists: true, DriverRegistered: registered},
	}
	for _, p := range pods {
		f.CSI.PluginPods = append(f.CSI.PluginPods, v1alpha1.PodFacts{Namespace: "trident", Name: p, UID: p + "-uid", Node: "node-b"})
	}
	return f
}

func fenced(node string) v1alpha1.RemediationRequestSpec {
	return v1alpha1.RemediationRequestSpec{Fencing: &v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: node}}
}

func with(f *v1alpha1.Facts, change func(*v1alpha1.Facts)) *v1alpha1.Facts {
	change(f)
	return f
}

func TestCheckFloor(t *testing.T) {
	release := []string{"deleteLease"}
	move := []string{"cordon", "deleteAffectedPods", "waitPodsGone", "deleteLease", "uncordon"}
	restart := []string{"cordon", "deletePluginPod", "waitPluginPodReady", "waitDriverRegistered", "uncordon"}
	lease := v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease}
	plugin := v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReregisterCSIDriver}
	cases := []struct {
		name string
		in   FloorInput
		want Invariant // "" means no violation
	}{
		// Decisions: whatever playbook a policy chose.
		{"shut-down holder, Lease released", FloorInput{Steps: release, Now: leaseFacts(v1alpha1.NodeShutdown)}, ""},
		{"unreachable holder without fencing", FloorInput{Steps: release, Now: leaseFacts(v1alpha1.NodeUnreachable)}, InvariantHolderNotFenced},
		{"unreachable holder fenced as itself", FloorInput{Spec: fenced("node-a"), Steps: release, Now: leaseFacts(v1alpha1.NodeUnreachable)}, ""},
		{"unreachable holder, fencing names another node", FloorInput{Spec: fenced("node-b"), Steps: release, Now: leaseFacts(v1alpha1.NodeUnreachable)}, InvariantHolderNotFenced},
		{"fencing stated but not confirmed", FloorInput{Spec: v1alpha1.RemediationRequestSpec{Fencing: &v1alpha1.Fencing{Node: "node-a"}}, Steps: release, Now: leaseFacts(v1alpha1.NodeUnreachable)}, InvariantHolderNotFenced},
		{"missing holder node without fencing", FloorInput{Steps: release, Now: leaseFacts(v1alpha1.NodeNotFound)}, InvariantHolderNotFenced},
		{"missing holder node fenced as itself", FloorInput{Spec: fenced("node-a"), Steps: release, Now: leaseFacts(v1alpha1.NodeNotFound)}, ""},
		{"unknown holder state", FloorInput{Spec: fenced("node-a"), Steps: release, Now: leaseFacts(v1alpha1.NodeUnknown)}, InvariantHolderStateUnproven},
		{"healthy holder with pods, Lease deleted outright", FloorInput{Steps: release, Now: leaseFacts(v1alpha1.NodeHealthy, "web-0")}, InvariantHealthyHolderPodsRunning},
		{"healthy holder without pods, Lease deleted outright", FloorInput{Steps: release, Now: leaseFacts(v1alpha1.NodeHealthy)}, InvariantHealthyHolderPodsRunning},
		{"healthy holder, pods moved first", FloorInput{Steps: move, Now: leaseFacts(v1alpha1.NodeHealthy, "web-0")}, ""},
		{"healthy holder, claim unverified", FloorInput{Steps: move, Now: with(leaseFacts(v1alpha1.NodeHealthy), func(f *v1alpha1.Facts) { f.Target.PersistentVolumeClaim = "" })}, InvariantHealthyHolderPodsRunning},
		{"no Lease", FloorInput{Steps: release, Now: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.Lease.Exists = false })}, InvariantLeaseNotHeld},
		{"another request runs on the Lease", FloorInput{Steps: release, Now: leaseFacts(v1alpha1.NodeShutdown), Conflicts: []string{"ns/other (Running, on Lease trident/pvc-1)"}}, InvariantConcurrentRemediation},
		{"no facts", FloorInput{Steps: release}, InvariantHolderStateUnproven},

		// Right before a destructive step, against the decision's facts.
		{"deleteLease, unchanged", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown), Now: leaseFacts(v1alpha1.NodeShutdown)}, ""},
		{"deleteLease, Lease passed to another holder", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown),
			Now: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.Lease.HolderIdentity = "node-b" })}, InvariantLeaseChanged},
		{"deleteLease, Lease re-created", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown),
			Now: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.Lease.UID = "other" })}, InvariantLeaseChanged},
		{"deleteLease, Lease updated", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown),
			Now: with(leaseFacts(v1alpha1.NodeShutdown), func(f *v1alpha1.Facts) { f.Lease.ResourceVersion = "11" })}, InvariantLeaseChanged},
		{"deleteLease, holder came back", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown), Now: leaseFacts(v1alpha1.NodeHealthy)}, InvariantHolderStateChanged},
		{"deleteLease, fencing withdrawn since the decision", FloorInput{Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeUnreachable), Now: leaseFacts(v1alpha1.NodeUnreachable)}, InvariantHolderNotFenced},
		{"deleteLease, healthy holder's pods still there", FloorInput{Steps: move, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"), Now: leaseFacts(v1alpha1.NodeHealthy, "web-1")}, InvariantHealthyHolderPodsRunning},
		{"deleteLease, healthy holder drained", FloorInput{Steps: move, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"), Now: leaseFacts(v1alpha1.NodeHealthy)}, ""},
		{"evict, healthy holder's pods are there to evict", FloorInput{Steps: move, Step: "deleteAffectedPods", Decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"), Now: leaseFacts(v1alpha1.NodeHealthy, "web-0")}, ""},
		{"evict, holder lost the control plane", FloorInput{Steps: move, Step: "deleteAffectedPods", Decided: leaseFacts(v1alpha1.NodeHealthy, "web-0"), Now: leaseFacts(v1alpha1.NodeUnreachable, "web-0")}, InvariantHolderStateChanged},
		{"uncordon is a restore, never refused", FloorInput{Steps: move, Step: "uncordon", Decided: leaseFacts(v1alpha1.NodeHealthy), Now: leaseFacts(v1alpha1.NodeUnreachable)}, ""},

		// The node-plugin restart.
		{"one plugin pod, driver missing", FloorInput{Steps: restart, Now: csiFacts(false, "trident-csi-a")}, ""},
		{"two plugin pods overlap", FloorInput{Steps: restart, Now: csiFacts(false, "trident-csi-a", "trident-csi-2-b")}, InvariantPluginPodsOverlap},
		{"driver registered", FloorInput{Steps: restart, Now: csiFacts(true, "trident-csi-a")}, InvariantDriverRegistered},
		{"deletePluginPod, a second pod appeared", FloorInput{Steps: restart, Step: "deletePluginPod", Decided: csiFacts(false, "trident-csi-a"), Now: csiFacts(false, "trident-csi-a", "trident-csi-2-b")}, InvariantPluginPodsOverlap},
		{"deletePluginPod, pod replaced", FloorInput{Steps: restart, Step: "deletePluginPod", Decided: csiFacts(false, "trident-csi-a"), Now: csiFacts(false, "trident-csi-c")}, InvariantPluginPodsOverlap},
		{"deletePluginPod, driver came back", FloorInput{Steps: restart, Step: "deletePluginPod", Decided: csiFacts(false, "trident-csi-a"), Now: csiFacts(true, "trident-csi-a")}, InvariantDriverRegistered},
		{"deletePluginPod, unchanged", FloorInput{Steps: restart, Step: "deletePluginPod", Decided: csiFacts(false, "trident-csi-a"), Now: csiFacts(false, "trident-csi-a")}, ""},
		{"deletePluginPod, other target", FloorInput{Steps: restart, Step: "deletePluginPod", Decided: with(csiFacts(false, "trident-csi-a"), func(f *v1alpha1.Facts) { f.Target.Node = "node-z" }),
			Now: csiFacts(false, "trident-csi-a")}, InvariantHolderStateChanged},
	}
	forged := []struct {
		name string
		in   FloorInput
		want Invariant
	}{
		{"status lists a playbook without the Lease delete", FloorInput{Spec: lease, Steps: []string{"cordon"}, Step: "cordon",
			Decided: leaseFacts(v1alpha1.NodeHealthy), Now: leaseFacts(v1alpha1.NodeHealthy)}, InvariantPlaybookMismatch},
		{"status lists a playbook without the plugin restart", FloorInput{Spec: plugin, Steps: []string{"cordon", "uncordon"}, Step: "cordon",
			Decided: csiFacts(false, "trident-csi-a"), Now: csiFacts(false, "trident-csi-a")}, InvariantPlaybookMismatch},
		{"status names a node to cordon on a Lease request", FloorInput{Spec: lease, Steps: move, Step: "cordon",
			Decided: with(leaseFacts(v1alpha1.NodeHealthy, "web-0"), func(f *v1alpha1.Facts) { f.Target.Node = "victim" }), Now: leaseFacts(v1alpha1.NodeHealthy, "web-0")}, InvariantLeaseChanged},
		{"the CSI cordon re-checks the target node", FloorInput{Spec: plugin, Steps: restart, Step: "cordon",
			Decided: with(csiFacts(false, "trident-csi-a"), func(f *v1alpha1.Facts) { f.Target.Node = "victim" }), Now: csiFacts(false, "trident-csi-a")}, InvariantHolderStateChanged},
		{"dry run refuses every step", FloorInput{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease, Mode: v1alpha1.ModeDryRun},
			Steps: release, Step: "deleteLease", Decided: leaseFacts(v1alpha1.NodeShutdown), Now: leaseFacts(v1alpha1.NodeShutdown)}, InvariantDryRun},
	}
	for _, f := range forged {
		cases = append(cases, struct {
			name string
			in   FloorInput
			want Invariant
		}{f.name, f.in, f.want})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in.Spec.Remediation == "" {
				tc.in.Spec.Remediation = v1alpha1.RemediationReleaseLUKSLease
				if tc.in.Now != nil && tc.in.Now.CSI != nil {
					tc.in.Spec.Remediation = v1alpha1.RemediationReregisterCSIDriver
				}
			}
			v := CheckFloor(tc.in)
			if tc.want == "" {
				assert.Nil(t, v)
				return
			}
			require.NotNil(t, v, "want invariant %s", tc.want)
			assert.Equal(t, tc.want, v.Invariant, v.Message)
			assert.NotEmpty(t, tc.want.Advice())
		})
	}
}

func TestInvariantReason(t *testing.T) {
	assert.Equal(t, "HolderNotFenced", InvariantHolderNotFenced.Reason())
	assert.Equal(t, "HealthyHolderPodsRunning", InvariantHealthyHolderPodsRunning.Reason())
}
