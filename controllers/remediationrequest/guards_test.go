package remediationrequest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/remediationrequest"
)

// withClock injects the reconciler's one clock: the guard and window tests move
// time by hand.
func withClock(c *clocktesting.FakePassiveClock) func(*remediationrequest.Reconciler) {
	return func(r *remediationrequest.Reconciler) { r.Clock = c }
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	require.NoError(t, env.Client.Create(context.Background(), obj), "creating %T %s", obj, obj.GetName())
	inManagerCache(t, obj)
}

// inManagerCache waits until the running manager's cache holds obj, when obj is of a
// kind the controller decides from its cache. A test stages an incident and files a
// request within milliseconds; in a cluster the incident is minutes old by then.
// Waiting here keeps the test about the decision, not about which watch event
// arrives first.
func inManagerCache(t *testing.T, obj client.Object) {
	t.Helper()
	cache := managerCache
	if cache == nil {
		return
	}
	switch o := obj.(type) {
	case *corev1.Node, *coordinationv1.Lease, *corev1.PersistentVolume, *corev1.PersistentVolumeClaim, *storagev1.CSINode:
	case *corev1.Event:
		if o.Namespace != "trident" || o.Reason != facts.DefaultRetainedEventReason {
			return
		}
	default:
		return
	}
	got := obj.DeepCopyObject().(client.Object)
	require.Eventually(t, func() bool {
		return cache.Get(context.Background(), client.ObjectKeyFromObject(obj), got) == nil
	}, 10*time.Second, 10*time.Millisecond, "%T %s never reached the controller's cache", obj, client.ObjectKeyFromObject(obj))
}

// healthyHolder stages incident A on a healthy node as of now: the node Ready with a
// fresh kube-node-lease heartbeat, a Lease acquired 40 minutes before with a
// LeaseRetained event, and a pod on the node using the volume. Without a kubelet the
// evicted pod stays Terminating, which holds the playbook at waitPodsGone until the
// test removes it.
func healthyHolder(t *testing.T, name string, now time.Time) (pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	create(t, node)
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}
	require.NoError(t, env.Client.Status().Update(ctx, node))
	create(t, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), RenewTime: &metav1.MicroTime{Time: now}},
	})
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-" + name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), AcquireTime: &metav1.MicroTime{Time: now.Add(-40 * time.Minute)}},
	}
	create(t, lease)
	// Trident reports the failure while it holds this Lease: not before the API
	// server created it, or the event is evidence about an earlier hold.
	seen := now
	if lease.CreationTimestamp.After(seen) {
		seen = lease.CreationTimestamp.Time
	}
	create(t, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "trident", GenerateName: lease.Name + "."},
		InvolvedObject: corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: "trident", Name: lease.Name, UID: lease.UID},
		Reason:         facts.DefaultRetainedEventReason, Type: corev1.EventTypeWarning, Count: 1,
		Message:        "Retaining lease after failed LUKS operation on " + name + ": cryptsetup luksOpen exited with status 5",
		FirstTimestamp: metav1.NewTime(seen), LastTimestamp: metav1.NewTime(seen),
	})
	create(t, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: lease.Name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			ClaimRef:               &corev1.ObjectReference{Namespace: "app", Name: name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: facts.DefaultDriverName, VolumeHandle: lease.Name}},
		},
	})
	create(t, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			VolumeName:  lease.Name,
		},
	})
	pod = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name},
		Spec: corev1.PodSpec{
			NodeName:   name,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
		},
	}
	create(t, pod)
	return pod
}

// shutdownHolder stages a Lease whose holder node is powered off.
func shutdownHolder(t *testing.T, name string, now time.Time) {
	t.Helper()
	create(t, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}},
	})
	create(t, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-" + name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), AcquireTime: &metav1.MicroTime{Time: now.Add(-time.Hour)}},
	})
	create(t, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: facts.DefaultDriverName, VolumeHandle: "pvc-" + name}},
		},
	})
}

func newRequest(t *testing.T, name, pv string, window *v1alpha1.MaintenanceWindow) client.ObjectKey {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: name},
		Spec: v1alpha1.RemediationRequestSpec{
			Remediation:       v1alpha1.RemediationReleaseLUKSLease,
			Target:            v1alpha1.Target{PersistentVolume: pv},
			Reason:            "Lease retained after a failed cryptsetup luksOpen (INC-4711)",
			MaintenanceWindow: window,
		},
	}
	create(t, rr)
	return client.ObjectKeyFromObject(rr)
}

// waitFor polls a request until cond holds, for at most timeout of real time.
func waitFor(t *testing.T, key client.ObjectKey, timeout time.Duration, what string, cond func(*v1alpha1.RemediationRequest) bool) *v1alpha1.RemediationRequest {
	t.Helper()
	var rr *v1alpha1.RemediationRequest
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &v1alpha1.RemediationRequest{}
		require.NoError(c, env.Client.Get(context.Background(), key, got))
		require.True(c, cond(got), "phase %s, steps %+v, conditions %+v", got.Status.Phase, got.Status.Steps, got.Status.Conditions)
		rr = got
	}, timeout, 100*time.Millisecond, "%s: timed out after %s waiting for %s", key.Name, timeout, what)
	return rr
}

func stepState(rr *v1alpha1.RemediationRequest, name string) v1alpha1.StepState {
	for _, st := range rr.Status.Steps {
		if st.Name == name {
			return st.State
		}
	}
	return ""
}

// finishTermination plays the kubelet: the evicted pod's containers stopped, so the
// pod object goes away.
func finishTermination(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	err := env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0))
	if !apierrors.IsNotFound(err) {
		require.NoError(t, err)
	}
}

// TestConcurrencyCapHoldsRequestsUntilASlotFrees: with a cap of one, a second
// disruptive request waits (not rejected, not lost) while the first runs, and starts
// as soon as the first finishes, because finishing wakes it. A third, younger one
// keeps waiting behind it, and is not decided again just because the slot freed
// (no thundering herd); it starts when the second finishes. A Lease release for a
// shut-down holder is not capped: it runs at once while the slot is taken.
func TestConcurrencyCapHoldsRequestsUntilASlotFrees(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	clock := clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second))
	startManager(t, withClock(clock), func(r *remediationrequest.Reconciler) { r.MaxConcurrent = 1 })

	podA := healthyHolder(t, "envtest-cap-a", clock.Now())
	podB := healthyHolder(t, "envtest-cap-b", clock.Now())
	podD := healthyHolder(t, "envtest-cap-d", clock.Now())
	shutdownHolder(t, "envtest-cap-c", clock.Now())
	a := newRequest(t, "cap-a", "pvc-envtest-cap-a", nil)
	waitFor(t, a, 20*time.Second, "cap-a holding at waitPodsGone", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "waitPodsGone") == v1alpha1.StepRunning
	})
	b := newRequest(t, "cap-b", "pvc-envtest-cap-b", nil)
	got := waitFor(t, b, 20*time.Second, "cap-b waiting for a slot", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseWaiting
	})
	p := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionProgressing)
	want := "Playbook healthy-move-workload is allowed and waits in line for a slot of the cluster-wide cap of 1 (--max-concurrent-remediations), granted oldest request first; 1 slot(s) are held, by remediator/cap-a; it is decided again on fresh facts when granted one."
	require.NotNil(t, p)
	assert.Equal(t, v1alpha1.ReasonWaitingForSlot, p.Reason)
	assert.Equal(t, want, p.Message)
	d := newRequest(t, "cap-d", "pvc-envtest-cap-d", nil)
	got = waitFor(t, d, 20*time.Second, "cap-d waiting behind cap-b", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseWaiting
	})
	dDecided := got.Status.Decision.DecidedAt
	assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionProgressing).Message,
		"remediator/cap-a; 1 request(s) that came earlier are ahead of it in line;")

	c := newRequest(t, "cap-c", "pvc-envtest-cap-c", nil)
	waitFor(t, c, 20*time.Second, "cap-c, a shut-down holder, Succeeded while the slot is taken", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseSucceeded
	})
	for _, lease := range []string{"pvc-envtest-cap-b", "pvc-envtest-cap-d"} {
		assert.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: "trident", Name: lease}, &coordinationv1.Lease{}),
			"the Lease of a waiting request must be untouched")
	}

	finishTermination(t, podA)
	waitFor(t, a, 20*time.Second, "cap-a Succeeded", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseSucceeded
	})
	start := time.Now()
	waitFor(t, b, 10*time.Second, "cap-b started once the slot freed", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseRunning
	})
	t.Logf("cap-b started %s after cap-a finished", time.Since(start).Round(time.Millisecond))
	// Give a woken cap-d every chance to show up.
	time.Sleep(time.Second)
	got = waitFor(t, d, time.Second, "cap-d still waiting", func(rr *v1alpha1.RemediationRequest) bool { return true })
	assert.Equal(t, v1alpha1.PhaseWaiting, got.Status.Phase)
	assert.True(t, got.Status.Decision.DecidedAt.Equal(&dDecided), "cap-d was decided again when cap-a's slot went to cap-b")

	waitFor(t, b, 20*time.Second, "cap-b holding at waitPodsGone", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "waitPodsGone") == v1alpha1.StepRunning
	})
	finishTermination(t, podB)
	waitFor(t, b, 20*time.Second, "cap-b Succeeded", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseSucceeded
	})
	waitFor(t, d, 20*time.Second, "cap-d holding at waitPodsGone", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "waitPodsGone") == v1alpha1.StepRunning
	})
	finishTermination(t, podD)
	waitFor(t, d, 20*time.Second, "cap-d Succeeded", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseSucceeded
	})
}

// TestAdmissionSurvivesARestart: the line and the slots are the requests' status,
// read live, so a controller that restarts (a new process, an empty cache, a new
// leader) with requests waiting grants no extra slot and keeps the order: oldest
// first. Before admission, the slots a process had granted lived in its memory.
func TestAdmissionSurvivesARestart(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	clock := clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second))
	capOne := func(r *remediationrequest.Reconciler) { r.MaxConcurrent = 1 }
	stop := startStoppableManager(t, withClock(clock), capOne)

	pods := map[string]*corev1.Pod{}
	for _, n := range []string{"a", "b", "c"} {
		pods[n] = healthyHolder(t, "envtest-restart-"+n, clock.Now())
	}
	a := newRequest(t, "restart-a", "pvc-envtest-restart-a", nil)
	waitFor(t, a, 20*time.Second, "restart-a holding at waitPodsGone", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "waitPodsGone") == v1alpha1.StepRunning
	})
	inLine := func(rr *v1alpha1.RemediationRequest) bool {
		p := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
		return rr.Status.Phase == v1alpha1.PhaseWaiting && p != nil && p.Reason == v1alpha1.ReasonWaitingForSlot
	}
	b := newRequest(t, "restart-b", "pvc-envtest-restart-b", nil)
	waitFor(t, b, 20*time.Second, "restart-b in line", inLine)
	c := newRequest(t, "restart-c", "pvc-envtest-restart-c", nil)
	waitFor(t, c, 20*time.Second, "restart-c in line", inLine)

	stop()
	startManager(t, withClock(clock), capOne)
	// The new controller has listed everything and looked at the line; give a wrong
	// grant every chance to show.
	time.Sleep(2 * time.Second)
	waitFor(t, a, time.Second, "restart-a still running", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase == v1alpha1.PhaseRunning })
	waitFor(t, b, time.Second, "restart-b still in line after the restart", inLine)
	waitFor(t, c, time.Second, "restart-c still in line after the restart", inLine)

	finishTermination(t, pods["a"])
	waitFor(t, b, 20*time.Second, "restart-b, the oldest in line, running once restart-a finished", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "waitPodsGone") == v1alpha1.StepRunning
	})
	waitFor(t, c, time.Second, "restart-c still in line behind restart-b", inLine)
	finishTermination(t, pods["b"])
	waitFor(t, c, 20*time.Second, "restart-c running once restart-b finished", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "waitPodsGone") == v1alpha1.StepRunning
	})
	finishTermination(t, pods["c"])
	waitFor(t, c, 20*time.Second, "restart-c Succeeded", func(rr *v1alpha1.RemediationRequest) bool { return rr.Status.Phase == v1alpha1.PhaseSucceeded })
}

// TestMaintenanceWindowClosingAfterEvictionFinishes: the steps start inside the
// window; when it closes after the workload was evicted, the playbook does not stop
// there (that would leave the workload down, its Lease stuck, until the next
// window): it finishes the Lease deletion and the uncordon, and says so in a
// Warning Event and the step's message. Seen failing before: the playbook stopped
// before deleteLease and waited for the next window, the Lease kept. A window that
// closes before the eviction still stops it
// (TestWindowClosingBeforeEvictionReleasesTheFinalizer). Time only moves when the
// test moves it.
func TestMaintenanceWindowClosingAfterEvictionFinishes(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	clock, window, opened := openWindow()
	startManager(t, withClock(clock))

	node := "envtest-window-close"
	pod := healthyHolder(t, node, clock.Now())
	key := newRequest(t, "window-close", "pvc-"+node, window)
	waitFor(t, key, 20*time.Second, "the playbook started inside the window and holding at waitPodsGone", func(rr *v1alpha1.RemediationRequest) bool {
		return stepState(rr, "waitPodsGone") == v1alpha1.StepRunning
	})
	require.True(t, nodeCordoned(t, node), "node not cordoned by the playbook")

	// The window closes while the evicted pod is still terminating; the holder
	// still heartbeats.
	clock.SetTime(opened.Add(time.Hour + time.Minute))
	nl := &coordinationv1.Lease{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: node}, nl))
	nl.Spec.RenewTime = &metav1.MicroTime{Time: clock.Now()}
	require.NoError(t, env.Client.Update(ctx, nl))
	finishTermination(t, pod)
	got := waitFor(t, key, 20*time.Second, "the playbook finished after the window closed", func(rr *v1alpha1.RemediationRequest) bool {
		return terminal(rr)
	})
	require.Equal(t, v1alpha1.PhaseSucceeded, got.Status.Phase)
	for _, step := range []string{"cordon", "deleteAffectedPods", "waitPodsGone", "deleteLease", "uncordon"} {
		assert.Equal(t, v1alpha1.StepSucceeded, stepState(got, step), "step %s", step)
	}
	warningEvent(t, key.Name, remediationrequest.EventWindowClosedAfterEviction,
		"The maintenance window closed after the affected pods were evicted; step deleteLease starts all the same")
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: "trident", Name: "pvc-" + node}, &coordinationv1.Lease{})
	assert.True(t, apierrors.IsNotFound(err), "the Lease must be deleted, or the workload stays down: %v", err)
	assert.False(t, nodeCordoned(t, node), "the node must be uncordoned by the playbook's last step")
}
