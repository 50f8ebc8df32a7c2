package facts_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

// Lines as Trident v26.06.0's trident-main container writes them: logrus's
// TextFormatter (logging.NewConsoleHook, FullTimestamp), fields sorted, the request's
// requestID, requestSource, workflow and logLayer from logging.Logc. Request r1 stages
// volume pvc-1 (internal name trident_pvc_1), r2 another volume.
const (
	grpcCall1   = `time="2026-12-04T17:00:00Z" level=debug msg="GRPC call: /csi.v1.Node/NodeStageVolume" Request="GRPC request: volume_id:\"pvc-1\" publish_context:{key:\"protocol\" value:\"block\"} staging_target_path:\"/var/lib/kubelet/plugins/kubernetes.io/csi/csi.trident.netapp.io/abc/globalmount\" secrets:<REDACTED>" logLayer=csi_frontend requestID=r1 requestSource=CSI`
	ensureIn1   = `time="2026-12-04T17:00:01Z" level=debug msg=">>>> EnsureCryptsetupFormattedAndMappedOnHost" logLayer=csi_frontend requestID=r1 requestSource=CSI workflow="node_server=stage"`
	opening1    = `time="2026-12-04T17:00:01Z" level=info msg="Opening encrypted volume." logLayer=csi_frontend luks-passphrase-name=luks-key requestID=r1 requestSource=CSI volume=trident_pvc_1 workflow="node_server=stage"`
	openDev1    = `time="2026-12-04T17:00:01Z" level=debug msg="Opening LUKS device." device=/dev/sdb logLayer=csi_frontend luksDeviceName=luks-trident_pvc_1 requestID=r1 requestSource=CSI workflow="node_server=stage"`
	opened1     = `time="2026-12-04T17:00:03Z" level=debug msg="Opened LUKS device." device=/dev/sdb logLayer=csi_frontend luksDeviceName=luks-trident_pvc_1 requestID=r1 requestSource=CSI workflow="node_server=stage"`
	openOK1     = `time="2026-12-04T17:00:03Z" level=debug msg="Device is LUKS formatted and open." logLayer=csi_frontend requestID=r1 requestSource=CSI workflow="node_server=stage"`
	ensureOut1  = `time="2026-12-04T17:00:03Z" level=debug msg="<<<< EnsureCryptsetupFormattedAndMappedOnHost" logLayer=csi_frontend requestID=r1 requestSource=CSI workflow="node_server=stage"`
	openFail1   = `time="2026-12-04T17:00:03Z" level=info msg="Failed to open LUKS device." device=/dev/sdb error="exit status 5" logLayer=csi_frontend luksDeviceName=luks-trident_pvc_1 output="Device luks-trident_pvc_1 already exists." requestID=r1 requestSource=CSI workflow="node_server=stage"`
	couldNot1   = `time="2026-12-04T17:00:03Z" level=error msg="Could not open LUKS formatted device." error="could not open LUKS device; exit status 5" logLayer=csi_frontend requestID=r1 requestSource=CSI workflow="node_server=stage"`
	grpcError1  = `time="2026-12-04T17:00:03Z" level=error msg="GRPC error: rpc error: code = Internal desc = could not open LUKS device; exit status 5" logLayer=csi_frontend requestID=r1 requestSource=CSI`
	passphrase1 = `time="2026-12-04T17:00:04Z" level=error msg="cryptsetup command failed, output: No key available with this passphrase." error="exit status 2" logLayer=csi_frontend requestID=r1 requestSource=CSI workflow="node_server=stage"`
	ensureIn2   = `time="2026-12-04T17:00:05Z" level=debug msg=">>>> EnsureCryptsetupFormattedAndMappedOnHost" logLayer=csi_frontend requestID=r2 requestSource=CSI workflow="node_server=stage"`
	opening2    = `time="2026-12-04T17:00:05Z" level=info msg="Opening encrypted volume." logLayer=csi_frontend luks-passphrase-name=luks-key requestID=r2 requestSource=CSI volume=trident_pvc_2 workflow="node_server=stage"`
	// The same volume again, in a later request r3 (kubelet's retry).
	opening3  = `time="2026-12-04T17:01:00Z" level=info msg="Opening encrypted volume." logLayer=csi_frontend luks-passphrase-name=luks-key requestID=r3 requestSource=CSI volume=trident_pvc_1 workflow="node_server=stage"`
	couldNot3 = `time="2026-12-04T17:01:02Z" level=error msg="Could not open LUKS formatted device." error="could not open LUKS device; exit status 5" logLayer=csi_frontend requestID=r3 requestSource=CSI workflow="node_server=stage"`
	ensureIn3 = `time="2026-12-04T17:01:00Z" level=debug msg=">>>> EnsureCryptsetupFormattedAndMappedOnHost" logLayer=csi_frontend requestID=r3 requestSource=CSI workflow="node_server=stage"`
	ensureOK3 = `time="2026-12-04T17:01:02Z" level=debug msg="<<<< EnsureCryptsetupFormattedAndMappedOnHost" logLayer=csi_frontend requestID=r3 requestSource=CSI workflow="node_server=stage"`
	// Trident's JSON format (logging.JSONFormatter): every value a string.
	openingJSON = `{"@timestamp":"2026-12-04T17:00:01Z","level":"info","logLayer":"csi_frontend","luks-passphrase-name":"luks-key","message":"Opening encrypted volume.","requestID":"r1","requestSource":"CSI","volume":"trident_pvc_1","workflow":"node_server=stage"}`
	failJSON    = `{"@timestamp":"2026-12-04T17:00:03Z","level":"error","logLayer":"csi_frontend","message":"Could not open LUKS formatted device.","error":"could not open LUKS device; exit status 5","requestID":"r1","requestSource":"CSI"}`
	// Lines that are not Trident's, or about nothing this rule reads.
	noise = `I1204 17:00:00.000000       1 main.go:10] not a logrus line
time="2026-12-04T17:00:00Z" level=info msg="Node health check." requestID=r9 requestSource=Periodic`
)

var pvc1 = facts.LogVolumeNames("pvc-1", &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
	CSI: &corev1.CSIPersistentVolumeSource{Driver: facts.DefaultDriverName, VolumeHandle: "pvc-1", VolumeAttributes: map[string]string{"internalName": "trident_pvc_1"}},
}}})

func TestLogVolumeNames(t *testing.T) {
	assert.Equal(t, []string{"luks-trident_pvc_1", "pvc-1", "trident_pvc_1"}, pvc1)
	assert.Equal(t, []string{"pvc-9"}, facts.LogVolumeNames("pvc-9", nil), "no PV: its name only")
}

func TestClassifyLog(t *testing.T) {
	lines := func(ls ...string) string { return strings.Join(ls, "\n") + "\n" }
	cases := []struct {
		name  string
		log   string
		want  v1alpha1.LogState
		line  string // the line the state rests on
		lines int
	}{
		{name: "empty log", log: "", want: v1alpha1.LogNone},
		{name: "nothing of Trident's LUKS code", log: noise, want: v1alpha1.LogNone},
		{name: "debug: cryptsetup open entered, never left", log: lines(grpcCall1, ensureIn1, opening1, openDev1), want: v1alpha1.LogRunning, line: ensureIn1, lines: 3},
		{name: "debug: opened and left", log: lines(grpcCall1, ensureIn1, opening1, openDev1, opened1, openOK1, ensureOut1), want: v1alpha1.LogFinished, line: ensureOut1, lines: 5},
		{name: "debug: failed, the deferred exit marker after it", log: lines(ensureIn1, opening1, openDev1, openFail1, couldNot1, ensureOut1, grpcError1), want: v1alpha1.LogFailed, line: grpcError1, lines: 5},
		{name: "info: the open failed", log: lines(opening1, openFail1, couldNot1, grpcError1), want: v1alpha1.LogFailed, line: grpcError1, lines: 4},
		// At info level Trident logs no line when the open succeeds: the operation
		// cannot be told finished, so it counts as running.
		{name: "info: an open without an end", log: lines(opening1), want: v1alpha1.LogRunning, line: opening1, lines: 1},
		{name: "a wrong passphrase", log: lines(grpcCall1, passphrase1), want: v1alpha1.LogFailed, line: passphrase1, lines: 1},
		{name: "another volume's hang", log: lines(ensureIn2, opening2), want: v1alpha1.LogNone},
		{name: "another volume's hang beside this volume's success", log: lines(ensureIn1, opening1, ensureIn2, opening2, opened1, ensureOut1), want: v1alpha1.LogFinished, line: ensureOut1, lines: 4},
		{name: "a gRPC error before any LUKS line", log: lines(grpcCall1, grpcError1), want: v1alpha1.LogNone, lines: 1},
		{name: "a retry fails while the first attempt still hangs", log: lines(ensureIn1, opening1, ensureIn3, opening3, couldNot3), want: v1alpha1.LogRunning, line: ensureIn1, lines: 5},
		{name: "a failure, then a retry that succeeds", log: lines(opening1, couldNot1, grpcError1, ensureIn3, opening3, ensureOK3), want: v1alpha1.LogFinished, line: ensureOK3, lines: 5},
		{name: "a success, then a retry that hangs", log: lines(ensureIn1, opening1, opened1, ensureOut1, ensureIn3, opening3), want: v1alpha1.LogRunning, line: ensureIn3, lines: 5},
		{name: "JSON: an open without an end", log: lines(openingJSON), want: v1alpha1.LogRunning, line: openingJSON, lines: 1},
		{name: "JSON: the open failed", log: lines(openingJSON, failJSON), want: v1alpha1.LogFailed, line: failJSON, lines: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := facts.ClassifyLog(strings.NewReader(tc.log), pvc1)
			require.NoError(t, err)
			assert.Equal(t, tc.want, ev.State)
			assert.Equal(t, tc.line, ev.Line)
			assert.Len(t, ev.Lines, tc.lines, "%q", ev.Lines)
			if tc.lines > 0 {
				assert.NotContains(t, strings.Join(ev.Lines, "\n"), "GRPC call", "the request's own line is not recorded")
			}
		})
	}
}

// Status keeps at most five lines, each cut to 512 bytes.
func TestClassifyLogBoundsTheLines(t *testing.T) {
	var b strings.Builder
	for i := range 8 {
		fmt.Fprintf(&b, `time="2026-12-04T17:00:0%dZ" level=info msg="Failed to open LUKS device." luksDeviceName=luks-trident_pvc_1 output=%q requestID=r%d`+"\n",
			i, strings.Repeat("é", 400), i)
	}
	ev, err := facts.ClassifyLog(strings.NewReader(b.String()), pvc1)
	require.NoError(t, err)
	assert.Equal(t, v1alpha1.LogFailed, ev.State)
	require.Len(t, ev.Lines, 5)
	assert.Contains(t, ev.Lines[0], "17:00:03Z", "the newest five")
	for _, l := range ev.Lines {
		assert.LessOrEqual(t, len(l), 512+len("..."))
		assert.True(t, strings.HasSuffix(l, "..."))
	}
}

// A fencing statement that rests on the log is voided by a line after it: the newest
// line read, and the newest about the volume, are dated by Trident's own time field.
func TestClassifyLogDatesTheNewestLines(t *testing.T) {
	at := func(s string) *metav1.Time {
		tm, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return &metav1.Time{Time: tm}
	}
	cases := []struct {
		name                 string
		log                  []string
		newest, newestVolume *metav1.Time
	}{
		{name: "no dated line", log: []string{"I1204 17:00:00.000000       1 main.go:10] not a logrus line"}},
		{name: "another volume's line is the newest", log: []string{opening1, couldNot1, ensureIn2, opening2},
			newest: at("2026-12-04T17:00:05Z"), newestVolume: at("2026-12-04T17:00:03Z")},
		{name: "the volume's retry is the newest", log: []string{ensureIn2, opening1, opening3, couldNot3},
			newest: at("2026-12-04T17:01:02Z"), newestVolume: at("2026-12-04T17:01:02Z")},
		{name: "a periodic line only", log: []string{noise}, newest: at("2026-12-04T17:00:00Z")},
		{name: "JSON's @timestamp", log: []string{openingJSON, failJSON}, newest: at("2026-12-04T17:00:03Z"), newestVolume: at("2026-12-04T17:00:03Z")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := facts.ClassifyLog(strings.NewReader(strings.Join(tc.log, "\n")+"\n"), pvc1)
			require.NoError(t, err)
			assert.Equal(t, tc.newest, ev.NewestLineAt, "newest line")
			assert.Equal(t, tc.newestVolume, ev.NewestVolumeLineAt, "newest line about the volume")
		})
	}
}

// fakeLogs serves a log and records what was asked.
type fakeLogs struct {
	log  string
	err  error
	opts *corev1.PodLogOptions
	pod  string
}

func (f *fakeLogs) OpenLog(_ context.Context, ns, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
	f.opts, f.pod = opts, ns+"/"+pod
	if f.err != nil {
		return nil, f.err
	}
	return io.NopCloser(strings.NewReader(f.log)), nil
}

func TestReadLogEvidence(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "trident-node-a"}}
	since := time.Date(2026, 12, 4, 16, 59, 0, 0, time.UTC)

	logs := &fakeLogs{log: ensureIn1 + "\n" + opening1 + "\n"}
	ev := facts.ReadLogEvidence(context.Background(), logs, pod, since, pvc1)
	assert.Equal(t, "trident/trident-node-a", logs.pod)
	require.NotNil(t, logs.opts)
	assert.Equal(t, "trident-main", logs.opts.Container)
	assert.Equal(t, since, logs.opts.SinceTime.Time)
	assert.Equal(t, int64(facts.MaxLogBytes+1), *logs.opts.LimitBytes)
	assert.False(t, logs.opts.Follow, "read-only and bounded: never followed")
	assert.Equal(t, v1alpha1.LogRunning, ev.State)
	assert.Equal(t, ensureIn1, ev.Line)
	assert.Equal(t, "trident", ev.Namespace)
	assert.Equal(t, "trident-node-a", ev.Pod)
	assert.Equal(t, "trident-main", ev.Container)
	assert.Equal(t, int64(len(logs.log)), ev.BytesRead)
	assert.False(t, ev.Truncated)
	assert.Empty(t, ev.ReadError)
	assert.Equal(t, pvc1, ev.VolumeNames)

	ev = facts.ReadLogEvidence(context.Background(), &fakeLogs{err: errors.New("the server could not find the requested resource")}, pod, since, pvc1)
	assert.Equal(t, v1alpha1.LogUnread, ev.State)
	assert.Equal(t, "the server could not find the requested resource", ev.ReadError)
	assert.Equal(t, "trident-node-a", ev.Pod)

	// A log past the limit: its newest lines were not read, so it proves nothing.
	long := strings.Repeat(noise+"\n", facts.MaxLogBytes/len(noise)+1)
	ev = facts.ReadLogEvidence(context.Background(), &fakeLogs{log: long}, pod, since, pvc1)
	assert.Equal(t, v1alpha1.LogUnread, ev.State)
	assert.True(t, ev.Truncated)
	assert.Equal(t, int64(facts.MaxLogBytes), ev.BytesRead)
	assert.Contains(t, ev.ReadError, "longer than 1048576 bytes")
}

// FuzzClassifyLog classifies arbitrary logs, mixed with Trident's lines, and checks
// what status may hold: a known state, a line to rest on exactly when there is
// something about the volume, at most five lines of at most 512 bytes (and the cut
// marker) in valid UTF-8, the same answer twice, and nothing about a volume no line
// names.
func FuzzClassifyLog(f *testing.F) {
	for _, s := range []string{"", noise, ensureIn1 + "\n" + opening1, opening1 + "\n" + couldNot1 + "\n" + grpcError1,
		openingJSON + "\n" + failJSON, grpcCall1 + "\n" + passphrase1, "{\"message\":1}", `msg="unterminated`, "a=b c=\"\\xff\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, log string) {
		ev, err := facts.ClassifyLog(strings.NewReader(log), pvc1)
		if err != nil {
			return // a line longer than the read limit
		}
		again, _ := facts.ClassifyLog(strings.NewReader(log), pvc1)
		assert.Equal(t, ev, again, "deterministic")
		assert.Contains(t, []v1alpha1.LogState{v1alpha1.LogRunning, v1alpha1.LogFailed, v1alpha1.LogFinished, v1alpha1.LogNone}, ev.State)
		assert.Equal(t, ev.State == v1alpha1.LogNone, ev.Line == "", "a line exactly when there is a state: %+v", ev)
		assert.LessOrEqual(t, len(ev.Lines), 5)
		for _, l := range append([]string{ev.Line}, ev.Lines...) {
			assert.LessOrEqual(t, len(l), 512+len("..."))
			assert.True(t, utf8.ValidString(l), "%q", l)
		}
		if !strings.Contains(log, "never-named") {
			other, _ := facts.ClassifyLog(strings.NewReader(log), []string{"pvc-never-named"})
			assert.Equal(t, v1alpha1.LogNone, other.State, "no line names it")
		}
	})
}
