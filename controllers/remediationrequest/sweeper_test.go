package remediationrequest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/sweeper"
	"github.com/remediator/remediator/remediations"
)

// markedNode creates a node cordoned the way the cordon step does (its field
// manager, its mark naming owner), or only marked when cordoned is false.
func markedNode(t *testing.T, name, owner string, cordoned bool) {
	t.Helper()
	ctx := context.Background()
	// Labelled as a kubelet registers it: the API server tracks no field managers
	// on an object created without a field of its own.
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	require.NoError(t, env.Client.Create(ctx, n))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	before := n.DeepCopy()
	n.Spec.Unschedulable = cordoned
	n.Annotations = map[string]string{remediations.CordonedByAnnotation: owner}
	require.NoError(t, env.Client.Patch(ctx, n, client.MergeFrom(before), client.FieldOwner(remediations.FieldManager)))
}

// requestIn creates a request and sets its phase, as a controller would have.
func requestIn(t *testing.T, name string, phase v1alpha1.Phase) string {
	t.Helper()
	key := newRequest(t, name, "pvc-"+name, nil)
	rr := &v1alpha1.RemediationRequest{}
	require.NoError(t, env.Client.Get(context.Background(), key, rr))
	rr.Status.Phase = phase
	require.NoError(t, env.Client.Status().Update(context.Background(), rr))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), rr) })
	return key.Namespace + "/" + key.Name
}

func nodeState(t *testing.T, name string) (cordoned bool, mark string) {
	t.Helper()
	n := &corev1.Node{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n))
	return n.Spec.Unschedulable, n.Annotations[remediations.CordonedByAnnotation]
}

// TestSweeperReleasesLeftoverCordons: a node keeps this controller's cordon only
// while the request that made it may still need it. Seen failing before: there
// was no sweeper (the test did not build), and such nodes stayed cordoned for good.
func TestSweeperReleasesLeftoverCordons(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator")
	failed := requestIn(t, "sweep-failed", v1alpha1.PhaseFailed)
	rejected := requestIn(t, "sweep-rejected", v1alpha1.PhaseRejected)
	succeeded := requestIn(t, "sweep-succeeded", v1alpha1.PhaseSucceeded)
	running := requestIn(t, "sweep-running", v1alpha1.PhaseRunning)
	waiting := requestIn(t, "sweep-waiting", v1alpha1.PhaseWaiting)
	cases := []struct {
		node, owner    string
		cordoned       bool
		assert         func(t *testing.T, name string)
		wantCordoned   bool
		wantMarkRemain bool
	}{
		{node: "sweep-gone", owner: "remediator/sweep-never-existed", cordoned: true},
		{node: "sweep-failed", owner: failed, cordoned: true},
		{node: "sweep-rejected", owner: rejected, cordoned: true},
		{node: "sweep-succeeded", owner: succeeded, cordoned: true},
		{node: "sweep-running", owner: running, cordoned: true, wantCordoned: true, wantMarkRemain: true},
		{node: "sweep-waiting", owner: waiting, cordoned: true, wantCordoned: true, wantMarkRemain: true},
		{node: "sweep-bad-mark", owner: "no-slash", cordoned: true, wantCordoned: true, wantMarkRemain: true},
		// Someone uncordoned it already: only the stale mark goes.
		{node: "sweep-uncordoned", owner: "remediator/sweep-never-existed", cordoned: false},
		// An administrator cordoned it again after the controller: theirs now.
		{node: "sweep-asserted", owner: failed, cordoned: true, wantCordoned: true, assert: func(t *testing.T, name string) {
			n := &corev1.Node{}
			require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: name}, n))
			for _, v := range []bool{false, true} {
				before := n.DeepCopy()
				n.Spec.Unschedulable = v
				require.NoError(t, env.Client.Patch(ctx, n, client.MergeFrom(before), client.FieldOwner("kubectl-cordon")))
			}
		}},
	}
	for _, tc := range cases {
		markedNode(t, tc.node, tc.owner, tc.cordoned)
		if tc.assert != nil {
			tc.assert(t, tc.node)
		}
	}
	// A node cordoned before any playbook never carries the mark: never touched.
	before := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sweep-cordoned-before"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	require.NoError(t, env.Client.Create(ctx, before))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), before) })

	require.NoError(t, (&sweeper.Sweeper{Client: env.Client, Reader: env.Client}).Sweep(ctx))
	for _, tc := range cases {
		cordoned, mark := nodeState(t, tc.node)
		assert.Equal(t, tc.wantCordoned, cordoned, "node %s (mark %s): cordoned", tc.node, tc.owner)
		if tc.wantMarkRemain {
			assert.Equal(t, tc.owner, mark, "node %s: the mark of a request that may need it stays", tc.node)
		} else {
			assert.Empty(t, mark, "node %s: the mark of a finished or gone request goes", tc.node)
		}
	}
	cordoned, _ := nodeState(t, before.Name)
	assert.True(t, cordoned, "a node cordoned before the playbook stays cordoned")
}

// TestSweeperRunsWithTheManager: the manager the controller is wired with runs the
// sweeper, which sweeps when it starts.
func TestSweeperRunsWithTheManager(t *testing.T) {
	markedNode(t, "sweep-at-start", "remediator/sweep-at-start-gone", true)
	startManager(t)
	require.Eventually(t, func() bool {
		cordoned, mark := nodeState(t, "sweep-at-start")
		return !cordoned && mark == ""
	}, 20*time.Second, 100*time.Millisecond, "the manager's sweeper never released the leftover cordon")
}
