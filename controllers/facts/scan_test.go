package facts_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

func TestScan(t *testing.T) {
	w := newWorld(t)
	ready := nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second}
	w.node("scan-holder", ready)
	w.volume("pvc-scan-old", "app", "scan-old")
	w.tridentLease("pvc-scan-old", "scan-holder", 20*time.Minute, 0)
	w.volume("pvc-scan-retained", "app", "scan-retained")
	w.tridentLease("pvc-scan-retained", "scan-holder", time.Minute, 2)
	w.volume("pvc-scan-young", "app", "scan-young")
	w.tridentLease("pvc-scan-young", "scan-holder", time.Minute, 0)
	// Not named after a PV: some other component's Lease, not Trident's cryptsetup lock.
	w.create(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "scan-trident-leader"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("trident-controller-0"), AcquireTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Hour)))},
	})

	// A young Lease without events, held by a node that went down: stuck however young.
	w.node("scan-down", nodeSpec{ready: corev1.ConditionUnknown, renewedAgo: 10 * time.Minute})
	w.volume("pvc-scan-down", "app", "scan-down")
	w.tridentLease("pvc-scan-down", "scan-down", time.Minute, 0)
	waiting := w.waitingPod("app", "web-scan-down", "scan-holder", "scan-down")
	w.failedMount(waiting, "scan-holder", `MountVolume.MountDevice failed for volume "pvc-scan-down" : rpc error: code = Aborted desc = cryptsetup lock held by scan-down`, 4)
	// A FailedMount of another volume on another pod is not this Lease's symptom.
	other := w.waitingPod("app", "web-scan-other", "scan-holder", "scan-unrelated")
	w.failedMount(other, "scan-holder", `MountVolume.SetUp failed for volume "pvc-unrelated" : not found`, 1)

	w.node("scan-deregistered", ready)
	w.csiNode("scan-deregistered")
	w.failedMount(other, "scan-deregistered", "MountVolume.MountDevice failed for volume \"pvc-x\" : kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: driver name csi.trident.netapp.io not found in the list of registered CSI drivers", 7)
	w.pluginPod("trident", "trident-csi-scan-a", "scan-deregistered")
	w.node("scan-overlap", ready)
	w.csiNode("scan-overlap", facts.DefaultDriverName)
	w.pluginPod("trident", "trident-csi-scan-b", "scan-overlap")
	w.pluginPod("trident", "trident-csi-2-scan-c", "scan-overlap")
	w.node("scan-fine", ready)
	w.csiNode("scan-fine", facts.DefaultDriverName)
	w.pluginPod("trident", "trident-csi-scan-d", "scan-fine")

	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig(), Clock: w}
	got, err := g.Scan(context.Background(), facts.ScanOptions{LeaseAge: 10 * time.Minute})
	require.NoError(t, err)
	find := func(kind, node, lease string) *facts.Finding {
		for i := range got {
			if got[i].Kind == kind && got[i].Node == node && got[i].Lease == lease {
				return &got[i]
			}
		}
		return nil
	}
	if f := find(facts.FindingStuckLease, "scan-holder", "trident/pvc-scan-old"); assert.NotNil(t, f, "old Lease") {
		assert.Equal(t, v1alpha1.NodeHealthy, f.NodeState, "old Lease: %+v", f)
		assert.GreaterOrEqual(t, f.AgeSeconds, int64(1199), "old Lease: %+v", f)
	}
	if f := find(facts.FindingStuckLease, "scan-holder", "trident/pvc-scan-retained"); assert.NotNil(t, f, "Lease with LeaseRetained events") {
		assert.Equal(t, int32(2), f.RetainedEvents, "Lease with LeaseRetained events: %+v", f)
		assert.Contains(t, f.Evidence, "LeaseRetained", "Lease with LeaseRetained events: %+v", f)
	}
	assert.Nil(t, find(facts.FindingStuckLease, "scan-holder", "trident/pvc-scan-young"), "a Healthy holder's young Lease without events is not stuck")
	if f := find(facts.FindingStuckLease, "scan-down", "trident/pvc-scan-down"); assert.NotNil(t, f, "a young Lease of a holder that is down") {
		assert.Equal(t, v1alpha1.NodeUnreachable, f.NodeState, "%+v", f)
		assert.Equal(t, []facts.Symptom{
			{Kind: facts.SymptomContainerCreating, Pod: "app/web-scan-down", Count: 1, Message: "on scan-holder"},
			{Kind: facts.SymptomFailedMount, Pod: "app/web-scan-down", Count: 4, Message: `MountVolume.MountDevice failed for volume "pvc-scan-down" : rpc error: code = Aborted desc = cryptsetup lock held by scan-down`},
		}, f.Symptoms, "the claim's waiting pod and its FailedMount events, not the other volume's")
	}
	assert.False(t, slices.ContainsFunc(got, func(f facts.Finding) bool { return strings.Contains(f.Lease, "leader") }),
		"a Lease not named after a PV was reported: %+v", got)
	if f := find(facts.FindingDeregisteredDriver, "scan-deregistered", ""); assert.NotNil(t, f, "deregistered driver") {
		assert.Len(t, f.PluginPods, 1, "deregistered driver: %+v", f)
		if assert.Len(t, f.Symptoms, 1, "kubelet's FailedMount on that node: %+v", f) {
			assert.Equal(t, facts.SymptomFailedMount, f.Symptoms[0].Kind)
			assert.Equal(t, int32(7), f.Symptoms[0].Count)
			assert.Contains(t, f.Symptoms[0].Message, "not found in the list of registered CSI drivers")
		}
	}
	if f := find(facts.FindingOverlappingPluginPods, "scan-overlap", ""); assert.NotNil(t, f, "overlapping pods") {
		assert.Len(t, f.PluginPods, 2, "overlapping pods: %+v", f)
	}
	for _, f := range got {
		assert.False(t, f.Node == "scan-fine" || (f.Node == "scan-overlap" && f.Kind == facts.FindingDeregisteredDriver), "unexpected finding %+v", f)
	}
	assert.True(t, slices.IsSortedFunc(got, func(a, b facts.Finding) int {
		return strings.Compare(a.Kind+"\x00"+a.Node+"\x00"+a.Lease, b.Kind+"\x00"+b.Node+"\x00"+b.Lease)
	}), "findings are not sorted: %+v", got)

	// The runbook's shutdown branch starts from the Leases a node holds: every
	// PV-named one, stuck or not, with why, sorted; the findings are Scan's.
	res, err := g.ScanWithHeld(context.Background(), facts.ScanOptions{LeaseAge: 10 * time.Minute, HeldBy: "scan-holder"})
	require.NoError(t, err)
	assert.Equal(t, len(got), len(res.Findings), "ScanWithHeld finds what Scan finds: %+v", res.Findings)
	var held []string
	for _, h := range res.Held {
		assert.Equal(t, "scan-holder", h.Node, "%+v", h)
		assert.Equal(t, v1alpha1.NodeHealthy, h.NodeState, "%+v", h)
		held = append(held, fmt.Sprintf("%s stuck=%t", h.Lease, h.Stuck))
	}
	assert.Equal(t, []string{"trident/pvc-scan-old stuck=true", "trident/pvc-scan-retained stuck=true", "trident/pvc-scan-young stuck=false"}, held,
		"every PV-named Lease scan-holder holds, sorted, not the leader Lease: %+v", res.Held)
	if len(res.Held) == 3 {
		assert.Contains(t, res.Held[0].Why, "at least the 10m0s", "old: %+v", res.Held[0])
		assert.Contains(t, res.Held[1].Why, "2 LeaseRetained event(s)", "retained: %+v", res.Held[1])
		assert.Contains(t, res.Held[2].Why, "young: held", "young: %+v", res.Held[2])
		assert.Contains(t, res.Held[2].Why, "holder Healthy, renewing its node Lease", "young: %+v", res.Held[2])
	}
	res, err = g.ScanWithHeld(context.Background(), facts.ScanOptions{LeaseAge: 10 * time.Minute, HeldBy: "scan-fine"})
	require.NoError(t, err)
	assert.NotNil(t, res.Held, "a node that holds nothing: an empty list, not none asked for")
	assert.Empty(t, res.Held)
}

// TestScanLeaseAgeCountsFromServerTime: scan measures a Lease's age as the decision
// does, so a holder whose clock runs 20 minutes slow does not make a Lease created
// just now look stuck.
func TestScanLeaseAgeCountsFromServerTime(t *testing.T) {
	w := newWorld(t)
	w.node("scan-slowclock", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
	w.volume("pvc-scan-slowclock", "app", "scan-slowclock")
	w.tridentLeaseAt("pvc-scan-slowclock", "scan-slowclock", time.Now().Add(-20*time.Minute), 0)

	// The real clock: the Lease was created just now.
	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig()}
	got, err := g.Scan(context.Background(), facts.ScanOptions{LeaseAge: 10 * time.Minute})
	require.NoError(t, err)
	for _, f := range got {
		assert.NotEqual(t, "trident/pvc-scan-slowclock", f.Lease,
			"a Lease created just now was reported as stuck because of its holder's acquireTime: %+v", f)
	}
}

// TestScanSymptoms: what counts as a sign of an incident, and what does not.
//   - A Lease held by an Unknown node (Ready=False while its kubelet renews its node
//     Lease) is not stuck at any age: it may be running cryptsetup.
//   - A pod whose init container has not run waits with PodInitializing; it counts.
//   - On the claim's own pod, a FailedMount about another volume (a missing
//     ConfigMap) is not the Lease's; kubelet's "unmounted volumes=[data]" is.
//   - A pod being deleted within its grace period is not stuck Terminating; one past
//     it is.
//   - A node's FailedMount saying the driver is not registered counts when kubelet
//     reported it as events.k8s.io does (reportingInstance, a series), and not when it
//     is older than DriverSymptomWindow.
func TestScanSymptoms(t *testing.T) {
	w := newWorld(t)
	ready := nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second}
	w.node("sym-unknown", nodeSpec{ready: corev1.ConditionFalse, renewedAgo: time.Second})
	w.volume("pvc-sym-unknown", "app", "sym-unknown")
	w.tridentLease("pvc-sym-unknown", "sym-unknown", time.Minute, 0)

	w.node("sym-down", nodeSpec{ready: corev1.ConditionUnknown, renewedAgo: 10 * time.Minute})
	w.node("sym-other", ready)
	w.volume("pvc-sym-down", "app", "sym-down")
	w.tridentLease("pvc-sym-down", "sym-down", time.Minute, 0)
	init := w.waitingPod("app", "sym-init", "sym-other", "sym-down")
	init.Spec.InitContainers = nil
	init.Status.ContainerStatuses[0].State.Waiting.Reason = "PodInitializing"
	require.NoError(t, env.Client.Status().Update(context.Background(), init))
	w.failedMount(init, "sym-other", `MountVolume.MountDevice failed for volume "pvc-sym-down" : rpc error: code = Aborted desc = locked`, 2)
	// The same pod's other volume.
	w.createEvent(init, "sym-other.config", `MountVolume.SetUp failed for volume "config" : configmap "app-config" not found`, "sym-other", "", 9, w.Now())
	// kubelet's summary names the pod's volume, not the PV.
	w.createEvent(init, "sym-other.summary", `Unable to attach or mount volumes: unmounted volumes=[config data], unattached volumes=[]: timed out waiting for the condition`, "sym-other", "", 1, w.Now())
	// On the holder: one pod being deleted within its grace period, one past it.
	for name, deleteIn := range map[string]time.Duration{"sym-graceful": time.Hour, "sym-stuck": -time.Minute} {
		p := w.waitingPod("app", name, "sym-down", "sym-down")
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		require.NoError(t, env.Client.Status().Update(context.Background(), p))
		p.Finalizers = []string{"envtest.remediator.io/hold"}
		require.NoError(t, env.Client.Update(context.Background(), p))
		t.Cleanup(func() {
			p.Finalizers = nil
			_ = env.Client.Update(context.Background(), p)
		})
		// The API server sets deletionTimestamp to now + grace (real time); the world's
		// clock is worldAhead later, so a grace that ends before it has passed.
		grace := int64((worldAhead + deleteIn) / time.Second)
		require.NoError(t, env.Client.Delete(context.Background(), p, client.GracePeriodSeconds(grace)))
	}

	w.node("sym-dereg", ready)
	w.csiNode("sym-dereg")
	w.pluginPod("trident", "trident-csi-sym", "sym-dereg")
	app := w.waitingPod("app", "sym-app", "sym-dereg", "sym-app-data")
	const notRegistered = `kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: driver name csi.trident.netapp.io not found in the list of registered CSI drivers`
	w.createEvent(app, "sym-dereg.new", notRegistered, "", "sym-dereg", 3, w.Now())
	w.createEvent(app, "sym-dereg.old", notRegistered+" (an hour ago)", "sym-dereg", "", 40, w.Now().Add(-time.Hour))

	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig(), Clock: w}
	got, err := g.Scan(context.Background(), facts.ScanOptions{LeaseAge: 10 * time.Minute})
	require.NoError(t, err)
	byKey := map[string]facts.Finding{}
	for _, f := range got {
		byKey[f.Kind+" "+f.Node+" "+f.Lease] = f
	}
	assert.NotContains(t, byKey, "StuckLease sym-unknown trident/pvc-sym-unknown", "an Unknown holder's young Lease without events")
	down, ok := byKey["StuckLease sym-down trident/pvc-sym-down"]
	require.True(t, ok, "the down holder's Lease: %+v", got)
	var kinds []string
	for _, s := range down.Symptoms {
		kinds = append(kinds, s.Kind+" "+s.Pod+" "+strings.SplitN(s.Message, " ", 2)[0])
	}
	assert.Equal(t, []string{
		"ContainerCreating app/sym-init on",
		"FailedMount app/sym-init MountVolume.MountDevice",
		"FailedMount app/sym-init Unable",
		"Terminating app/sym-stuck on",
	}, kinds, "symptoms: %+v", down.Symptoms)
	dereg, ok := byKey["DeregisteredDriver sym-dereg "]
	require.True(t, ok, "the deregistered node: %+v", got)
	require.Len(t, dereg.Symptoms, 1, "only the recent FailedMount: %+v", dereg.Symptoms)
	assert.Equal(t, int32(3), dereg.Symptoms[0].Count, "the series' count")
}

// podListCounter counts the reads of workload pods that pass through it: every
// list and read of pods but the node-plugin pods' (one list per scan).
type podListCounter struct {
	client.Reader
	// pods is atomic: a scan reads stuck Leases' pods concurrently.
	pods atomic.Int32
}

func (c *podListCounter) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := &client.ListOptions{}
	o.ApplyOptions(opts)
	if _, ok := list.(*corev1.PodList); ok && o.Namespace != facts.DefaultTridentNamespace {
		c.pods.Add(1)
	}
	return c.Reader.List(ctx, list, opts...)
}

func (c *podListCounter) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Pod); ok {
		c.pods.Add(1)
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestScanRemembersSymptoms: continuous detection reads a stuck Lease's pods once,
// and again only when what the symptoms depend on changed or the reading is older
// than the refresh: a scan during a storm of releases reads no pods again.
func TestScanRemembersSymptoms(t *testing.T) {
	w := newWorld(t)
	w.node("mem-down", nodeSpec{ready: corev1.ConditionUnknown, renewedAgo: 10 * time.Minute})
	w.node("mem-other", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
	w.volume("pvc-mem-down", "app", "mem-down")
	w.tridentLease("pvc-mem-down", "mem-down", time.Minute, 0)
	p := w.waitingPod("app", "mem-app", "mem-other", "mem-down")

	reads := &podListCounter{Reader: env.Client}
	g := &facts.Gatherer{Reader: reads, Config: facts.DefaultConfig(), Clock: w}
	seen := &facts.SymptomsSeen{Refresh: time.Hour}
	scan := func() []facts.Symptom {
		t.Helper()
		got, err := g.Scan(context.Background(), facts.ScanOptions{LeaseAge: 10 * time.Minute, Symptoms: seen})
		require.NoError(t, err)
		for _, f := range got {
			if f.Lease == "trident/pvc-mem-down" {
				return f.Symptoms
			}
		}
		t.Fatalf("the down holder's Lease is not found stuck: %+v", got)
		return nil
	}
	first := scan()
	require.NotZero(t, reads.pods.Load(), "the first scan reads the pods")
	reads.pods.Store(0)
	assert.Equal(t, first, scan())
	assert.Zero(t, reads.pods.Load(), "nothing changed: no pod is read again")

	w.failedMount(p, "mem-other", `MountVolume.MountDevice failed for volume "pvc-mem-down" : rpc error: code = Aborted desc = locked`, 1)
	require.Eventually(t, func() bool {
		reads.pods.Store(0)
		s := scan()
		return reads.pods.Load() > 0 && slices.ContainsFunc(s, func(s facts.Symptom) bool { return s.Kind == facts.SymptomFailedMount })
	}, 10*time.Second, 100*time.Millisecond, "a FailedMount naming the volume brings a new reading")

	reads.pods.Store(0)
	scan()
	assert.Zero(t, reads.pods.Load())
	*seen = facts.SymptomsSeen{Refresh: time.Nanosecond}
	scan()
	reads.pods.Store(0)
	scan()
	assert.NotZero(t, reads.pods.Load(), "a reading older than the refresh is made again")
}

// TestScanReadsSymptomsConcurrently: after a power loss the first scan reads the
// pods of every newly stuck Lease live; read one after another, a thousand of them
// outlasted a scan's bound on a loaded API server. Each pod list here returns only
// once three are in flight, or after a while: read one at a time, the scan takes
// that while for each Lease and never has three in flight.
func TestScanReadsSymptomsConcurrently(t *testing.T) {
	w := newWorld(t)
	const n = 3
	want := map[string]bool{}
	for i := range n {
		node, pv := fmt.Sprintf("conc-down-%d", i), fmt.Sprintf("pvc-conc-%d", i)
		w.node(node, nodeSpec{ready: corev1.ConditionUnknown, renewedAgo: 10 * time.Minute})
		w.volume(pv, "app", "conc-"+pv)
		w.tridentLease(pv, node, time.Minute, 0)
		w.waitingPod("app", "conc-app-"+pv, node, "conc-"+pv)
		want["trident/"+pv] = true
	}

	reads := &podListBarrier{Reader: env.Client, n: n, release: make(chan struct{})}
	g := &facts.Gatherer{Reader: reads, Config: facts.DefaultConfig(), Clock: w}
	got, err := g.Scan(context.Background(), facts.ScanOptions{LeaseAge: 10 * time.Minute})
	require.NoError(t, err)

	var leases []string
	for _, f := range got {
		if want[f.Lease] {
			leases = append(leases, f.Lease)
			assert.NotEmpty(t, f.Symptoms, "%s: the pods were read: %+v", f.Lease, f)
		}
	}
	assert.Equal(t, []string{"trident/pvc-conc-0", "trident/pvc-conc-1", "trident/pvc-conc-2"}, leases, "each stuck Lease, in order")
	assert.GreaterOrEqual(t, reads.most(), n, "the stuck Leases' pods are read at once")
}

// podListBarrier holds each list of workload pods until n are in flight, or for a
// second, and records the most it saw in flight at once.
type podListBarrier struct {
	client.Reader
	n       int
	release chan struct{}

	once     sync.Once
	mu       sync.Mutex
	inFlight int
	peak     int
}

func (c *podListBarrier) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := &client.ListOptions{}
	o.ApplyOptions(opts)
	if _, ok := list.(*corev1.PodList); ok && o.Namespace != facts.DefaultTridentNamespace {
		c.mu.Lock()
		c.inFlight++
		c.peak = max(c.peak, c.inFlight)
		if c.inFlight == c.n {
			c.once.Do(func() { close(c.release) })
		}
		c.mu.Unlock()
		select {
		case <-c.release:
		case <-time.After(time.Second):
		}
		defer func() {
			c.mu.Lock()
			c.inFlight--
			c.mu.Unlock()
		}()
	}
	return c.Reader.List(ctx, list, opts...)
}

func (c *podListBarrier) most() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}
