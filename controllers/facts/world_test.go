package facts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// world builds cluster objects for one case. Envtest runs no controllers, so node
// and pod status are written directly, the way kubelet and kube-controller-manager
// would.
//
// The API server sets a Lease's creationTimestamp to the real time of the create, and
// a Lease's age counts from that or from the API server's time of the holder's later
// write (managedFields). A test cannot backdate creationTimestamp, so the world's clock
// runs worldAhead ahead of the real one: every object the API server creates is about
// worldAhead old in the world's time, and every time a test writes (renewals,
// acquisitions, events) is relative to w.now. The gatherer reads with the same clock.
type world struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
}

// worldAhead bounds the Lease ages a test can stage.
const worldAhead = time.Hour

// Now and Since make the world a clock.PassiveClock the gatherer reads with.
func (w *world) Now() time.Time { return time.Now().Add(worldAhead) }

func (w *world) Since(t time.Time) time.Duration { return w.Now().Sub(t) }

func newWorld(t *testing.T) *world {
	w := &world{t: t, ctx: context.Background(), c: env.Client}
	for _, ns := range []string{"trident", "app", "remediator"} {
		w.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	return w
}

func (w *world) create(obj client.Object) {
	w.t.Helper()
	status := statusOf(obj)
	err := w.c.Create(w.ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		return
	}
	require.NoError(w.t, err, "creating %T %s", obj, obj.GetName())
	if status != nil {
		status(obj)
		require.NoError(w.t, w.c.Status().Update(w.ctx, obj), "updating status of %T %s", obj, obj.GetName())
	}
}

// statusOf captures the status a test set before Create wipes it.
func statusOf(obj client.Object) func(client.Object) {
	switch o := obj.(type) {
	case *corev1.Node:
		s := o.Status
		return func(obj client.Object) { obj.(*corev1.Node).Status = s }
	case *corev1.Pod:
		s := o.Status
		return func(obj client.Object) { obj.(*corev1.Pod).Status = s }
	}
	return nil
}

type nodeSpec struct {
	ready      corev1.ConditionStatus
	taints     []string
	renewedAgo time.Duration // <0: no node Lease
	// volumesInUse is status.volumesInUse, as the kubelet posts it.
	volumesInUse []corev1.UniqueVolumeName
}

func (w *world) node(name string, s nodeSpec) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, k := range s.taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoExecute})
	}
	// A kubelet that reports Ready posts its heartbeat now; a node that went down
	// posted its last one when it did.
	heartbeat := w.Now()
	if s.ready != corev1.ConditionTrue {
		heartbeat = w.Now().Add(-10 * time.Minute)
	}
	n.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: s.ready, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(w.Now().Add(-10 * time.Minute)),
	}}
	n.Status.VolumesInUse = s.volumesInUse
	w.create(n)
	if s.renewedAgo >= 0 {
		w.create(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: ptr.To(metav1.NewMicroTime(w.Now().Add(-s.renewedAgo))),
			},
		})
	}
}

// volume creates a PV and PVC bound to each other, as Trident and the PV controller
// would for a LUKS RWX volume: the PV's claimRef carries the claim's UID.
func (w *world) volume(pv, ns, pvc string) {
	claim := w.claim(ns, pvc, pv)
	w.pv(pv, &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: pvc, UID: claim.UID})
}

// claim creates a PVC whose volumeName is pv ("" for none).
func (w *world) claim(ns, name, pv string) *corev1.PersistentVolumeClaim {
	w.t.Helper()
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
			VolumeName:  pv,
		},
	}
	w.create(c)
	if c.UID == "" {
		// It already existed; read it back for its UID.
		require.NoError(w.t, w.c.Get(w.ctx, client.ObjectKeyFromObject(c), c), "reading PVC %s/%s", ns, name)
	}
	return c
}

// pv creates a Trident PV with the given claimRef (nil for none).
func (w *world) pv(name string, claimRef *corev1.ObjectReference) {
	w.create(&corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			ClaimRef:    claimRef,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: facts.DefaultDriverName, VolumeHandle: name,
			}},
		},
	})
}

func (w *world) pod(ns, name, node string, labels map[string]string, claims ...string) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c},
		}})
	}
	w.create(p)
}

// waitingPod creates a pod on node that uses claim and waits in ContainerCreating, as
// kubelet leaves a pod whose volume it cannot stage.
func (w *world) waitingPod(ns, name, node, claim string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", Image: "registry.example/app:1",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
		}}},
	}
	w.create(p)
	return p
}

// failedMount records kubelet's FailedMount Warning on pod, as the kubelet of node
// reports it, seen count times.
func (w *world) failedMount(pod *corev1.Pod, node, message string, count int32) {
	w.createEvent(pod, "failedmount-"+node, message, node, "", count, w.Now())
}

// createEvent records a FailedMount Warning on pod named <pod>.<suffix>, reported by
// host as a core/v1 event does (source.host), or by reportingInstance as events.k8s.io
// does (an EventSeries of count), last seen at.
func (w *world) createEvent(pod *corev1.Pod, suffix, message, host, reportingInstance string, count int32, at time.Time) {
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: fmt.Sprintf("%s.%s", pod.Name, suffix)},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		},
		Reason: facts.FailedMountReason, Type: corev1.EventTypeWarning, Message: message,
	}
	if reportingInstance == "" {
		ev.Count, ev.FirstTimestamp, ev.LastTimestamp = count, metav1.NewTime(at), metav1.NewTime(at)
		ev.Source = corev1.EventSource{Component: "kubelet", Host: host}
	} else {
		ev.EventTime = metav1.NewMicroTime(at)
		ev.Series = &corev1.EventSeries{Count: count, LastObservedTime: metav1.NewMicroTime(at)}
		ev.ReportingController, ev.ReportingInstance, ev.Action = "kubelet", reportingInstance, "Mount"
	}
	w.create(ev)
}

// tridentLease creates the Lease Trident keeps after a failed cryptsetup, acquired
// acquiredAgo in the world's time (after its creation, which is worldAhead ago), plus
// `retained` LeaseRetained Warning events on it. The API server's record of that
// acquisition is staged in the world's time (stageAcquisition).
func (w *world) tridentLease(pv, holder string, acquiredAgo time.Duration, retained int) {
	acquired := w.Now().Add(-acquiredAgo)
	l := w.tridentLeaseAt(pv, holder, acquired, retained)
	w.stageAcquisition(l, acquired)
}

// stageAcquisition records in l's managedFields that its holder (field manager
// trident-node) last wrote acquireTime and holderIdentity at the API server's time at,
// in the world's time: what the API server records when the holder re-acquires the
// Lease at that moment. The API server stamps its own real time on every write, which
// is worldAhead in the world's past, so the record is written as such (the API server
// keeps the managedFields of other managers that a write sends, and stamps only the
// writer's, the test's, which owns the marking annotation).
func (w *world) stageAcquisition(l *coordinationv1.Lease, at time.Time) {
	w.t.Helper()
	stamp := metav1.NewTime(at)
	l.ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: "trident-node", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1", Time: &stamp,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:acquireTime":{},"f:holderIdentity":{}}}`)},
	}}
	metav1.SetMetaDataAnnotation(&l.ObjectMeta, "test.remediator.io/staged-acquisition", stamp.UTC().Format(time.RFC3339))
	require.NoError(w.t, w.c.Update(w.ctx, l), "staging the acquisition of Lease %s", l.Name)
}

// tridentLeaseAt creates the Lease with acquireTime acquired on the holder's clock,
// and no later write by the holder: its hold began at its creation, by the API
// server's clock.
func (w *world) tridentLeaseAt(pv, holder string, acquired time.Time, retained int) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder),
			AcquireTime:    ptr.To(metav1.NewMicroTime(acquired)),
		},
	}
	w.create(l)
	// Trident reports each failed attempt while it holds the Lease: after it acquired
	// it, before now.
	held := w.Now().Sub(acquired)
	for i := range retained {
		at := metav1.NewTime(acquired.Add(held * time.Duration(i+1) / time.Duration(retained+1)))
		w.create(&corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: fmt.Sprintf("%s.retained-%d", pv, i)},
			InvolvedObject: corev1.ObjectReference{
				APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: "trident", Name: pv, UID: l.UID,
			},
			Reason: "LeaseRetained", Type: corev1.EventTypeWarning, Count: 1,
			Message:        fmt.Sprintf("cryptsetup luksOpen failed on %s (attempt %d): device or resource busy", holder, i+1),
			FirstTimestamp: at, LastTimestamp: at,
			Source: corev1.EventSource{Component: "trident-node", Host: holder},
		})
	}
	// An unrelated Normal event must not count.
	w.create(&corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "trident", Name: pv + ".acquired"},
		InvolvedObject: corev1.ObjectReference{Kind: "Lease", Namespace: "trident", Name: pv, UID: l.UID},
		Reason:         "LeaseAcquired", Type: corev1.EventTypeNormal, Message: "acquired", Count: 1,
	})
	return l
}

func (w *world) csiNode(node string, drivers ...string) {
	cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	for _, d := range drivers {
		cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: node, TopologyKeys: []string{"topology.kubernetes.io/zone"}})
	}
	w.create(cn)
}

// volumeAttachment creates the VolumeAttachment of the Trident PV pv on node, under
// the attacher's name for it, and sets its status.attached as the external-attacher
// would.
func (w *world) volumeAttachment(pv, node string, attached bool) *storagev1.VolumeAttachment {
	w.t.Helper()
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: facts.AttachmentName(pv, facts.DefaultDriverName, node)},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: facts.DefaultDriverName, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}},
	}
	w.create(va)
	va.Status.Attached = attached
	require.NoError(w.t, w.c.Status().Update(w.ctx, va), "updating status of VolumeAttachment %s", va.Name)
	return va
}

// csiDriver creates the CSIDriver name with spec.attachRequired (nil: unset).
func (w *world) csiDriver(name string, attachRequired *bool) {
	w.create(&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSIDriverSpec{AttachRequired: attachRequired}})
}

// gather reads facts with the world's clock.
func (w *world) gather(t *testing.T, remediation v1alpha1.Remediation, target v1alpha1.Target) *v1alpha1.Facts {
	t.Helper()
	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig(), Clock: w}
	rr := &v1alpha1.RemediationRequest{Spec: v1alpha1.RemediationRequestSpec{Remediation: remediation, Target: target}}
	f, err := g.Gather(context.Background(), rr)
	require.NoError(t, err, "Gather")
	return f
}

var pluginLabels = map[string]string{"app": "node.csi.trident.netapp.io"}
