package facts_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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
// a Lease's age counts from the later of that and acquireTime. A test cannot backdate
// creationTimestamp, so the world's clock runs worldAhead ahead of the real one: every
// object the API server creates is about worldAhead old in the world's time, and
// every time a test writes (renewals, acquisitions, events) is relative to w.now. The
// gatherer reads with the same clock.
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
	if err := w.c.Create(w.ctx, obj); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return
		}
		w.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
	if status != nil {
		status(obj)
		if err := w.c.Status().Update(w.ctx, obj); err != nil {
			w.t.Fatalf("updating status of %T %s: %v", obj, obj.GetName(), err)
		}
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
}

func (w *world) node(name string, s nodeSpec) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, k := range s.taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoExecute})
	}
	n.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: s.ready, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.NewTime(w.Now()), LastTransitionTime: metav1.NewTime(w.Now().Add(-10 * time.Minute)),
	}}
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
		if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(c), c); err != nil {
			w.t.Fatalf("reading PVC %s/%s: %v", ns, name, err)
		}
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

// tridentLease creates the Lease Trident keeps after a failed cryptsetup, acquired
// acquiredAgo in the world's time (after its creation, which is worldAhead ago), plus
// `retained` LeaseRetained Warning events on it.
func (w *world) tridentLease(pv, holder string, acquiredAgo time.Duration, retained int) {
	w.tridentLeaseAt(pv, holder, w.Now().Add(-acquiredAgo), retained)
}

func (w *world) tridentLeaseAt(pv, holder string, acquired time.Time, retained int) {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder),
			AcquireTime:    ptr.To(metav1.NewMicroTime(acquired)),
		},
	}
	w.create(l)
	for i := range retained {
		at := metav1.NewTime(w.Now().Add(-time.Duration(retained-i) * time.Minute))
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
}

func (w *world) csiNode(node string, drivers ...string) {
	cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	for _, d := range drivers {
		cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: node, TopologyKeys: []string{"topology.kubernetes.io/zone"}})
	}
	w.create(cn)
}

// gather reads facts with the world's clock.
func (w *world) gather(t *testing.T, remediation v1alpha1.Remediation, target v1alpha1.Target) *v1alpha1.Facts {
	t.Helper()
	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig(), Clock: w}
	rr := &v1alpha1.RemediationRequest{Spec: v1alpha1.RemediationRequestSpec{Remediation: remediation, Target: target}}
	f, err := g.Gather(context.Background(), rr)
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	return f
}

var pluginLabels = map[string]string{"app": "node.csi.trident.netapp.io"}

func TestGatherLeaseFacts(t *testing.T) {
	w := newWorld(t)
	type want struct {
		found   bool
		message string
		// contains are parts of the message, for messages with server-made UIDs.
		contains []string
		// claim is the verified claim, namespace/name; "" when none is.
		claim          string
		ageFrom        string // prefix of lease.ageFrom
		leaseExists    bool
		holder         string
		nodeState      v1alpha1.NodeState
		nodeExists     bool
		retained       int32
		minAge, maxAge int64
		affected       []string
	}
	cases := []struct {
		name   string
		setup  func()
		target v1alpha1.Target
		want   want
	}{{
		name: "shutdown holder",
		setup: func() {
			w.node("holder-shutdown", nodeSpec{ready: corev1.ConditionFalse, taints: []string{v1alpha1.TaintOutOfService}, renewedAgo: time.Hour})
			w.volume("pvc-shutdown", "app", "data-shutdown")
			w.tridentLease("pvc-shutdown", "holder-shutdown", 20*time.Minute, 3)
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-shutdown"},
		want: want{found: true, claim: "app/data-shutdown", leaseExists: true, holder: "holder-shutdown", nodeState: v1alpha1.NodeShutdown, nodeExists: true,
			retained: 3, minAge: 1199, maxAge: 1205},
	}, {
		name: "unreachable holder",
		setup: func() {
			w.node("holder-unreachable", nodeSpec{ready: corev1.ConditionUnknown, taints: []string{v1alpha1.TaintUnreachable}, renewedAgo: 3 * time.Minute})
			w.volume("pvc-unreachable", "app", "data-unreachable")
			w.tridentLease("pvc-unreachable", "holder-unreachable", 2*time.Minute, 0)
		},
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-unreachable"}},
		// Acquired after the Lease was created: the later acquireTime counts.
		want: want{found: true, claim: "app/data-unreachable", leaseExists: true, holder: "holder-unreachable", nodeState: v1alpha1.NodeUnreachable, nodeExists: true,
			minAge: 119, maxAge: 125, ageFrom: "acquireTime "},
	}, {
		name: "healthy holder with affected pods",
		setup: func() {
			w.node("holder-healthy", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.node("other-healthy", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.volume("pvc-healthy", "app", "data-healthy")
			w.tridentLease("pvc-healthy", "holder-healthy", 30*time.Second, 1)
			w.pod("app", "web-1", "holder-healthy", nil, "data-healthy")
			w.pod("app", "web-0", "holder-healthy", nil, "scratch", "data-healthy")
			w.pod("app", "web-2", "other-healthy", nil, "data-healthy") // another node
			w.pod("app", "cache-0", "holder-healthy", nil, "scratch")   // another claim
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-healthy"},
		want: want{found: true, claim: "app/data-healthy", leaseExists: true, holder: "holder-healthy", nodeState: v1alpha1.NodeHealthy, nodeExists: true,
			retained: 1, minAge: 29, maxAge: 35, affected: []string{"app/web-0", "app/web-1"}},
	}, {
		name: "holder node deleted",
		setup: func() {
			w.volume("pvc-gone", "app", "data-gone")
			w.tridentLease("pvc-gone", "holder-gone", 10*time.Minute, 2)
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-gone"},
		// A missing Node is not a shutdown: the policy treats it like Unreachable.
		want: want{found: true, claim: "app/data-gone", leaseExists: true, holder: "holder-gone", nodeState: v1alpha1.NodeNotFound, retained: 2, minAge: 599, maxAge: 605},
	}, {
		name:   "no lease",
		setup:  func() { w.volume("pvc-nolease", "app", "data-nolease") },
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-nolease"}},
		want:   want{found: true, claim: "app/data-nolease"},
	}, {
		name: "pod target resolves pod -> PVC -> PV -> Lease",
		setup: func() {
			w.node("holder-pod", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.volume("pvc-podtarget", "app", "data-podtarget")
			w.volume("pvc-podscratch", "app", "scratch-podtarget")
			w.tridentLease("pvc-podtarget", "holder-pod", 15*time.Minute, 0)
			w.pod("app", "db-0", "holder-pod", nil, "scratch-podtarget", "data-podtarget")
		},
		target: v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: "app", Name: "db-0"}},
		want: want{found: true, claim: "app/data-podtarget", leaseExists: true, holder: "holder-pod", nodeState: v1alpha1.NodeHealthy, nodeExists: true,
			minAge: 899, maxAge: 905, affected: []string{"app/db-0"}},
	}, {
		name:   "missing pod",
		setup:  func() {},
		target: v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: "app", Name: "ghost-0"}},
		want:   want{message: "Pod app/ghost-0 not found"},
	}, {
		name:   "missing PVC",
		setup:  func() {},
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "ghost"}},
		want:   want{message: "PersistentVolumeClaim app/ghost not found"},
	}, {
		// The PV's claimRef carries the UID of a claim that was deleted; a claim of the
		// same name was created again since. Its pods are not the volume's and must not
		// be moved for it, but the PV and its Lease are still reported.
		name: "PV claimRef UID names an earlier claim",
		setup: func() {
			w.node("holder-reclaimed", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.claim("app", "data-reclaimed", "pvc-reclaimed")
			w.pv("pvc-reclaimed", &corev1.ObjectReference{Namespace: "app", Name: "data-reclaimed", UID: "5f0c1d2e-0000-4000-8000-000000000001"})
			w.tridentLease("pvc-reclaimed", "holder-reclaimed", 20*time.Minute, 1)
			w.pod("app", "reclaimed-0", "holder-reclaimed", nil, "data-reclaimed")
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-reclaimed"},
		want: want{found: true, leaseExists: true, holder: "holder-reclaimed", nodeState: v1alpha1.NodeHealthy, nodeExists: true, retained: 1, minAge: 1199, maxAge: 1205,
			contains: []string{
				"PersistentVolume pvc-reclaimed has claimRef app/data-reclaimed with UID 5f0c1d2e-0000-4000-8000-000000000001, but PersistentVolumeClaim app/data-reclaimed has UID ",
				"the claim was deleted and created again under the same name; the claim is not the volume's, so no pods are looked up as affected",
			}},
	}, {
		name: "PV claimRef names a missing claim",
		setup: func() {
			w.node("holder-orphan", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.pv("pvc-orphan", &corev1.ObjectReference{Namespace: "app", Name: "data-orphan", UID: "5f0c1d2e-0000-4000-8000-000000000002"})
			w.tridentLease("pvc-orphan", "holder-orphan", 20*time.Minute, 1)
			w.pod("app", "orphan-0", "holder-orphan", nil, "data-orphan")
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-orphan"},
		want: want{found: true, leaseExists: true, holder: "holder-orphan", nodeState: v1alpha1.NodeHealthy, nodeExists: true, retained: 1, minAge: 1199, maxAge: 1205,
			message: "PersistentVolume pvc-orphan has claimRef app/data-orphan, but that PersistentVolumeClaim does not exist; " +
				"the claim is not the volume's, so no pods are looked up as affected"},
	}, {
		name: "PV claimRef names a claim bound to another volume",
		setup: func() {
			w.node("holder-moved", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			c := w.claim("app", "data-moved", "pvc-moved-new")
			w.pv("pvc-moved-old", &corev1.ObjectReference{Namespace: "app", Name: "data-moved", UID: c.UID})
			w.tridentLease("pvc-moved-old", "holder-moved", 20*time.Minute, 1)
			w.pod("app", "moved-0", "holder-moved", nil, "data-moved")
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-moved-old"},
		want: want{found: true, leaseExists: true, holder: "holder-moved", nodeState: v1alpha1.NodeHealthy, nodeExists: true, retained: 1, minAge: 1199, maxAge: 1205,
			message: `PersistentVolume pvc-moved-old has claimRef app/data-moved, but that PersistentVolumeClaim is bound to PersistentVolume "pvc-moved-new"; ` +
				"the claim is not the volume's, so no pods are looked up as affected"},
	}, {
		// A pre-bound PV names its claim without a UID; the claim, bound back to it, is
		// the volume's.
		name: "PV claimRef without UID and its claim",
		setup: func() {
			w.node("holder-prebound", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.claim("app", "data-prebound", "pvc-prebound")
			w.pv("pvc-prebound", &corev1.ObjectReference{Namespace: "app", Name: "data-prebound"})
			w.tridentLease("pvc-prebound", "holder-prebound", 20*time.Minute, 1)
			w.pod("app", "prebound-0", "holder-prebound", nil, "data-prebound")
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-prebound"},
		want: want{found: true, claim: "app/data-prebound", leaseExists: true, holder: "holder-prebound", nodeState: v1alpha1.NodeHealthy, nodeExists: true,
			retained: 1, minAge: 1199, maxAge: 1205, affected: []string{"app/prebound-0"}},
	}, {
		name: "PVC names a PV whose claimRef is another claim",
		setup: func() {
			w.claim("app", "data-stolen", "pvc-stolen")
			w.pv("pvc-stolen", &corev1.ObjectReference{Namespace: "app", Name: "data-thief"})
			w.tridentLease("pvc-stolen", "holder-stolen", 20*time.Minute, 0)
		},
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-stolen"}},
		want: want{message: "PersistentVolumeClaim app/data-stolen names PersistentVolume pvc-stolen, but that volume's claimRef is app/data-thief; " +
			"the claim does not lead to that volume's Lease"},
	}, {
		name: "PVC names a PV whose claimRef UID is an earlier claim's",
		setup: func() {
			w.claim("app", "data-recreated", "pvc-recreated")
			w.pv("pvc-recreated", &corev1.ObjectReference{Namespace: "app", Name: "data-recreated", UID: "5f0c1d2e-0000-4000-8000-000000000003"})
			w.tridentLease("pvc-recreated", "holder-recreated", 20*time.Minute, 0)
		},
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-recreated"}},
		want: want{contains: []string{
			"PersistentVolume pvc-recreated has claimRef app/data-recreated with UID 5f0c1d2e-0000-4000-8000-000000000003, but PersistentVolumeClaim app/data-recreated has UID ",
			"; the claim does not lead to that volume's Lease",
		}},
	}, {
		name:   "PVC names a missing PV",
		setup:  func() { w.claim("app", "data-lost", "pvc-lost") },
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-lost"}},
		want: want{message: "PersistentVolumeClaim app/data-lost names PersistentVolume pvc-lost, which does not exist, so the binding cannot be verified; " +
			"target the PersistentVolume to look up its Lease"},
	}, {
		name: "PVC names a PV without claimRef",
		setup: func() {
			w.claim("app", "data-unclaimed", "pvc-unclaimed")
			w.pv("pvc-unclaimed", nil)
		},
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-unclaimed"}},
		want: want{message: "PersistentVolumeClaim app/data-unclaimed names PersistentVolume pvc-unclaimed, but that volume has no claimRef; " +
			"the claim does not lead to that volume's Lease"},
	}, {
		// The claim whose PV has the Lease is bound to another claim; the pod's other
		// claim resolves but has no Lease. The broken one is reported, so that "no
		// Lease" is not read as "nothing is stuck".
		name: "pod with a resolving claim and one bound elsewhere",
		setup: func() {
			w.claim("app", "data-podsplit", "pvc-podsplit")
			w.pv("pvc-podsplit", &corev1.ObjectReference{Namespace: "app", Name: "data-elsewhere"})
			w.tridentLease("pvc-podsplit", "holder-podsplit", 20*time.Minute, 0)
			w.volume("pvc-podsplit-scratch", "app", "scratch-podsplit")
			w.pod("app", "podsplit-0", "holder-podsplit", nil, "data-podsplit", "scratch-podsplit")
		},
		target: v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: "app", Name: "podsplit-0"}},
		want: want{found: true, claim: "app/scratch-podsplit",
			message: "Pod app/podsplit-0: only claim scratch-podsplit resolved; the others did not: " +
				"PersistentVolumeClaim app/data-podsplit names PersistentVolume pvc-podsplit, but that volume's claimRef is app/data-elsewhere; " +
				"the claim does not lead to that volume's Lease"},
	}, {
		name: "pod whose only claim names a PV bound to another claim",
		setup: func() {
			w.node("holder-podstolen", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.claim("app", "data-podstolen", "pvc-podstolen")
			w.pv("pvc-podstolen", &corev1.ObjectReference{Namespace: "app", Name: "data-other"})
			w.tridentLease("pvc-podstolen", "holder-podstolen", 20*time.Minute, 0)
			w.pod("app", "podstolen-0", "holder-podstolen", nil, "data-podstolen")
		},
		target: v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: "app", Name: "podstolen-0"}},
		want: want{message: "PersistentVolumeClaim app/data-podstolen names PersistentVolume pvc-podstolen, but that volume's claimRef is app/data-other; " +
			"the claim does not lead to that volume's Lease"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.t = t
			tc.setup()
			f := w.gather(t, v1alpha1.RemediationReleaseLUKSLease, tc.target)
			if f.Target.Found != tc.want.found {
				t.Errorf("target found = %v (%s), want %v", f.Target.Found, f.Target.Message, tc.want.found)
			}
			if tc.want.message != "" && f.Target.Message != tc.want.message {
				t.Errorf("target message = %q, want %q", f.Target.Message, tc.want.message)
			}
			for _, part := range tc.want.contains {
				if !strings.Contains(f.Target.Message, part) {
					t.Errorf("target message = %q, want it to contain %q", f.Target.Message, part)
				}
			}
			if f.Target.PersistentVolumeClaim != tc.want.claim {
				t.Errorf("target claim = %q, want %q", f.Target.PersistentVolumeClaim, tc.want.claim)
			}
			if !tc.want.found && (tc.want.message != "" || len(tc.want.contains) > 0) {
				if f.Lease != nil {
					t.Errorf("lease facts for an unresolved target: %+v", f.Lease)
				}
				return
			}
			if f.Lease == nil {
				t.Fatal("no lease facts")
			}
			if f.Lease.Exists != tc.want.leaseExists {
				t.Fatalf("lease exists = %v, want %v", f.Lease.Exists, tc.want.leaseExists)
			}
			if !tc.want.leaseExists {
				if f.Node != nil {
					t.Errorf("node facts without a lease holder: %+v", f.Node)
				}
				return
			}
			l := f.Lease
			if l.HolderIdentity != tc.want.holder || l.UID == "" || l.ResourceVersion == "" || l.CreationTimestamp == nil {
				t.Errorf("lease facts incomplete: %+v", l)
			}
			if l.AgeSeconds < tc.want.minAge || l.AgeSeconds > tc.want.maxAge {
				t.Errorf("lease age = %ds (from %s), want within [%d, %d]", l.AgeSeconds, l.AgeFrom, tc.want.minAge, tc.want.maxAge)
			}
			if !strings.HasPrefix(l.AgeFrom, tc.want.ageFrom) || l.AgeFrom == "" {
				t.Errorf("lease age from %q, want it to start with %q", l.AgeFrom, tc.want.ageFrom)
			}
			if l.RetainedEvents != tc.want.retained {
				t.Errorf("retained events = %d, want %d", l.RetainedEvents, tc.want.retained)
			}
			if tc.want.retained > 0 {
				wantMsg := fmt.Sprintf("cryptsetup luksOpen failed on %s (attempt %d): device or resource busy", tc.want.holder, tc.want.retained)
				if l.LastRetainedMessage != wantMsg {
					t.Errorf("last retained message = %q, want %q", l.LastRetainedMessage, wantMsg)
				}
			}
			if f.Node == nil || f.Node.State != tc.want.nodeState || f.Node.Exists != tc.want.nodeExists {
				t.Fatalf("node facts = %+v, want state %s exists %v", f.Node, tc.want.nodeState, tc.want.nodeExists)
			}
			var affected []string
			for _, p := range f.AffectedPods {
				affected = append(affected, p.Namespace+"/"+p.Name)
				if p.UID == "" || p.Node != tc.want.holder {
					t.Errorf("affected pod facts incomplete: %+v", p)
				}
			}
			if !slices.Equal(affected, tc.want.affected) {
				t.Errorf("affected pods = %v, want %v", affected, tc.want.affected)
			}
		})
	}
}

// TestGatherLeaseAgeCountsFromServerTime: a holder whose clock runs 10 minutes slow
// writes an acquireTime 10 minutes before the API server created the Lease. The age
// must count from creationTimestamp, so the Lease looks new, not 10 minutes old: a
// slow clock must never let a Lease pass the runbook's 5-minute gate early.
func TestGatherLeaseAgeCountsFromServerTime(t *testing.T) {
	w := newWorld(t)
	w.volume("pvc-slowclock", "app", "data-slowclock")
	acquired := time.Now().Add(-10 * time.Minute)
	w.tridentLeaseAt("pvc-slowclock", "holder-slowclock", acquired, 0)

	// The real clock here: the world's clock runs ahead to stage older Leases.
	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig()}
	f, err := g.Gather(context.Background(), &v1alpha1.RemediationRequest{Spec: v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{PersistentVolume: "pvc-slowclock"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	l := f.Lease
	if l == nil || !l.Exists || l.CreationTimestamp == nil || l.AcquireTime == nil {
		t.Fatalf("lease facts = %+v", l)
	}
	if l.AgeSeconds > 5 {
		t.Errorf("lease age = %ds, want about 0: the acquireTime before creationTimestamp must not count", l.AgeSeconds)
	}
	want := fmt.Sprintf("creationTimestamp %s, set by the API server; acquireTime %s, set by the holder's clock, is earlier and does not count",
		l.CreationTimestamp.UTC().Format(time.RFC3339Nano), l.AcquireTime.UTC().Format(time.RFC3339Nano))
	if l.AgeFrom != want {
		t.Errorf("age from:\n got %q\nwant %q", l.AgeFrom, want)
	}
	// The holder is unknown to the cluster: NotFound, with what to check.
	if f.Node == nil || f.Node.State != v1alpha1.NodeNotFound || f.Node.Exists || !strings.Contains(f.Node.StateReason, "kubectl get nodes") {
		t.Errorf("node facts = %+v, want NotFound with what to check", f.Node)
	}
}

func TestGatherCSIFacts(t *testing.T) {
	w := newWorld(t)
	cases := []struct {
		name        string
		setup       func()
		node        string
		csiNode     bool
		registered  bool
		drivers     []string
		pluginPods  []string
		targetFound bool
	}{{
		name: "driver registered",
		setup: func() {
			w.node("csi-ok", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.csiNode("csi-ok", facts.DefaultDriverName)
			w.pod("trident", "trident-csi-ok", "csi-ok", pluginLabels)
			w.pod("trident", "trident-controller-x", "csi-ok", map[string]string{"app": "controller.csi.trident.netapp.io"})
		},
		node: "csi-ok", targetFound: true, csiNode: true, registered: true,
		drivers: []string{facts.DefaultDriverName}, pluginPods: []string{"trident-csi-ok"},
	}, {
		name: "driver deregistered while the plugin pod runs",
		setup: func() {
			w.node("csi-lost", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.csiNode("csi-lost", "ebs.csi.aws.com")
			w.pod("trident", "trident-csi-lost", "csi-lost", pluginLabels)
			w.pod("trident", "trident-csi-other", "csi-ok", pluginLabels)
		},
		node: "csi-lost", targetFound: true, csiNode: true, registered: false,
		drivers: []string{"ebs.csi.aws.com"}, pluginPods: []string{"trident-csi-lost"},
	}, {
		name:        "no CSINode",
		setup:       func() { w.node("csi-none", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second}) },
		node:        "csi-none",
		targetFound: true,
	}, {
		name:  "node missing",
		setup: func() {},
		node:  "csi-ghost",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.t = t
			tc.setup()
			f := w.gather(t, v1alpha1.RemediationReregisterCSIDriver, v1alpha1.Target{Node: tc.node})
			if f.Target.Found != tc.targetFound || f.Target.Node != tc.node {
				t.Fatalf("target = %+v", f.Target)
			}
			if f.Node == nil || f.Node.Name != tc.node {
				t.Fatalf("node facts = %+v", f.Node)
			}
			if !tc.targetFound {
				if f.Target.Message != "Node "+tc.node+" not found" || f.CSI != nil {
					t.Errorf("missing node: message %q, csi %+v", f.Target.Message, f.CSI)
				}
				return
			}
			if f.Node.State != v1alpha1.NodeHealthy {
				t.Errorf("node state = %s (%s)", f.Node.State, f.Node.StateReason)
			}
			c := f.CSI
			if c.CSINodeExists != tc.csiNode || c.DriverRegistered != tc.registered || !slices.Equal(c.Drivers, tc.drivers) {
				t.Errorf("csi facts = %+v", c)
			}
			var pods []string
			for _, p := range c.PluginPods {
				pods = append(pods, p.Name)
				if !p.Ready || p.Phase != string(corev1.PodRunning) || p.DeletionTimestamp != nil {
					t.Errorf("plugin pod facts = %+v", p)
				}
			}
			if !slices.Equal(pods, tc.pluginPods) {
				t.Errorf("plugin pods = %v, want %v", pods, tc.pluginPods)
			}
		})
	}
}
