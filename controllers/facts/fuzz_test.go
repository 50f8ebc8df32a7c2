package facts

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// fuzzNow is the fixed clock of FuzzClassifyNode; times are offsets from it.
var fuzzNow = time.Date(2026, 11, 19, 5, 47, 54, 0, time.UTC)

// fuzzTaints are the keys a fuzz byte picks from: the three state taints, one that
// must be ignored, and near misses (a prefix, a different case) that must be too.
var fuzzTaints = []string{v1alpha1.TaintOutOfService, v1alpha1.TaintCloudShutdown, v1alpha1.TaintUnreachable,
	"node.kubernetes.io/not-ready", "node.kubernetes.io/out-of-service-", "Node.Kubernetes.io/out-of-service", ""}

var negativeDuration = regexp.MustCompile(`(for|renewed) -[0-9]`)

// FuzzClassifyNode classifies Nodes and node Leases built from fuzz arguments and
// checks the runbook's node states (docs/safety.md) against the evidence, independently of how
// ClassifyNode reaches them: Shutdown only with a shutdown taint on a node that does
// not report Ready=True; Healthy only for Ready=True with a node Lease renewed within
// the grace period and no state taint; Unreachable only without a shutdown taint and
// with Ready=Unknown, the unreachable taint or a stale renewal; a missing Node is
// NotFound, never Shutdown. The record is consistent with the inputs (sorted state
// taints only, ages never negative, -1 without a renewal) and its reason is
// deterministic and names no negative age.
//
// readyStatus is the Ready condition's status ("" for no condition; other strings
// than True, False and Unknown are what a broken kubelet could write).
// readyOffset and renewOffset are seconds before fuzzNow (negative: in the future);
// taints picks state and other taints, one per byte; graceSeconds is the
// --node-lease-grace-period.
func FuzzClassifyNode(f *testing.F) {
	// The rows of TestClassifyNode, and a few edges: the clock skewed ahead, a renewal
	// exactly at the grace period, times at the ends of the range, a renewal ahead of
	// the clock under a negative grace.
	f.Add("n", false, "", int64(0), []byte{}, false, false, false, int64(0), int64(40))
	f.Add("n", true, "False", int64(90), []byte{0}, false, true, true, int64(3600), int64(40))
	f.Add("n", true, "Unknown", int64(90), []byte{1, 2}, false, true, true, int64(3600), int64(40))
	f.Add("n", true, "True", int64(90), []byte{0}, false, true, true, int64(1), int64(40))
	f.Add("n", true, "Unknown", int64(90), []byte{}, false, true, true, int64(1), int64(40))
	f.Add("n", true, "True", int64(90), []byte{2}, false, true, true, int64(1), int64(40))
	f.Add("n", true, "True", int64(90), []byte{}, false, true, true, int64(41), int64(40))
	f.Add("n", true, "True", int64(90), []byte{}, true, true, true, int64(40), int64(40))
	f.Add("n", true, "True", int64(90), []byte{}, false, true, true, int64(2), int64(40))
	f.Add("n", true, "True", int64(90), []byte{}, false, false, false, int64(0), int64(40))
	f.Add("n", true, "False", int64(90), []byte{}, false, true, true, int64(1), int64(40))
	f.Add("n", true, "", int64(0), []byte{}, false, true, true, int64(1), int64(40))
	f.Add("kwok-node-0", true, "True", int64(-600), []byte{3, 4, 5, 3}, true, true, true, int64(-600), int64(40))
	f.Add("kwok-node-0", true, "True", int64(90), []byte{}, false, true, false, int64(0), int64(40))
	f.Add("kwok-node-0", true, "NotAStatus", int64(1<<40), []byte{6, 0, 0}, false, true, true, int64(-1<<40), int64(0))
	f.Add("kwok-node-0", true, "True", int64(-1<<62), []byte{}, false, true, true, int64(1<<62), int64(-5))
	f.Add("0", true, "True", int64(122), []byte{}, false, true, true, int64(-19), int64(-1<<40))

	f.Fuzz(func(t *testing.T, name string, exists bool, readyStatus string, readyOffset int64, taints []byte,
		unschedulable, hasLease, renewed bool, renewOffset, graceSeconds int64) {
		// The grace in effect is never below the node Lease's duration, which these
		// Leases leave at zero: a negative grace (the flag refuses one) is none.
		grace := max(0, time.Duration(clampSeconds(graceSeconds))*time.Second)
		var node *corev1.Node
		if exists {
			node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
			if readyStatus != "" {
				node.Status.Conditions = []corev1.NodeCondition{
					{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue},
					{Type: corev1.NodeReady, Status: corev1.ConditionStatus(readyStatus), LastTransitionTime: metav1.NewTime(offset(readyOffset))},
				}
			}
			for _, b := range taints {
				node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: fuzzTaints[int(b)%len(fuzzTaints)], Effect: corev1.TaintEffectNoExecute})
			}
		}
		var lease *coordinationv1.Lease
		if hasLease {
			lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: name}}
			if renewed {
				renew := metav1.NewMicroTime(offset(renewOffset))
				lease.Spec.RenewTime = &renew
			}
		}

		nf := ClassifyNode(name, node, lease, fuzzNow, grace)
		again := ClassifyNode(name, node, lease, fuzzNow, grace)
		require.Equal(t, nf, again, "ClassifyNode is not deterministic")

		require.Equal(t, name, nf.Name)
		require.NotEmpty(t, nf.StateReason)
		require.False(t, negativeDuration.MatchString(nf.StateReason), "a negative age in %q", nf.StateReason)
		renewedInGrace := lease != nil && lease.Spec.RenewTime != nil && fuzzNow.Sub(lease.Spec.RenewTime.Time) <= grace
		if node == nil {
			// A missing Node is not proof of anything, and a kubelet that still renews
			// its node Lease runs: never a state that fencing alone may release.
			want := v1alpha1.NodeNotFound
			if renewedInGrace {
				want = v1alpha1.NodeUnknown
			}
			require.Equal(t, want, nf.State, "a missing Node is not proof of anything: %+v", nf)
			require.False(t, nf.Exists)
			return
		}
		require.True(t, nf.Exists)
		require.Equal(t, unschedulable, nf.Unschedulable)
		require.Equal(t, readyStatus, nf.Ready)

		// The recorded taints: the state taints present, once each, sorted.
		var want []string
		for _, tn := range node.Spec.Taints {
			if slices.Contains([]string{v1alpha1.TaintOutOfService, v1alpha1.TaintCloudShutdown, v1alpha1.TaintUnreachable}, tn.Key) && !slices.Contains(want, tn.Key) {
				want = append(want, tn.Key)
			}
		}
		slices.Sort(want)
		require.Equal(t, want, nf.Taints)

		require.GreaterOrEqual(t, nf.ReadyAgeSeconds, int64(0))
		fresh := false
		if lease != nil && lease.Spec.RenewTime != nil {
			require.GreaterOrEqual(t, nf.LeaseRenewAgeSeconds, int64(0))
			require.NotNil(t, nf.LeaseRenewTime)
			fresh = fuzzNow.Sub(lease.Spec.RenewTime.Time) <= grace
		} else {
			require.Equal(t, int64(-1), nf.LeaseRenewAgeSeconds, "no renewal, yet an age")
			require.Nil(t, nf.LeaseRenewTime)
		}

		shutdownTaint := slices.Contains(want, v1alpha1.TaintOutOfService) || slices.Contains(want, v1alpha1.TaintCloudShutdown)
		unreachableTaint := slices.Contains(want, v1alpha1.TaintUnreachable)
		readyTrue := readyStatus == string(corev1.ConditionTrue)
		switch nf.State {
		case v1alpha1.NodeShutdown:
			require.True(t, shutdownTaint && !readyTrue, "Shutdown without a shutdown taint, or on a Ready node: %+v", nf)
			require.False(t, renewedInGrace, "Shutdown while the kubelet renews its node Lease: %+v", nf)
		case v1alpha1.NodeHealthy:
			require.True(t, readyTrue && fresh && len(want) == 0, "Healthy without Ready=True and a fresh node Lease, or with a state taint: %+v", nf)
		case v1alpha1.NodeUnreachable:
			require.False(t, shutdownTaint, "Unreachable with a shutdown taint: %+v", nf)
			require.True(t, readyStatus == string(corev1.ConditionUnknown) || unreachableTaint || (lease != nil && !fresh),
				"Unreachable without evidence of a lost control plane: %+v", nf)
		case v1alpha1.NodeUnknown:
		default:
			require.Failf(t, "unknown node state", "state %q is none of the runbook's: %+v", nf.State, nf)
		}
		// Conflicting evidence is never resolved in favour of acting.
		if shutdownTaint && readyTrue {
			require.Equal(t, v1alpha1.NodeUnknown, nf.State, "%+v", nf)
		}
		if !shutdownTaint && !readyTrue && readyStatus != string(corev1.ConditionUnknown) && !unreachableTaint && (lease == nil || fresh) {
			require.Equal(t, v1alpha1.NodeUnknown, nf.State, "a NotReady node with a live kubelet is neither down nor cut off: %+v", nf)
		}
		if strings.Contains(nf.StateReason, "conflicting evidence") {
			require.Equal(t, v1alpha1.NodeUnknown, nf.State)
		}
	})
}

// clampSeconds keeps a fuzzed second count within what a time.Duration can hold.
func clampSeconds(s int64) int64 {
	const limit = int64(1<<63-1) / int64(time.Second)
	return max(-limit, min(limit, s))
}

// offset is fuzzNow minus s seconds, clamped so that the arithmetic cannot wrap.
func offset(s int64) time.Time {
	return fuzzNow.Add(-time.Duration(clampSeconds(s)) * time.Second)
}
