package verification_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/pause"
	"github.com/remediator/remediator/controllers/remediationrequest"
	"github.com/remediator/remediator/controllers/setup"
	"github.com/remediator/remediator/controllers/verification"
	"github.com/remediator/remediator/controllers/wiring"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// verifyFor is the verification window a manager runs with.
type verifyFor time.Duration

// startManager runs the request reconciler and the verification of fixes for window,
// the way `remediator-controller` wires them.
func startManager(t *testing.T, window verifyFor) {
	t.Helper()
	startStoppableManager(t, window)
}

// startStoppableManager is startManager, and returns what stops the manager before
// the test ends (a controller restart); the test's cleanup stops it otherwise.
func startStoppableManager(t *testing.T, window verifyFor) (stop func()) {
	t.Helper()
	cacheOpts, clientOpts := wiring.CacheOptions(facts.DefaultConfig(), nil, types.NamespacedName{}, wiring.Runs{Detect: true, VerifyFixes: true})
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  scheme.Scheme,
		Cache:   cacheOpts,
		Client:  clientOpts,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Each test starts its own manager in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	require.NoError(t, err)
	// The controller's namespace, where admission keeps the slots Lease.
	env.EnsureNamespaces(t, pause.DefaultConfigMap.Namespace)
	marks, err := wiring.PrepareCache(context.Background(), mgr)
	require.NoError(t, err)
	decide, fresh, freshRelease := wiring.Gatherers(mgr, facts.DefaultConfig(), marks)
	policy, err := policies.Embedded()
	require.NoError(t, err)
	playbooks, err := remediations.DefaultPlaybooks()
	require.NoError(t, err)
	recorder := mgr.GetEventRecorderFor("remediator-test")
	r := &remediationrequest.Reconciler{
		Client:       mgr.GetClient(),
		Reader:       mgr.GetAPIReader(),
		Gatherer:     decide,
		Fresh:        fresh,
		FreshRelease: freshRelease,
		Workers:      4,
		Policy:       policy,
		Playbooks:    playbooks,
		Timeouts:     remediations.DefaultTimeouts,
		Recorder:     recorder,
	}
	v := &verification.Reconciler{Client: mgr.GetClient(), Gatherer: wiring.VerifyGatherer(mgr, facts.DefaultConfig()), Window: time.Duration(window), Recorder: recorder, Workers: 4}
	require.NoError(t, setup.Runnables(mgr, r, v))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		assert.NoError(t, <-done, "manager")
	})
	t.Cleanup(stop)
	return stop
}

// waitRequest waits until the request satisfies cond and returns it.
func waitRequest(t *testing.T, key client.ObjectKey, what string, cond func(*v1alpha1.RemediationRequest) bool) *v1alpha1.RemediationRequest {
	t.Helper()
	got := &v1alpha1.RemediationRequest{}
	testenv.Eventually(t, what, func() (bool, string) {
		if err := env.Client.Get(context.Background(), key, got); err != nil {
			return false, err.Error()
		}
		return cond(got), fmt.Sprintf("phase %s, conditions %+v, outcome %+v", got.Status.Phase, got.Status.Conditions, got.Status.Outcome)
	})
	return got
}

// shutdownLease stages incident A with a holder that is shut down: the node-shutdown
// playbook releases the Lease at once. It returns the Lease.
func shutdownLease(t *testing.T, node, pv string) *coordinationv1.Lease {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}},
	}
	require.NoError(t, c.Create(ctx, n))
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", LastTransitionTime: metav1.Now()}}
	require.NoError(t, c.Status().Update(ctx, n))
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &node, AcquireTime: &metav1.MicroTime{Time: time.Now().Add(-time.Hour)}},
	}
	require.NoError(t, c.Create(ctx, lease))
	require.NoError(t, c.Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: facts.DefaultDriverName, VolumeHandle: pv}},
		},
	}))
	return lease
}

// fixHeld is the request's FixHeld condition, or nil.
func fixHeld(rr *v1alpha1.RemediationRequest) *metav1.Condition {
	return meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionFixHeld)
}

// fixHeldIs waits for FixHeld with status st and reason.
func fixHeldIs(st metav1.ConditionStatus, reason string) func(*v1alpha1.RemediationRequest) bool {
	return func(rr *v1alpha1.RemediationRequest) bool {
		c := fixHeld(rr)
		return c != nil && c.Status == st && c.Reason == reason
	}
}

// releaseRequest creates a release-luks-lease request for pv.
func releaseRequest(t *testing.T, name, pv string) client.ObjectKey {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: name},
		Spec: v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target:      v1alpha1.Target{PersistentVolume: pv},
			Reason:      "holder was powered off",
		},
	}
	require.NoError(t, env.Client.Create(context.Background(), rr))
	return client.ObjectKeyFromObject(rr)
}

// retakeLease has holder take the Lease pv again; with retained, Trident's
// LeaseRetained Warning names the new Lease's UID, as after a failed cryptsetup.
func retakeLease(t *testing.T, pv, holder string, retained bool) *coordinationv1.Lease {
	t.Helper()
	ctx := context.Background()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &metav1.MicroTime{Time: time.Now()}},
	}
	require.NoError(t, env.Client.Create(ctx, lease))
	if retained {
		now := metav1.Now()
		require.NoError(t, env.Client.Create(ctx, &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: "trident", GenerateName: pv + "."},
			InvolvedObject: corev1.ObjectReference{
				APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: "trident", Name: pv, UID: lease.UID,
			},
			Reason: "LeaseRetained", Type: corev1.EventTypeWarning, Count: 1,
			Message:        "Retaining lease after failed LUKS operation on node " + holder + ": cryptsetup luksOpen exited 5",
			FirstTimestamp: now, LastTimestamp: now,
			Source: corev1.EventSource{Component: "trident-node", Host: holder},
		}))
	}
	return lease
}

// fixNotHeldEvents lists the FixNotHeld Warning Events on the request.
func fixNotHeldEvents(t *testing.T, key client.ObjectKey) []corev1.Event {
	t.Helper()
	list := &corev1.EventList{}
	require.NoError(t, env.Client.List(context.Background(), list, client.InNamespace(key.Namespace)))
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Name == key.Name && e.Reason == v1alpha1.EventFixNotHeld {
			out = append(out, e)
		}
	}
	return out
}

// TestFixNotHeldWhenSameHolderRetainsAgain: after a Succeeded release, the same
// holder takes the Lease again and Trident retains it (a LeaseRetained Warning on
// the new UID). The controller sets FixHeld=False with LeaseRetainedAgain and emits
// one Warning Event; Ready stays True, and nothing is acted on (the new Lease
// stays). The first re-take is seen through the watches (well before the window's
// periodic check); the second while the controller was down, from the window in
// status.
func TestFixNotHeldWhenSameHolderRetainsAgain(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator", "trident", corev1.NamespaceNodeLease)
	stop := startStoppableManager(t, verifyFor(time.Hour))
	const node, pv, pvDown = "envtest-fix-again", "pvc-envtest-fix-again", "pvc-envtest-fix-again-down"
	shutdownLease(t, node, pv)
	key := releaseRequest(t, "fix-again", pv)
	rr := waitRequest(t, key, "Succeeded and verifying", fixHeldIs(metav1.ConditionUnknown, v1alpha1.ReasonVerifying))
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase)
	assert.Contains(t, fixHeld(rr).Message, "Watching for Lease trident/"+pv+" retained again by node "+node)

	lease := retakeLease(t, pv, node, true)
	rr = waitRequest(t, key, "FixHeld False", fixHeldIs(metav1.ConditionFalse, v1alpha1.ReasonLeaseRetainedAgain))
	c := fixHeld(rr)
	assert.Contains(t, c.Message, "Lease trident/"+pv+" was taken again by node "+node+" (UID "+string(lease.UID))
	assert.Contains(t, c.Message, "1 LeaseRetained Warning event(s) name it")
	assert.Contains(t, c.Message, "investigate the root cause on node "+node)
	assert.Contains(t, c.Message, "instead of repeating the playbook")
	ready := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionTrue, ready.Status, "Ready keeps saying the playbook succeeded: %+v", ready)
	assert.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase)

	testenv.Eventually(t, "the FixNotHeld Warning Event", func() (bool, string) {
		return len(fixNotHeldEvents(t, key)) > 0, ""
	})
	// More reconciles (an annotation change starts one) announce nothing more.
	patch := client.MergeFrom(rr.DeepCopy())
	metav1.SetMetaDataAnnotation(&rr.ObjectMeta, "remediator.io/test-touch", "1")
	require.NoError(t, env.Client.Patch(ctx, rr, patch))
	time.Sleep(2 * time.Second)
	events := fixNotHeldEvents(t, key)
	require.Len(t, events, 1, "FixNotHeld events: %+v", events)
	assert.Equal(t, corev1.EventTypeWarning, events[0].Type)
	assert.Equal(t, int32(1), max(events[0].Count, 1), "the event was emitted once")
	assert.Equal(t, c.Message, events[0].Message)
	assert.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(lease), &coordinationv1.Lease{}), "verification must not touch the new Lease")

	// The window is in status: a controller started after the re-take finds it.
	shutdownLease(t, node+"-down", pvDown)
	down := releaseRequest(t, "fix-again-down", pvDown)
	waitRequest(t, down, "Succeeded and verifying", fixHeldIs(metav1.ConditionUnknown, v1alpha1.ReasonVerifying))
	stop()
	retakeLease(t, pvDown, node+"-down", true)
	startManager(t, verifyFor(time.Hour))
	waitRequest(t, down, "FixHeld False after the restart", fixHeldIs(metav1.ConditionFalse, v1alpha1.ReasonLeaseRetainedAgain))
	testenv.Eventually(t, "the FixNotHeld Warning Event after the restart", func() (bool, string) {
		return len(fixNotHeldEvents(t, down)) == 1, ""
	})
}

// TestFixHeldWhenQuietOrAnotherHolder: a window without a re-take, and one where
// another node takes the Lease (its own operation, retained or not), both end with
// FixHeld=True, NoRecurrence, and no Warning.
func TestFixHeldWhenQuietOrAnotherHolder(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident", corev1.NamespaceNodeLease)
	const window = 6 * time.Second
	startManager(t, verifyFor(window))
	shutdownLease(t, "envtest-fix-quiet", "pvc-envtest-fix-quiet")
	shutdownLease(t, "envtest-fix-other", "pvc-envtest-fix-other")
	quiet := releaseRequest(t, "fix-quiet", "pvc-envtest-fix-quiet")
	other := releaseRequest(t, "fix-other", "pvc-envtest-fix-other")
	waitRequest(t, other, "Succeeded and verifying", fixHeldIs(metav1.ConditionUnknown, v1alpha1.ReasonVerifying))
	retakeLease(t, "pvc-envtest-fix-other", "envtest-fix-other-2", true)

	for _, key := range []client.ObjectKey{quiet, other} {
		rr := waitRequest(t, key, key.Name+" FixHeld True", fixHeldIs(metav1.ConditionTrue, v1alpha1.ReasonNoRecurrence))
		c := fixHeld(rr)
		assert.Contains(t, c.Message, "No Lease trident/pvc-envtest-"+key.Name+" retained again by node envtest-"+key.Name)
		assert.Empty(t, fixNotHeldEvents(t, key))
		// The verdict came at the window's end, not before it.
		require.NotNil(t, rr.Status.Outcome)
		assert.False(t, c.LastTransitionTime.Time.Before(rr.Status.Outcome.FinishedAt.Add(window)),
			"FixHeld turned True at %s, before the window's end %s", c.LastTransitionTime, rr.Status.Outcome.FinishedAt.Add(window))
	}
}

// TestFixNotHeldWhenDriverDeregistersAgain: a reregister-csi-driver request that
// Succeeded (its status written as the playbook leaves it, before this controller
// starts: the window comes from status) is verified on its node. While the CSINode
// lists the driver, FixHeld is Verifying; once the driver is gone from it again
// while the node-plugin pod runs Ready, the CSINode watch brings FixHeld=False with
// DriverDeregisteredAgain and one Warning, and Ready stays True.
func TestFixNotHeldWhenDriverDeregistersAgain(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	env.EnsureNamespaces(t, "remediator", "trident", corev1.NamespaceNodeLease)
	const node = "envtest-csi-again"
	require.NoError(t, c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}))
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: facts.DefaultDriverName, NodeID: node}}},
	}
	require.NoError(t, c.Create(ctx, csiNode))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "trident-node-linux-csi-again", Labels: map[string]string{"app": "node.csi.trident.netapp.io"},
			// Node-plugin pods are the DaemonSet's; envtest runs no DaemonSet controller
			// (nor the garbage collector), so the owner is only named.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "trident-node-linux",
				UID: "6f1e2d3c-4b5a-4697-8e7f-0a1b2c3d4e5f", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "trident-main", Image: "netapp/trident:24.06"}}},
	}
	require.NoError(t, c.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	require.NoError(t, c.Status().Update(ctx, pod))

	rr := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "csi-again"},
		Spec: v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReregisterCSIDriver,
			Target:      v1alpha1.Target{Node: node},
			Reason:      "driver deregistered after the trident-csi DaemonSet was recreated",
		},
	}
	require.NoError(t, c.Create(ctx, rr))
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	rr.Status = v1alpha1.RemediationRequestStatus{
		ObservedGeneration: rr.Generation,
		Phase:              v1alpha1.PhaseSucceeded,
		Facts:              &v1alpha1.Facts{GatheredAt: now, TridentNamespace: "trident", DriverName: facts.DefaultDriverName, Target: v1alpha1.TargetFacts{Ref: "Node " + node, Found: true, Node: node}},
		Decision:           &v1alpha1.Decision{Allowed: true, Playbook: v1alpha1.PlaybookRestartNodePlugin, Rule: "driver-deregistered", PolicyDigest: "sha256:test", DecidedAt: now, Generation: rr.Generation},
		Outcome:            &v1alpha1.Outcome{Result: v1alpha1.PhaseSucceeded, Reason: v1alpha1.ReasonPlaybookCompleted, FinishedAt: now, Generation: rr.Generation},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPlaybookCompleted,
			Message: "Playbook restart-node-plugin completed", LastTransitionTime: now, ObservedGeneration: rr.Generation}},
	}
	require.NoError(t, c.Status().Update(ctx, rr))
	key := client.ObjectKeyFromObject(rr)

	startManager(t, verifyFor(time.Hour))
	got := waitRequest(t, key, "verifying", fixHeldIs(metav1.ConditionUnknown, v1alpha1.ReasonVerifying))
	assert.Contains(t, fixHeld(got).Message, "Watching for deregistration of "+facts.DefaultDriverName+" from CSINode "+node+" from "+now.UTC().Format(time.RFC3339))

	csiNode.Spec.Drivers = nil
	require.NoError(t, c.Update(ctx, csiNode))
	got = waitRequest(t, key, "FixHeld False", fixHeldIs(metav1.ConditionFalse, v1alpha1.ReasonDriverDeregisteredAgain))
	assert.Equal(t, "CSINode "+node+" does not list "+facts.DefaultDriverName+" again while node-plugin pod(s) run there: trident-node-linux-csi-again (Running, ready=true). "+
		"Restarting the plugin did not fix the cause: investigate why the registration is dropped (overlapping node-plugin pods, the trident-operator recreating its DaemonSet, the driver-registrar's logs) instead of repeating the playbook",
		fixHeld(got).Message)
	ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	testenv.Eventually(t, "one FixNotHeld Warning Event", func() (bool, string) {
		return len(fixNotHeldEvents(t, key)) == 1, ""
	})
	assert.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}), "verification must not touch the plugin pod")
}

// TestSuccessOpensItsWindowInTheSameWrite: the status write that makes a request
// Succeeded already carries FixHeld Unknown (Verifying), so that verification adds no
// write of its own: no version of the request is Succeeded without it.
func TestSuccessOpensItsWindowInTheSameWrite(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator", "trident", corev1.NamespaceNodeLease)
	startManager(t, verifyFor(time.Hour))
	const node, pv, name = "envtest-fix-one-write", "pvc-envtest-fix-one-write", "fix-one-write"
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme.Scheme})
	require.NoError(t, err)
	w, err := wc.Watch(ctx, &v1alpha1.RemediationRequestList{}, client.InNamespace("remediator"),
		client.MatchingFields{"metadata.name": name})
	require.NoError(t, err)
	defer w.Stop()
	shutdownLease(t, node, pv)
	releaseRequest(t, name, pv)
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			require.True(t, ok, "the watch ended")
			rr, isRequest := ev.Object.(*v1alpha1.RemediationRequest)
			require.True(t, isRequest, "watch event %s: %T", ev.Type, ev.Object)
			if rr.Status.Phase != v1alpha1.PhaseSucceeded {
				continue
			}
			c := fixHeld(rr)
			require.NotNil(t, c, "the first Succeeded version has no FixHeld: %+v", rr.Status.Conditions)
			assert.Equal(t, metav1.ConditionUnknown, c.Status)
			assert.Equal(t, v1alpha1.ReasonVerifying, c.Reason)
			assert.Contains(t, c.Message, "Watching for Lease trident/"+pv+" retained again by node "+node)
			return
		case <-timeout:
			require.FailNow(t, "the request did not succeed within a minute")
		}
	}
}

// claimedVolume binds a claim ns/claim to the PersistentVolume pv that shutdownLease
// created, from both sides, as the PV controller would.
func claimedVolume(t *testing.T, ns, claim, pv string) {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	require.NoError(t, c.Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			VolumeName:  pv,
		},
	}))
	vol := &corev1.PersistentVolume{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: pv}, vol))
	vol.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: claim}
	require.NoError(t, c.Update(ctx, vol))
}

// claimPod creates a pod that mounts ns/claim, on a node other than the holder, with
// status st, and returns it.
func claimPod(t *testing.T, ns, name, claim string, st corev1.PodStatus) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: "envtest-elsewhere", Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "storage", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}},
	}
	require.NoError(t, env.Client.Create(ctx, pod))
	pod.Status = st
	require.NoError(t, env.Client.Status().Update(ctx, pod))
	return pod
}

// failedMountEvent is kubelet's FailedMount Warning on pod, last seen at seen.
func failedMountEvent(t *testing.T, pod *corev1.Pod, msg string, seen time.Time) {
	t.Helper()
	at := metav1.NewTime(seen)
	require.NoError(t, env.Client.Create(context.Background(), &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: pod.Namespace, GenerateName: pod.Name + "."},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Reason:         "FailedMount", Type: corev1.EventTypeWarning, Count: 1, Message: msg,
		FirstTimestamp: at, LastTimestamp: at,
		Source: corev1.EventSource{Component: "kubelet", Host: pod.Spec.NodeName},
	}))
}

// TestFixHeldWaitsForTheClaimsPods: after a release, FixHeld also needs the pods of
// the volume's claim back. Pods Running and Ready (an evicted pod left behind and a
// FailedMount from before the fix aside) end the window True; a pod still
// ContainerCreating keeps FixHeld Verifying, naming it (a FailedMount from before the
// fix does not count), and turns it False (PodsNotReady) when the window ends; a
// FailedMount naming the volume after the fix turns it False (FailedMountAfterFix) at
// once, through the events' watch.
func TestFixHeldWaitsForTheClaimsPods(t *testing.T) {
	const ns, window = "app-fix", 10 * time.Second
	env.EnsureNamespaces(t, "remediator", "trident", corev1.NamespaceNodeLease, ns)
	startManager(t, verifyFor(window))
	running := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	creating := corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "busybox",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}
	mountMsg := func(pv string) string {
		return `MountVolume.MountDevice failed for volume "` + pv + `" : rpc error: code = Internal desc = cryptsetup luksOpen exited 5`
	}
	keys := map[string]client.ObjectKey{}
	pods := map[string]*corev1.Pod{}
	for _, name := range []string{"back", "creating", "mount"} {
		pv := "pvc-envtest-fix-" + name
		shutdownLease(t, "envtest-fix-"+name, pv)
		claimedVolume(t, ns, name, pv)
		st := running
		if name == "creating" {
			st = creating
		}
		pods[name] = claimPod(t, ns, name+"-0", name, st)
	}
	claimPod(t, ns, "back-evicted", "back", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"})
	failedMountEvent(t, pods["back"], mountMsg("pvc-envtest-fix-back"), time.Now().Add(-time.Hour))
	for _, name := range []string{"back", "creating", "mount"} {
		keys[name] = releaseRequest(t, "fix-pods-"+name, "pvc-envtest-fix-"+name)
	}

	// A FailedMount from before the fix, seen late, is no verdict, nor a reason to
	// list the claim's namespace: its pods are read when the window ends (below) or
	// for a FailedMount after the fix.
	waitRequest(t, keys["creating"], "Succeeded and verifying", fixHeldIs(metav1.ConditionUnknown, v1alpha1.ReasonVerifying))
	failedMountEvent(t, pods["creating"], mountMsg("pvc-envtest-fix-creating"), time.Now().Add(-time.Hour))
	rr := waitRequest(t, keys["creating"], "still verifying", fixHeldIs(metav1.ConditionUnknown, v1alpha1.ReasonVerifying))
	assert.NotContains(t, fixHeld(rr).Message, "FailedMount")

	rr = waitRequest(t, keys["mount"], "Succeeded and verifying", fixHeldIs(metav1.ConditionUnknown, v1alpha1.ReasonVerifying))
	require.NotNil(t, rr.Status.Outcome)
	fixed := rr.Status.Outcome.FinishedAt.Time
	failedMountEvent(t, pods["mount"], mountMsg("pvc-envtest-fix-mount"), fixed.Add(11*time.Second)) // past the grace of an attempt that ended after the fix
	rr = waitRequest(t, keys["mount"], "FixHeld False, FailedMountAfterFix", fixHeldIs(metav1.ConditionFalse, v1alpha1.ReasonFailedMountAfterFix))
	c := fixHeld(rr)
	assert.Contains(t, c.Message, "on pod(s) "+ns+"/mount-0; the newest, on "+ns+"/mount-0 at ")
	assert.Contains(t, c.Message, strconv.Quote(mountMsg("pvc-envtest-fix-mount")))
	assert.True(t, c.LastTransitionTime.Time.Before(fixed.Add(window)), "FailedMountAfterFix came at the window's end, not through the watch: %s", c.LastTransitionTime)

	rr = waitRequest(t, keys["creating"], "FixHeld False, PodsNotReady", fixHeldIs(metav1.ConditionFalse, v1alpha1.ReasonPodsNotReady))
	assert.Contains(t, fixHeld(rr).Message, "Pod(s) using PersistentVolumeClaim "+ns+"/creating were not Running and Ready when the window ended at ")
	assert.Contains(t, fixHeld(rr).Message, ": "+ns+"/creating-0 (Pending, ContainerCreating, not ready). ")

	rr = waitRequest(t, keys["back"], "FixHeld True", fixHeldIs(metav1.ConditionTrue, v1alpha1.ReasonNoRecurrence))
	assert.Contains(t, fixHeld(rr).Message, "; the pod(s) using PersistentVolumeClaim "+ns+"/back are Running and Ready: "+ns+"/back-0")
	assert.Empty(t, fixNotHeldEvents(t, keys["back"]))
	for _, name := range []string{"creating", "mount"} {
		testenv.Eventually(t, "one FixNotHeld Warning Event on "+name, func() (bool, string) {
			return len(fixNotHeldEvents(t, keys[name])) == 1, ""
		})
	}
}
