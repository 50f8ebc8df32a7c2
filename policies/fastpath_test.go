package policies

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"cuelang.org/go/cue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// decideGeneral is the evaluation Decide did before the fast path, kept verbatim as
// the reference the fast path is compared with: marshal the input, compile it, fill
// it into #Policy and decode the decision of the fully evaluated result.
func decideGeneral(e *Engine, in Input) (Decision, error) {
	if in.Conflicts == nil {
		in.Conflicts = []string{}
	}
	data, err := json.Marshal(in)
	if err != nil {
		return Decision{}, fmt.Errorf("encoding policy input: %w", err)
	}
	c := e.current()
	inst, err := c.take()
	if err != nil {
		return Decision{}, err
	}
	defer c.give(inst)
	iv := inst.ctx.CompileBytes(data)
	if err := iv.Err(); err != nil {
		return Decision{}, fmt.Errorf("compiling policy input: %w", err)
	}
	d := inst.policy.FillPath(cue.ParsePath("input"), iv).LookupPath(cue.ParsePath("decision"))
	var out decoded
	if err := d.Decode(&out); err != nil {
		return Decision{}, fmt.Errorf("evaluating policy: %w", err)
	}
	return out.decision(c.digest), nil
}

// decideFast runs only the fast path, without the fallback, so that a test sees
// whether the fast path itself decides.
func decideFast(e *Engine, in Input) (Decision, error) {
	if in.Conflicts == nil {
		in.Conflicts = []string{}
	}
	data, err := json.Marshal(in)
	if err != nil {
		return Decision{}, err
	}
	c := e.current()
	inst, err := c.take()
	if err != nil {
		return Decision{}, err
	}
	defer c.give(inst)
	d, err := decideSelected(inst.ctx, inst.root, data)
	return d.decision(c.digest), err
}

// usesFastPath reports whether Decide takes the fast path for in.
func usesFastPath(e *Engine, in Input) bool {
	if in.Conflicts == nil {
		in.Conflicts = []string{}
	}
	return e.current().fast && inputInSchema(in)
}

// assertSameDecision checks that Decide gives exactly the general path's answer
// (decision or error); that where Decide takes the fast path the fast path alone
// reaches that decision rather than falling back to it; and that the fast path is
// never taken where the general path fails. It reports whether the fast path was
// taken.
func assertSameDecision(t *testing.T, e *Engine, in Input) bool {
	t.Helper()
	want, wantErr := decideGeneral(e, in)
	got, gotErr := e.Decide(in)
	fastPath := usesFastPath(e, in)
	if wantErr != nil {
		require.Error(t, gotErr, "the general path fails, Decide decided %+v", got)
		// Decide says what kind of failure it is (an ambiguous policy) around the
		// general path's own error.
		assert.Contains(t, gotErr.Error(), wantErr.Error())
		assert.False(t, fastPath, "inputInSchema accepts an input the general path rejects: %v", wantErr)
		return fastPath
	}
	require.NoError(t, gotErr)
	assert.Equal(t, want, got)
	if fastPath {
		fast, err := decideFast(e, in)
		require.NoError(t, err, "the fast path did not decide where the general path did")
		assert.Equal(t, want, fast)
	}
	return fastPath
}

// TestFastPathReviewed: the embedded policies are the reviewed source the fast path
// decides for. When this fails the embedded policies changed: review them as the
// comment on fastPathDigests says (and inputInSchema against schema.cue), then put
// the new digest there in place of the old one. Until then every decision takes the
// general path, which is correct but slower.
func TestFastPathReviewed(t *testing.T) {
	e := engine(t)
	assert.True(t, e.current().fast, "the embedded policies (%s) are not in fastPathDigests", e.Digest())
	assert.Len(t, fastPathDigests, 1, "only the current embedded policies belong in fastPathDigests")
}

// TestInputFieldsInSchema: every field Decide sends, with every pointer, slice and
// time set, is one #Input knows with a kind it accepts, so inputInSchema need check
// no field names or kinds. It fails when a field is added to Input or the facts
// without the schema learning it.
func TestInputFieldsInSchema(t *testing.T) {
	e := engine(t)
	var in Input
	fill(reflect.ValueOf(&in).Elem())
	in.Remediation, in.Mode = v1alpha1.RemediationReleaseLUKSLease, v1alpha1.ModeDryRun
	in.Facts.Node.State = v1alpha1.NodeHealthy
	data, err := json.Marshal(in)
	require.NoError(t, err)
	t.Logf("input: %s", data)
	require.True(t, inputInSchema(in))
	d, err := decideGeneral(e, in)
	require.NoError(t, err, "the schema rejects a fully set input")
	assert.True(t, assertSameDecision(t, e, in))
	assert.Equal(t, "one-remediation-at-a-time", d.Rule)
	in.Conflicts = nil
	assert.True(t, assertSameDecision(t, e, in))
	d, err = e.Decide(in)
	require.NoError(t, err)
	assert.Equal(t, "healthy-lease-stuck", d.Rule)
}

// fill sets every field reachable from v to a non-zero value.
func fill(v reflect.Value) {
	if v.Type() == reflect.TypeFor[metav1.Time]() {
		v.Set(reflect.ValueOf(metav1.NewTime(time.Date(2026, 11, 19, 6, 30, 0, 0, time.UTC))))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(700)
	default:
		panic("fill: no value for " + v.Type().String())
	}
}

// TestFastPathMatchesFixtures: on every golden fixture the fast path decides, and
// decides as the general path does.
func TestFastPathMatchesFixtures(t *testing.T) {
	e := engine(t)
	files, err := filepath.Glob("testdata/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in := loadFixture(t, f).Input
			assertSameDecision(t, e, in)
			// The same request in DryRun, and with conflicts, decides the same way on
			// both paths too.
			in.Mode = v1alpha1.ModeDryRun
			assertSameDecision(t, e, in)
			in.Conflicts = []string{"remediator/other (Running, on Lease trident/x)"}
			assertSameDecision(t, e, in)
		})
	}
}

// TestFastPathNeedsTheGate shows why the fast path is gated: on an input the schema
// rejects in a field no rule reads, the general path fails and the fast path alone
// would decide.
func TestFastPathNeedsTheGate(t *testing.T) {
	e := engine(t)
	in := loadFixture(t, "testdata/shutdown-holder.yaml").Input
	in.Mode = "Later"
	_, err := decideGeneral(e, in)
	require.ErrorContains(t, err, "input.mode")
	_, err = decideFast(e, in)
	require.NoError(t, err, "the fast path now fails here too; the gate may no longer be needed")
	assert.False(t, usesFastPath(e, in))
	_, err = e.Decide(in)
	require.ErrorContains(t, err, "input.mode")
}

// TestFastPathSurvivesRecompile: after an abandoned evaluation the Engine compiles a
// fresh copy of the policy for the next one, and after Reload a new one; the fast path must use the
// new package, not the old one.
func TestFastPathSurvivesRecompile(t *testing.T) {
	dir := t.TempDir()
	copyPolicies(t, dir)
	e, err := FromDir(dir)
	require.NoError(t, err)
	young := loadFixture(t, "testdata/unreachable-fenced-young.yaml").Input
	d, err := e.Decide(young)
	require.NoError(t, err)
	require.Equal(t, "unreachable-lease-too-young", d.Rule)

	// As after an abandoned evaluation, which keeps its copy: no copy is idle, so
	// the next decision compiles another.
	c := e.current()
	c.poolMu.Lock()
	c.idle = nil
	c.poolMu.Unlock()
	assertSameDecision(t, e, young)

	p := filepath.Join(dir, "release_luks_lease.cue")
	src, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, []byte(replaceOnce(t, string(src), "#UnreachableMinLeaseAgeSeconds: 300", "#UnreachableMinLeaseAgeSeconds: 0")), 0o644))
	changed, err := e.Reload()
	require.NoError(t, err)
	require.True(t, changed)
	assertSameDecision(t, e, young)
	d, err = e.Decide(young)
	require.NoError(t, err)
	assert.Equal(t, "unreachable-fenced", d.Rule)
}

func replaceOnce(t *testing.T, s, from, to string) string {
	t.Helper()
	require.Contains(t, s, from)
	return strings.Replace(s, from, to, 1)
}

// latencyInputs are the mix the latency benchmark decides: a shut-down holder, a
// healthy holder with LeaseRetained events, and a fenced unreachable holder whose
// Lease is old enough.
func latencyInputs(b *testing.B) []Input {
	fenced := loadFixture(b, "testdata/unreachable-fenced-young.yaml").Input
	lease := *fenced.Facts.Lease
	lease.AgeSeconds = 900
	facts := *fenced.Facts
	facts.Lease = &lease
	fenced.Facts = &facts
	return []Input{
		loadFixture(b, "testdata/shutdown-holder.yaml").Input,
		loadFixture(b, "testdata/healthy-retained.yaml").Input,
		fenced,
	}
}

// BenchmarkDecideLatency decides the mix in turn and reports the median and the 99th
// percentile of single decisions besides the mean (ns/op): path=decide is Decide,
// path=general the evaluation Decide did before the fast path (decideGeneral).
func BenchmarkDecideLatency(b *testing.B) {
	for _, path := range []string{"decide", "general"} {
		b.Run("path="+path, func(b *testing.B) {
			e := engine(b)
			ins := latencyInputs(b)
			want := []string{"holder-shutdown", "healthy-lease-stuck", "unreachable-fenced"}
			decide := e.Decide
			if path == "general" {
				decide = func(in Input) (Decision, error) { return decideGeneral(e, in) }
			}
			for i, in := range ins {
				d, err := decide(in)
				require.NoError(b, err)
				require.Equal(b, want[i], d.Rule)
			}
			durations := make([]time.Duration, 0, 4096)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				start := time.Now()
				_, err := decide(ins[i%len(ins)])
				require.NoError(b, err)
				durations = append(durations, time.Since(start))
				i++
			}
			slices.Sort(durations)
			at := func(q float64) float64 { return float64(durations[int(q*float64(len(durations)-1))].Nanoseconds()) }
			b.ReportMetric(at(0.50), "p50-ns")
			b.ReportMetric(at(0.99), "p99-ns")
		})
	}
}
