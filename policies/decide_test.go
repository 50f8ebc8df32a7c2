package policies

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"

	"cuelang.org/go/cue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

// schemaAccepts reports whether the policy's own #Input accepts in as Decide marshals
// it: the oracle for "an input the schema accepts is decided", taken from the schema
// itself, not from a copy of it in Go.
func schemaAccepts(t *testing.T, e *Engine, in Input) bool {
	t.Helper()
	data, err := json.Marshal(in)
	require.NoError(t, err)
	c := e.current()
	inst, err := c.take()
	require.NoError(t, err)
	defer c.give(inst)
	iv := inst.ctx.CompileBytes(data)
	if iv.Err() != nil {
		return false
	}
	return inst.root.LookupPath(cue.ParsePath("#Input")).Unify(iv).Validate(cue.Concrete(true)) == nil
}

// TestInputFieldsInSchema: an input with every field of Input and the facts set is
// accepted by #Input and decided. It fails when a field is added to Input or the facts
// without the schema learning it (the schema is closed).
func TestInputFieldsInSchema(t *testing.T) {
	e := engine(t)
	var in Input
	fill(reflect.ValueOf(&in).Elem())
	in.Remediation, in.Mode = v1alpha1.RemediationReleaseLUKSLease, v1alpha1.ModeDryRun
	in.Facts.Node.State = v1alpha1.NodeHealthy
	in.Facts.Logs.State = v1alpha1.LogFinished
	require.True(t, schemaAccepts(t, e, in), "the schema rejects a fully set input")
	d, err := e.Decide(in)
	require.NoError(t, err)
	assert.Equal(t, "one-remediation-at-a-time", d.Rule)
	in.Conflicts = nil
	d, err = e.Decide(in)
	require.NoError(t, err)
	assert.Equal(t, "healthy-lease-stuck", d.Rule)

	// And the oracle can say no: a field the schema does not know.
	data, err := json.Marshal(in)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(data, &raw))
	raw["unknownField"] = true
	inst, err := e.current().take()
	require.NoError(t, err)
	iv := inst.ctx.Encode(raw)
	assert.Error(t, inst.root.LookupPath(cue.ParsePath("#Input")).Unify(iv).Validate(cue.Concrete(true)), "#Input is closed")
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
// percentile of single decisions besides the mean (ns/op).
func BenchmarkDecideLatency(b *testing.B) {
	e := engine(b)
	ins := latencyInputs(b)
	want := []string{"holder-shutdown", "healthy-lease-stuck", "unreachable-fenced"}
	for i, in := range ins {
		d, err := e.Decide(in)
		require.NoError(b, err)
		require.Equal(b, want[i], d.Rule)
	}
	durations := make([]time.Duration, 0, 4096)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		start := time.Now()
		_, err := e.Decide(ins[i%len(ins)])
		require.NoError(b, err)
		durations = append(durations, time.Since(start))
		i++
	}
	slices.Sort(durations)
	at := func(q float64) float64 { return float64(durations[int(q*float64(len(durations)-1))].Nanoseconds()) }
	b.ReportMetric(at(0.50), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
}

// TestDecisionsDoNotAccumulate: a compiled copy of the policy makes decision after
// decision for the life of the controller, so what one decision compiles into its
// cue.Context must not stay there. Compiling the input as a file of its own
// (CompileBytes) kept about 20 KiB per distinct input for good: 21 MB over a storm
// of 1,000, and a controller's heap growing for as long as it ran.
func TestDecisionsDoNotAccumulate(t *testing.T) {
	c, err := compile(embedded)
	require.NoError(t, err)
	inst, err := c.take()
	require.NoError(t, err)
	ins := latencyInputs(&testing.B{})
	made := 0
	decide := func(n int) uint64 {
		for range n {
			// Each request names its own volume, as in a storm.
			made++
			in := ins[made%len(ins)]
			f := *in.Facts
			f.Target.Ref = fmt.Sprintf("PersistentVolume pvc-%d", made)
			in.Facts = &f
			in.Conflicts = []string{} // as Decide fills it in
			data, err := json.Marshal(in)
			require.NoError(t, err)
			_, err = decideInput(inst.ctx, inst.policy, data)
			require.NoError(t, err)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		// The copy is measured in use, as the pool keeps it.
		runtime.KeepAlive(inst)
		return ms.HeapAlloc
	}
	before := decide(100)
	after := decide(1000)
	grown := int64(after) - int64(before)
	assert.Less(t, grown, int64(4<<20), "one copy's heap grew by %d KiB over 1,000 decisions", grown>>10)
}
