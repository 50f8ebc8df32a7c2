package stage

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/remediator/remediator/api/v1alpha1"
)

const (
	// Label marks every object a run stages, valued with the run's ID.
	Label = "test.remediator.io/run"
	// TridentNamespace holds Trident's Leases and LeaseRetained events.
	TridentNamespace = "trident"
	// DriverName is Trident's CSI driver.
	DriverName = "csi.trident.netapp.io"
	workers    = 32
)

// Stager creates objects for one run.
type Stager struct {
	CS    kubernetes.Interface
	RunID string
	// Apps holds the application pods and claims; Requests the requests.
	Apps, Requests string
}

func (s *Stager) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Labels: map[string]string{Label: s.RunID}}
}

// Parallel runs fn for 0..n-1 on a pool of workers and returns the first error.
func Parallel(n int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// Namespaces creates the apps and requests namespaces; existing ones are kept.
func (s *Stager) Namespaces(ctx context.Context) error {
	for _, ns := range []string{s.Apps, s.Requests} {
		_, err := s.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	return nil
}

// ShutdownNode creates a node whose machine was powered off: no kubelet (kwok does
// not manage it: no kwok annotation), Ready=False, and the out-of-service taint an
// administrator sets after verifying the shutdown (non-graceful node shutdown).
func (s *Stager) ShutdownNode(ctx context.Context, name string) error {
	return s.deadNode(ctx, name, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute},
		corev1.ConditionFalse, "KubeletNotReady", "node was shut down")
}

// UnreachableNode creates a node that lost the control plane: no kubelet (kwok does
// not manage it), Ready=Unknown and the node.kubernetes.io/unreachable taint, as the
// node lifecycle controller leaves a node whose heartbeats stopped. Whether its
// machine still runs is not known, which is why a release needs fencing.
func (s *Stager) UnreachableNode(ctx context.Context, name string) error {
	return s.deadNode(ctx, name, corev1.Taint{Key: v1alpha1.TaintUnreachable, Effect: corev1.TaintEffectNoExecute},
		corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status.")
}

// deadNode creates a node without a kubelet, with taint and the Ready condition
// given.
func (s *Stager) deadNode(ctx context.Context, name string, taint corev1.Taint, ready corev1.ConditionStatus, reason, msg string) error {
	n := &corev1.Node{ObjectMeta: s.meta(name), Spec: corev1.NodeSpec{Taints: []corev1.Taint{taint}}}
	if _, err := s.CS.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	// The node lifecycle controller writes the new node too (its taints): retry on
	// conflict with what it wrote.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := s.CS.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		// The kubelet's last heartbeat is when the node went down, some time ago: a
		// heartbeat within the grace period would make it a live node.
		then := metav1.NewTime(time.Now().Add(-time.Hour))
		cur.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: ready, Reason: reason, Message: msg, LastHeartbeatTime: then, LastTransitionTime: then,
		}}
		_, err = s.CS.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("setting node %s Ready=%s: %w", name, ready, err)
	}
	return nil
}

// KwokNode creates a node kwok runs a simulated kubelet for: it turns Ready, renews
// its Lease and runs the pods bound to it. It has no kubernetes.io/os label, so the
// trident-csi DaemonSet of the local cluster does not put a node-plugin pod on it.
func (s *Stager) KwokNode(ctx context.Context, name string) error {
	n := &corev1.Node{ObjectMeta: s.meta(name)}
	n.Annotations = map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}
	n.Labels["type"] = "kwok"
	n.Status = corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("1000")},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("1000")},
	}
	if _, err := s.CS.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	return nil
}

// WaitNodesReady waits until every named node reports Ready=True.
func (s *Stager) WaitNodesReady(ctx context.Context, names []string, timeout time.Duration) error {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	deadline := time.Now().Add(timeout)
	for {
		list, err := s.CS.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: Label + "=" + s.RunID, ResourceVersion: "0"})
		if err != nil {
			return err
		}
		ready := 0
		for i := range list.Items {
			if !want[list.Items[i].Name] {
				continue
			}
			for _, c := range list.Items[i].Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready == len(want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d kwok nodes Ready after %s", ready, len(want), timeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// CarrierPod is one of the cluster's ordinary pods: it has nothing to do with any
// incident, and is there so that the controller's memory can be measured against
// the number of pods in the cluster.
func (s *Stager) CarrierPod(ctx context.Context, name, node string) error {
	p := &corev1.Pod{ObjectMeta: s.meta(name), Spec: corev1.PodSpec{
		NodeName:   node,
		Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		// kwok ends a deleted pod at once; a real kubelet would use the grace period.
		TerminationGracePeriodSeconds: ptr.To[int64](30),
	}}
	p.Namespace = s.Apps
	if _, err := s.CS.CoreV1().Pods(s.Apps).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating pod %s: %w", name, err)
	}
	return nil
}

// Incident is one stuck LUKS volume: a claim bound to a Trident PV, an application
// pod that mounts it, and the PV-named Lease in the Trident namespace held by holder.
type Incident struct {
	Name   string // PV name, which is the Lease name
	Claim  string
	Pod    string
	Holder string
	// PodNode is where the application pod runs: the holder itself (a healthy holder
	// whose workload must move), or another node (the workload was rescheduled off a
	// dead holder and now hangs in ContainerCreating behind the stuck Lease).
	PodNode string
}

// StageIncident creates the claim, the PV bound to it, the pod, the Lease and, for a
// healthy holder, the LeaseRetained Warning events Trident emits after a failed
// cryptsetup.
func (s *Stager) StageIncident(ctx context.Context, in Incident, retained bool) error {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: s.meta(in.Claim), Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		StorageClassName: ptr.To(""),
		VolumeName:       in.Name,
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}}
	pvc.Namespace = s.Apps
	createdPVC, err := s.CS.CoreV1().PersistentVolumeClaims(s.Apps).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating claim %s: %w", in.Claim, err)
	}
	pv := &corev1.PersistentVolume{ObjectMeta: s.meta(in.Name), Spec: corev1.PersistentVolumeSpec{
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: s.Apps, Name: in.Claim, UID: createdPVC.UID},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
			Driver: DriverName, VolumeHandle: in.Name,
			VolumeAttributes: map[string]string{"luksEncryption": "true"},
		}},
	}}
	if _, err := s.CS.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating PV %s: %w", in.Name, err)
	}
	pod := &corev1.Pod{ObjectMeta: s.meta(in.Pod), Spec: corev1.PodSpec{
		NodeName:                      in.PodNode,
		Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		TerminationGracePeriodSeconds: ptr.To[int64](30),
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: in.Claim},
		}}},
	}}
	pod.Namespace = s.Apps
	if _, err := s.CS.CoreV1().Pods(s.Apps).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod %s: %w", in.Pod, err)
	}
	now := metav1.NowMicro()
	lease := &coordinationv1.Lease{ObjectMeta: s.meta(in.Name), Spec: coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To(in.Holder), AcquireTime: &now,
	}}
	lease.Namespace = TridentNamespace
	created, err := s.CS.CoordinationV1().Leases(TridentNamespace).Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Lease %s: %w", in.Name, err)
	}
	if !retained {
		return nil
	}
	// The event Trident's node plugin emits when cryptsetup failed and it kept the
	// Lease (as Trident records it): reason LeaseRetained, type Warning, on the Lease.
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: in.Name + ".retained", Namespace: TridentNamespace, Labels: map[string]string{Label: s.RunID}},
		InvolvedObject: corev1.ObjectReference{Kind: "Lease", APIVersion: "coordination.k8s.io/v1",
			Namespace: TridentNamespace, Name: in.Name, UID: created.UID},
		Reason:  "LeaseRetained",
		Message: fmt.Sprintf("Lease %s retained by node %s after failed LUKS operation: cryptsetup luksOpen failed: exit status 5", in.Name, in.Holder),
		Type:    corev1.EventTypeWarning, Count: 3,
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(),
		Source: corev1.EventSource{Component: "trident-node", Host: in.Holder},
	}
	if _, err := s.CS.CoreV1().Events(TridentNamespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating LeaseRetained event for %s: %w", in.Name, err)
	}
	return nil
}

// Cleanup deletes what the run staged. Nodes go last: pods bound to a deleted node
// are removed by the pod garbage collector.
func (s *Stager) Cleanup(ctx context.Context) error {
	return s.cleanup(ctx, Label+"="+s.RunID)
}

// SweepOthers deletes what earlier runs staged and left behind (a run that was
// interrupted never cleaned up), so that their objects neither load the cluster
// nor stand in this run's way.
func (s *Stager) SweepOthers(ctx context.Context) error {
	return s.cleanup(ctx, Label+","+Label+"!="+s.RunID)
}

func (s *Stager) cleanup(ctx context.Context, selector string) error {
	sel := metav1.ListOptions{LabelSelector: selector}
	del := metav1.DeleteOptions{}
	var errs []error
	add := func(what string, err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", what, err))
		}
	}
	add("Leases", s.CS.CoordinationV1().Leases(TridentNamespace).DeleteCollection(ctx, del, sel))
	add("events", s.CS.CoreV1().Events(TridentNamespace).DeleteCollection(ctx, del, sel))
	// The staged pods are the harness's own stand-ins, run by kwok: they go at once
	// (grace 0), so that a run of 20,000 is cleaned up in seconds. The controller
	// never does this to a pod.
	now := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	add("pods", s.CS.CoreV1().Pods(s.Apps).DeleteCollection(ctx, now, sel))
	add("claims", s.CS.CoreV1().PersistentVolumeClaims(s.Apps).DeleteCollection(ctx, del, sel))
	add("PVs", s.CS.CoreV1().PersistentVolumes().DeleteCollection(ctx, del, sel))
	// The staged PVs were never provisioned: nothing will release them, and the
	// pv-protection finalizer can hold thousands for minutes behind a busy
	// controller manager, in every informer of the next run.
	add("PV finalizers", s.releasePVs(ctx, sel))
	add("nodes", s.CS.CoreV1().Nodes().DeleteCollection(ctx, del, sel))
	if len(errs) > 0 {
		return fmt.Errorf("cleanup: %v", errs)
	}
	return nil
}

// releasePVs drops the finalizers of the staged PVs already being deleted.
func (s *Stager) releasePVs(ctx context.Context, sel metav1.ListOptions) error {
	list, err := s.CS.CoreV1().PersistentVolumes().List(ctx, sel)
	if err != nil {
		return err
	}
	return Parallel(len(list.Items), func(i int) error {
		pv := &list.Items[i]
		if pv.DeletionTimestamp == nil || len(pv.Finalizers) == 0 {
			return nil
		}
		_, err := s.CS.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}
