package remediations

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// shutdownHolder creates a node that classifies as Shutdown and a Trident Lease it
// holds, and returns an Execution whose facts are those of the decision, gathered the way
// the controller gathers them, and which observes fresh facts the same way.
func shutdownHolder(t *testing.T) (*Execution, *coordinationv1.Lease) {
	t.Helper()
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "trident"}})
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-" + rand.String(5)},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Effect: corev1.TaintEffectNoExecute}}},
	}
	mustCreate(t, node)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-" + rand.String(8)},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node.Name)},
	}
	mustCreate(t, lease)
	rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "rr"},
		Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target: v1alpha1.Target{PersistentVolume: lease.Name}, Reason: "holder powered off"}}
	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig()}
	f, err := g.Gather(context.Background(), rr)
	require.NoError(t, err)
	require.Equal(t, v1alpha1.NodeShutdown, f.Node.State)
	rr.Status.Facts = f
	rr.Status.Decision = &v1alpha1.Decision{Allowed: true, Playbook: "node-shutdown", Rule: "holder-shutdown"}
	pb, err := DefaultPlaybooks()
	require.NoError(t, err)
	return &Execution{RR: rr, Client: env.Client, Reader: env.Client, Fresh: gathered{g, rr}, Now: time.Now(), Timeouts: DefaultTimeouts, Playbooks: pb}, lease
}

// gathered observes through the controller's gatherer, reading live, as the
// controller wires it in.
type gathered struct {
	g  *facts.Gatherer
	rr *v1alpha1.RemediationRequest
}

func (o gathered) FreshFacts(ctx context.Context) (*v1alpha1.Facts, []string, error) {
	f, err := o.g.Gather(ctx, o.rr)
	return f, nil, err
}

func (o gathered) NodePluginPods(ctx context.Context, namespace, node string) ([]corev1.Pod, error) {
	return o.g.Config.NodePluginPods(ctx, env.Client, namespace, node)
}

// runStep advances a playbook whose only step has been started, as the runner does
// on the reconcile after the one that journaled the start.
func runStep(t *testing.T, r *Execution, step string) Progress {
	t.Helper()
	now := metav1.NewTime(r.Now)
	r.RR.Status.Steps = []v1alpha1.StepStatus{{Name: step, State: v1alpha1.StepRunning, StartedAt: &now}}
	p, err := Advance(context.Background(), r)
	require.NoError(t, err)
	return p
}

func leaseGone(t *testing.T, l *coordinationv1.Lease) bool {
	t.Helper()
	err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(l), &coordinationv1.Lease{})
	if apierrors.IsNotFound(err) {
		return true
	}
	require.NoError(t, err)
	return false
}

func TestDeleteLeasePreconditions(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		// change alters the cluster after the decision.
		change   func(t *testing.T, r *Execution, l *coordinationv1.Lease)
		wantFail string // "" means the Lease is deleted
	}{
		{"unchanged Lease is deleted", func(*testing.T, *Execution, *coordinationv1.Lease) {}, ""},
		{"already released counts as done", func(t *testing.T, _ *Execution, l *coordinationv1.Lease) {
			require.NoError(t, env.Client.Delete(ctx, l))
		}, ""},
		{"re-acquired by another node", func(t *testing.T, _ *Execution, l *coordinationv1.Lease) {
			l.Spec.HolderIdentity = ptr.To("kwok-node-2")
			require.NoError(t, env.Client.Update(ctx, l))
		}, `to "kwok-node-2" since the decision`},
		{"changed in place", func(t *testing.T, _ *Execution, l *coordinationv1.Lease) {
			l.Spec.LeaseDurationSeconds = ptr.To[int32](30)
			require.NoError(t, env.Client.Update(ctx, l))
		}, "changed since the decision"},
		{"re-created", func(t *testing.T, _ *Execution, l *coordinationv1.Lease) {
			require.NoError(t, env.Client.Delete(ctx, l))
			n := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name}, Spec: l.Spec}
			require.NoError(t, env.Client.Create(ctx, n))
		}, "re-created since the decision"},
		{"holder node state changed", func(t *testing.T, r *Execution, _ *coordinationv1.Lease) {
			r.RR.Status.Facts.Node.State = v1alpha1.NodeUnreachable
		}, "not Unreachable as when decided"},
		{"holder node deleted", func(t *testing.T, r *Execution, _ *coordinationv1.Lease) {
			require.NoError(t, env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.RR.Status.Facts.Node.Name}}))
		}, "is now NotFound, not Shutdown as when decided"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, l := shutdownHolder(t)
			tc.change(t, r, l)
			p := runStep(t, r, "deleteLease")
			if tc.wantFail == "" {
				require.Nil(t, p.Failure)
				assert.Equal(t, v1alpha1.StepSucceeded, r.RR.Status.Steps[0].State)
				assert.True(t, leaseGone(t, l), "the Lease must be gone")
				return
			}
			require.NotNil(t, p.Failure, "want a failure mentioning %q", tc.wantFail)
			assert.Contains(t, p.Failure.Message, tc.wantFail)
			assert.False(t, leaseGone(t, l), "the Lease was deleted despite the failed precondition")
		})
	}
}

func TestAdvanceJournalsOneStepAtATime(t *testing.T) {
	ctx := context.Background()
	r, l := shutdownHolder(t)
	pb, err := DefaultPlaybooks()
	require.NoError(t, err)
	r.RR.Status.Steps, err = pb.Plan("node-shutdown")
	require.NoError(t, err)

	// The first advance must only journal the start.
	p, err := Advance(ctx, r)
	require.NoError(t, err, "first advance")
	st := r.RR.Status.Steps[0]
	require.True(t, p.Started, "first advance must journal the start: %+v", p)
	require.Equal(t, v1alpha1.StepRunning, st.State, "first advance: %+v", st)
	require.NotNil(t, st.StartedAt, "first advance: %+v", st)
	require.False(t, leaseGone(t, l), "first advance must only journal the start, not delete the Lease")
	started := *st.StartedAt

	// The second advance must run the step and finish: the last step's success
	// finishes the playbook in the same journal write.
	r.Now = r.Now.Add(time.Second)
	p, err = Advance(ctx, r)
	require.NoError(t, err, "second advance")
	st = r.RR.Status.Steps[0]
	require.True(t, p.Finished, "second advance must finish the playbook: %+v", p)
	require.Equal(t, v1alpha1.StepSucceeded, st.State, "second advance: %+v", st)
	require.True(t, st.StartedAt.Equal(&started), "second advance changed the start %v, was %v", st.StartedAt, started)
	require.Equal(t, string(l.UID), st.ObjectUID, "second advance: %+v", st)
	require.True(t, leaseGone(t, l), "second advance must delete the Lease")

	// A finished playbook stays finished without a transition.
	p, err = Advance(ctx, r)
	require.NoError(t, err, "advance of a finished playbook")
	require.True(t, p.Finished, "a finished playbook stays finished: %+v", p)
	require.Empty(t, p.Transition, "a finished playbook makes no transition: %+v", p)
}

func TestCordonRestoresOnlyWhatItChanged(t *testing.T) {
	ctx := context.Background()
	for _, already := range []bool{false, true} {
		r, _ := shutdownHolder(t)
		name := r.RR.Status.Facts.Lease.HolderIdentity
		node := &corev1.Node{}
		require.NoError(t, env.Client.Get(ctx, types.NamespacedName{Name: name}, node))
		if already {
			node.Spec.Unschedulable = true
			require.NoError(t, env.Client.Update(ctx, node))
		}
		out, err := (cordon{}).Run(ctx, r)
		require.NoError(t, err, "cordon (already=%v)", already)
		require.True(t, out.Done, "cordon (already=%v): %+v", already, out)
		// A second run (a restart) changes nothing and reports the same.
		out, err = (cordon{}).Run(ctx, r)
		require.NoError(t, err, "cordon again (already=%v)", already)
		require.True(t, out.Done, "cordon again (already=%v): %+v", already, out)
		require.Equal(t, already, strings.Contains(out.Message, "already"), "cordon again (already=%v): message %q", already, out.Message)
		_, err = Restore(ctx, r, "test")
		require.NoError(t, err)
		r.RR.Status.Steps = []v1alpha1.StepStatus{{Name: "cordon"}, {Name: "uncordon"}}
		_, err = Restore(ctx, r, "test")
		require.NoError(t, err)
		require.NoError(t, env.Client.Get(ctx, types.NamespacedName{Name: name}, node))
		assert.Equal(t, already, node.Spec.Unschedulable, "already=%v: unschedulable after restore", already)
		assert.Empty(t, node.Annotations[CordonedByAnnotation], "already=%v: annotations after restore %v", already, node.Annotations)
		assert.Equal(t, v1alpha1.StepSucceeded, r.RR.Status.Steps[1].State, "restore not journaled on uncordon: %+v", r.RR.Status.Steps)
	}
}

func TestPlaybooksAreValid(t *testing.T) {
	pb, err := DefaultPlaybooks()
	require.NoError(t, err)
	for name, want := range map[string]int{"node-shutdown": 1, "fenced-unreachable": 1, "healthy-move-workload": 5, "restart-node-plugin": 5} {
		plan, err := pb.Plan(name)
		if assert.NoError(t, err, name) {
			assert.Len(t, plan, want, "%s: steps", name)
		}
	}
	_, err = pb.Plan("force-delete")
	assert.Error(t, err, "unknown playbook planned")
	// Only playbooks that disturb running workloads count against the cap; an unknown
	// playbook is capped (what is not known to be harmless is).
	for name, want := range map[string]bool{"node-shutdown": false, "fenced-unreachable": false,
		"healthy-move-workload": true, "restart-node-plugin": true, "force-delete": true} {
		assert.Equal(t, want, pb.Disruptive(name), "Disruptive(%s)", name)
	}
}

// TestPluginPodEvictionRechecksOverlap: the CSI playbook used to evict the plugin
// pod recorded at decision time after a UID check only. If the trident-csi
// DaemonSet is recreated in between, a second plugin pod overlaps on the node and
// evicting the first reproduces incident B. The floor counts the plugin pods again,
// live, right before the eviction.
func TestPluginPodEvictionRechecksOverlap(t *testing.T) {
	ctx := context.Background()
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "trident"}})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + rand.String(5)}}
	mustCreate(t, node)
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	require.NoError(t, env.Client.Status().Update(ctx, node))
	mustCreate(t, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: node.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node.Name), RenewTime: ptr.To(metav1.NowMicro())}})
	mustCreate(t, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node.Name}})
	plugin := func(name string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: name, Labels: map[string]string{"app": "node.csi.trident.netapp.io"},
				// Node-plugin pods are the DaemonSet's; envtest runs no DaemonSet
				// controller (nor the garbage collector), so the owner is only named.
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "trident-csi",
					UID: "0d5e7c8a-1b2c-4d3e-8f90-a1b2c3d4e5f6", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "trident-main", Image: "netapp/trident:25.06"}}},
		}
		mustCreate(t, p)
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		require.NoError(t, env.Client.Status().Update(ctx, p))
		return p
	}
	old := plugin("trident-csi-" + rand.String(5))

	rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "csi"},
		Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReregisterCSIDriver,
			Target: v1alpha1.Target{Node: node.Name}, Reason: "driver missing from CSINode"}}
	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig()}
	decided, err := g.Gather(ctx, rr)
	require.NoError(t, err)
	require.Len(t, decided.CSI.PluginPods, 1)
	rr.Status.Facts = decided
	rr.Status.Decision = &v1alpha1.Decision{Allowed: true, Playbook: "restart-node-plugin", Rule: "driver-deregistered"}
	pb, err := DefaultPlaybooks()
	require.NoError(t, err)
	r := &Execution{RR: rr, Client: env.Client, Reader: env.Client, Fresh: gathered{g, rr}, Now: time.Now(), Timeouts: DefaultTimeouts, Playbooks: pb}

	// The DaemonSet is recreated after the decision: a second plugin pod lands.
	plugin("trident-csi-2-" + rand.String(5))
	now := metav1.NewTime(r.Now)
	r.RR.Status.Steps = []v1alpha1.StepStatus{{Name: "cordon", State: v1alpha1.StepSucceeded},
		{Name: "deletePluginPod", State: v1alpha1.StepRunning, StartedAt: &now}, {Name: "waitPluginPodReady", State: v1alpha1.StepPending},
		{Name: "waitDriverRegistered", State: v1alpha1.StepPending}, {Name: "uncordon", State: v1alpha1.StepPending}}
	p, err := Advance(ctx, r)
	require.NoError(t, err)
	require.NotNil(t, p.Failure, "the eviction must be refused while two plugin pods overlap")
	assert.Equal(t, "PluginPodsOverlap", p.Failure.Reason)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(old), old))
	assert.Nil(t, old.DeletionTimestamp, "the plugin pod must not be evicted")
}

// TestRestoreUncordonsTheDecidedNode: when the floor fails a step because the Lease
// passed to another holder, the restore must uncordon the node this request
// cordoned, not the new holder named by the fresh facts (seen failing in the e2e:
// the first holder stayed cordoned).
func TestRestoreUncordonsTheDecidedNode(t *testing.T) {
	ctx := context.Background()
	r, l := shutdownHolder(t)
	name := r.RR.Status.Facts.Lease.HolderIdentity
	r.RR.Status.Steps = []v1alpha1.StepStatus{{Name: "cordon", State: v1alpha1.StepSucceeded}, {Name: "uncordon", State: v1alpha1.StepPending}}
	_, err := (cordon{}).Run(ctx, r)
	require.NoError(t, err)
	l.Spec.HolderIdentity = ptr.To("kwok-node-2")
	require.NoError(t, env.Client.Update(ctx, l))
	_, _, err = r.readFresh(ctx)
	require.NoError(t, err)
	require.Equal(t, "kwok-node-2", r.freshFacts.Lease.HolderIdentity)

	_, err = Restore(ctx, r, "the failure")
	require.NoError(t, err)
	node := &corev1.Node{}
	require.NoError(t, env.Client.Get(ctx, types.NamespacedName{Name: name}, node))
	assert.False(t, node.Spec.Unschedulable, "the node this request cordoned must be uncordoned")
	assert.Empty(t, node.Annotations[CordonedByAnnotation])
}

// TestDeleteLeaseConflictIsJudgedOnTheLiveLease: a 409 on the Lease delete fails the
// playbook only when the Lease really changed. A 409 the API server's preconditions
// did not produce (make chaos R2: a fault-injecting proxy; in life a webhook or a
// load-shedding API server) leaves the Lease unchanged, and the delete is retried
// with the same preconditions. Seen failing first: the unchanged case failed the
// playbook with lease-changed.
func TestDeleteLeaseConflictIsJudgedOnTheLiveLease(t *testing.T) {
	ctx := context.Background()
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "x", errors.New("injected"))
	cases := []struct {
		name string
		// before runs in place of the first delete, which answers 409 without acting.
		before   func(t *testing.T, l *coordinationv1.Lease)
		wantFail bool
		wantGone bool
	}{
		{"unchanged: retried, then deleted", func(*testing.T, *coordinationv1.Lease) {}, false, true},
		{"changed in between: fails closed", func(t *testing.T, l *coordinationv1.Lease) {
			cur := &coordinationv1.Lease{}
			require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(l), cur))
			cur.Spec.HolderIdentity = ptr.To("kwok-node-2")
			require.NoError(t, env.Client.Update(ctx, cur))
		}, true, false},
		{"gone in between (a lost reply): done", func(t *testing.T, l *coordinationv1.Lease) {
			require.NoError(t, env.Client.Delete(ctx, l))
		}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, l := shutdownHolder(t)
			wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
			require.NoError(t, err)
			first := true
			r.Client = interceptor.NewClient(wc, interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				if _, ok := obj.(*coordinationv1.Lease); ok && first {
					first = false
					tc.before(t, l)
					return conflict
				}
				return c.Delete(ctx, obj, opts...)
			}})
			now := metav1.NewTime(r.Now)
			r.RR.Status.Steps = []v1alpha1.StepStatus{{Name: "deleteLease", State: v1alpha1.StepRunning, StartedAt: &now}}
			p, err := Advance(ctx, r)
			switch {
			case tc.wantFail:
				require.NoError(t, err)
				require.NotNil(t, p.Failure)
				assert.Contains(t, p.Failure.Message, "changed at the moment of deletion")
				assert.False(t, leaseGone(t, l))
				return
			case tc.name == "unchanged: retried, then deleted":
				require.Error(t, err, "an unexplained conflict is retried, not a failure")
				assert.Contains(t, err.Error(), "the Lease is unchanged since the decision")
				assert.False(t, leaseGone(t, l), "nothing was deleted by the refused call")
				assert.Equal(t, v1alpha1.StepRunning, r.RR.Status.Steps[0].State)
				r.freshFacts = nil // the next reconcile re-reads
				p, err = Advance(ctx, r)
			}
			require.NoError(t, err)
			require.Nil(t, p.Failure)
			assert.Equal(t, v1alpha1.StepSucceeded, r.RR.Status.Steps[0].State)
			assert.Equal(t, tc.wantGone, leaseGone(t, l))
		})
	}
}

// TestShutdownReleaseAwaitsTheDetach: where the driver attaches, a shut-down
// holder's Lease goes only once the attach-detach controller has detached the volume
// from it; until then deleteLease waits and says on what.
func TestShutdownReleaseAwaitsTheDetach(t *testing.T) {
	ctx := context.Background()
	r, l := shutdownHolder(t)
	node := r.RR.Status.Facts.Node.Name
	const driver = "csi.trident.netapp.io"
	mustCreate(t, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: l.Name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: l.Name}},
		},
	})
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: facts.AttachmentName(l.Name, driver, node)},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(l.Name)}},
	}
	mustCreate(t, va)
	va.Status.Attached = true
	require.NoError(t, env.Client.Status().Update(ctx, va))

	p := runStep(t, r, "deleteLease")
	require.Nil(t, p.Failure)
	require.False(t, p.Finished)
	assert.Equal(t, v1alpha1.StepRunning, r.RR.Status.Steps[0].State)
	assert.Contains(t, r.RR.Status.Steps[0].Message, "VolumeAttachment "+va.Name+" still attaches PersistentVolume "+l.Name+" to it")
	assert.False(t, leaseGone(t, l), "the Lease went while the volume was attached to the shut-down holder")

	require.NoError(t, env.Client.Delete(ctx, va)) // the attach-detach controller detached it
	r.freshFacts = nil                             // the next reconcile reads afresh
	p = runStep(t, r, "deleteLease")
	require.Nil(t, p.Failure)
	assert.Equal(t, v1alpha1.StepSucceeded, r.RR.Status.Steps[0].State, r.RR.Status.Steps[0].Message)
	assert.True(t, leaseGone(t, l), "the Lease must be gone once the volume is detached")
}

// factsReader serves fixed fresh facts.
type factsReader struct{ f *v1alpha1.Facts }

func (s factsReader) FreshFacts(context.Context) (*v1alpha1.Facts, []string, error) {
	return s.f, nil, nil
}

func (factsReader) NodePluginPods(context.Context, string, string) ([]corev1.Pod, error) {
	return nil, nil
}

// TestWaitPodsGoneAwaitsTheUnmount: a healthy holder's pods gone is not enough; the
// wait ends when its kubelet no longer lists the volume in use.
func TestWaitPodsGoneAwaitsTheUnmount(t *testing.T) {
	cases := []struct {
		name     string
		f        *v1alpha1.Facts
		done     bool
		contains string
	}{
		{"pods still there", withVolume(leaseFacts(v1alpha1.NodeHealthy, "web-0"), true, true), false, "Waiting for pods to terminate: app/web-0"},
		{"pods gone, volume still in use", withVolume(leaseFacts(v1alpha1.NodeHealthy), true, true), false, "its kubelet still lists volume kubernetes.io/csi/csi.trident.netapp.io^pvc-1"},
		{"pods gone, volume unmounted", withVolume(leaseFacts(v1alpha1.NodeHealthy), false, true), true, "its kubelet no longer lists the volume in use"},
		{"pods gone, no volume evidence", leaseFacts(v1alpha1.NodeHealthy), true, "No pod that uses the volume is left"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := podsGone(context.Background(), &Execution{Fresh: factsReader{tc.f}})
			require.NoError(t, err)
			assert.Equal(t, tc.done, out.Done, out.Message)
			assert.Contains(t, out.Message, tc.contains)
			if !tc.done {
				assert.Positive(t, out.RequeueAfter)
			}
		})
	}
}
