package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Driver is the CSI Identity and Node server. A volume is the directory
// <VolumesDir>/<volume handle>, created on first use. Every real node of the local cluster
// runs on the same host and so sees the same directory: data written on one node is read on
// the other, as with a ReadWriteMany volume.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	Name       string
	Version    string
	NodeID     string
	VolumesDir string
	Mounter    Mounter
	// Gate takes LUKS volumes' Leases; nil (no API access) makes staging a LUKS volume fail.
	Gate *LeaseGate
	// Cryptsetup runs the LUKS steps (luksOpen of staging, luksClose of unstaging); see
	// cryptsetupSim.
	Cryptsetup func(ctx context.Context, op, volumeID string) error
	Log        *slog.Logger
	// Trident writes Trident's own lines for the LUKS step (TridentLog); nil: none.
	Trident *TridentLog

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// lock serialises the operations on one volume within this plugin.
func (d *Driver) lock(volumeID string) func() {
	d.mu.Lock()
	if d.locks == nil {
		d.locks = map[string]*sync.Mutex{}
	}
	m := d.locks[volumeID]
	if m == nil {
		m = &sync.Mutex{}
		d.locks[volumeID] = m
	}
	d.mu.Unlock()
	m.Lock()
	return m.Unlock
}

func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.Name, VendorVersion: d.Version}, nil
}

func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	// A node plugin only: no controller service, no topology.
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.NodeID}, nil
}

func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{
			Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		}},
	}}}, nil
}

// volumeDir validates a volume handle and returns (creating it) the volume's directory.
func (d *Driver) volumeDir(id string) (string, error) {
	if id == "" {
		return "", status.Error(codes.InvalidArgument, "volume ID missing")
	}
	if strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return "", status.Errorf(codes.InvalidArgument, "volume ID %q cannot name a directory", id)
	}
	dir := filepath.Join(d.VolumesDir, id)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", status.Errorf(codes.Internal, "creating volume directory %s: %v", dir, err)
	}
	// World-writable like a fresh NFS export, whatever the umask: pods run as any user.
	if err := os.Chmod(dir, 0o777); err != nil {
		return "", status.Errorf(codes.Internal, "chmod volume directory %s: %v", dir, err)
	}
	return dir, nil
}

func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return status.Error(codes.InvalidArgument, "volume capability missing")
	}
	if c.GetBlock() != nil {
		return status.Error(codes.InvalidArgument, "block volumes are not supported: volumes are directories")
	}
	return nil
}

// isLUKS reports whether a volume context marks the volume LUKS-encrypted, as Trident's
// volume attributes do (luksEncryption: "true").
func isLUKS(volumeContext map[string]string) bool {
	for k, v := range volumeContext {
		k = strings.ToLower(k)
		if (k == "luksencryption" || k == "trident.netapp.io/luksencryption") && strings.EqualFold(strings.TrimSpace(v), "true") {
			return true
		}
	}
	return false
}

func (d *Driver) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if staging == "" {
		return nil, status.Error(codes.InvalidArgument, "staging target path missing")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	src, err := d.volumeDir(id)
	if err != nil {
		return nil, err
	}
	defer d.lock(id)()
	log := d.Log.With("volume", id, "stagingPath", staging)
	if mounted, err := d.Mounter.IsMountPoint(staging); err != nil {
		return nil, status.Errorf(codes.Internal, "checking %s: %v", staging, err)
	} else if mounted {
		log.Info("NodeStageVolume: already staged")
		return &csi.NodeStageVolumeResponse{}, nil
	}
	if isLUKS(req.GetVolumeContext()) {
		if err := d.luksOpen(ctx, log, id, luksName(req.GetVolumeContext(), id)); err != nil {
			return nil, err
		}
		// NodeUnstage has no volume context: record what to close, as Trident's
		// volume tracking file does.
		if err := os.WriteFile(d.openPath(id), nil, 0o600); err != nil {
			return nil, status.Errorf(codes.Internal, "recording the open LUKS device of %s: %v", id, err)
		}
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "creating staging path %s: %v", staging, err)
	}
	if err := d.Mounter.BindMount(src, staging, false); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	log.Info("NodeStageVolume: staged", "source", src, "luks", isLUKS(req.GetVolumeContext()))
	return &csi.NodeStageVolumeResponse{}, nil
}

// luksOpen runs the LUKS step of staging under the volume's Lease: taken before, deleted
// after success, kept (with a LeaseRetained event) after a failure. Held by another node, it
// fails with Aborted, which kubelet reports as FailedMount and retries. name is Trident's
// name of the volume (luksName), in the Trident lines it writes.
func (d *Driver) luksOpen(ctx context.Context, log *slog.Logger, id, name string) error {
	if d.Gate == nil {
		return status.Errorf(codes.Unavailable, "volume %s is LUKS-encrypted and this plugin has no Kubernetes API access to take its Lease", id)
	}
	pv, err := d.Gate.PVName(ctx, id)
	if err != nil {
		return status.Errorf(codes.Unavailable, "finding the PV of LUKS volume %s: %v", id, err)
	}
	lease, err := d.Gate.Acquire(ctx, pv)
	var held *HeldError
	if errors.As(err, &held) {
		log.Warn("LUKS lease held by another node", "lease", held.Namespace+"/"+held.Lease, "holder", held.Holder, "err", held)
		return status.Error(codes.Aborted, held.Error())
	}
	if err != nil {
		return status.Errorf(codes.Unavailable, "acquiring the Lease of LUKS volume %s: %v", pv, err)
	}
	log.Info("Running cryptsetup luksOpen", "lease", lease.Namespace+"/"+lease.Name)
	tl := d.Trident.Request("node_server=stage")
	device := filepath.Join(d.VolumesDir, id) // no block device here: the volume's directory
	tl.Debug(">>>> EnsureCryptsetupFormattedAndMappedOnHost")
	tl.Info("Opening encrypted volume.", "volume", name, "luks-passphrase-name", "luks-key")
	tl.Debug("Opening LUKS device.", "device", device, "luksDeviceName", "luks-"+name)
	if err := d.Cryptsetup(ctx, "luksOpen", id); err != nil {
		tl.Info("Failed to open LUKS device.", "device", device, "luksDeviceName", "luks-"+name, "output", "", "error", err.Error())
		tl.Error("Could not open LUKS formatted device.", "error", "could not open LUKS device; "+err.Error())
		tl.Debug("<<<< EnsureCryptsetupFormattedAndMappedOnHost")
		// The request's context may be over (kubelet gave up): report with a fresh one.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
		defer cancel()
		if rerr := d.Gate.Retain(rctx, lease, err); rerr != nil {
			log.Error("Could not report the retained lease", "err", rerr)
		}
		code := codes.Internal
		if ctx.Err() != nil {
			code = codes.DeadlineExceeded
		}
		serr := status.Errorf(code, "LUKS operation on volume %s failed, lease %s/%s retained: %v", pv, lease.Namespace, lease.Name, err)
		tl.Error("GRPC error: " + serr.Error())
		return serr
	}
	tl.Debug("Opened LUKS device.", "device", device, "luksDeviceName", "luks-"+name)
	tl.Debug("Device is LUKS formatted and open.")
	tl.Debug("<<<< EnsureCryptsetupFormattedAndMappedOnHost")
	if err := d.Gate.Release(ctx, lease); err != nil {
		return status.Errorf(codes.Unavailable, "cryptsetup luksOpen of %s succeeded but its Lease could not be deleted: %v", pv, err)
	}
	return nil
}

// luksName is Trident's name of a volume, which its LUKS code logs and names the LUKS
// device after (luks-<name>): the volume context's internalName (node_server.go passes
// req.VolumeContext["internalName"]), else, for a PV without it, the volume handle.
func luksName(volumeContext map[string]string, id string) string {
	if n := volumeContext["internalName"]; n != "" {
		return n
	}
	return id
}

// openPath records, beside the volume's directory, that this node opened the volume's
// LUKS device.
func (d *Driver) openPath(id string) string {
	return filepath.Join(d.VolumesDir, id+".luks-open-"+d.NodeID)
}

// NodeUnstageVolume unmounts the staging path and, for a LUKS volume this node opened,
// closes the device. The kubelet lists the volume in the Node's status.volumesInUse
// until this returns: after the pod is gone, not before.
func (d *Driver) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if id == "" || staging == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID and staging target path are required")
	}
	defer d.lock(id)()
	if err := d.unmountAll(staging); err != nil {
		return nil, err
	}
	if _, err := os.Stat(d.openPath(id)); err == nil {
		d.Log.Info("Running cryptsetup luksClose", "volume", id)
		if err := d.Cryptsetup(ctx, "luksClose", id); err != nil {
			return nil, status.Errorf(codes.Internal, "closing the LUKS device of volume %s: %v", id, err)
		}
		if err := os.Remove(d.openPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, status.Errorf(codes.Internal, "recording the closed LUKS device of %s: %v", id, err)
		}
	}
	d.Log.Info("NodeUnstageVolume: unstaged", "volume", id, "stagingPath", staging)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *Driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, staging, target := req.GetVolumeId(), req.GetStagingTargetPath(), req.GetTargetPath()
	if id == "" || staging == "" || target == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID, staging target path and target path are required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	defer d.lock(id)()
	if mounted, err := d.Mounter.IsMountPoint(target); err != nil {
		return nil, status.Errorf(codes.Internal, "checking %s: %v", target, err)
	} else if mounted {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if mounted, err := d.Mounter.IsMountPoint(staging); err != nil {
		return nil, status.Errorf(codes.Internal, "checking %s: %v", staging, err)
	} else if !mounted {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", id, staging)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "creating target path %s: %v", target, err)
	}
	if err := d.Mounter.BindMount(staging, target, req.GetReadonly()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	d.Log.Info("NodePublishVolume: published", "volume", id, "targetPath", target, "readOnly", req.GetReadonly())
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if id == "" || target == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID and target path are required")
	}
	defer d.lock(id)()
	if err := d.unmountAll(target); err != nil {
		return nil, err
	}
	// The CSI spec has the plugin delete the target path it created; only an empty directory
	// goes.
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.Log.Warn("Could not remove the target path", "targetPath", target, "err", err)
	}
	d.Log.Info("NodeUnpublishVolume: unpublished", "volume", id, "targetPath", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// unmountAll unmounts every mount stacked at path; a path that is missing or not mounted is
// fine (the operation is idempotent).
func (d *Driver) unmountAll(path string) error {
	for range 10 {
		mounted, err := d.Mounter.IsMountPoint(path)
		if err != nil {
			return status.Errorf(codes.Internal, "checking %s: %v", path, err)
		}
		if !mounted {
			return nil
		}
		if err := d.Mounter.Unmount(path); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	return status.Errorf(codes.Internal, "%s is still mounted after 10 unmounts", path)
}

// hookPath is the path of a test hook beside a volume's directory, for the cryptsetup step.
func hookPath(volumesDir, id, hook string) string {
	return filepath.Join(volumesDir, id+".cryptsetup-"+hook)
}

// cryptsetupSim plays the LUKS step. There is no LUKS device: the step takes duration and
// succeeds, except that tests (from the host, which all nodes share) can make it
//   - hang: while <volumes dir>/<handle>.cryptsetup-hang exists (empty, or naming this node),
//     as a node that dies mid-operation does, leaving its Lease behind; the request's end
//     (kubelet's deadline) ends it as a failure;
//   - stay stuck: while <volumes dir>/<handle>.cryptsetup-stuck exists (empty, or naming this
//     node), even past the request's end, as a cryptsetup in uninterruptible sleep does: the
//     Trident lines of the step then show it begun and never ended, cryptsetup still running;
//     once the hook goes it completes at once (and fails while the fail hook exists);
//   - fail: while <volumes dir>/<handle>.cryptsetup-fail exists, with its content as the
//     error (the Lease is then retained and a LeaseRetained event emitted).
type cryptsetupSim struct {
	volumesDir string
	node       string
	duration   time.Duration
	// closeDuration is luksClose's: unstaging also flushes and removes the device.
	closeDuration time.Duration
	log           *slog.Logger
}

// hooked reports whether the hook file at path holds for this node: it exists, empty or
// naming this node.
func (c *cryptsetupSim) hooked(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	who := strings.TrimSpace(string(b))
	return who == "" || who == c.node
}

func (c *cryptsetupSim) run(ctx context.Context, op, id string) error {
	// Not the request's context: a stuck cryptsetup does not notice kubelet giving up.
	stuck := hookPath(c.volumesDir, id, "stuck")
	wasStuck := false
	for ; c.hooked(stuck); wasStuck = true {
		if !wasStuck {
			c.log.Warn("cryptsetup "+op+" is stuck while the hook file exists, past the request's end", "volume", id, "hook", stuck)
		}
		time.Sleep(pollInterval)
	}
	if wasStuck { // it completes when it comes back, whatever became of the request
		return c.result(op, id)
	}
	hang := hookPath(c.volumesDir, id, "hang")
	for logged := false; c.hooked(hang); logged = true {
		if !logged {
			c.log.Warn("cryptsetup "+op+" hangs while the hook file exists", "volume", id, "hook", hang)
		}
		if !sleepCtx(ctx, pollInterval) {
			return fmt.Errorf("cryptsetup %s interrupted: %w", op, ctx.Err())
		}
	}
	d := c.duration
	if op == "luksClose" {
		d = c.closeDuration
	}
	if !sleepCtx(ctx, d) {
		return fmt.Errorf("cryptsetup %s interrupted: %w", op, ctx.Err())
	}
	return c.result(op, id)
}

// result is how cryptsetup ends: failed while the fail hook exists.
func (c *cryptsetupSim) result(op, id string) error {
	if b, err := os.ReadFile(hookPath(c.volumesDir, id, "fail")); err == nil {
		msg := strings.TrimSpace(string(b))
		if msg == "" {
			msg = "exit status 1"
		}
		return fmt.Errorf("cryptsetup %s failed: %s", op, msg)
	}
	return nil
}
