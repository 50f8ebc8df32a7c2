package facts_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

// gatherWithLogs reads facts as a decision does: with a log reader.
// fencing is the request's statement, if any.
func (w *world) gatherWithLogs(t *testing.T, logs facts.LogReader, pv string, fencing ...v1alpha1.Fencing) *v1alpha1.Facts {
	t.Helper()
	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig(), Clock: w, Logs: logs}
	rr := &v1alpha1.RemediationRequest{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target: v1alpha1.Target{PersistentVolume: pv}}}
	if len(fencing) > 0 {
		rr.Spec.Fencing = &fencing[0]
	}
	f, err := g.Gather(context.Background(), rr)
	require.NoError(t, err, "Gather")
	return f
}

// TestGatherLogEvidence: a decision on a healthy holder reads the trident-main log of
// the holder's node-plugin pod from a minute before the Lease's acquisition; on an
// unreachable holder only for a fencing statement that rests on that log; without a
// log reader (the re-reads before a step), nothing.
func TestGatherLogEvidence(t *testing.T) {
	w := newWorld(t)
	w.node("logs-healthy", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
	w.node("logs-unreachable", nodeSpec{ready: corev1.ConditionUnknown, taints: []string{v1alpha1.TaintUnreachable}, renewedAgo: 10 * time.Minute})
	w.node("logs-rollout", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
	w.pluginPod("trident", "trident-node-logs-healthy", "logs-healthy")
	w.pluginPod("trident", "trident-node-logs-unreachable", "logs-unreachable")
	w.pluginPod("trident", "trident-node-logs-rollout-old", "logs-rollout")
	w.pluginPod("trident", "trident-node-logs-rollout-new", "logs-rollout")
	for _, pv := range []string{"pvc-logs-healthy", "pvc-logs-unreachable", "pvc-logs-rollout"} {
		w.volume(pv, "app", "data-"+pv)
	}
	acquired := w.Now().Add(-20 * time.Minute).Truncate(time.Microsecond)
	w.tridentLeaseAt("pvc-logs-healthy", "logs-healthy", acquired, 0)
	w.tridentLeaseAt("pvc-logs-unreachable", "logs-unreachable", acquired, 0)
	w.tridentLeaseAt("pvc-logs-rollout", "logs-rollout", acquired, 0)

	hang := `time="2026-12-04T17:00:01Z" level=info msg="Opening encrypted volume." luks-passphrase-name=luks-key requestID=r1 requestSource=CSI volume=pvc-logs-healthy`
	logs := &fakeLogs{log: hang + "\n"}
	f := w.gatherWithLogs(t, logs, "pvc-logs-healthy")
	require.NotNil(t, f.Logs, "a healthy holder's log is read")
	assert.Equal(t, "trident/trident-node-logs-healthy", logs.pod)
	assert.Equal(t, v1alpha1.LogRunning, f.Logs.State)
	assert.Equal(t, hang, f.Logs.Line)
	require.NotNil(t, f.Logs.SinceTime)
	assert.True(t, acquired.Add(-facts.LogSinceMargin).Equal(f.Logs.SinceTime.Time), "since %s, acquired %s", f.Logs.SinceTime.Time, acquired)
	assert.Equal(t, []string{"pvc-logs-healthy"}, f.Logs.VolumeNames)

	logs = &fakeLogs{log: hang + "\n"}
	f = w.gatherWithLogs(t, logs, "pvc-logs-unreachable")
	assert.Equal(t, v1alpha1.NodeUnreachable, f.Node.State)
	assert.Nil(t, f.Logs, "an unreachable holder's log is not read")
	assert.Empty(t, logs.pod, "nothing was asked of the kubelet")
	for _, m := range []v1alpha1.FencingMethod{v1alpha1.FencingLogsVerified, v1alpha1.FencingTridentNodeContainerStopped} {
		logs = &fakeLogs{log: hang + "\n"}
		f = w.gatherWithLogs(t, logs, "pvc-logs-unreachable", v1alpha1.Fencing{Confirmed: true, Method: m, Node: "logs-unreachable"})
		require.NotNil(t, f.Logs, "fenced by %s: the log it rests on is read", m)
		assert.Equal(t, "trident/trident-node-logs-unreachable", logs.pod)
		assert.Equal(t, v1alpha1.LogNone, f.Logs.State, "the line names another volume")
		require.NotNil(t, f.Logs.NewestLineAt, "the newest line is dated")
		assert.Equal(t, "2026-12-04T17:00:01Z", f.Logs.NewestLineAt.UTC().Format(time.RFC3339))
	}
	logs = &fakeLogs{log: hang + "\n"}
	f = w.gatherWithLogs(t, logs, "pvc-logs-unreachable", v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: "logs-unreachable"})
	assert.Nil(t, f.Logs, "a shutdown does not rest on the log")
	assert.Empty(t, logs.pod)

	f = w.gatherWithLogs(t, nil, "pvc-logs-healthy")
	assert.Nil(t, f.Logs, "no log reader, no log")

	logs = &fakeLogs{log: hang + "\n"}
	f = w.gatherWithLogs(t, logs, "pvc-logs-rollout")
	require.NotNil(t, f.Logs)
	assert.Equal(t, v1alpha1.LogUnread, f.Logs.State)
	assert.Equal(t, "node logs-rollout runs 2 node-plugin pods (trident-node-logs-rollout-new, trident-node-logs-rollout-old): which one runs the operation is not known", f.Logs.ReadError)
	assert.Empty(t, logs.pod, "neither log is read")
}
