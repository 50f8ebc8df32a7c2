package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"k8s.io/client-go/kubernetes/fake"
)

var lineTime = time.Date(2026, 12, 4, 17, 0, 1, 0, time.UTC)

// TestTridentLogIsLogrusText: each line is byte for byte what Trident's console log,
// logrus's TextFormatter with full timestamps and no colours, writes for the same entry.
func TestTridentLogIsLogrusText(t *testing.T) {
	var got bytes.Buffer
	r := &tridentRequest{l: &TridentLog{W: &got, Now: func() time.Time { return lineTime }}, id: "5b0c2d7e-0000-4000-8000-000000000001", workflow: "node_server=stage"}
	r.Info("Opening encrypted volume.", "volume", "trident_pvc_1", "luks-passphrase-name", "luks-key")
	r.Error("GRPC error: rpc error: code = Internal desc = could not open LUKS device; exit status 5", "output", "")

	lr := logrus.New()
	var want bytes.Buffer
	lr.SetOutput(&want)
	lr.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, DisableColors: true})
	base := logrus.Fields{"requestID": "5b0c2d7e-0000-4000-8000-000000000001", "requestSource": "CSI", "logLayer": "csi_frontend", "workflow": "node_server=stage"}
	lr.WithFields(base).WithFields(logrus.Fields{"volume": "trident_pvc_1", "luks-passphrase-name": "luks-key"}).WithTime(lineTime).Info("Opening encrypted volume.")
	lr.WithFields(base).WithField("output", "").WithTime(lineTime).Error("GRPC error: rpc error: code = Internal desc = could not open LUKS device; exit status 5")
	if got.String() != want.String() {
		t.Errorf("lines:\n%s\nlogrus writes:\n%s", got.String(), want.String())
	}
	var none *TridentLog
	none.Request("x").Info("nothing") // a nil log writes nothing, and does not panic
}

// tridentLines are the messages of the lines written, in order, and the requestIDs seen.
func tridentLines(t *testing.T, log string) (msgs []string, ids map[string]bool) {
	t.Helper()
	ids = map[string]bool{}
	msg, id := regexp.MustCompile(`msg=("(?:[^"\\]|\\.)*"|\S+)`), regexp.MustCompile(`requestID=(\S+)`)
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		if l == "" {
			continue
		}
		m := msg.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("no msg in %q", l)
		}
		msgs = append(msgs, strings.Trim(m[1], `"`))
		if i := id.FindStringSubmatch(l); i != nil {
			ids[i[1]] = true
		}
	}
	return msgs, ids
}

// TestTridentLinesOfTheLUKSStep: staging a LUKS volume writes Trident's lines of the LUKS
// step, named after the volume's internalName, in one request: begun and ended after a
// success; begun, failed and the gRPC error after a failure.
func TestTridentLinesOfTheLUKSStep(t *testing.T) {
	const pv = "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e"
	stage := func(n *luksNode) error {
		_, err := n.d.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: pv, StagingTargetPath: n.staging,
			VolumeCapability: mountCap, VolumeContext: map[string]string{"luksEncryption": "true", "internalName": "trident_pvc_75a6fd7f"}})
		return err
	}
	n := newLUKSNode(t, fake.NewClientset(luksPV(pv)), "real-1")
	var buf bytes.Buffer
	n.d.Trident = &TridentLog{W: &buf}
	if err := stage(n); err != nil {
		t.Fatalf("NodeStageVolume: %v", err)
	}
	msgs, ids := tridentLines(t, buf.String())
	want := []string{">>>> EnsureCryptsetupFormattedAndMappedOnHost", "Opening encrypted volume.", "Opening LUKS device.",
		"Opened LUKS device.", "Device is LUKS formatted and open.", "<<<< EnsureCryptsetupFormattedAndMappedOnHost"}
	if strings.Join(msgs, "|") != strings.Join(want, "|") || len(ids) != 1 {
		t.Errorf("after a success: %q in %d requests, want %q in one", msgs, len(ids), want)
	}
	for _, w := range []string{"volume=trident_pvc_75a6fd7f ", "luksDeviceName=luks-trident_pvc_75a6fd7f ", `workflow="node_server=stage"`, "level=info msg=\"Opening encrypted volume.\""} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("no %q in:\n%s", w, buf.String())
		}
	}

	buf.Reset()
	n = newLUKSNode(t, fake.NewClientset(luksPV(pv)), "real-2")
	n.d.Trident = &TridentLog{W: &buf}
	n.fail = errTest("cryptsetup luksOpen failed: exit status 5")
	if err := stage(n); code(err) != codes.Internal {
		t.Fatalf("NodeStageVolume = %v, want Internal", err)
	}
	msgs, ids = tridentLines(t, buf.String())
	want = []string{">>>> EnsureCryptsetupFormattedAndMappedOnHost", "Opening encrypted volume.", "Opening LUKS device.",
		"Failed to open LUKS device.", "Could not open LUKS formatted device.", "<<<< EnsureCryptsetupFormattedAndMappedOnHost",
		"GRPC error: rpc error: code = Internal desc = LUKS operation on volume " + pv + " failed, lease trident/" + pv + " retained: cryptsetup luksOpen failed: exit status 5"}
	if strings.Join(msgs, "|") != strings.Join(want, "|") || len(ids) != 1 {
		t.Errorf("after a failure: %q in %d requests, want %q in one", msgs, len(ids), want)
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }

// TestCryptsetupStuckHook: while <handle>.cryptsetup-stuck exists, cryptsetup runs on past
// the request's end, and the Trident lines show the step begun and never ended; once the
// hook goes, cryptsetup completes and the step's end is logged.
func TestCryptsetupStuckHook(t *testing.T) {
	log, _ := testLog(t)
	vols := t.TempDir()
	sim := &cryptsetupSim{volumesDir: vols, node: "real-1", log: log}
	const pv = "pvc-stuck"
	stuck := hookPath(vols, pv, "stuck")
	if err := os.WriteFile(stuck, []byte("real-2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sim.run(context.Background(), "luksOpen", pv); err != nil {
		t.Errorf("a stuck hook naming another node held up this one: %v", err)
	}
	if err := os.WriteFile(stuck, []byte("real-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	n := newLUKSNode(t, fake.NewClientset(luksPV(pv)), "real-1")
	n.d.VolumesDir, n.d.Cryptsetup, n.d.Trident = vols, sim.run, &TridentLog{W: &buf}
	ctx, cancel := context.WithTimeout(context.Background(), 2*pollInterval)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := n.d.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: pv, StagingTargetPath: filepath.Join(t.TempDir(), "g"),
			VolumeCapability: mountCap, VolumeContext: map[string]string{"luksEncryption": "true"}})
		done <- err
	}()
	<-ctx.Done()
	select {
	case err := <-done:
		t.Fatalf("the stuck cryptsetup ended with its request: %v", err)
	case <-time.After(3 * pollInterval):
	}
	msgs, _ := tridentLines(t, buf.String())
	want := []string{">>>> EnsureCryptsetupFormattedAndMappedOnHost", "Opening encrypted volume.", "Opening LUKS device."}
	if strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Errorf("while stuck: %q, want %q (begun, never ended)", msgs, want)
	}
	if !strings.Contains(buf.String(), "volume="+pv+" ") {
		t.Errorf("without internalName the volume handle names it:\n%s", buf.String())
	}
	_ = os.Remove(stuck)
	select {
	case err := <-done: // what comes of the Lease after the request's end is not this test's
		t.Logf("NodeStageVolume once unstuck: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("cryptsetup still stuck after the hook went")
	}
	if msgs, _ = tridentLines(t, buf.String()); msgs[len(msgs)-1] != "<<<< EnsureCryptsetupFormattedAndMappedOnHost" {
		t.Errorf("once unstuck, the step ends: the last line is %q", msgs[len(msgs)-1])
	}
}
