package facts_test

import (
	"context"
	"fmt"
	"slices"
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
type world struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
}

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
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.NewTime(time.Now().Add(-10 * time.Minute)),
	}}
	w.create(n)
	if s.renewedAgo >= 0 {
		w.create(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-s.renewedAgo))),
			},
		})
	}
}

// volume creates a bound PV and PVC, as Trident would for a LUKS RWX volume.
func (w *world) volume(pv, ns, pvc string) {
	w.create(&corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			ClaimRef:    &corev1.ObjectReference{Namespace: ns, Name: pvc},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: facts.DefaultDriverName, VolumeHandle: pv,
			}},
		},
	})
	w.create(&corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pvc},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
			VolumeName:  pv,
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

// tridentLease creates the Lease Trident keeps after a failed cryptsetup, plus
// `retained` LeaseRetained Warning events on it.
func (w *world) tridentLease(pv, holder string, acquiredAgo time.Duration, retained int) {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder),
			AcquireTime:    ptr.To(metav1.NewMicroTime(time.Now().Add(-acquiredAgo))),
		},
	}
	w.create(l)
	for i := range retained {
		at := metav1.NewTime(time.Now().Add(-time.Duration(retained-i) * time.Minute))
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

func gather(t *testing.T, remediation v1alpha1.Remediation, target v1alpha1.Target) *v1alpha1.Facts {
	t.Helper()
	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig()}
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
		found          bool
		message        string
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
		want:   want{found: true, leaseExists: true, holder: "holder-shutdown", nodeState: v1alpha1.NodeShutdown, nodeExists: true, retained: 3, minAge: 1199, maxAge: 1205},
	}, {
		name: "unreachable holder",
		setup: func() {
			w.node("holder-unreachable", nodeSpec{ready: corev1.ConditionUnknown, taints: []string{v1alpha1.TaintUnreachable}, renewedAgo: 3 * time.Minute})
			w.volume("pvc-unreachable", "app", "data-unreachable")
			w.tridentLease("pvc-unreachable", "holder-unreachable", 2*time.Minute, 0)
		},
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-unreachable"}},
		want:   want{found: true, leaseExists: true, holder: "holder-unreachable", nodeState: v1alpha1.NodeUnreachable, nodeExists: true, minAge: 119, maxAge: 125},
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
		want: want{found: true, leaseExists: true, holder: "holder-healthy", nodeState: v1alpha1.NodeHealthy, nodeExists: true,
			retained: 1, minAge: 29, maxAge: 35, affected: []string{"app/web-0", "app/web-1"}},
	}, {
		name: "holder node deleted",
		setup: func() {
			w.volume("pvc-gone", "app", "data-gone")
			w.tridentLease("pvc-gone", "holder-gone", 10*time.Minute, 2)
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-gone"},
		want:   want{found: true, leaseExists: true, holder: "holder-gone", nodeState: v1alpha1.NodeShutdown, retained: 2, minAge: 599, maxAge: 605},
	}, {
		name:   "no lease",
		setup:  func() { w.volume("pvc-nolease", "app", "data-nolease") },
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-nolease"}},
		want:   want{found: true},
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
		want: want{found: true, leaseExists: true, holder: "holder-pod", nodeState: v1alpha1.NodeHealthy, nodeExists: true,
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
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.t = t
			tc.setup()
			f := gather(t, v1alpha1.RemediationReleaseLUKSLease, tc.target)
			if f.Target.Found != tc.want.found {
				t.Errorf("target found = %v (%s), want %v", f.Target.Found, f.Target.Message, tc.want.found)
			}
			if tc.want.message != "" && f.Target.Message != tc.want.message {
				t.Errorf("target message = %q, want %q", f.Target.Message, tc.want.message)
			}
			if !tc.want.found && tc.want.message != "" {
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
				t.Errorf("lease age = %ds, want within [%d, %d]", l.AgeSeconds, tc.want.minAge, tc.want.maxAge)
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
			f := gather(t, v1alpha1.RemediationReregisterCSIDriver, v1alpha1.Target{Node: tc.node})
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
