//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestReregisterInATenantNamespaceEvictsNothing: a reregister-csi-driver request
// that names a tenant's namespace as its Trident namespace, where a Running pod
// carries the node plugin's label, on a healthy node whose CSINode lacks the driver.
// The controller's settings do not list that namespace, so nothing is read there:
// the request is rejected and says why, and the tenant's pod and the node are left
// as they were. Without spec.tridentNamespace the request looks in Trident's own
// namespace, where no node-plugin pod runs on that node, and restarts nothing either.
func TestReregisterInATenantNamespaceEvictsNothing(t *testing.T) {
	startController(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-tenant-rr")
	tenant := namespace(t, "e2e-tenant")

	// A healthy kwok node that trident-csi does not run on (its nodeSelector wants
	// kubernetes.io/os=linux), with a CSINode that lists no driver.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        "e2e-tenant-" + rand.String(5),
		Labels:      map[string]string{"type": "kwok"},
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
	}}
	create(t, node)
	create(t, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node.Name,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}}})
	// The tenant's pod, labelled as Trident's node plugin.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "tenant-app", Labels: map[string]string{"app": simPodLabel}},
		Spec: corev1.PodSpec{
			NodeName:                      node.Name,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.example/tenant-app:1"}},
		},
	}
	create(t, pod)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n := &corev1.Node{}
		require.NoError(c, k8s.Get(ctx, types.NamespacedName{Name: node.Name}, n))
		assert.True(c, nodeReady(n), "node %s is not Ready: %+v", node.Name, n.Status.Conditions)
		p := &corev1.Pod{}
		require.NoError(c, k8s.Get(ctx, types.NamespacedName{Namespace: tenant, Name: pod.Name}, p))
		assert.True(c, simPodReady(p), "tenant pod not Running and Ready: %+v", p.Status)
	}, 60*time.Second, poll, "node %s Ready with the tenant's pod running on it", node.Name)
	d, _ := simDrivers(t, node.Name)
	require.NotContains(t, d, simDriver, "CSINode %s lists %s", node.Name, simDriver)

	untouched := func(t *testing.T, what string) {
		t.Helper()
		p := &corev1.Pod{}
		if assert.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: tenant, Name: pod.Name}, p), "%s: the tenant's pod is gone", what) {
			assert.Equal(t, pod.UID, p.UID, "%s: the tenant's pod was replaced", what)
			assert.Nil(t, p.DeletionTimestamp, "%s: the tenant's pod is being deleted", what)
		}
		n := &corev1.Node{}
		if assert.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: node.Name}, n)) {
			assert.False(t, n.Spec.Unschedulable, "%s: node %s cordoned", what, node.Name)
		}
	}

	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation:      v1alpha1.RemediationReregisterCSIDriver,
		TridentNamespace: tenant,
		Target:           v1alpha1.Target{Node: node.Name},
		Reason:           "driver name csi.trident.netapp.io not found in the list of registered CSI drivers on " + node.Name,
	})
	rr := waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, describe(rr))
	dec := decision(t, rr)
	assert.Equal(t, "target-unresolved", dec.Rule, describe(rr))
	assert.Contains(t, dec.Message, `spec.tridentNamespace "`+tenant+`" is not a Trident namespace of this controller, which acts only in "`+tridentNS+`"`, describe(rr))
	assert.Contains(t, dec.Message, "allowed-trident-namespaces", "the message names the setting: %s", describe(rr))
	if f := rr.Status.Facts; assert.NotNil(t, f, describe(rr)) {
		assert.Nil(t, f.CSI, "facts read in the tenant's namespace: %+v", f.CSI)
	}
	if c := condition(rr, v1alpha1.ConditionAccepted); assert.NotNil(t, c, "Accepted condition: %s", describe(rr)) {
		assert.Equal(t, metav1.ConditionFalse, c.Status, "Accepted: %+v", c)
		assert.Contains(t, c.Message, "is not a Trident namespace of this controller", "Accepted: %+v", c)
	}
	// Give a wrongly started playbook the time to act before looking.
	time.Sleep(3 * time.Second)
	untouched(t, "request naming the tenant's namespace")

	// In Trident's own namespace no node-plugin pod runs on that node: the tenant's
	// pod, wherever it runs, is not one.
	key = request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReregisterCSIDriver,
		Target:      v1alpha1.Target{Node: node.Name},
		Reason:      "the same node, in Trident's namespace",
	})
	rr = waitPhase(t, key, 60*time.Second, v1alpha1.PhaseRejected, v1alpha1.PhaseRunning, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed)
	require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, describe(rr))
	assert.Equal(t, "no-plugin-pod", decision(t, rr).Rule, describe(rr))
	time.Sleep(3 * time.Second)
	untouched(t, "request in Trident's namespace")
}
