//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

const tridentNS = "trident"

func create(t *testing.T, obj client.Object) {
	t.Helper()
	require.NoError(t, k8s.Create(context.Background(), obj), "creating %T %s", obj, obj.GetName())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
}

// luksVolume stages incident A's objects the way Trident leaves them: a bound RWX
// volume, a Lease named after the PV held by holder whose acquireTime is acquiredAgo,
// and `retained` LeaseRetained Warning events on it. acquireTime is the holder's
// clock: the controller counts the Lease's age from the later of it and the Lease's
// creationTimestamp (now, server time), so a backdated acquireTime does not make the
// Lease old. Tests that need an old Lease run the controller on shortGatePolicies.
func luksVolume(t *testing.T, ns, holder string, acquiredAgo time.Duration, retained int) (pv, pvc string) {
	t.Helper()
	pv, pvc = csiVolume(t, ns, true)
	strandLease(t, pv, holder, acquiredAgo, retained)
	return pv, pvc
}

// csiVolume creates a bound RWX PersistentVolume of Trident's driver and its claim in
// ns; luks marks it LUKS-encrypted, as Trident's volume attributes do. On a real node
// the project's node plugin (test/tools/tridentnode) stages and mounts it, and takes
// the PV's Lease while it "runs cryptsetup" on a LUKS volume.
func csiVolume(t *testing.T, ns string, luks bool) (pv, pvc string) {
	t.Helper()
	pv = "pvc-" + rand.String(8) + "-7aee-45e8-a5fa-d4500272528e"
	pvc = "data-" + rand.String(5)
	attrs := map[string]string{}
	if luks {
		attrs["luksEncryption"] = "true"
	}
	create(t, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: pvc},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "csi.trident.netapp.io", VolumeHandle: pv, VolumeAttributes: attrs,
			}},
		},
	})
	create(t, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pvc},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
			VolumeName:  pv,
		},
	})
	return pv, pvc
}

// strandLease leaves the Lease of pv held by holder, as a holder that died in the
// middle of cryptsetup leaves it, with `retained` LeaseRetained Warnings on it.
func strandLease(t *testing.T, pv, holder string, acquiredAgo time.Duration, retained int) {
	t.Helper()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: tridentNS, Name: pv},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder),
			AcquireTime:    ptr.To(metav1.NewMicroTime(time.Now().Add(-acquiredAgo))),
		},
	}
	create(t, lease)
	for i := range retained {
		now := metav1.Now()
		create(t, &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: tridentNS, GenerateName: pv + "."},
			InvolvedObject: corev1.ObjectReference{
				APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: tridentNS, Name: pv, UID: lease.UID,
			},
			Reason: "LeaseRetained", Type: corev1.EventTypeWarning, Count: 1,
			Message:        fmt.Sprintf("Retaining lease after failed LUKS operation on node %s: cryptsetup luksOpen exited 5 (attempt %d)", holder, i+1),
			FirstTimestamp: now, LastTimestamp: now,
			Source: corev1.EventSource{Component: "trident-node", Host: holder},
		})
	}
}

func request(t *testing.T, ns string, spec v1alpha1.RemediationRequestSpec) types.NamespacedName {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "rr-"}, Spec: spec}
	create(t, rr)
	return client.ObjectKeyFromObject(rr)
}

// factsOf waits until the controller has recorded facts for the request's generation.
func factsOf(t *testing.T, key types.NamespacedName) *v1alpha1.RemediationRequest {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(context.Background(), key, rr))
		assert.NotNil(c, rr.Status.Facts, "status %+v", rr.Status)
		assert.Equal(c, rr.Generation, rr.Status.ObservedGeneration, "observedGeneration; status %+v", rr.Status)
	}, 60*time.Second, poll, "status.facts on %s", key)
	return rr
}

func TestFactsForHealthyHolderFromPodTarget(t *testing.T) {
	startController(t)
	ns := namespace(t, "e2e-facts")
	holder := "kwok-node-0"
	pv, pvc := luksVolume(t, ns, holder, 12*time.Minute, 2)
	create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-0"},
		Spec: corev1.PodSpec{
			NodeName:   holder,
			Containers: []corev1.Container{{Name: "db", Image: "registry.example/db:1"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc},
			}}},
		},
	})

	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Mode:        v1alpha1.ModeDryRun, // facts only: nothing may act here
		Target:      v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: ns, Name: "db-0"}},
		Reason:      "db-0 stuck in ContainerCreating behind a retained Lease",
	})
	rr := factsOf(t, key)
	f := rr.Status.Facts
	// Dry run: Pending with the healthy-move-workload plan.
	assert.Equal(t, v1alpha1.PhasePending, rr.Status.Phase, "dry run: %s", describe(rr))
	if assert.NotNil(t, rr.Status.Decision, "dry run: %s", describe(rr)) {
		assert.Equal(t, "healthy-move-workload", string(rr.Status.Decision.Playbook), "dry run: %s", describe(rr))
	}
	assert.True(t, f.Target.Found, "target = %+v", f.Target)
	assert.Equal(t, pv, f.Target.PersistentVolume, "target = %+v", f.Target)
	assert.Equal(t, ns+"/"+pvc, f.Target.PersistentVolumeClaim, "target = %+v", f.Target)
	// acquireTime says 12 minutes ago, by the holder's clock; the age counts from the
	// later creationTimestamp, set by the API server when the test created the Lease.
	if l := f.Lease; assert.NotNil(t, l, "lease facts") {
		assert.True(t, l.Exists, "lease = %+v", l)
		assert.Equal(t, holder, l.HolderIdentity, "lease = %+v", l)
		assert.EqualValues(t, 2, l.RetainedEvents, "lease = %+v", l)
		assert.NotEmpty(t, l.UID, "lease = %+v", l)
		assert.True(t, l.AgeSeconds >= 0 && l.AgeSeconds <= 60, "lease age %ds, want 0 to 60s: %+v", l.AgeSeconds, l)
		assert.True(t, strings.HasPrefix(l.AgeFrom, "creationTimestamp"), "lease ageFrom %q, want creationTimestamp", l.AgeFrom)
		assert.Contains(t, l.AgeFrom, "acquireTime", "lease ageFrom")
	}
	// kwok renews kwok-node-0's Lease, so the real node lifecycle keeps it Ready.
	if n := f.Node; assert.NotNil(t, n, "holder node facts") {
		assert.Equal(t, v1alpha1.NodeHealthy, n.State, "holder node = %+v", n)
		assert.True(t, n.LeaseRenewAgeSeconds >= 0 && n.LeaseRenewAgeSeconds <= 20, "holder node lease renewed %ds ago, want 0 to 20s: %+v", n.LeaseRenewAgeSeconds, n)
	}
	if assert.Len(t, f.AffectedPods, 1, "affected pods = %+v", f.AffectedPods) {
		assert.Equal(t, "db-0", f.AffectedPods[0].Name, "affected pod")
		assert.Equal(t, holder, f.AffectedPods[0].Node, "affected pod's node")
	}
}

func TestFactsForUnreachableHolder(t *testing.T) {
	// In parallel with the other tests that mostly wait (make test's budget): its
	// controller decides only this namespace's requests, and its node is its own.
	t.Parallel()
	ns := namespace(t, "e2e-unreachable")
	startController(t, "--request-namespaces", ns)
	// The node's heartbeats stop, so the real kube-controller-manager marks it
	// NotReady and taints it unreachable.
	node := unreachableNode(t)
	pv, _ := luksVolume(t, ns, node, 3*time.Minute, 0)

	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease,
		Target:      v1alpha1.Target{PersistentVolume: pv},
		Reason:      "holder lost the control plane during cryptsetup",
	})
	f := factsOf(t, key).Status.Facts
	require.NotNil(t, f.Node, "holder node facts")
	require.Equal(t, v1alpha1.NodeUnreachable, f.Node.State, "holder node = %+v", f.Node)
	require.Contains(t, f.Node.Taints, v1alpha1.TaintUnreachable, "holder node taints")
	if assert.NotNil(t, f.Lease, "lease facts") {
		assert.Zero(t, f.Lease.RetainedEvents, "lease = %+v", f.Lease)
		assert.Equal(t, node, f.Lease.HolderIdentity, "lease = %+v", f.Lease)
	}
}

func TestFactsForCSINodeTarget(t *testing.T) {
	startController(t)
	ns := namespace(t, "e2e-csi")
	node := "kwok-node-1"
	key := request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReregisterCSIDriver,
		Target:      v1alpha1.Target{Node: node},
		Reason:      "unmounts fail: driver name csi.trident.netapp.io not found in the list of registered CSI drivers",
	})
	f := factsOf(t, key).Status.Facts
	require.NotNil(t, f.Node, "facts = %+v", f)
	require.Equal(t, v1alpha1.NodeHealthy, f.Node.State, "facts = %+v", f)
	require.NotNil(t, f.CSI, "facts = %+v", f)
	// The real DaemonSet controller and kwok run exactly one node-plugin pod here.
	pods := f.CSI.PluginPods
	if assert.Len(t, pods, 1, "plugin pods = %+v", pods) {
		assert.True(t, pods[0].Ready, "plugin pod = %+v", pods[0])
		assert.Equal(t, string(corev1.PodRunning), pods[0].Phase, "plugin pod = %+v", pods[0])
		assert.Equal(t, node, pods[0].Node, "plugin pod = %+v", pods[0])
	}
	if f.CSI.DriverRegistered {
		assert.Contains(t, f.CSI.Drivers, "csi.trident.netapp.io", "csi facts inconsistent: %+v", f.CSI)
	} else {
		assert.NotContains(t, f.CSI.Drivers, "csi.trident.netapp.io", "csi facts inconsistent: %+v", f.CSI)
	}
	// A node that does not exist is a fact, not a crash.
	key = request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReregisterCSIDriver,
		Target:      v1alpha1.Target{Node: "kwok-node-404"},
		Reason:      "typo in the node name must be reported plainly",
	})
	f = factsOf(t, key).Status.Facts
	assert.False(t, f.Target.Found, "missing node target = %+v", f.Target)
	assert.Equal(t, "Node kwok-node-404 not found", f.Target.Message, "missing node target")
}
