package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

var mountCap = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
}

// requireMounts skips the test where this process may not mount (not root, or a sandbox that
// refuses mount(2)).
func requireMounts(t *testing.T) {
	t.Helper()
	src, dst := t.TempDir(), t.TempDir()
	if err := (sysMounter{}).BindMount(src, dst, false); err != nil {
		t.Skipf("bind mounts are refused here: %v", err)
	}
	if err := (sysMounter{}).Unmount(dst); err != nil {
		t.Fatalf("unmounting the trial bind mount: %v", err)
	}
}

func code(err error) codes.Code { return status.Code(err) }

// TestStagePublishRoundTrip stages and publishes a volume with real bind mounts, as kubelet
// calls the plugin: the pod's target path shows the volume's directory, a read-only publish
// refuses writes, and unpublishing and unstaging are idempotent.
func TestStagePublishRoundTrip(t *testing.T) {
	requireMounts(t)
	log, _ := testLog(t)
	root := t.TempDir()
	d := &Driver{Name: DriverName, NodeID: "real-1", VolumesDir: filepath.Join(root, "volumes"), Mounter: sysMounter{}, Log: log}
	staging := filepath.Join(root, "kubelet/plugins/kubernetes.io/csi/csi.trident.netapp.io/0123/globalmount")
	target := filepath.Join(root, "kubelet/pods/uid-1/volumes/kubernetes.io~csi/pvc-1/mount")
	roTarget := filepath.Join(root, "kubelet/pods/uid-2/volumes/kubernetes.io~csi/pvc-1/mount")
	t.Cleanup(func() {
		for _, p := range []string{target, roTarget, staging} {
			_ = d.unmountAll(p)
		}
	})
	ctx := context.Background()
	stage := &csi.NodeStageVolumeRequest{VolumeId: "pvc-1", StagingTargetPath: staging, VolumeCapability: mountCap}
	for i := range 2 { // twice: idempotent
		if _, err := d.NodeStageVolume(ctx, stage); err != nil {
			t.Fatalf("NodeStageVolume #%d: %v", i+1, err)
		}
	}
	if m, _ := d.Mounter.IsMountPoint(staging); !m {
		t.Fatal("the staging path is not a mount point")
	}
	pub := &csi.NodePublishVolumeRequest{VolumeId: "pvc-1", StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap}
	for i := range 2 {
		if _, err := d.NodePublishVolume(ctx, pub); err != nil {
			t.Fatalf("NodePublishVolume #%d: %v", i+1, err)
		}
	}
	if err := os.WriteFile(filepath.Join(target, "hello"), []byte("from real-1\n"), 0o644); err != nil {
		t.Fatalf("writing through the published volume: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(d.VolumesDir, "pvc-1", "hello"))
	if err != nil || string(got) != "from real-1\n" {
		t.Fatalf("the volume's directory holds %q, %v", got, err)
	}

	ro := &csi.NodePublishVolumeRequest{VolumeId: "pvc-1", StagingTargetPath: staging, TargetPath: roTarget, VolumeCapability: mountCap, Readonly: true}
	if _, err := d.NodePublishVolume(ctx, ro); err != nil {
		t.Fatalf("read-only NodePublishVolume: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(roTarget, "hello")); err != nil || string(b) != "from real-1\n" {
		t.Errorf("read-only target reads %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(roTarget, "nope"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing to the read-only target: %v, want EROFS", err)
	}

	for _, p := range []string{target, roTarget} {
		for i := range 2 {
			if _, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "pvc-1", TargetPath: p}); err != nil {
				t.Fatalf("NodeUnpublishVolume %s #%d: %v", p, i+1, err)
			}
		}
		if exists(p) {
			t.Errorf("the target path %s is still there", p)
		}
	}
	for i := range 2 {
		if _, err := d.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "pvc-1", StagingTargetPath: staging}); err != nil {
			t.Fatalf("NodeUnstageVolume #%d: %v", i+1, err)
		}
	}
	if m, _ := d.Mounter.IsMountPoint(staging); m {
		t.Error("the staging path is still mounted")
	}
	if b, err := os.ReadFile(filepath.Join(d.VolumesDir, "pvc-1", "hello")); err != nil || string(b) != "from real-1\n" {
		t.Errorf("the data went with the unmount: %q, %v", b, err)
	}
	// Never staged on this node: nothing to undo, no error.
	if _, err := d.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "pvc-2", StagingTargetPath: filepath.Join(root, "missing")}); err != nil {
		t.Errorf("NodeUnstageVolume of a missing path: %v", err)
	}
}

// TestSharedBetweenNodes: two nodes' plugins stage the same volume handle onto their own
// paths and see each other's writes, as two real nodes of this host do.
func TestSharedBetweenNodes(t *testing.T) {
	requireMounts(t)
	log, _ := testLog(t)
	root := t.TempDir()
	vols := filepath.Join(root, "volumes")
	ctx := context.Background()
	var paths []string
	t.Cleanup(func() {
		for _, p := range paths {
			_ = (&Driver{Mounter: sysMounter{}}).unmountAll(p)
		}
	})
	for _, node := range []string{"real-1", "real-2"} {
		d := &Driver{Name: DriverName, NodeID: node, VolumesDir: vols, Mounter: sysMounter{}, Log: log}
		staging := filepath.Join(root, node, "globalmount")
		paths = append(paths, staging)
		if _, err := d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "pvc-rwx", StagingTargetPath: staging, VolumeCapability: mountCap}); err != nil {
			t.Fatalf("%s: NodeStageVolume: %v", node, err)
		}
		if err := os.WriteFile(filepath.Join(staging, node), []byte(node), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range paths {
		for _, node := range []string{"real-1", "real-2"} {
			if b, err := os.ReadFile(filepath.Join(p, node)); err != nil || string(b) != node {
				t.Errorf("%s does not show %s's write: %q, %v", p, node, b, err)
			}
		}
	}
}

// fakeMounter records mounts without mounting, for the tests about the Lease.
type fakeMounter struct {
	mu     sync.Mutex
	mounts map[string]string
}

func (f *fakeMounter) BindMount(src, dst string, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mounts == nil {
		f.mounts = map[string]string{}
	}
	f.mounts[dst] = src
	return nil
}

func (f *fakeMounter) Unmount(p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.mounts, p)
	return nil
}

func (f *fakeMounter) IsMountPoint(p string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.mounts[p]
	return ok, nil
}

func TestRequestValidation(t *testing.T) {
	log, _ := testLog(t)
	d := &Driver{Name: DriverName, NodeID: "real-1", VolumesDir: t.TempDir(), Mounter: &fakeMounter{}, Log: log}
	ctx := context.Background()
	block := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
	for name, req := range map[string]*csi.NodeStageVolumeRequest{
		"no volume ID":     {StagingTargetPath: "/s", VolumeCapability: mountCap},
		"escaping ID":      {VolumeId: "..", StagingTargetPath: "/s", VolumeCapability: mountCap},
		"ID with a slash":  {VolumeId: "a/b", StagingTargetPath: "/s", VolumeCapability: mountCap},
		"no staging path":  {VolumeId: "pvc-1", VolumeCapability: mountCap},
		"no capability":    {VolumeId: "pvc-1", StagingTargetPath: "/s"},
		"block capability": {VolumeId: "pvc-1", StagingTargetPath: "/s", VolumeCapability: block},
	} {
		if _, err := d.NodeStageVolume(ctx, req); code(err) != codes.InvalidArgument {
			t.Errorf("%s: NodeStageVolume = %v, want InvalidArgument", name, err)
		}
	}
	_, err := d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-1", StagingTargetPath: "/s", TargetPath: filepath.Join(t.TempDir(), "t"), VolumeCapability: mountCap})
	if code(err) != codes.FailedPrecondition {
		t.Errorf("publishing an unstaged volume: %v, want FailedPrecondition", err)
	}
}

func TestIdentityAndNodeInfo(t *testing.T) {
	log, _ := testLog(t)
	path := serveDriver(t, &Driver{Name: DriverName, Version: DefaultVersion, NodeID: "real-2", Log: log})
	conn, err := dialUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close() //nolint:errcheck
	ctx := context.Background()
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil || info.Name != DriverName || info.VendorVersion != DefaultVersion {
		t.Errorf("GetPluginInfo = %+v, %v", info, err)
	}
	if p, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{}); err != nil || !p.GetReady().GetValue() {
		t.Errorf("Probe = %+v, %v", p, err)
	}
	if _, err := csi.NewIdentityClient(conn).GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{}); err != nil {
		t.Errorf("GetPluginCapabilities: %v", err)
	}
	node := csi.NewNodeClient(conn)
	if ni, err := node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}); err != nil || ni.NodeId != "real-2" {
		t.Errorf("NodeGetInfo = %+v, %v", ni, err)
	}
	caps, err := node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil || len(caps.Capabilities) != 1 || caps.Capabilities[0].GetRpc().GetType() != csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME {
		t.Errorf("NodeGetCapabilities = %+v, %v", caps, err)
	}
}

// luksPV is a PV as the e2e tests and the demo make them: volume handle = PV name.
func luksPV(name string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
			Driver: DriverName, VolumeHandle: name, VolumeAttributes: map[string]string{"luksEncryption": "true"},
		}},
	}}
}

func heldLease(name, holder string, acquired time.Time) *coordinationv1.Lease {
	at := metav1.NewMicroTime(acquired)
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: name, UID: "lease-uid"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), AcquireTime: &at}}
}

// luksNode is a node's plugin with a fake API and fake mounts; its cryptsetup step checks
// that it runs under the Lease, and fails while fail is set.
type luksNode struct {
	d       *Driver
	cs      *fake.Clientset
	fail    error
	ran     int
	under   []string // the Lease's holder while each cryptsetup ran
	staging string
}

func newLUKSNode(t *testing.T, cs *fake.Clientset, node string) *luksNode {
	t.Helper()
	log, _ := testLog(t)
	n := &luksNode{cs: cs, staging: filepath.Join(t.TempDir(), node, "globalmount")}
	n.d = &Driver{Name: DriverName, NodeID: node, VolumesDir: t.TempDir(), Mounter: &fakeMounter{}, Log: log.With("node", node),
		Gate: &LeaseGate{Client: cs, Namespace: "trident", Node: node, Log: log.With("node", node)}}
	n.d.Cryptsetup = func(ctx context.Context, op, id string) error {
		n.ran++
		l, err := cs.CoordinationV1().Leases("trident").Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			n.under = append(n.under, "no Lease: "+err.Error())
		} else {
			n.under = append(n.under, ptr.Deref(l.Spec.HolderIdentity, ""))
		}
		return n.fail
	}
	return n
}

func (n *luksNode) stage(vol string) error {
	_, err := n.d.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: n.staging,
		VolumeCapability: mountCap, VolumeContext: map[string]string{"luksEncryption": "true"}})
	return err
}

func lease(t *testing.T, cs *fake.Clientset, name string) *coordinationv1.Lease {
	t.Helper()
	l, err := cs.CoordinationV1().Leases("trident").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return l
}

func retainedEvents(t *testing.T, cs *fake.Clientset) []corev1.Event {
	t.Helper()
	list, err := cs.CoreV1().Events("trident").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.Reason == "LeaseRetained" {
			out = append(out, e)
		}
	}
	return out
}

// TestLUKSLeaseGate: staging a LUKS volume runs cryptsetup under the PV's Lease and deletes
// the Lease after; a Lease held by another node fails the stage with Aborted and kubelet's
// retry succeeds once it is gone; a failure retains the Lease with a LeaseRetained event, and
// then only the holder's retry gets through.
func TestLUKSLeaseGate(t *testing.T) {
	const pv = "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e"

	t.Run("free: taken for cryptsetup and deleted after", func(t *testing.T) {
		cs := fake.NewClientset(luksPV(pv))
		n := newLUKSNode(t, cs, "real-1")
		if err := n.stage(pv); err != nil {
			t.Fatalf("NodeStageVolume: %v", err)
		}
		if n.ran != 1 || n.under[0] != "real-1" {
			t.Errorf("cryptsetup ran %d times, under holders %v; want once under real-1", n.ran, n.under)
		}
		if l := lease(t, cs, pv); l != nil {
			t.Errorf("the Lease is still there after a successful operation: %+v", l.Spec)
		}
		if m, _ := n.d.Mounter.IsMountPoint(n.staging); !m {
			t.Error("not staged")
		}
	})

	t.Run("held by another node: Aborted until it is released", func(t *testing.T) {
		acquired := time.Date(2026, 11, 19, 5, 47, 54, 0, time.UTC)
		cs := fake.NewClientset(luksPV(pv), heldLease(pv, "real-2", acquired))
		n := newLUKSNode(t, cs, "real-1")
		err := n.stage(pv)
		if code(err) != codes.Aborted {
			t.Fatalf("NodeStageVolume = %v, want Aborted", err)
		}
		msg := status.Convert(err).Message()
		for _, want := range []string{"Lease trident/" + pv, "held by real-2", "2026-11-19T05:47:54Z", "only one node at a time may run cryptsetup"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
		if n.ran != 0 {
			t.Error("cryptsetup ran while another node held the Lease")
		}
		if l := lease(t, cs, pv); l == nil || ptr.Deref(l.Spec.HolderIdentity, "") != "real-2" || !l.Spec.AcquireTime.Time.Equal(acquired) {
			t.Errorf("the other node's Lease changed: %+v", l)
		}
		if m, _ := n.d.Mounter.IsMountPoint(n.staging); m {
			t.Error("staged while the Lease was held")
		}
		// The fix: the Lease goes, kubelet retries, the stage goes through.
		if err := cs.CoordinationV1().Leases("trident").Delete(context.Background(), pv, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := n.stage(pv); err != nil {
			t.Fatalf("NodeStageVolume after the Lease was deleted: %v", err)
		}
		if lease(t, cs, pv) != nil {
			t.Error("the Lease is still there")
		}
	})

	t.Run("failure retains the Lease for the same node only", func(t *testing.T) {
		cs := fake.NewClientset(luksPV(pv))
		one, two := newLUKSNode(t, cs, "real-1"), newLUKSNode(t, cs, "real-2")
		one.fail = errors.New("cryptsetup luksOpen failed: exit status 5")
		err := one.stage(pv)
		if code(err) != codes.Internal || !strings.Contains(err.Error(), "exit status 5") {
			t.Fatalf("NodeStageVolume = %v, want Internal with the cryptsetup error", err)
		}
		l := lease(t, cs, pv)
		if l == nil || ptr.Deref(l.Spec.HolderIdentity, "") != "real-1" {
			t.Fatalf("the Lease was not retained by real-1: %+v", l)
		}
		evs := retainedEvents(t, cs)
		if len(evs) != 1 {
			t.Fatalf("LeaseRetained events: %+v", evs)
		}
		e := evs[0]
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Lease" || e.InvolvedObject.Name != pv ||
			e.InvolvedObject.Namespace != "trident" || e.Source.Host != "real-1" ||
			!strings.Contains(e.Message, "Retaining lease after failed LUKS operation on node real-1: cryptsetup luksOpen failed: exit status 5") {
			t.Errorf("LeaseRetained event %+v", e)
		}
		if err := two.stage(pv); code(err) != codes.Aborted || !strings.Contains(err.Error(), "held by real-1") {
			t.Errorf("real-2's stage while real-1 retains the Lease = %v, want Aborted", err)
		}
		// real-1 retries: fails again (a second event), then succeeds and deletes the Lease.
		if err := one.stage(pv); code(err) != codes.Internal {
			t.Errorf("real-1's failing retry = %v", err)
		}
		if n := len(retainedEvents(t, cs)); n != 2 {
			t.Errorf("%d LeaseRetained events after two failures", n)
		}
		one.fail = nil
		if err := one.stage(pv); err != nil {
			t.Fatalf("real-1's retry: %v", err)
		}
		if lease(t, cs, pv) != nil {
			t.Error("the Lease is still there after the holder's successful retry")
		}
		if err := two.stage(pv); err != nil {
			t.Errorf("real-2 after the Lease went: %v", err)
		}
		if got := append(one.under, two.under...); strings.Join(got, ",") != "real-1,real-1,real-1,real-2" {
			t.Errorf("cryptsetup ran under the holders %v", got)
		}
	})

	t.Run("expired Lease is taken over, a Lease without a duration never expires", func(t *testing.T) {
		old := heldLease(pv, "real-2", time.Now().Add(-time.Hour))
		old.Spec.LeaseDurationSeconds = ptr.To[int32](60)
		cs := fake.NewClientset(luksPV(pv), old)
		if err := newLUKSNode(t, cs, "real-1").stage(pv); err != nil {
			t.Errorf("stage over an expired Lease: %v", err)
		}
		cs = fake.NewClientset(luksPV(pv), heldLease(pv, "real-2", time.Now().Add(-24*time.Hour)))
		if err := newLUKSNode(t, cs, "real-1").stage(pv); code(err) != codes.Aborted {
			t.Errorf("stage over a day-old Lease without a duration = %v, want Aborted", err)
		}
	})

	t.Run("Lease named after the PV, not the handle", func(t *testing.T) {
		p := luksPV("my-pv")
		p.Spec.CSI.VolumeHandle = "handle-1"
		cs := fake.NewClientset(p, heldLease("my-pv", "real-2", time.Now()))
		err := newLUKSNode(t, cs, "real-1").stage("handle-1")
		if code(err) != codes.Aborted || !strings.Contains(err.Error(), "Lease trident/my-pv") {
			t.Errorf("NodeStageVolume = %v, want Aborted on trident/my-pv", err)
		}
	})

	t.Run("no LUKS: no Lease", func(t *testing.T) {
		cs := fake.NewClientset(heldLease(pv, "real-2", time.Now()))
		n := newLUKSNode(t, cs, "real-1")
		if _, err := n.d.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: pv, StagingTargetPath: n.staging, VolumeCapability: mountCap}); err != nil {
			t.Errorf("NodeStageVolume of a plain volume: %v", err)
		}
		if n.ran != 0 {
			t.Error("cryptsetup ran for a plain volume")
		}
	})

	t.Run("no API access: Unavailable", func(t *testing.T) {
		n := newLUKSNode(t, fake.NewClientset(), "real-1")
		n.d.Gate = nil
		if err := n.stage(pv); code(err) != codes.Unavailable {
			t.Errorf("NodeStageVolume without a Gate = %v, want Unavailable", err)
		}
	})
}

func TestIsLUKS(t *testing.T) {
	for _, tc := range []struct {
		ctx  map[string]string
		want bool
	}{
		{map[string]string{"luksEncryption": "true"}, true},
		{map[string]string{"luksEncryption": "True"}, true},
		{map[string]string{"trident.netapp.io/luksEncryption": "true"}, true},
		{map[string]string{"luksEncryption": "false"}, false},
		{map[string]string{"backendUUID": "x"}, false},
		{nil, false},
	} {
		if got := isLUKS(tc.ctx); got != tc.want {
			t.Errorf("isLUKS(%v) = %v", tc.ctx, got)
		}
	}
}

// TestCryptsetupHooks: the hook files beside a volume make its cryptsetup step hang (all
// nodes, or the one named) or fail; a hang interrupted by kubelet's timeout retains the Lease.
func TestCryptsetupHooks(t *testing.T) {
	log, _ := testLog(t)
	vols := t.TempDir()
	sim := &cryptsetupSim{volumesDir: vols, node: "real-1", log: log}
	ctx := context.Background()
	if err := sim.run(ctx, "luksOpen", "pvc-1"); err != nil {
		t.Fatalf("no hooks: %v", err)
	}

	if err := os.WriteFile(hookPath(vols, "pvc-1", "fail"), []byte("exit status 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sim.run(ctx, "luksOpen", "pvc-1"); err == nil || err.Error() != "cryptsetup luksOpen failed: exit status 5" {
		t.Errorf("fail hook: %v", err)
	}
	_ = os.Remove(hookPath(vols, "pvc-1", "fail"))

	hang := hookPath(vols, "pvc-1", "hang")
	if err := os.WriteFile(hang, []byte("real-2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sim.run(ctx, "luksOpen", "pvc-1"); err != nil {
		t.Errorf("a hang hook naming another node hung or failed this one: %v", err)
	}
	if err := os.WriteFile(hang, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sim.run(ctx, "luksOpen", "pvc-1") }()
	select {
	case err := <-done:
		t.Fatalf("cryptsetup did not hang: %v", err)
	case <-time.After(3 * pollInterval):
	}
	_ = os.Remove(hang)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after the hang: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cryptsetup still hangs after the hook went")
	}

	// Through the plugin: kubelet's deadline ends the hang; the Lease stays with real-1.
	const pv = "pvc-hang"
	if err := os.WriteFile(hookPath(vols, pv, "hang"), []byte("real-1"), 0o644); err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset([]runtime.Object{luksPV(pv)}...)
	d := &Driver{Name: DriverName, NodeID: "real-1", VolumesDir: vols, Mounter: &fakeMounter{}, Log: log, Cryptsetup: sim.run,
		Gate: &LeaseGate{Client: cs, Namespace: "trident", Node: "real-1", Log: log}}
	dctx, cancel := context.WithTimeout(ctx, 3*pollInterval)
	defer cancel()
	_, err := d.NodeStageVolume(dctx, &csi.NodeStageVolumeRequest{VolumeId: pv, StagingTargetPath: filepath.Join(t.TempDir(), "g"),
		VolumeCapability: mountCap, VolumeContext: map[string]string{"luksEncryption": "true"}})
	if code(err) != codes.DeadlineExceeded {
		t.Errorf("NodeStageVolume interrupted in cryptsetup = %v, want DeadlineExceeded", err)
	}
	if l := lease(t, cs, pv); l == nil || ptr.Deref(l.Spec.HolderIdentity, "") != "real-1" {
		t.Errorf("the interrupted holder's Lease: %+v", l)
	}
}

func TestMountinfo(t *testing.T) {
	info := `22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
90 27 254:0 /var/lib/remediator-nodes/volumes/pvc-1 /var/lib/with\040space/globalmount rw,relatime shared:1 - ext4 /dev/vda rw
`
	for p, want := range map[string]bool{
		"/proc": true, "/": true, "/var/lib/with space/globalmount": true,
		`/var/lib/with\040space/globalmount`: false, "/var/lib": false,
	} {
		got, err := mountinfoHas(bufio.NewScanner(strings.NewReader(info)), p)
		if err != nil || got != want {
			t.Errorf("mountinfoHas(%q) = %v, %v; want %v", p, got, err, want)
		}
	}
}

// TestUnstageClosesWhatStageOpened: unstaging a LUKS volume this node opened runs
// luksClose, once (unstaging is idempotent); a plain volume has nothing to close.
func TestUnstageClosesWhatStageOpened(t *testing.T) {
	const pv = "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e"
	n := newLUKSNode(t, fake.NewClientset(luksPV(pv)), "real-1")
	var ops []string
	n.d.Cryptsetup = func(_ context.Context, op, id string) error {
		ops = append(ops, op+" "+id)
		return nil
	}
	unstage := func(vol string) {
		t.Helper()
		_, err := n.d.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: n.staging})
		if err != nil {
			t.Fatalf("NodeUnstageVolume: %v", err)
		}
	}
	if err := n.stage(pv); err != nil {
		t.Fatalf("NodeStageVolume: %v", err)
	}
	unstage(pv)
	unstage(pv)
	if want := []string{"luksOpen " + pv, "luksClose " + pv}; !slices.Equal(ops, want) {
		t.Errorf("cryptsetup ran %q, want %q", ops, want)
	}

	ops = nil
	if _, err := n.d.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: "plain", StagingTargetPath: n.staging,
		VolumeCapability: mountCap}); err != nil {
		t.Fatalf("NodeStageVolume: %v", err)
	}
	unstage("plain")
	if len(ops) != 0 {
		t.Errorf("cryptsetup ran %q for a volume that is not LUKS", ops)
	}
}
