package policies

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
	e.mu.Lock()
	defer e.mu.Unlock()
	iv := e.ctx.CompileBytes(data)
	if err := iv.Err(); err != nil {
		return Decision{}, fmt.Errorf("compiling policy input: %w", err)
	}
	d := e.policy.FillPath(cue.ParsePath("input"), iv).LookupPath(cue.ParsePath("decision"))
	var out decoded
	if err := d.Decode(&out); err != nil {
		return Decision{}, fmt.Errorf("evaluating policy: %w", err)
	}
	return out.decision(e.digest), nil
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
	e.mu.Lock()
	defer e.mu.Unlock()
	d, err := decideSelected(e.ctx, e.root, data)
	return d.decision(e.digest), err
}

// usesFastPath reports whether Decide takes the fast path for in.
func usesFastPath(e *Engine, in Input) bool {
	if in.Conflicts == nil {
		in.Conflicts = []string{}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fast && inputInSchema(in)
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
	assert.True(t, e.fast, "the embedded policies (%s) are not in fastPathDigests", e.Digest())
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

// synthetic builds release-luks-lease and reregister-csi-driver inputs over the
// dimensions the policies weigh, with values on both sides of every threshold.
func synthetic() []Input {
	const holder = "kwok-node-3"
	ts := metav1.NewTime(time.Date(2026, 11, 19, 6, 30, 0, 0, time.UTC))
	fencings := []*v1alpha1.Fencing{
		nil,
		{Confirmed: false},
		{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: holder},
		{Confirmed: true, Method: v1alpha1.FencingTridentNodeContainerStopped, Node: "kwok-node-7"},
		{Confirmed: true, Method: v1alpha1.FencingLogsVerified},
	}
	states := []v1alpha1.NodeState{v1alpha1.NodeShutdown, v1alpha1.NodeUnreachable, v1alpha1.NodeNotFound, v1alpha1.NodeHealthy, v1alpha1.NodeUnknown}
	ages := []int64{0, 1, 299, 300, 301, 599, 600, 601, 3600}
	modes := []v1alpha1.Mode{"", v1alpha1.ModeApply, v1alpha1.ModeDryRun}
	conflicts := [][]string{nil, {}, {"remediator/a (Running, on node kwok-node-3)"}, {"remediator/a (Running, on node kwok-node-3)", "remediator/b (Waiting, on Lease trident/pvc-1)"}}

	lease := func(age int64, events int32) *v1alpha1.LeaseFacts {
		return &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1", Exists: true, UID: "u-1", ResourceVersion: "7",
			HolderIdentity: holder, AgeSeconds: age, RetainedEvents: events, AcquireTime: &ts}
	}
	node := func(s v1alpha1.NodeState, taints ...string) *v1alpha1.NodeFacts {
		return &v1alpha1.NodeFacts{Name: holder, Exists: s != v1alpha1.NodeNotFound, State: s, StateReason: "because " + string(s),
			Ready: "Unknown", Taints: taints, LeaseRenewAgeSeconds: 90}
	}
	luks := func(f *v1alpha1.Facts) Input {
		return Input{Remediation: v1alpha1.RemediationReleaseLUKSLease, Facts: f}
	}
	target := v1alpha1.TargetFacts{Ref: "PersistentVolume pvc-1", Found: true, PersistentVolume: "pvc-1"}

	var ins []Input
	// The grid the rules branch on: node state x fencing x Lease age, with and
	// without LeaseRetained events and the out-of-service taint.
	for _, s := range states {
		for fi, fe := range fencings {
			for ai, age := range ages {
				var taints []string
				if (ai+fi)%3 == 0 {
					taints = []string{v1alpha1.TaintOutOfService}
				} else if (ai+fi)%3 == 1 {
					taints = []string{v1alpha1.TaintUnreachable}
				}
				in := luks(&v1alpha1.Facts{GatheredAt: ts, TridentNamespace: "trident", DriverName: "csi.trident.netapp.io",
					Target: target, Lease: lease(age, int32(ai%2)), Node: node(s, taints...)})
				in.Fencing = fe
				in.Mode = modes[(ai+fi)%len(modes)]
				ins = append(ins, in)
			}
		}
	}
	// The rules before the node state: conflicts, an unresolved target, no Lease, a
	// Lease without holder; and facts the gatherer left out.
	for ci, c := range conflicts {
		in := luks(&v1alpha1.Facts{Target: target, Lease: lease(400, 1), Node: node(v1alpha1.NodeShutdown)})
		in.Conflicts = c
		in.Mode = modes[ci%len(modes)]
		ins = append(ins, in)
	}
	unresolved := v1alpha1.TargetFacts{Ref: "Pod app/web-0", Message: "pod app/web-0 not found"}
	noHolder := lease(400, 0)
	noHolder.HolderIdentity = ""
	gone := lease(400, 0)
	gone.Exists = false
	ins = append(ins,
		luks(&v1alpha1.Facts{Target: unresolved}),
		luks(&v1alpha1.Facts{Target: unresolved, Lease: lease(700, 0), Node: node(v1alpha1.NodeHealthy)}),
		luks(&v1alpha1.Facts{Target: target}),
		luks(&v1alpha1.Facts{Target: target, Lease: gone, Node: node(v1alpha1.NodeShutdown)}),
		luks(&v1alpha1.Facts{Target: target, Lease: noHolder, Node: node(v1alpha1.NodeShutdown)}),
		luks(&v1alpha1.Facts{Target: target, Lease: lease(700, 0)}),
		luks(&v1alpha1.Facts{Target: target, Lease: &v1alpha1.LeaseFacts{Exists: true, HolderIdentity: holder, AgeFrom: "acquireTime"}, Node: node(v1alpha1.NodeUnreachable, v1alpha1.TaintOutOfService)}),
		luks(&v1alpha1.Facts{}),
		// Inputs the general path rejects: no facts at all, a node state outside
		// the schema, an unknown mode, an unknown remediation, a time that is set
		// but zero (it marshals as null).
		luks(nil),
		luks(&v1alpha1.Facts{Target: target, Lease: &v1alpha1.LeaseFacts{Exists: true, HolderIdentity: holder, AcquireTime: &metav1.Time{}}, Node: node(v1alpha1.NodeShutdown)}),
		luks(&v1alpha1.Facts{Target: target, Lease: lease(700, 0), Node: &v1alpha1.NodeFacts{State: v1alpha1.NodeHealthy, ReadySince: &metav1.Time{}}}),
		luks(&v1alpha1.Facts{Target: target, Lease: lease(700, 0), Node: node(v1alpha1.NodeShutdown), AffectedPods: []v1alpha1.PodFacts{{Name: "p", DeletionTimestamp: &metav1.Time{}}}}),
		Input{Remediation: v1alpha1.RemediationReregisterCSIDriver, Facts: &v1alpha1.Facts{Target: target, Node: node(v1alpha1.NodeHealthy),
			CSI: &v1alpha1.CSIFacts{PluginPods: []v1alpha1.PodFacts{{Name: "p", DeletionTimestamp: &metav1.Time{}}}}}},
		luks(&v1alpha1.Facts{Target: target, Lease: lease(700, 0), Node: node("Rebooting")}),
		func() Input {
			in := luks(&v1alpha1.Facts{Target: target, Lease: lease(700, 0), Node: node(v1alpha1.NodeShutdown)})
			in.Mode = "Later"
			return in
		}(),
		Input{Remediation: "defragment", Facts: &v1alpha1.Facts{Target: target}},
		Input{Remediation: "", Facts: &v1alpha1.Facts{}},
	)

	// reregister-csi-driver: node state x plugin pods x registration.
	pod := func(name, phase string, ready, terminating bool) v1alpha1.PodFacts {
		p := v1alpha1.PodFacts{Namespace: "trident", Name: name, UID: "uid-" + name, Node: holder, Phase: phase, Ready: ready}
		if terminating {
			p.DeletionTimestamp = &ts
		}
		return p
	}
	podSets := [][]v1alpha1.PodFacts{
		nil,
		{pod("trident-node-a", "Running", true, false)},
		{pod("trident-node-a", "Pending", false, false)},
		{pod("trident-node-a", "Running", false, false)},
		{pod("trident-node-a", "Running", true, true)},
		{pod("trident-node-a", "Running", true, true), pod("trident-node-b", "Pending", false, false)},
	}
	for si, s := range []v1alpha1.NodeState{v1alpha1.NodeHealthy, v1alpha1.NodeUnreachable, v1alpha1.NodeUnknown} {
		for pi, pods := range podSets {
			for _, registered := range []bool{false, true} {
				in := Input{Remediation: v1alpha1.RemediationReregisterCSIDriver, Mode: modes[(si+pi)%len(modes)], Facts: &v1alpha1.Facts{
					TridentNamespace: "trident", DriverName: "csi.trident.netapp.io",
					Target: v1alpha1.TargetFacts{Ref: "Node " + holder, Found: pi != 2 || si != 0, Node: holder, Message: "node resolved"},
					Node:   node(s),
					CSI:    &v1alpha1.CSIFacts{CSINodeExists: true, DriverRegistered: registered, Drivers: []string{"ebs.csi.aws.com"}, PluginPods: pods},
				}}
				if pi == 1 && registered {
					in.Conflicts = conflicts[2]
				}
				ins = append(ins, in)
			}
		}
	}
	return ins
}

// TestFastPathMatchesSynthetic compares both paths on the synthetic table, and on a
// seeded shuffle of the same inputs on one Engine, so that an earlier decision on the
// shared CUE values cannot change a later one.
func TestFastPathMatchesSynthetic(t *testing.T) {
	e := engine(t)
	ins := synthetic()
	require.Greater(t, len(ins), 250)
	rules, fast := map[string]int{}, 0
	for i, in := range ins {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if assertSameDecision(t, e, in) {
				fast++
			}
			if d, err := decideGeneral(e, in); err == nil {
				rules[d.Rule]++
			} else {
				rules["error"]++
			}
		})
	}
	t.Logf("%d inputs, %d on the fast path; rules: %v", len(ins), fast, rules)
	assert.Greater(t, fast, len(ins)*9/10, "most inputs should take the fast path")
	assert.NotZero(t, rules["error"], "no input the general path rejects")
	// The table reaches every rule of both policies.
	for _, r := range []string{"one-remediation-at-a-time", "target-unresolved", "no-lease", "lease-without-holder",
		"fencing-names-another-node", "holder-shutdown", "unreachable-not-fenced", "unreachable-lease-too-young",
		"unreachable-fenced", "holder-node-not-found", "not-found-lease-too-young", "not-found-fenced",
		"healthy-operation-may-be-running", "healthy-lease-stuck", "holder-state-unknown",
		"node-not-healthy", "plugin-pods-overlap", "driver-registered", "no-plugin-pod", "plugin-pod-not-ready", "driver-deregistered"} {
		assert.NotZero(t, rules[r], "no synthetic input reaches rule %s", r)
	}

	r := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		assertSameDecision(t, e, ins[r.IntN(len(ins))])
	}
}

// userPolicies are on-disk policies of the kinds a user may write, including broken
// ones: Decide must answer as the general path does for each of them.
var userPolicies = map[string]string{
	// An error in a field the decision does not use, for some inputs.
	"unused-conflict": `package policies
#Policy: {
	input: _
	_unused: input.remediation & "something else"
	decision: {allowed: false, rule: "r", reasons: ["x"], message: "m"}
}`,
	// A schema the input violates in a field the decision does not read.
	"schema-violation": `package policies
#Policy: {
	input: {remediation: string, mode: *"Apply" | "DryRun", ...}
	decision: {allowed: false, rule: input.remediation, reasons: ["x"], message: "m"}
}`,
	// A closed schema without the fields the controller sends.
	"closed-schema": `package policies
#Policy: {
	input: close({remediation: string})
	decision: {allowed: false, rule: input.remediation, reasons: ["x"], message: "m"}
}`,
	// Rules after the first one that conflict or cannot be evaluated.
	"broken-later-rules": `package policies
#Policy: {
	input: _
	_rules: [
		{allowed: false, rule: "first", reasons: ["\(input.remediation)"], message: "m"},
		{allowed: false, rule: "second" & input.remediation, reasons: [], message: "m"},
		{allowed: true, rule: "third \(input.nothere)", reasons: [], message: "m"},
	]
	decision: _rules[0]
}`,
	// A decision that is never concrete.
	"incomplete": `package policies
#Policy: {
	input: _
	decision: {allowed: bool, rule: "r", reasons: [], message: string}
}`,
	// A decision that conflicts for some inputs.
	"conflicting": `package policies
#Policy: {
	input: _
	decision: {allowed: false, rule: "r", reasons: [], message: "m"}
	decision: allowed: input.remediation == "release-luks-lease"
}`,
	// The order of the input's fields, and defaults.
	"field-order": `package policies
#Policy: {
	input: _
	decision: {
		allowed: *false | bool
		rule: "order"
		reasons: [for k, _ in input {k}, for k, _ in input.facts {k}]
		message: "\(len(input.conflicts)) conflicts"
		if len(input.conflicts) > 1 {recheckAfterSeconds: 5}
	}
}`,
	// A decision with fields Decision does not have, and a wrongly typed one.
	"extra-fields": `package policies
#Policy: {
	input: _
	decision: {allowed: false, rule: "r", reasons: ["x"], message: "m", debug: {depth: 3}}
}`,
	"wrong-type": `package policies
#Policy: {
	input: _
	decision: {allowed: "no", rule: "r", reasons: ["x"], message: "m"}
}`,
	// No decision at all, and a #Policy that is not a struct.
	"no-decision": `package policies
#Policy: {input: _}`,
	"not-a-struct": `package policies
#Policy: 5`,
	// A policy that uses package-level definitions, hidden fields and imports.
	"package-scope": `package policies
import "strings"
_prefix: "pkg"
#Rule: {allowed: false, rule: string, reasons: [...string], message: string}
#Policy: {
	input: _
	decision: #Rule & {rule: strings.ToUpper(_prefix), reasons: input.conflicts, message: "m"}
}`,
}

func TestFastPathMatchesUserPolicies(t *testing.T) {
	ins := []Input{
		loadFixture(t, "testdata/shutdown-holder.yaml").Input,
		loadFixture(t, "testdata/conflict-waits.yaml").Input,
		{Remediation: v1alpha1.RemediationReleaseLUKSLease, Mode: "Later", Facts: &v1alpha1.Facts{}},
		{Remediation: v1alpha1.RemediationReleaseLUKSLease},
	}
	for name, src := range userPolicies {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(src), 0o644))
			e, err := FromDir(dir)
			if err != nil {
				// A policy that does not compile never reaches Decide.
				t.Skipf("does not compile: %v", err)
			}
			require.False(t, e.fast, "an unreviewed policy is decided on the fast path")
			for i, in := range ins {
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					assertSameDecision(t, e, in)
					// Where both paths decide, they decide alike, on any policy.
					want, wantErr := decideGeneral(e, in)
					fast, fastErr := decideFast(e, in)
					if wantErr == nil && fastErr == nil {
						assert.Equal(t, want, fast)
					}
				})
			}
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
// fresh copy of the policy, and after Reload a new one; the fast path must use the
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

	e.mu.Lock()
	e.stale = true
	e.mu.Unlock()
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
				if _, err := decide(ins[i%len(ins)]); err != nil {
					b.Fatal(err)
				}
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
