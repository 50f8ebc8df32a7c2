package facts_test

// What the gatherer trusts: the Trident namespace is the controller's (or one its
// settings allow), a node-plugin pod is one a DaemonSet controls, and a generic
// ephemeral volume's claim is the pod's only when the pod controls it.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

// daemonSet creates (or reads back) DaemonSet ns/name: envtest runs no DaemonSet
// controller, so its pods are created by hand with an ownerReference to it.
func (w *world) daemonSet(ns, name string) *appsv1.DaemonSet {
	w.t.Helper()
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/trident:1"}}},
			},
		},
	}
	w.create(ds)
	require.NoError(w.t, w.c.Get(w.ctx, client.ObjectKeyFromObject(ds), ds), "reading DaemonSet %s/%s", ns, name)
	return ds
}

// pluginPod creates a Running, Ready node-plugin pod on node, controlled by the
// DaemonSet trident-csi of its namespace, as the DaemonSet controller creates it.
func (w *world) pluginPod(ns, name, node string) {
	w.ownedPod(ns, name, node, pluginLabels, w.daemonSet(ns, "trident-csi"))
}

// ownedPod creates a Running, Ready pod controlled by owner.
func (w *world) ownedPod(ns, name, node string, labels map[string]string, owner client.Object) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	gvk, err := w.c.GroupVersionKindFor(owner)
	require.NoError(w.t, err)
	p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, gvk)}
	w.create(p)
}

// recordingReader records the namespaces the gatherer reads in.
type recordingReader struct {
	client.Reader
	mu   sync.Mutex
	seen map[string]bool
}

func (r *recordingReader) note(ns string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	r.seen[ns] = true
}

func (r *recordingReader) read(ns string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[ns]
}

func (r *recordingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.note(key.Namespace)
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *recordingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := &client.ListOptions{}
	o.ApplyOptions(opts)
	r.note(o.Namespace)
	return r.Reader.List(ctx, list, opts...)
}

// TestTridentNamespaceIsTheControllers: a request that names a Trident namespace the
// controller is neither configured for nor allowed by its settings gets no facts from
// it: nothing is listed or read there, and the target says why. A tenant's Running
// pod labelled as Trident's node plugin, on a healthy node whose CSINode lacks the
// driver, is not taken for the node plugin. Allowed by the settings, the namespace is
// read as the configured one is.
func TestTridentNamespaceIsTheControllers(t *testing.T) {
	w := newWorld(t)
	w.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}})
	w.node("ns-tenant", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
	w.csiNode("ns-tenant")
	// The tenant's own DaemonSet: a tenant can create one, so ownership alone does not
	// make a namespace Trident's.
	w.ownedPod("tenant", "tenant-app", "ns-tenant", pluginLabels, w.daemonSet("tenant", "tenant-ds"))
	w.volume("pvc-ns-tenant", "app", "data-ns-tenant")

	const refused = `spec.tridentNamespace "tenant" is not a Trident namespace of this controller, which acts only in "trident" ` +
		`(--trident-namespace; other namespaces only when listed in --allowed-trident-namespaces, the settings key allowed-trident-namespaces), ` +
		`so nothing was read in it: remove spec.tridentNamespace, or ask the controller's administrators to allow "tenant"`
	gather := func(t *testing.T, cfg facts.Config, spec v1alpha1.RemediationRequestSpec) (*v1alpha1.Facts, *recordingReader) {
		t.Helper()
		r := &recordingReader{Reader: env.Client}
		g := &facts.Gatherer{Reader: r, Config: cfg, Clock: w}
		f, err := g.Gather(context.Background(), &v1alpha1.RemediationRequest{Spec: spec})
		require.NoError(t, err, "Gather")
		return f, r
	}
	csi := v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReregisterCSIDriver, TridentNamespace: "tenant",
		Target: v1alpha1.Target{Node: "ns-tenant"}}
	lease := v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease, TridentNamespace: "tenant",
		Target: v1alpha1.Target{PersistentVolume: "pvc-ns-tenant"}}

	t.Run("reregister-csi-driver in a tenant namespace", func(t *testing.T) {
		f, r := gather(t, facts.DefaultConfig(), csi)
		assert.False(t, r.read("tenant"), "the gatherer read in namespace tenant")
		assert.Equal(t, "tenant", f.TridentNamespace, "facts header")
		assert.False(t, f.Target.Found, "target = %+v", f.Target)
		assert.Equal(t, refused, f.Target.Message)
		assert.Nil(t, f.CSI, "csi facts from a namespace that is not Trident's")
	})
	t.Run("release-luks-lease in a tenant namespace", func(t *testing.T) {
		f, r := gather(t, facts.DefaultConfig(), lease)
		assert.False(t, r.read("tenant"), "the gatherer read in namespace tenant")
		assert.False(t, f.Target.Found, "target = %+v", f.Target)
		assert.Equal(t, refused, f.Target.Message)
		assert.Nil(t, f.Lease, "lease facts from a namespace that is not Trident's")
	})
	t.Run("the configured namespace named explicitly", func(t *testing.T) {
		spec := csi
		spec.TridentNamespace = "trident"
		f, _ := gather(t, facts.DefaultConfig(), spec)
		assert.True(t, f.Target.Found, "target = %+v", f.Target)
		require.NotNil(t, f.CSI, "csi facts")
	})
	t.Run("allowed by the settings", func(t *testing.T) {
		cfg := facts.DefaultConfig()
		cfg.AllowedTridentNamespaces = []string{"netapp-trident", "tenant"}
		f, r := gather(t, cfg, csi)
		assert.True(t, r.read("tenant"), "an allowed namespace is read")
		assert.True(t, f.Target.Found, "target = %+v", f.Target)
		require.NotNil(t, f.CSI, "csi facts")
		require.Len(t, f.CSI.PluginPods, 1, "plugin pods")
		assert.Equal(t, "tenant-app", f.CSI.PluginPods[0].Name)

		f, _ = gather(t, cfg, lease)
		assert.True(t, f.Target.Found, "target = %+v", f.Target)
		require.NotNil(t, f.Lease, "lease facts")
		assert.Equal(t, "tenant", f.Lease.Namespace)
	})
}

// TestPluginPodsAreTheDaemonSets: a pod labelled as the node plugin counts only when a
// DaemonSet controls it. A bare pod, one a ReplicaSet controls, and one that merely
// lists a DaemonSet among its owners are not node-plugin pods, in the facts of a
// decision, in the playbook's waits (NodePluginPods) and in scan.
func TestPluginPodsAreTheDaemonSets(t *testing.T) {
	w := newWorld(t)
	w.node("csi-owned", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
	w.csiNode("csi-owned")
	w.pluginPod("trident", "trident-csi-owned", "csi-owned")
	w.pod("trident", "bare-owned", "csi-owned", pluginLabels)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "impostor"},
		Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "impostor"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "impostor"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/app:1"}}},
			},
		},
	}
	w.create(rs)
	w.ownedPod("trident", "replicaset-owned", "csi-owned", pluginLabels, rs)
	ds := w.daemonSet("trident", "trident-csi")
	notController := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "listed-owned", Labels: pluginLabels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID}}},
		Spec:   corev1.PodSpec{NodeName: "csi-owned", Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	w.create(notController)

	f := w.gather(t, v1alpha1.RemediationReregisterCSIDriver, v1alpha1.Target{Node: "csi-owned"})
	require.NotNil(t, f.CSI, "csi facts")
	var names []string
	for _, p := range f.CSI.PluginPods {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"trident-csi-owned"}, names, "node-plugin pods in the facts")

	pods, err := facts.DefaultConfig().NodePluginPods(context.Background(), env.Client, "trident", "csi-owned")
	require.NoError(t, err)
	names = nil
	for _, p := range pods {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"trident-csi-owned"}, names, "node-plugin pods the playbook's waits see")

	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig(), Clock: w}
	found, err := g.Scan(context.Background(), facts.ScanOptions{LeaseAge: 10 * time.Minute})
	require.NoError(t, err)
	for _, fd := range found {
		if fd.Node != "csi-owned" {
			continue
		}
		assert.NotEqual(t, facts.FindingOverlappingPluginPods, fd.Kind, "scan counts pods no DaemonSet controls as plugin pods: %+v", fd)
		if fd.Kind == facts.FindingDeregisteredDriver {
			assert.Equal(t, []string{"trident-csi-owned (Running, ready=true)"}, fd.PluginPods, "scan's plugin pods")
		}
	}
}

// ephemeralPod creates pod ns/name on node with a generic ephemeral volume named
// volume, whose claim Kubernetes names <name>-<volume>.
func (w *world) ephemeralPod(ns, name, node, volume string) *corev1.Pod {
	w.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			Volumes: []corev1.Volume{{Name: volume, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
				VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				}},
			}}}},
		},
	}
	w.create(p)
	return p
}

// ephemeralVolume creates PV pv bound to claim ns/name, controlled by owner as the
// ephemeral volume controller creates it (nil: no owner).
func (w *world) ephemeralVolume(pv, ns, name string, owner *corev1.Pod) {
	w.t.Helper()
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			VolumeName:  pv,
		},
	}
	if owner != nil {
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	}
	w.create(c)
	w.pv(pv, &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name, UID: c.UID})
}

// TestEphemeralClaimIsThePodsOnlyWhenItOwnsIt: the claim of a generic ephemeral
// volume is named <pod>-<volume>, so pod "cache" with volume "a-data" and pod
// "cache-a" with volume "data" both name claim "cache-a-data". Kubelet mounts it
// only for the pod that controls it (the ephemeral volume controller's
// ownerReference); so the gatherer counts it for that pod only, among the pods moved
// off a healthy holder and when a pod target resolves to its volume.
func TestEphemeralClaimIsThePodsOnlyWhenItOwnsIt(t *testing.T) {
	w := newWorld(t)
	w.node("holder-eph-owner", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
	owner := w.ephemeralPod("app", "cache-a", "holder-eph-owner", "data")
	namesake := w.ephemeralPod("app", "cache", "holder-eph-owner", "a-data")
	w.ephemeralVolume("pvc-eph-owner", "app", "cache-a-data", owner)
	w.tridentLease("pvc-eph-owner", "holder-eph-owner", 20*time.Minute, 1)

	f := w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{PersistentVolume: "pvc-eph-owner"})
	var affected []string
	for _, p := range f.AffectedPods {
		affected = append(affected, p.Name)
	}
	assert.Equal(t, []string{"cache-a"}, affected, "affected pods: only the claim's owner uses it")

	f = w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: "app", Name: "cache-a"}})
	assert.True(t, f.Target.Found, "the owner's claim resolves: %s", f.Target.Message)
	assert.Equal(t, "pvc-eph-owner", f.Target.PersistentVolume)

	f = w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: "app", Name: namesake.Name}})
	assert.False(t, f.Target.Found, "a claim that only bears the pod's ephemeral name resolved: %+v", f.Target)
	assert.Empty(t, f.Target.PersistentVolume)
	assert.Equal(t, "PersistentVolumeClaim app/cache-a-data is named like the claim of Pod app/cache's ephemeral volume a-data, but that pod does not control it "+
		"(PVC app/cache-a-data was not created for pod app/cache (pod is not owner)): it is not the pod's volume", f.Target.Message)

	// A claim of the ephemeral name created by someone else, with no owner, is no
	// pod's either.
	w.node("holder-eph-none", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
	w.ephemeralPod("app", "orphan", "holder-eph-none", "data")
	w.ephemeralVolume("pvc-eph-none", "app", "orphan-data", nil)
	w.tridentLease("pvc-eph-none", "holder-eph-none", 20*time.Minute, 1)
	f = w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{PersistentVolume: "pvc-eph-none"})
	assert.Empty(t, f.AffectedPods, "affected pods: a claim no pod controls")
}
