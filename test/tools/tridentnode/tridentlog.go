package main

// Trident's own log lines for the LUKS step, so that what reads the trident-main
// container's log (the controller's log evidence, an operator following the runbook)
// sees on the real nodes what Trident would write. The messages and fields are those
// of Trident v26.06.0 (utils/devices/luks/luks.go EnsureCryptsetupFormattedAndMappedOnHost,
// EnsureDeviceMappedOnHost and ensureLUKSDevice; luks_linux.go Open; frontend/csi/interceptor.go
// logGRPCInterceptor's "GRPC error"), in the format of its console log: logrus's
// TextFormatter with full timestamps, fields sorted, and the request's requestID,
// requestSource, workflow and logLayer that logging.Logc adds. Trident's source logs
// nothing about its LUKS Lease, so neither does this.

import (
	"crypto/rand"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// TridentLog writes Trident-format lines to W; a nil *TridentLog writes nothing.
type TridentLog struct {
	W   io.Writer
	Now func() time.Time // nil: time.Now

	mu sync.Mutex
}

// tridentRequest is one gRPC request's log: its lines share a requestID.
type tridentRequest struct {
	l            *TridentLog
	id, workflow string
}

// Request starts the log of a CSI request of workflow (e.g. "node_server=stage").
func (t *TridentLog) Request(workflow string) *tridentRequest {
	if t == nil {
		return nil
	}
	return &tridentRequest{l: t, id: newUUID(), workflow: workflow}
}

func (r *tridentRequest) line(level, msg string, kv ...string) {
	if r == nil {
		return
	}
	fields := map[string]string{"requestID": r.id, "requestSource": "CSI", "logLayer": "csi_frontend"}
	if r.workflow != "" {
		fields["workflow"] = r.workflow
	}
	for i := 0; i+1 < len(kv); i += 2 {
		fields[kv[i]] = kv[i+1]
	}
	r.l.write(level, msg, fields)
}

func (r *tridentRequest) Debug(msg string, kv ...string) { r.line("debug", msg, kv...) }
func (r *tridentRequest) Info(msg string, kv ...string)  { r.line("info", msg, kv...) }
func (r *tridentRequest) Error(msg string, kv ...string) { r.line("error", msg, kv...) }

// write formats one line as logrus's TextFormatter does without colours: time, level
// and msg first, then the fields by name.
func (t *TridentLog) write(level, msg string, fields map[string]string) {
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	var b strings.Builder
	fmt.Fprintf(&b, "time=%s level=%s msg=%s", logrusValue(now().Format(time.RFC3339)), level, logrusValue(msg))
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, logrusValue(fields[k]))
	}
	b.WriteByte('\n')
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _ = io.WriteString(t.W, b.String())
}

// logrusValue quotes a value as logrus's TextFormatter.needsQuoting decides (without
// QuoteEmptyFields, which Trident does not set): unless it is only letters, digits and
// -._/@^+.
func logrusValue(s string) string {
	for _, c := range s {
		if !plainRune(c) {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

func plainRune(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._/@^+", c)
}

// newUUID is a random (version 4) UUID, as Trident's requestIDs are.
func newUUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
