//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
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
	pv = "pvc-" + rand.String(8) + "-7aee-45e8-a5fa-d4500272528e"
	pvc = "data-" + rand.String(5)
	create(t, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: pvc},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "csi.trident.netapp.io", VolumeHandle: pv,
				VolumeAttributes: map[string]string{"luksEncryption": "true"},
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
	return pv, pvc
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
	eventually(t, 60*time.Second, "status.facts on "+key.String(), func() (bool, string) {
		if err := k8s.Get(context.Background(), key, rr); err != nil {
			return false, err.Error()
		}
		return rr.Status.Facts != nil && rr.Status.ObservedGeneration == rr.Generation, fmt.Sprintf("%+v", rr.Status)
	})
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
	if rr.Status.Phase != v1alpha1.PhasePending || rr.Status.Decision == nil || rr.Status.Decision.Playbook != "healthy-move-workload" {
		t.Errorf("dry run: phase = %s decision %+v, want Pending with the healthy-move-workload plan", rr.Status.Phase, rr.Status.Decision)
	}
	if !f.Target.Found || f.Target.PersistentVolume != pv || f.Target.PersistentVolumeClaim != ns+"/"+pvc {
		t.Errorf("target = %+v", f.Target)
	}
	// acquireTime says 12 minutes ago, by the holder's clock; the age counts from the
	// later creationTimestamp, set by the API server when the test created the Lease.
	if l := f.Lease; l == nil || !l.Exists || l.HolderIdentity != holder || l.RetainedEvents != 2 || l.UID == "" ||
		l.AgeSeconds < 0 || l.AgeSeconds > 60 || !strings.HasPrefix(l.AgeFrom, "creationTimestamp") || !strings.Contains(l.AgeFrom, "acquireTime") {
		t.Errorf("lease = %+v", f.Lease)
	}
	// kwok renews kwok-node-0's Lease, so the real node lifecycle keeps it Ready.
	if n := f.Node; n == nil || n.State != v1alpha1.NodeHealthy || n.LeaseRenewAgeSeconds < 0 || n.LeaseRenewAgeSeconds > 20 {
		t.Errorf("holder node = %+v", f.Node)
	}
	if len(f.AffectedPods) != 1 || f.AffectedPods[0].Name != "db-0" || f.AffectedPods[0].Node != holder {
		t.Errorf("affected pods = %+v", f.AffectedPods)
	}
}

func TestFactsForUnreachableHolder(t *testing.T) {
	startController(t)
	ns := namespace(t, "e2e-unreachable")
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
	if f.Node == nil || f.Node.State != v1alpha1.NodeUnreachable || !slices.Contains(f.Node.Taints, v1alpha1.TaintUnreachable) {
		t.Fatalf("holder node = %+v", f.Node)
	}
	if f.Lease == nil || f.Lease.RetainedEvents != 0 || f.Lease.HolderIdentity != node {
		t.Errorf("lease = %+v", f.Lease)
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
	if f.Node == nil || f.Node.State != v1alpha1.NodeHealthy || f.CSI == nil {
		t.Fatalf("facts = %+v", f)
	}
	// The real DaemonSet controller and kwok run exactly one node-plugin pod here.
	pods := f.CSI.PluginPods
	if len(pods) != 1 || !pods[0].Ready || pods[0].Phase != string(corev1.PodRunning) || pods[0].Node != node {
		t.Errorf("plugin pods = %+v", pods)
	}
	if f.CSI.DriverRegistered != slices.Contains(f.CSI.Drivers, "csi.trident.netapp.io") {
		t.Errorf("csi facts inconsistent: %+v", f.CSI)
	}
	// A node that does not exist is a fact, not a crash.
	key = request(t, ns, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReregisterCSIDriver,
		Target:      v1alpha1.Target{Node: "kwok-node-404"},
		Reason:      "typo in the node name must be reported plainly",
	})
	f = factsOf(t, key).Status.Facts
	if f.Target.Found || f.Target.Message != "Node kwok-node-404 not found" {
		t.Errorf("missing node target = %+v", f.Target)
	}
}
