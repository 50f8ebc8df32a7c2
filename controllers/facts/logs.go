package facts

// Log evidence: the runbook reads the log of the Trident node pod on a healthy holder
// (kubectl logs -n <trident namespace> <node pod> -c trident-main) before it calls the
// holder's Lease stuck, and deletes the Lease only once the operation no longer runs.
// This file reads that log, read-only and bounded, and says what it shows of the LUKS
// operation on the Lease's volume.
//
// The lines recognised are Trident's own, as its source (v26.06.0) writes them; each
// pattern below names the file and function that logs it. Trident's public source
// logs nothing about its LUKS Lease (it has no Lease code), so no Lease line is
// recognised: only the LUKS operation's.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TridentMainContainer is the node-plugin pod's container that runs Trident, the one
// the runbook reads (kubectl logs ... -c trident-main).
const TridentMainContainer = "trident-main"

const (
	// MaxLogBytes bounds one read. A decision reads the log once, and a storm decides
	// many requests: at Trident's debug level a node logs a few hundred bytes a line,
	// so 1 MiB holds thousands of lines, minutes of a busy node; a longer log is
	// reported Truncated, which proves nothing, rather than read without end.
	MaxLogBytes = 1 << 20
	// LogReadTimeout bounds one read, so that a kubelet that does not answer holds
	// up the decision no longer than this.
	LogReadTimeout = 10 * time.Second
	// LogSinceMargin is read before the hold began: Trident may log the operation's
	// first line before it takes the Lease, and the holder's clock, which dates the
	// log, may run behind the one that dated the Lease.
	LogSinceMargin = time.Minute
	// maxEvidenceLines and maxEvidenceLineBytes bound what status records of the log.
	maxEvidenceLines     = 5
	maxEvidenceLineBytes = 512
)

// LogReader opens a container's log: the pods/log subresource, read-only.
type LogReader interface {
	OpenLog(ctx context.Context, namespace, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error)
}

// ClientsetLogs reads logs through client-go: controller-runtime's client has no
// pods/log.
type ClientsetLogs struct{ Client kubernetes.Interface }

// OpenLog streams the log.
func (c ClientsetLogs) OpenLog(ctx context.Context, namespace, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
	rc, err := c.Client.CoreV1().Pods(namespace).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the log of %s/%s: %w", namespace, pod, err)
	}
	return rc, nil
}

// logKind is what a recognised line says of a LUKS operation.
type logKind int

const (
	logEnter logKind = iota + 1 // the operation begins
	logExit                     // it ended without a failure
	logFail                     // it failed
)

// tridentLine is a message Trident logs, matched whole or, for a prefix, by its start.
type tridentLine struct {
	msg    string
	prefix bool
	kind   logKind
}

// tridentLines are the LUKS operation's lines of Trident v26.06.0.
var tridentLines = []tridentLine{
	// utils/devices/luks/luks.go, EnsureCryptsetupFormattedAndMappedOnHost (debug).
	{msg: ">>>> EnsureCryptsetupFormattedAndMappedOnHost", kind: logEnter},
	{msg: "<<<< EnsureCryptsetupFormattedAndMappedOnHost", kind: logExit},
	// utils/devices/luks/luks.go, (*LUKSDevice).EnsureDeviceMappedOnHost (info, field volume).
	{msg: "Opening encrypted volume.", kind: logEnter},
	// utils/devices/luks/luks_linux.go, (*LUKSDevice).Open (debug; info for the failure,
	// field luksDeviceName).
	{msg: "Opening LUKS device.", kind: logEnter},
	{msg: "Opened LUKS device.", kind: logExit},
	{msg: "Failed to open LUKS device.", kind: logFail},
	// utils/devices/luks/luks_linux.go, (*LUKSDevice).format (debug; error for the failure).
	{msg: "Formatting LUKS device.", kind: logEnter},
	{msg: "Failed to format LUKS device.", kind: logFail},
	// utils/devices/luks/luks.go, (*LUKSDevice).ensureLUKSDevice (debug; error for failures).
	{msg: "Device is LUKS formatted and open.", kind: logExit},
	{msg: "Could not LUKS format device.", kind: logFail},
	{msg: "Could not open LUKS formatted device.", kind: logFail},
	// utils/devices/luks/luks_linux.go, (*LUKSDevice).CheckPassphrase (error):
	// Errorf("cryptsetup command failed, output: %s", output).
	{msg: "cryptsetup command failed, output: ", prefix: true, kind: logFail},
	// frontend/csi/interceptor.go, logGRPCInterceptor (error): Errorf("GRPC error: %v", err),
	// the end of a request that failed; counted only in a request that began an operation.
	{msg: "GRPC error: ", prefix: true, kind: logFail},
}

func kindOf(msg string) logKind {
	for _, t := range tridentLines {
		if msg == t.msg || (t.prefix && strings.HasPrefix(msg, t.msg)) {
			return t.kind
		}
	}
	return 0
}

// logLine is one parsed line of Trident's log.
type logLine struct {
	raw    string
	msg    string
	fields map[string]string
	// named: the line names the volume itself.
	named bool
}

// parseLogLine reads a line in either of Trident's formats: logrus text
// (time="..." level=info msg="..." key=value, logging.NewConsoleHook's
// TextFormatter) or Trident's JSON (logging.JSONFormatter: "@timestamp", "level",
// "message" and the fields, every value a string). ok is false for anything else.
func parseLogLine(raw string) (logLine, bool) {
	s := strings.TrimSpace(raw)
	l := logLine{raw: s, fields: map[string]string{}}
	if strings.HasPrefix(s, "{") {
		var m map[string]any
		if json.Unmarshal([]byte(s), &m) != nil {
			return l, false
		}
		for k, v := range m {
			l.fields[k] = fmt.Sprint(v)
		}
		l.msg = l.fields["message"]
		return l, l.msg != ""
	}
	for s != "" {
		key, rest, ok := strings.Cut(s, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \"") {
			return l, false
		}
		var val string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return l, false
			}
			val, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			val, rest, _ = strings.Cut(rest, " ")
		}
		l.fields[key] = val
		s = strings.TrimLeft(rest, " ")
	}
	l.msg = l.fields["msg"]
	return l, l.msg != ""
}

// names reports whether a field of the line names the volume by one of names: a
// field equal to it (volume, luksDeviceName, VolumeID), a quoted value inside one (a
// gRPC request's volume_id:"..."), or a path that ends in it (/dev/mapper/luks-...).
func (l logLine) names(names []string) bool {
	for k, v := range l.fields {
		if k == "msg" || k == "message" {
			continue
		}
		for _, n := range names {
			if v == n || strings.Contains(v, `"`+n+`"`) || strings.HasSuffix(v, "/"+n) {
				return true
			}
		}
	}
	return false
}

// requestID is the line's request: Trident's logging.Logc adds requestID to every
// line logged in a request's context, so the lines of a request that names the
// volume are about the volume even where they do not name it.
func (l logLine) requestID() string { return l.fields["requestID"] }

// LogVolumeNames are the names Trident's lines give the volume of PV pv: its name
// and volume handle, and Trident's internal name (the PV's volumeAttributes
// internalName, which node_server.go passes to the LUKS code as the volume's name)
// with the LUKS device's name, luks-<internal name> (luks.go NewDevice).
func LogVolumeNames(pvName string, pv *corev1.PersistentVolume) []string {
	names := []string{pvName}
	if pv != nil && pv.Spec.CSI != nil {
		names = append(names, pv.Spec.CSI.VolumeHandle)
		if in := pv.Spec.CSI.VolumeAttributes["internalName"]; in != "" {
			names = append(names, in, "luks-"+in)
		}
	}
	names = slices.DeleteFunc(names, func(n string) bool { return n == "" })
	slices.Sort(names)
	return slices.Compact(names)
}

// ClassifyLog reads a Trident log and says what it shows of the LUKS operation on the
// volume known by names. A request's operation is Running from a line that begins
// it until a line that ends it; the volume's is Running while any request's is (a
// retry may fail while the first attempt still hangs), else the newest request's.
// It is pure, to be table-tested. It fills State, Line and Lines.
func ClassifyLog(r io.Reader, names []string) (v1alpha1.LogEvidence, error) {
	var kept []logLine
	var newest time.Time
	about := map[string]bool{} // requests that name the volume
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLogBytes+1)
	for sc.Scan() {
		l, ok := parseLogLine(sc.Text())
		if !ok {
			continue
		}
		if at, ok := l.time(); ok && at.After(newest) {
			newest = at
		}
		l.named = l.names(names)
		if l.named && l.requestID() != "" {
			about[l.requestID()] = true
		}
		if kindOf(l.msg) != 0 {
			kept = append(kept, l)
		}
	}
	if err := sc.Err(); err != nil {
		return v1alpha1.LogEvidence{State: v1alpha1.LogUnread}, fmt.Errorf("reading the log: %w", err)
	}
	kept = slices.DeleteFunc(kept, func(l logLine) bool {
		return !l.named && (l.requestID() == "" || !about[l.requestID()])
	})
	ev := judgeRequests(kept)
	if !newest.IsZero() {
		ev.NewestLineAt = &metav1.Time{Time: newest}
	}
	if len(kept) > 0 {
		if at, ok := kept[len(kept)-1].time(); ok {
			ev.NewestVolumeLineAt = &metav1.Time{Time: at}
		}
	}
	return ev, nil
}

// time is when the line was written, by Trident's time field: logrus's "time" in
// the text format, "@timestamp" in Trident's JSON, both RFC 3339.
func (l logLine) time() (time.Time, bool) {
	v := cmp.Or(l.fields["time"], l.fields["@timestamp"])
	at, err := time.Parse(time.RFC3339Nano, v)
	return at, err == nil
}

// requestState follows one request's operation through its lines.
type requestState struct {
	state v1alpha1.LogState
	line  string
}

func (r *requestState) see(l logLine) {
	switch kindOf(l.msg) {
	case logEnter:
		if r.state != v1alpha1.LogRunning {
			r.state, r.line = v1alpha1.LogRunning, l.raw
		}
	case logFail:
		// A request's gRPC error is a LUKS failure only once a LUKS operation began.
		if r.state != "" || !strings.HasPrefix(l.msg, "GRPC error: ") {
			r.state, r.line = v1alpha1.LogFailed, l.raw
		}
	case logExit: // a deferred exit marker after a failure does not undo it
		if r.state != v1alpha1.LogFailed {
			r.state, r.line = v1alpha1.LogFinished, l.raw
		}
	}
}

// judgeRequests turns the volume's lines, in log order, into the evidence's state.
func judgeRequests(lines []logLine) v1alpha1.LogEvidence {
	ev := v1alpha1.LogEvidence{State: v1alpha1.LogNone}
	requests := map[string]*requestState{}
	var order []string // requests by their newest line, newest last
	for _, l := range lines {
		id := l.requestID()
		r := requests[id]
		if r == nil {
			r = &requestState{}
			requests[id] = r
		}
		r.see(l)
		order = append(slices.DeleteFunc(order, func(o string) bool { return o == id }), id)
	}
	for _, id := range order { // oldest first: the first request still running is the one quoted
		if r := requests[id]; r.state == v1alpha1.LogRunning {
			ev.State, ev.Line = r.state, cut(r.line)
			break
		}
	}
	if ev.State != v1alpha1.LogRunning && len(order) > 0 {
		if r := requests[order[len(order)-1]]; r.state != "" {
			ev.State, ev.Line = r.state, cut(r.line)
		}
	}
	for _, l := range lines[max(0, len(lines)-maxEvidenceLines):] {
		ev.Lines = append(ev.Lines, cut(l.raw))
	}
	return ev
}

// cut bounds a line for status: valid UTF-8 (status is JSON), cut on a rune boundary.
func cut(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxEvidenceLineBytes {
		return s
	}
	n := maxEvidenceLineBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// ReadLogEvidence reads the trident-main log of pod since, bounded by MaxLogBytes and
// LogReadTimeout, and classifies it for the volume known by names. A read that fails
// or stops at the limit is recorded, State Unread, never returned as an error: it is
// evidence that nothing was proven, and the decision goes on without it.
func ReadLogEvidence(ctx context.Context, logs LogReader, pod *corev1.Pod, since time.Time, names []string) v1alpha1.LogEvidence {
	ctx, cancel := context.WithTimeout(ctx, LogReadTimeout)
	defer cancel()
	st := metav1.NewTime(since)
	base := v1alpha1.LogEvidence{Namespace: pod.Namespace, Pod: pod.Name, Container: TridentMainContainer, SinceTime: &st, VolumeNames: names}
	unread := func(why string) v1alpha1.LogEvidence {
		base.State, base.ReadError = v1alpha1.LogUnread, why
		return base
	}
	rc, err := logs.OpenLog(ctx, pod.Namespace, pod.Name, &corev1.PodLogOptions{
		Container: TridentMainContainer, SinceTime: &st, LimitBytes: ptr.To[int64](MaxLogBytes + 1),
	})
	if err != nil {
		return unread(err.Error())
	}
	defer func() { _ = rc.Close() }()
	counted := &countingReader{r: io.LimitReader(rc, MaxLogBytes+1)}
	ev, err := ClassifyLog(counted, names)
	base.BytesRead = min(counted.n, MaxLogBytes)
	if err == nil && counted.n > MaxLogBytes {
		base.Truncated = true
		err = fmt.Errorf("the log since %s is longer than %d bytes: its newest lines were not read", st.UTC().Format(time.RFC3339), MaxLogBytes)
	}
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (the read took longer than %s)", err, LogReadTimeout)
		}
		return unread(err.Error())
	}
	base.State, base.Line, base.Lines, base.NewestLineAt, base.NewestVolumeLineAt = ev.State, ev.Line, ev.Lines, ev.NewestLineAt, ev.NewestVolumeLineAt
	return base
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// logs records the log evidence of the Lease's volume on a Healthy holder, and on an
// Unreachable or NotFound one whose fencing statement rests on the log
// (FencingMethod.RestsOnTheLog): the states whose rules weigh it. A holder shut down,
// or fenced otherwise, is not read: it does not answer for its log, and reading it
// would only wait out LogReadTimeout for each request of a storm. Only an error listing the
// node-plugin pods is returned; what the log read found, or why it failed, is recorded.
func (s *gathering) logs(ctx context.Context, lease *coordinationv1.Lease) error {
	if s.g.Logs == nil || s.f.Node == nil {
		return nil
	}
	switch s.f.Node.State {
	case v1alpha1.NodeHealthy:
	case v1alpha1.NodeUnreachable, v1alpha1.NodeNotFound:
		if s.fencing == nil || !s.fencing.Method.RestsOnTheLog() {
			return nil
		}
	default:
		return nil
	}
	node, ns := s.f.Node.Name, s.f.TridentNamespace
	pods, err := s.g.Config.NodePluginPods(ctx, s.g.Reader, ns, node)
	if err != nil {
		return err
	}
	since := leaseHoldStart(lease).Add(-LogSinceMargin)
	names := LogVolumeNames(lease.Name, s.pv)
	var ev v1alpha1.LogEvidence
	switch len(pods) {
	case 1:
		ev = ReadLogEvidence(ctx, s.g.Logs, &pods[0], since, names)
	case 0:
		ev = unreadLog(ns, since, names, fmt.Sprintf("no node-plugin pod (%s, controlled by a DaemonSet) runs on node %s", s.g.Config.NodePluginSelector, node))
	default:
		// During a rollout the operation may run in either; one log proves nothing of the other.
		ev = unreadLog(ns, since, names, fmt.Sprintf("node %s runs %d node-plugin pods (%s): which one runs the operation is not known",
			node, len(pods), podNames(pods)))
	}
	if ev.State == v1alpha1.LogUnread {
		ctrl.LoggerFrom(ctx).V(1).Info("the Trident node plugin's log proves nothing", "lease", lease.Namespace+"/"+lease.Name, "node", node, "reason", ev.ReadError)
	}
	s.f.Logs = &ev
	return nil
}

// leaseHoldStart is when the Lease's hold began as its holder dated it: its
// acquireTime, which the holder's clock wrote as it does the log's lines, else its
// creation.
func leaseHoldStart(l *coordinationv1.Lease) time.Time {
	if l.Spec.AcquireTime != nil {
		return l.Spec.AcquireTime.Time
	}
	return l.CreationTimestamp.Time
}

func unreadLog(ns string, since time.Time, names []string, why string) v1alpha1.LogEvidence {
	st := metav1.NewTime(since)
	return v1alpha1.LogEvidence{Namespace: ns, Container: TridentMainContainer, SinceTime: &st, VolumeNames: names,
		State: v1alpha1.LogUnread, ReadError: why}
}

func podNames(pods []corev1.Pod) string {
	names := make([]string, len(pods))
	for i := range pods {
		names[i] = pods[i].Name
	}
	return strings.Join(names, ", ")
}

// FailedLogs is a LogReader that could not be made: every read fails with Err.
type FailedLogs struct{ Err error }

// OpenLog returns Err.
func (f FailedLogs) OpenLog(context.Context, string, string, *corev1.PodLogOptions) (io.ReadCloser, error) {
	return nil, f.Err
}
