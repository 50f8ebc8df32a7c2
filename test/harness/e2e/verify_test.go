//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestFixNotHeldAfterRelease (issue 26's Done-when): after a Succeeded release, the
// same holder takes the Lease again and Trident retains it (a LeaseRetained Warning
// on the new Lease's UID). The controller, with its default --verify-fix-for, sets
// FixHeld=False (LeaseRetainedAgain) and emits one FixNotHeld Warning Event; Ready
// stays True and the new Lease is left alone. kubectl reads the condition as the
// README shows.
func TestFixNotHeldAfterRelease(t *testing.T) {
	ctx := context.Background()
	c := startController(t)
	ns := namespace(t, "e2e-verify")
	node := extraNode(t, "e2e-verify-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	pv, _ := luksVolume(t, ns, node, 20*time.Minute, 1)
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "holder powered off after a kernel panic during cryptsetup",
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
	require.False(t, leaseExists(t, pv), "the Lease still exists")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, k8s.Get(ctx, key, rr))
		fh := condition(rr, v1alpha1.ConditionFixHeld)
		require.NotNil(ct, fh, describe(rr))
		assert.Equal(ct, v1alpha1.ReasonVerifying, fh.Reason, describe(rr))
	}, 30*time.Second, poll, "FixHeld Verifying")

	// The node comes back, takes the Lease for the next cryptsetup, fails again.
	strandLease(t, pv, node, 0, 1)
	lease := &coordinationv1.Lease{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: tridentNS, Name: pv}, lease))

	kubectl(t, "", "wait", "--for=condition=FixHeld=false", "rr/"+key.Name, "-n", ns, "--timeout=60s")
	require.NoError(t, k8s.Get(ctx, key, rr))
	fh := condition(rr, v1alpha1.ConditionFixHeld)
	require.NotNil(t, fh, describe(rr))
	assert.Equal(t, v1alpha1.ReasonLeaseRetainedAgain, fh.Reason, describe(rr))
	assert.Contains(t, fh.Message, "Lease "+tridentNS+"/"+pv+" was taken again by node "+node+" (UID "+string(lease.UID))
	assert.Contains(t, fh.Message, "investigate the root cause on node "+node)
	if ready := condition(rr, v1alpha1.ConditionReady); assert.NotNil(t, ready, describe(rr)) {
		assert.Equal(t, metav1.ConditionTrue, ready.Status, "Ready keeps saying the playbook succeeded: %+v", ready)
	}
	assert.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase)
	assert.True(t, leaseExists(t, pv), "the verification must leave the new Lease alone")
	cols := kubectl(t, "", "get", "rr", key.Name, "-n", ns, "-o",
		`custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,FIXHELD:.status.conditions[?(@.type=="FixHeld")].status,REASON:.status.conditions[?(@.type=="FixHeld")].reason`)
	assert.Regexp(t, key.Name+`\s+False\s+LeaseRetainedAgain`, cols)

	warnings := func() []corev1.Event {
		events := &corev1.EventList{}
		require.NoError(t, k8s.List(ctx, events, client.InNamespace(ns)))
		return slices.DeleteFunc(events.Items, func(e corev1.Event) bool {
			return e.InvolvedObject.Name != key.Name || e.Reason != v1alpha1.EventFixNotHeld
		})
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NotEmpty(ct, warnings())
	}, 30*time.Second, poll, "the FixNotHeld Warning Event")
	// Another LeaseRetained event reconciles the request again; nothing more is said.
	strandEvent(t, lease, node)
	time.Sleep(3 * time.Second)
	w := warnings()
	require.Len(t, w, 1, "FixNotHeld events")
	assert.Equal(t, corev1.EventTypeWarning, w[0].Type)
	assert.Equal(t, int32(1), max(w[0].Count, 1))
	assert.Equal(t, fh.Message, w[0].Message)
	var outcome []string
	for _, l := range strings.Split(c.Logs(), "\n") {
		if strings.Contains(l, `"Remediation outcome recorded"`) && strings.Contains(l, key.Namespace+"/"+key.Name) {
			outcome = append(outcome, l)
		}
	}
	if assert.Len(t, outcome, 1, "the outcome's log line, once") {
		assert.Contains(t, outcome[0], `result="Succeeded"`)
		assert.Contains(t, outcome[0], `rule="holder-shutdown"`)
	}
}

// strandEvent records one more LeaseRetained Warning on lease, as Trident does on
// each failed retry.
func strandEvent(t *testing.T, lease *coordinationv1.Lease, holder string) {
	t.Helper()
	now := metav1.Now()
	create(t, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, GenerateName: lease.Name + "."},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: lease.Namespace, Name: lease.Name, UID: lease.UID,
		},
		Reason: "LeaseRetained", Type: corev1.EventTypeWarning, Count: 1,
		Message:        "Retaining lease after failed LUKS operation on node " + holder + ": cryptsetup luksOpen exited 5 (retry)",
		FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "trident-node", Host: holder},
	})
}
