//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/harness/helmchart"
)

// remediatorCLI runs bin/remediator with args as an operator would, and returns its
// output.
func remediatorCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(root, "bin", "remediator"), append(args, "--kubeconfig", kubeconfig)...).CombinedOutput()
	require.NoError(t, err, "remediator %v:\n%s", args, out)
	return string(out)
}

// remediatorCLIResult runs bin/remediator with args and returns its output and its
// error, for a command that is expected to fail.
func remediatorCLIResult(args ...string) (string, error) {
	out, err := exec.Command(filepath.Join(root, "bin", "remediator"), append(args, "--kubeconfig", kubeconfig)...).CombinedOutput()
	return string(out), err
}

// TestOnlyTheOnCallGroupMayPause: the stop button's guard on the local cluster, with
// the chart's own objects (templates/pause.yaml: the Role and RoleBinding for
// pause.groups and the ValidatingAdmissionPolicy) and the real command, run as an
// operator would run it, impersonated with the kubeconfig flags it takes like kubectl
// (--as, --as-group).
//
//   - alice, in devs and with no RBAC on ConfigMaps: `remediator pause` is Forbidden by
//     RBAC, the error names the missing permission (get on configmaps in the namespace),
//     and nothing is written.
//   - bob, in remediator:on-call (the chart's default pause.groups): pause and resume
//     succeed, and the ConfigMap records him.
//   - carol, in devs but bound to the built-in edit ClusterRole in the namespace (a
//     team's usual grant, not the chart's; the chart grants ConfigMap writes to the
//     on-call groups only): RBAC lets her write ConfigMaps there, so the admission
//     policy alone refuses her, both the command and kubectl writing paused=true
//     directly; the pause ConfigMap stays as bob left it.
//
// Without the Role or its RoleBinding bob is refused; without the policy carol's
// writes go through: either way this test fails.
func TestOnlyTheOnCallGroupMayPause(t *testing.T) {
	ctx := context.Background()
	system := namespace(t, "e2e-pause-guard")
	const release = "pauseguard"
	objs, err := helmchart.Render(release, system, map[string]any{"trident": map[string]any{"namespace": tridentNS}})
	require.NoError(t, err)
	applied := map[string]int{}
	for _, o := range objs {
		if !strings.HasSuffix(o.GetName(), "-pause") {
			continue
		}
		switch o.GetKind() {
		case "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			obj := o.DeepCopy()
			require.NoError(t, k8s.Create(ctx, obj), "applying rendered %s %s", o.GetKind(), o.GetName())
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
			applied[o.GetKind()]++
		}
	}
	t.Logf("applied the chart's pause objects: %v", applied)
	key := types.NamespacedName{Namespace: system, Name: "remediator-pause"}
	pauseCM := key.String()

	// carol: edit in the namespace, outside the on-call groups.
	create(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: "devs-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{userSubject("carol")},
	})
	// RBAC and admission policies take a moment to be in force. Wait until the API
	// server's authorizer lets bob create ConfigMaps and carol too (RBAC), and, when the
	// chart rendered a policy, until it refuses a dry run of carol's pause (nothing is
	// stored either way).
	allowed := func(c *assert.CollectT, user, group, verb string) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{group, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: system, Verb: verb, Resource: "configmaps", Name: key.Name},
		}}
		require.NoError(c, k8s.Create(ctx, sar))
		return sar.Status.Allowed
	}
	carolCM := func(paused string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: key.Name},
			Data: map[string]string{v1alpha1.PauseKeyPaused: paused, v1alpha1.PauseKeyReason: "I think so", v1alpha1.PauseKeyBy: "carol"}}
	}
	carol := impersonate(t, "carol", "devs")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, allowed(c, "bob", "remediator:on-call", "create"), "bob may create ConfigMaps")
		assert.True(c, allowed(c, "carol", "devs", "create"), "carol may create ConfigMaps")
		if applied["ValidatingAdmissionPolicyBinding"] > 0 {
			err := carol.Create(ctx, carolCM("true"), client.DryRunAll)
			if assert.Error(c, err, "the pause policy refuses carol's dry run") {
				assert.Contains(c, err.Error(), "ValidatingAdmissionPolicy")
			}
		}
	}, 30*time.Second, poll, "the chart's pause RBAC and policy in force")

	unchanged := func(what string, want *corev1.ConfigMap) {
		t.Helper()
		got := &corev1.ConfigMap{}
		err := k8s.Get(ctx, key, got)
		if want == nil {
			assert.True(t, apierrors.IsNotFound(err), "%s: want no pause ConfigMap, got %v %v", what, got.Data, err)
			return
		}
		require.NoError(t, err, what)
		assert.Equal(t, want.ResourceVersion, got.ResourceVersion, "%s: the pause ConfigMap was written", what)
		assert.Equal(t, want.Data, got.Data, "%s: the pause ConfigMap changed", what)
	}

	// alice, outside the group, no RBAC: the command says who she is, what she may not
	// do, what RBAC is missing, and the chart values and commands that grant it.
	alice := []string{"--as", "alice", "--as-group", "devs", "--pause-configmap", pauseCM}
	out, err := remediatorCLIResult(append([]string{"pause", "--reason", "x"}, alice...)...)
	require.Error(t, err, "alice paused:\n%s", out)
	assert.Contains(t, out, "alice may not pause Remediator: RBAC refused writing the pause ConfigMap "+pauseCM, out)
	assert.Contains(t, out, "pause.groups, pause.users and pause.serviceAccounts", out)
	assert.Contains(t, out, "--set 'pause.users={alice}'", out)
	assert.Contains(t, out, "kubectl create rolebinding RELEASE_FULLNAME-pause-alice -n "+system, out)
	assert.Contains(t, out, `configmaps "remediator-pause" is forbidden: User "alice" cannot get resource "configmaps" in API group "" in the namespace "`+system+`"`, out)
	unchanged("after alice's pause", nil)

	// bob, on call: paused, and recorded.
	bob := []string{"--as", "bob", "--as-group", "remediator:on-call", "--pause-configmap", pauseCM}
	out, err = remediatorCLIResult(append([]string{"pause", "--reason", "INC-4711: array firmware upgrade"}, bob...)...)
	require.NoError(t, err, "bob, on call, could not pause:\n%s", out)
	assert.Contains(t, out, "Paused by bob: INC-4711", out)
	paused := &corev1.ConfigMap{}
	require.NoError(t, k8s.Get(ctx, key, paused))
	assert.Equal(t, "true", paused.Data[v1alpha1.PauseKeyPaused])
	assert.Equal(t, "bob", paused.Data[v1alpha1.PauseKeyBy])

	// alice cannot resume (or pause again) either.
	for _, args := range [][]string{{"resume", "--reason", "x"}, {"pause", "--reason", "x"}} {
		out, err = remediatorCLIResult(append(args, alice...)...)
		require.Error(t, err, "alice %s:\n%s", args[0], out)
		assert.Contains(t, out, "alice may not "+args[0]+" Remediator", out)
		assert.Contains(t, out, `User "alice" cannot get resource "configmaps"`, out)
		unchanged("after alice's "+args[0], paused)
	}

	// carol holds edit: RBAC lets her write the ConfigMap, the chart's policy does not.
	carolArgs := []string{"--as", "carol", "--as-group", "devs", "--pause-configmap", pauseCM}
	out, err = remediatorCLIResult(append([]string{"resume", "--reason", "x"}, carolArgs...)...)
	require.Error(t, err, "carol resumed:\n%s", out)
	assert.Contains(t, out, "ValidatingAdmissionPolicy", out)
	assert.Contains(t, out, "carol may not pause or resume Remediator: only the on-call groups remediator:on-call, system:masters may write ConfigMap "+pauseCM, out)
	assert.Contains(t, out, "carol may not resume Remediator: the chart's admission policy refused writing the pause ConfigMap "+pauseCM, out)
	assert.Contains(t, out, "cluster-admin through a ClusterRoleBinding is not enough", out)
	assert.Contains(t, out, "--set 'pause.users={carol}'", out)
	unchanged("after carol's resume", paused)

	// ... nor kubectl writing it directly, with her own name as the author.
	kc := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(root, "bin", "kubectl"), append([]string{"--kubeconfig", kubeconfig, "--as", "carol", "--as-group", "devs", "-n", system}, args...)...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	for _, args := range [][]string{
		{"patch", "configmap", key.Name, "--type", "merge", "-p", `{"data":{"paused":"false","by":"carol","reason":"resumed by hand"}}`},
		{"delete", "configmap", key.Name},
	} {
		out, err = kc(args...)
		require.Error(t, err, "kubectl %s as carol:\n%s", args[0], out)
		assert.Contains(t, out, "carol may not pause or resume Remediator", "kubectl %s: %s", args[0], out)
		unchanged("after carol's kubectl "+args[0], paused)
	}
	require.NoError(t, k8s.Delete(ctx, paused))
	out, err = kc("create", "configmap", key.Name, "--from-literal=paused=true", "--from-literal=by=carol", "--from-literal=reason=I think so")
	require.Error(t, err, "kubectl create as carol:\n%s", out)
	assert.Contains(t, out, "carol may not pause or resume Remediator", out)
	unchanged("after carol's kubectl create", nil)

	// bob pauses again and resumes: the on-call group keeps the button.
	remediatorCLI(t, append([]string{"pause", "--reason", "INC-4712"}, bob...)...)
	out = remediatorCLI(t, append([]string{"resume", "--reason", "firmware done"}, bob...)...)
	assert.Contains(t, out, "Resumed by bob", out)
	resumed := &corev1.ConfigMap{}
	require.NoError(t, k8s.Get(ctx, key, resumed))
	assert.Equal(t, "false", resumed.Data[v1alpha1.PauseKeyPaused])
	assert.Equal(t, "bob", resumed.Data[v1alpha1.PauseKeyBy])
}

// TestPauseHoldsAnEvictionAndResumeFinishes: the stop button on the local cluster.
// A disruptive playbook waits for an eviction a PodDisruptionBudget refuses; paused
// with `remediator pause` (kubectl remediator pause), it holds at that boundary: the
// budget lifted, the eviction still does not happen, the node stays cordoned. A
// request filed meanwhile waits with reason Paused. `remediator resume` lets both
// finish.
func TestPauseHoldsAnEvictionAndResumeFinishes(t *testing.T) {
	ctx := context.Background()
	system := namespace(t, "e2e-pause-system")
	pauseCM := system + "/remediator-pause"
	startController(t, "--pause-configmap", pauseCM)
	h := heldAfterCordon(t, "e2e-pause", "kwok-node-0", "retained Lease on the db volume, paused mid-run")

	out := remediatorCLI(t, "pause", "--reason", "INC-4711: storage array firmware upgrade", "--pause-configmap", pauseCM)
	assert.Contains(t, out, "Paused by ")
	isPaused := func(rr *v1alpha1.RemediationRequest) bool {
		c := condition(rr, v1alpha1.ConditionProgressing)
		return c != nil && c.Reason == v1alpha1.ReasonPaused
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rr := &v1alpha1.RemediationRequest{}
		require.NoError(c, k8s.Get(ctx, h.key, rr))
		assert.True(c, isPaused(rr), "held: %s", describe(rr))
	}, 60*time.Second, poll, "the running playbook held")
	// The budget no longer refuses; a playbook that was not held would evict now
	// (it retries every 5 s).
	require.NoError(t, k8s.Delete(ctx, h.pdb))
	time.Sleep(8 * time.Second)
	rr := &v1alpha1.RemediationRequest{}
	require.NoError(t, k8s.Get(ctx, h.key, rr))
	assert.Equal(t, v1alpha1.PhaseRunning, rr.Status.Phase, describe(rr))
	assert.True(t, isPaused(rr), describe(rr))
	assert.True(t, leaseExists(t, h.pv), "the Lease is kept while paused")
	node := &corev1.Node{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: "kwok-node-0"}, node))
	assert.True(t, node.Spec.Unschedulable, "a held playbook keeps its cordon")
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(ctx, pods))
	for _, p := range pods.Items {
		if p.Namespace == h.ns {
			assert.Nil(t, p.DeletionTimestamp, "pod %s/%s evicted while paused", p.Namespace, p.Name)
		}
	}

	down := extraNode(t, "e2e-pause-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	ns := namespace(t, "e2e-pause-new")
	pv, _ := luksVolume(t, ns, down, 25*time.Minute, 2)
	next := request(t, ns, v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target: v1alpha1.Target{PersistentVolume: pv}, Reason: "holder shut down while Remediator is paused"})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &v1alpha1.RemediationRequest{}
		require.NoError(c, k8s.Get(ctx, next, got))
		assert.Equal(c, v1alpha1.PhaseWaiting, got.Status.Phase, describe(got))
		assert.True(c, isPaused(got), describe(got))
	}, 60*time.Second, poll, "the new request waits, Paused")
	assert.True(t, leaseExists(t, pv), "nothing starts while paused")

	remediatorCLI(t, "resume", "--reason", "firmware done", "--pause-configmap", pauseCM)
	for _, key := range []types.NamespacedName{h.key, next} {
		got := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
		require.Equal(t, v1alpha1.PhaseSucceeded, got.Status.Phase, describe(got))
	}
	assert.False(t, leaseExists(t, h.pv))
	assert.False(t, leaseExists(t, pv))
}

// TestExcludedNodeIsRejected: remediator.io/exclude=true on a node keeps every
// playbook off it; the request says so, and the Lease stays.
func TestExcludedNodeIsRejected(t *testing.T) {
	startController(t)
	down := extraNode(t, "e2e-excluded", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	ctx := context.Background()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: down}, node); err != nil {
			return err
		}
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[v1alpha1.LabelExclude] = "true"
		return k8s.Update(ctx, node)
	}))
	ns := namespace(t, "e2e-excluded")
	pv, _ := luksVolume(t, ns, down, 25*time.Minute, 2)
	key := request(t, ns, v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target: v1alpha1.Target{PersistentVolume: pv}, Reason: "holder shut down, but the node is kept out"})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseSucceeded)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, describe(rr))
	c := condition(rr, v1alpha1.ConditionAccepted)
	require.NotNil(t, c, describe(rr))
	assert.Equal(t, "NodeExcluded", c.Reason, describe(rr))
	assert.True(t, leaseExists(t, pv))
}
