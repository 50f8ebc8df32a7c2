package policies

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// synthetic builds release-luks-lease and reregister-csi-driver inputs over the
// dimensions the policies weigh, with values on both sides of every threshold.
func synthetic() []Input {
	const holder = "kwok-node-3"
	ts := metav1.NewTime(time.Date(2026, 11, 19, 6, 30, 0, 0, time.UTC))
	fencings := []*v1alpha1.Fencing{
		nil,
		{Confirmed: false},
		{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: holder},
		{Confirmed: true, Method: v1alpha1.FencingTridentNodeContainerStopped, Node: "kwok-node-7"},
		{Confirmed: true, Method: v1alpha1.FencingLogsVerified},
	}
	states := []v1alpha1.NodeState{v1alpha1.NodeShutdown, v1alpha1.NodeUnreachable, v1alpha1.NodeNotFound, v1alpha1.NodeHealthy, v1alpha1.NodeUnknown}
	ages := []int64{0, 1, 299, 300, 301, 599, 600, 601, 3600}
	modes := []v1alpha1.Mode{"", v1alpha1.ModeApply, v1alpha1.ModeDryRun}
	conflicts := [][]string{nil, {}, {"remediator/a (Running, on node kwok-node-3)"}, {"remediator/a (Running, on node kwok-node-3)", "remediator/b (Waiting, on Lease trident/pvc-1)"}}

	lease := func(age int64, events int32) *v1alpha1.LeaseFacts {
		return &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1", Exists: true, UID: "u-1", ResourceVersion: "7",
			HolderIdentity: holder, AgeSeconds: age, RetainedEvents: events, AcquireTime: &ts}
	}
	node := func(s v1alpha1.NodeState, taints ...string) *v1alpha1.NodeFacts {
		return &v1alpha1.NodeFacts{Name: holder, Exists: s != v1alpha1.NodeNotFound, State: s, StateReason: "because " + string(s),
			Ready: "Unknown", Taints: taints, LeaseRenewAgeSeconds: 90}
	}
	luks := func(f *v1alpha1.Facts) Input {
		return Input{Remediation: v1alpha1.RemediationReleaseLUKSLease, Facts: f}
	}
	target := v1alpha1.TargetFacts{Ref: "PersistentVolume pvc-1", Found: true, PersistentVolume: "pvc-1"}

	var ins []Input
	// The grid the rules branch on: node state x fencing x Lease age, with and
	// without LeaseRetained events and the out-of-service taint.
	for _, s := range states {
		for fi, fe := range fencings {
			for ai, age := range ages {
				var taints []string
				switch (ai + fi) % 3 {
				case 0:
					taints = []string{v1alpha1.TaintOutOfService}
				case 1:
					taints = []string{v1alpha1.TaintUnreachable}
				}
				in := luks(&v1alpha1.Facts{GatheredAt: ts, TridentNamespace: "trident", DriverName: "csi.trident.netapp.io",
					Target: target, Lease: lease(age, int32(ai%2)), Node: node(s, taints...)})
				in.Fencing = fe
				in.Mode = modes[(ai+fi)%len(modes)]
				ins = append(ins, in)
			}
		}
	}
	// The rules before the node state: conflicts, an unresolved target, no Lease, a
	// Lease without holder; and facts the gatherer left out.
	for ci, c := range conflicts {
		in := luks(&v1alpha1.Facts{Target: target, Lease: lease(400, 1), Node: node(v1alpha1.NodeShutdown)})
		in.Conflicts = c
		in.Mode = modes[ci%len(modes)]
		ins = append(ins, in)
	}
	unresolved := v1alpha1.TargetFacts{Ref: "Pod app/web-0", Message: "pod app/web-0 not found"}
	noHolder := lease(400, 0)
	noHolder.HolderIdentity = ""
	gone := lease(400, 0)
	gone.Exists = false
	ins = append(ins,
		luks(&v1alpha1.Facts{Target: unresolved}),
		luks(&v1alpha1.Facts{Target: unresolved, Lease: lease(700, 0), Node: node(v1alpha1.NodeHealthy)}),
		luks(&v1alpha1.Facts{Target: target}),
		luks(&v1alpha1.Facts{Target: target, Lease: gone, Node: node(v1alpha1.NodeShutdown)}),
		luks(&v1alpha1.Facts{Target: target, Lease: noHolder, Node: node(v1alpha1.NodeShutdown)}),
		luks(&v1alpha1.Facts{Target: target, Lease: lease(700, 0)}),
		luks(&v1alpha1.Facts{Target: target, Lease: &v1alpha1.LeaseFacts{Exists: true, HolderIdentity: holder, AgeFrom: "acquireTime"}, Node: node(v1alpha1.NodeUnreachable, v1alpha1.TaintOutOfService)}),
		luks(&v1alpha1.Facts{}),
		// Inputs the general path rejects: no facts at all, a node state outside
		// the schema, an unknown mode, an unknown remediation, a time that is set
		// but zero (it marshals as null).
		luks(nil),
		luks(&v1alpha1.Facts{Target: target, Lease: &v1alpha1.LeaseFacts{Exists: true, HolderIdentity: holder, AcquireTime: &metav1.Time{}}, Node: node(v1alpha1.NodeShutdown)}),
		luks(&v1alpha1.Facts{Target: target, Lease: lease(700, 0), Node: &v1alpha1.NodeFacts{State: v1alpha1.NodeHealthy, ReadySince: &metav1.Time{}}}),
		luks(&v1alpha1.Facts{Target: target, Lease: lease(700, 0), Node: node(v1alpha1.NodeShutdown), AffectedPods: []v1alpha1.PodFacts{{Name: "p", DeletionTimestamp: &metav1.Time{}}}}),
		Input{Remediation: v1alpha1.RemediationReregisterCSIDriver, Facts: &v1alpha1.Facts{Target: target, Node: node(v1alpha1.NodeHealthy),
			CSI: &v1alpha1.CSIFacts{PluginPods: []v1alpha1.PodFacts{{Name: "p", DeletionTimestamp: &metav1.Time{}}}}}},
		luks(&v1alpha1.Facts{Target: target, Lease: lease(700, 0), Node: node("Rebooting")}),
		func() Input {
			in := luks(&v1alpha1.Facts{Target: target, Lease: lease(700, 0), Node: node(v1alpha1.NodeShutdown)})
			in.Mode = "Later"
			return in
		}(),
		Input{Remediation: "defragment", Facts: &v1alpha1.Facts{Target: target}},
		Input{Remediation: "", Facts: &v1alpha1.Facts{}},
	)

	// reregister-csi-driver: node state x plugin pods x registration.
	pod := func(name, phase string, ready, terminating bool) v1alpha1.PodFacts {
		p := v1alpha1.PodFacts{Namespace: "trident", Name: name, UID: "uid-" + name, Node: holder, Phase: phase, Ready: ready}
		if terminating {
			p.DeletionTimestamp = &ts
		}
		return p
	}
	podSets := [][]v1alpha1.PodFacts{
		nil,
		{pod("trident-node-a", "Running", true, false)},
		{pod("trident-node-a", "Pending", false, false)},
		{pod("trident-node-a", "Running", false, false)},
		{pod("trident-node-a", "Running", true, true)},
		{pod("trident-node-a", "Running", true, true), pod("trident-node-b", "Pending", false, false)},
	}
	for si, s := range []v1alpha1.NodeState{v1alpha1.NodeHealthy, v1alpha1.NodeUnreachable, v1alpha1.NodeUnknown} {
		for pi, pods := range podSets {
			for _, registered := range []bool{false, true} {
				in := Input{Remediation: v1alpha1.RemediationReregisterCSIDriver, Mode: modes[(si+pi)%len(modes)], Facts: &v1alpha1.Facts{
					TridentNamespace: "trident", DriverName: "csi.trident.netapp.io",
					Target: v1alpha1.TargetFacts{Ref: "Node " + holder, Found: pi != 2 || si != 0, Node: holder, Message: "node resolved"},
					Node:   node(s),
					CSI:    &v1alpha1.CSIFacts{CSINodeExists: true, DriverRegistered: registered, Drivers: []string{"ebs.csi.aws.com"}, PluginPods: pods},
				}}
				if pi == 1 && registered {
					in.Conflicts = conflicts[2]
				}
				ins = append(ins, in)
			}
		}
	}
	return ins
}

// TestFastPathMatchesSynthetic compares both paths on the synthetic table, and on a
// seeded shuffle of the same inputs on one Engine, so that an earlier decision on the
// shared CUE values cannot change a later one.
func TestFastPathMatchesSynthetic(t *testing.T) {
	e := engine(t)
	ins := synthetic()
	require.Greater(t, len(ins), 250)
	rules, fast := map[string]int{}, 0
	for i, in := range ins {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if assertSameDecision(t, e, in) {
				fast++
			}
			if d, err := decideGeneral(e, in); err == nil {
				rules[d.Rule]++
			} else {
				rules["error"]++
			}
		})
	}
	t.Logf("%d inputs, %d on the fast path; rules: %v", len(ins), fast, rules)
	assert.Greater(t, fast, len(ins)*9/10, "most inputs should take the fast path")
	assert.NotZero(t, rules["error"], "no input the general path rejects")
	// The table reaches every rule of both policies.
	for _, r := range []string{"one-remediation-at-a-time", "target-unresolved", "no-lease", "lease-without-holder",
		"fencing-names-another-node", "holder-shutdown", "unreachable-not-fenced", "unreachable-lease-too-young",
		"unreachable-fenced", "holder-node-not-found", "not-found-lease-too-young", "not-found-fenced",
		"healthy-operation-may-be-running", "healthy-lease-stuck", "holder-state-unknown",
		"node-not-healthy", "plugin-pods-overlap", "driver-registered", "no-plugin-pod", "plugin-pod-not-ready", "driver-deregistered"} {
		assert.NotZero(t, rules[r], "no synthetic input reaches rule %s", r)
	}

	r := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		assertSameDecision(t, e, ins[r.IntN(len(ins))])
	}
}
