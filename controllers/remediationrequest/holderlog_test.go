package remediationrequest_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/remediationrequest"
)

// servedLog is a pods/log that serves log for every pod and records what was read:
// envtest runs no kubelet to answer it.
type servedLog struct {
	log  string
	read chan string
}

func (s servedLog) OpenLog(_ context.Context, ns, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
	select {
	case s.read <- ns + "/" + pod + " -c " + opts.Container:
	default:
	}
	return io.NopCloser(strings.NewReader(s.log)), nil
}

func withHolderLog(l servedLog) func(*remediationrequest.Reconciler) {
	return func(r *remediationrequest.Reconciler) {
		g := *r.Gatherer
		g.Logs = l
		r.Gatherer = &g
	}
}

// nodePluginPod creates Trident's node-plugin pod on node, controlled by a DaemonSet,
// as the gatherer finds the pod whose log it reads.
func nodePluginPod(t *testing.T, node string) {
	t.Helper()
	labels := map[string]string{"app": "node.csi.trident.netapp.io"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "trident-node-" + node},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "trident-main", Image: "registry.example/trident:26.06.0"}}},
			},
		},
	}
	create(t, ds)
	create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "trident-node-" + node + "-x", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "trident-main", Image: "registry.example/trident:26.06.0"}}},
	})
}

// allowMoving allows the healthy holder's playbook for any facts: without the floor's
// reading of the log, it would cordon the node and evict its pods.
const allowMoving = `package policies

#Policy: {
	input: _
	decision: {
		allowed:  true
		playbook: "healthy-move-workload"
		rule:     "allow-moving"
		reasons: ["this policy allows everything"]
		message: "Allowed without looking at the facts."
	}
}
`

// TestHolderLogShowingCryptsetupRunningKeepsTheLease: a healthy holder whose Lease
// Trident reported retained, and whose trident-main log shows the LUKS operation on
// the volume begun and never ended (the same node retrying). A policy that allows
// moving the workload is still refused by the floor, whose message quotes the line;
// the decision read the holder's node-plugin pod's log, and the Lease and the node are
// as they were. Without the floor's rule, the playbook starts and cordons the node.
func TestHolderLogShowingCryptsetupRunningKeepsTheLease(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	clock := clocktesting.NewFakePassiveClock(time.Now().Add(time.Hour).Truncate(time.Second))
	const node, pv = "envtest-log-running", "pvc-envtest-log-running"
	running := `time="2026-12-04T17:00:01Z" level=info msg="Opening encrypted volume." luks-passphrase-name=luks-key requestID=r1 requestSource=CSI volume=` + pv
	served := servedLog{log: running + "\n", read: make(chan string, 8)}
	startManager(t, withClock(clock), withPolicyDir(t, allowMoving), withHolderLog(served))
	healthyHolder(t, node, clock.Now())
	nodePluginPod(t, node)

	key := requestFor(t, "log-running", v1alpha1.Target{PersistentVolume: pv}, nil)
	rr := waitFor(t, key, 20*time.Second, "a terminal phase", terminal)
	assert.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase)
	assert.Equal(t, "lease-not-proven-stuck", rr.Status.Decision.Rule)
	assert.Contains(t, rr.Status.Decision.Message, "still running")
	assert.Contains(t, rr.Status.Decision.Message, `msg=\"Opening encrypted volume.\"`, "the message quotes the line")
	require.NotNil(t, rr.Status.Facts.Logs, "the decision recorded the log evidence")
	assert.Equal(t, v1alpha1.LogRunning, rr.Status.Facts.Logs.State)
	assert.Equal(t, running, rr.Status.Facts.Logs.Line)
	assert.Equal(t, "trident-node-"+node+"-x", rr.Status.Facts.Logs.Pod)
	select {
	case got := <-served.read:
		assert.Equal(t, "trident/trident-node-"+node+"-x -c trident-main", got)
	default:
		t.Error("no log was read")
	}
	assert.True(t, leaseExists(t, pv), "the Lease must be kept")
	assert.False(t, nodeCordoned(t, node), "the node must not be cordoned")
}
