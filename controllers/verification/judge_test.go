package verification

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestJudgeFix: the verdict on a released Lease and a re-registered driver, from the
// facts alone.
func TestJudgeFix(t *testing.T) {
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	end := start.Add(15 * time.Minute)
	const stuck = 10 * time.Minute
	released := &v1alpha1.RemediationRequest{
		Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease},
		Status: v1alpha1.RemediationRequestStatus{
			Phase: v1alpha1.PhaseSucceeded,
			Facts: &v1alpha1.Facts{Lease: &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1", UID: "old", HolderIdentity: "node-a", Exists: true}},
			Steps: []v1alpha1.StepStatus{{Name: v1alpha1.StepDeleteLease, State: v1alpha1.StepSucceeded, ObjectUID: "old"}},
		},
	}
	lease := func(uid, holder string, heldSince time.Time, age time.Duration, retained int32) *v1alpha1.Facts {
		created := metav1.NewTime(heldSince)
		return &v1alpha1.Facts{Lease: &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1", Exists: true, UID: uid, HolderIdentity: holder,
			CreationTimestamp: &created, HeldSince: &created, AgeSeconds: int64(age / time.Second), RetainedEvents: retained, LastRetainedMessage: "cryptsetup luksOpen exited 5"}}
	}
	gone := &v1alpha1.Facts{Lease: &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1"}}
	at := func(d time.Duration) time.Time { return start.Add(d) }
	for _, tc := range []struct {
		name   string
		f      *v1alpha1.Facts
		now    time.Time
		status metav1.ConditionStatus
		reason string
		until  time.Time
	}{
		{"lease gone, in the window", gone, at(time.Minute), metav1.ConditionUnknown, v1alpha1.ReasonVerifying, end},
		{"lease gone, window over", gone, end, metav1.ConditionTrue, v1alpha1.ReasonNoRecurrence, end},
		{"same holder, retained", lease("new", "node-a", at(2*time.Minute), time.Minute, 1), at(3 * time.Minute), metav1.ConditionFalse, v1alpha1.ReasonLeaseRetainedAgain, time.Time{}},
		{"same holder, stuck-old", lease("new", "node-a", at(2*time.Minute), stuck, 0), at(12 * time.Minute), metav1.ConditionFalse, v1alpha1.ReasonLeaseRetainedAgain, time.Time{}},
		{"same holder, young, no event", lease("new", "node-a", at(2*time.Minute), time.Minute, 0), at(3 * time.Minute), metav1.ConditionUnknown, v1alpha1.ReasonVerifying, end},
		// Re-taken late in the window: judged until it would count as stuck.
		{"same holder, re-taken late, window over", lease("new", "node-a", at(14*time.Minute), 2*time.Minute, 0), at(16 * time.Minute), metav1.ConditionUnknown, v1alpha1.ReasonVerifying, at(24 * time.Minute)},
		{"same holder, re-taken late, then stuck", lease("new", "node-a", at(14*time.Minute), stuck, 0), at(24 * time.Minute), metav1.ConditionFalse, v1alpha1.ReasonLeaseRetainedAgain, time.Time{}},
		{"same holder, re-taken after the window", lease("new", "node-a", at(16*time.Minute), time.Minute, 3), at(17 * time.Minute), metav1.ConditionTrue, v1alpha1.ReasonNoRecurrence, end},
		{"another holder, retained", lease("new", "node-b", at(2*time.Minute), stuck, 2), at(12 * time.Minute), metav1.ConditionUnknown, v1alpha1.ReasonVerifying, end},
		{"the released Lease itself", lease("old", "node-a", at(-time.Hour), time.Hour, 2), at(time.Minute), metav1.ConditionUnknown, v1alpha1.ReasonVerifying, end},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeFix(released, tc.f, nil, start, end, tc.now, stuck)
			assert.Equal(t, tc.status, v.status, "verdict %+v", v)
			assert.Equal(t, tc.reason, v.reason, "verdict %+v", v)
			if !tc.until.IsZero() {
				assert.Equal(t, tc.until, v.until, "verdict %+v", v)
			}
			if v.status == metav1.ConditionFalse {
				assert.Contains(t, v.message, "Lease trident/pvc-1 was taken again by node node-a (UID new, held since ")
				assert.Contains(t, v.message, "instead of repeating the playbook")
			}
		})
	}

	csi := &v1alpha1.RemediationRequest{
		Spec:   v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReregisterCSIDriver, Target: v1alpha1.Target{Node: "node-a"}},
		Status: v1alpha1.RemediationRequestStatus{Phase: v1alpha1.PhaseSucceeded, Facts: &v1alpha1.Facts{DriverName: "csi.trident.netapp.io"}},
	}
	node := &v1alpha1.NodeFacts{Name: "node-a", Exists: true}
	readyPod := v1alpha1.PodFacts{Name: "trident-node-linux-x", Phase: "Running", Ready: true}
	terminating := readyPod
	terminating.DeletionTimestamp = &metav1.Time{Time: start}
	for _, tc := range []struct {
		name   string
		csi    *v1alpha1.CSIFacts
		status metav1.ConditionStatus
	}{
		{"registered", &v1alpha1.CSIFacts{CSINodeExists: true, DriverRegistered: true, PluginPods: []v1alpha1.PodFacts{readyPod}}, metav1.ConditionUnknown},
		{"deregistered, Ready plugin pod", &v1alpha1.CSIFacts{CSINodeExists: true, PluginPods: []v1alpha1.PodFacts{readyPod}}, metav1.ConditionFalse},
		{"deregistered, plugin pod being replaced", &v1alpha1.CSIFacts{CSINodeExists: true, PluginPods: []v1alpha1.PodFacts{terminating}}, metav1.ConditionUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &v1alpha1.Facts{DriverName: "csi.trident.netapp.io", Node: node, CSI: tc.csi}
			v := judgeFix(csi, f, nil, start, end, at(time.Minute), stuck)
			assert.Equal(t, tc.status, v.status, "verdict %+v", v)
			if v.status == metav1.ConditionFalse {
				assert.Equal(t, v1alpha1.ReasonDriverDeregisteredAgain, v.reason)
				assert.Equal(t, "CSINode node-a does not list csi.trident.netapp.io again while node-plugin pod(s) run there: trident-node-linux-x (Running, ready=true). "+
					"Restarting the plugin did not fix the cause: investigate why the registration is dropped (overlapping node-plugin pods, the trident-operator recreating its DaemonSet, the driver-registrar's logs) instead of repeating the playbook",
					v.message)
			}
		})
	}
	v := judgeFix(csi, &v1alpha1.Facts{DriverName: "csi.trident.netapp.io", Node: node, CSI: &v1alpha1.CSIFacts{DriverRegistered: true}}, nil, start, end, end, stuck)
	assert.Equal(t, "No deregistration of csi.trident.netapp.io from CSINode node-a from 2026-05-01T10:00:00Z to 2026-05-01T10:15:00Z", v.message)
}

// TestJudgeWorkload: after a release, the claim's pods must be back, Running and
// Ready, by the window's end, and no FailedMount naming the volume may come after
// the fix; the Lease retained again still comes first.
func TestJudgeWorkload(t *testing.T) {
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	end := start.Add(15 * time.Minute)
	const stuck = 10 * time.Minute
	at := func(d time.Duration) time.Time { return start.Add(d) }
	released := &v1alpha1.RemediationRequest{
		Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease},
		Status: v1alpha1.RemediationRequestStatus{
			Phase: v1alpha1.PhaseSucceeded,
			Facts: &v1alpha1.Facts{
				Target: v1alpha1.TargetFacts{PersistentVolumeClaim: "app/data", PersistentVolume: "pvc-1"},
				Lease:  &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1", UID: "old", HolderIdentity: "node-a", Exists: true},
			},
		},
	}
	gone := &v1alpha1.Facts{Lease: &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1"}}
	retaken := func() *v1alpha1.Facts {
		held := metav1.NewTime(at(2 * time.Minute))
		return &v1alpha1.Facts{Lease: &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1", Exists: true, UID: "new", HolderIdentity: "node-a",
			HeldSince: &held, AgeSeconds: 60, RetainedEvents: 1, LastRetainedMessage: "cryptsetup luksOpen exited 5"}}
	}
	running := func(key string) claimPod {
		return claimPod{Key: key, Phase: corev1.PodRunning, Ready: true, Volumes: []string{"storage"}}
	}
	creating := claimPod{Key: "app/web-1", Phase: corev1.PodPending, Waiting: "ContainerCreating", Volumes: []string{"storage"}}
	mount := func(pod, msg string, seen time.Time) failedMount {
		return failedMount{Pod: pod, Message: msg, LastSeen: seen}
	}
	const mountDevice = `MountVolume.MountDevice failed for volume "pvc-1" : rpc error: code = Internal desc = cryptsetup luksOpen exited 5`
	const unmounted = "Unable to attach or mount volumes: unmounted volumes=[storage], unattached volumes=[kube-api-access]: timed out waiting for the condition"
	for _, tc := range []struct {
		name    string
		f       *v1alpha1.Facts
		w       *workload
		now     time.Time
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{name: "pods Running and Ready, window over", f: gone, now: end,
			w:      &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{running("app/web-0"), running("app/web-1")}},
			status: metav1.ConditionTrue, reason: v1alpha1.ReasonNoRecurrence,
			message: "No Lease trident/pvc-1 retained again by node node-a from 2026-05-01T10:00:00Z to 2026-05-01T10:15:00Z; " +
				"the pod(s) using PersistentVolumeClaim app/data are Running and Ready: app/web-0, app/web-1"},
		{name: "no pod uses the claim, window over", f: gone, now: end, w: &workload{Claim: "app/data", PV: "pvc-1"},
			status: metav1.ConditionTrue, reason: v1alpha1.ReasonNoRecurrence,
			message: "No Lease trident/pvc-1 retained again by node node-a from 2026-05-01T10:00:00Z to 2026-05-01T10:15:00Z; no pod uses PersistentVolumeClaim app/data"},
		{name: "a pod ContainerCreating, in the window", f: gone, now: at(time.Minute),
			w:      &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{running("app/web-0"), creating}},
			status: metav1.ConditionUnknown, reason: v1alpha1.ReasonVerifying,
			message: "Watching for Lease trident/pvc-1 retained again by node node-a from 2026-05-01T10:00:00Z until 2026-05-01T10:15:00Z; " +
				"waiting for the pod(s) using PersistentVolumeClaim app/data to be Running and Ready: app/web-1 (Pending, ContainerCreating, not ready)"},
		{name: "pods ContainerCreating and not ready, window over", f: gone, now: end,
			w: &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{running("app/web-0"), creating,
				{Key: "app/web-2", Phase: corev1.PodRunning, Volumes: []string{"storage"}}}},
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonPodsNotReady,
			message: "Pod(s) using PersistentVolumeClaim app/data were not Running and Ready when the window ended at 2026-05-01T10:15:00Z: " +
				"app/web-1 (Pending, ContainerCreating, not ready), app/web-2 (Running, not ready). The Lease was released but the workload did not come back: " +
				"read the pods' events and the mount on their node (kubelet, trident-main logs) instead of repeating the playbook"},
		{name: "a Ready pod whose node lost touch, window over", f: gone, now: end,
			w:      &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{{Key: "app/web-0", Phase: corev1.PodUnknown, Ready: true, Volumes: []string{"storage"}}}},
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonPodsNotReady},
		{name: "FailedMount after the fix", f: gone, now: at(3 * time.Minute),
			w: &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{running("app/web-0"), creating},
				Mounts: []failedMount{mount("app/web-0", mountDevice, at(time.Minute)), mount("app/web-1", mountDevice, at(2*time.Minute))}},
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonFailedMountAfterFix,
			message: "FailedMount Warning(s) for PersistentVolume pvc-1 (claim app/data) after the fix at 2026-05-01T10:00:00Z on pod(s) app/web-0, app/web-1; " +
				"the newest, on app/web-1 at 2026-05-01T10:02:00Z: " + strconv.Quote(mountDevice) + ". The Lease was released but the volume still does not mount: " +
				"read the pods' events and the trident-main logs on their node instead of repeating the playbook"},
		{name: "FailedMount naming the pod's volume of the claim", f: gone, now: at(3 * time.Minute),
			w:      &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{creating}, Mounts: []failedMount{mount("app/web-1", unmounted, at(time.Minute))}},
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonFailedMountAfterFix},
		{name: "FailedMount naming the claim", f: gone, now: at(3 * time.Minute),
			w: &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{creating},
				Mounts: []failedMount{mount("app/web-1", `Unable to attach or mount volumes: persistentvolumeclaim "data" not found`, at(time.Minute))}},
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonFailedMountAfterFix},
		{name: "FailedMount naming the claim as namespace/name", f: gone, now: at(3 * time.Minute),
			w: &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{creating},
				Mounts: []failedMount{mount("app/web-1", "Unable to attach or mount volumes: error processing PVC app/data: PVC is being deleted", at(time.Minute))}},
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonFailedMountAfterFix},
		{name: "FailedMount before the fix ignored", f: gone, now: end,
			w: &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{running("app/web-0")},
				Mounts: []failedMount{mount("app/web-0", mountDevice, at(-time.Minute)), mount("app/web-0", mountDevice, start)}},
			status: metav1.ConditionTrue, reason: v1alpha1.ReasonNoRecurrence},
		{name: "FailedMount of an attempt that ended just after the fix ignored", f: gone, now: end,
			w: &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{running("app/web-0")},
				Mounts: []failedMount{mount("app/web-0", mountDevice, at(mountAttemptGrace))}},
			status: metav1.ConditionTrue, reason: v1alpha1.ReasonNoRecurrence},
		{name: "FailedMount just past the attempt's grace counts", f: gone, now: at(time.Minute),
			w: &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{running("app/web-0")},
				Mounts: []failedMount{mount("app/web-0", mountDevice, at(mountAttemptGrace+time.Second))}},
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonFailedMountAfterFix},
		{name: "FailedMount on a pod not using the claim ignored", f: gone, now: end,
			w: &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{running("app/web-0")},
				Mounts: []failedMount{mount("app/other", mountDevice, at(time.Minute))}},
			status: metav1.ConditionTrue, reason: v1alpha1.ReasonNoRecurrence},
		{name: "FailedMount about another volume ignored", f: gone, now: end,
			w: &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{running("app/web-0")},
				Mounts: []failedMount{mount("app/web-0", `MountVolume.SetUp failed for volume "config" : configmap "app" not found`, at(time.Minute))}},
			status: metav1.ConditionTrue, reason: v1alpha1.ReasonNoRecurrence},
		{name: "Lease retained again before FailedMount and pods", f: retaken(), now: end,
			w: &workload{Claim: "app/data", PV: "pvc-1", Pods: []claimPod{creating},
				Mounts: []failedMount{mount("app/web-1", mountDevice, at(3*time.Minute))}},
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonLeaseRetainedAgain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeFix(released, tc.f, tc.w, start, end, tc.now, stuck)
			assert.Equal(t, tc.status, v.status, "verdict %+v", v)
			assert.Equal(t, tc.reason, v.reason, "verdict %+v", v)
			if tc.message != "" {
				assert.Equal(t, tc.message, v.message)
			}
		})
	}
}

// TestAnnounceFixHeld: the Warning Event and the counter come with the status write
// that turns FixHeld False, and only with it.
func TestAnnounceFixHeld(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	r := &Reconciler{Recorder: rec}
	with := func(st metav1.ConditionStatus) *v1alpha1.RemediationRequest {
		rr := &v1alpha1.RemediationRequest{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReregisterCSIDriver}}
		if st != "" {
			meta.SetStatusCondition(&rr.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionFixHeld, Status: st, Reason: "R", Message: "the message"})
		}
		return rr
	}
	counter := fixNotHeld.WithLabelValues(string(v1alpha1.RemediationReregisterCSIDriver))
	before := value(t, counter)
	r.announceFixHeld(with(metav1.ConditionUnknown), with(metav1.ConditionUnknown))
	r.announceFixHeld(with(""), with(metav1.ConditionTrue))
	r.announceFixHeld(with(metav1.ConditionUnknown), with(metav1.ConditionFalse))
	r.announceFixHeld(with(metav1.ConditionFalse), with(metav1.ConditionFalse))
	assert.InDelta(t, before+1, value(t, counter), 0)
	require.Len(t, rec.Events, 1)
	assert.Equal(t, "Warning FixNotHeld the message", <-rec.Events)
}

// value reads a counter.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	require.NoError(t, m.Write(&out))
	return out.Counter.GetValue()
}
