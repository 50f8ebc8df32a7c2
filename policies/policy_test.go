package policies

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
)

type fixture struct {
	Input Input `json:"input"`
	Want  struct {
		Allowed             bool   `json:"allowed"`
		Wait                bool   `json:"wait"`
		Playbook            string `json:"playbook"`
		Rule                string `json:"rule"`
		RecheckAfterSeconds int64  `json:"recheckAfterSeconds"`
		MessageContains     string `json:"messageContains"`
	} `json:"want"`
}

func engine(t testing.TB) *Engine {
	t.Helper()
	e, err := Embedded()
	require.NoError(t, err)
	return e
}

// TestGoldenFixtures decides each testdata/*.yaml input (status.facts as the
// controller writes them) and compares with its expected decision.
func TestGoldenFixtures(t *testing.T) {
	e := engine(t)
	files, err := filepath.Glob("testdata/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no fixtures")
	// outcome is what a fixture pins of a decision.
	type outcome struct {
		Verdict             Verdict
		Playbook, Rule      string
		RecheckAfterSeconds int64
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			var fx fixture
			require.NoError(t, yaml.UnmarshalStrict(data, &fx), "parsing fixture")
			d, err := e.Decide(fx.Input)
			require.NoError(t, err)
			w := fx.Want
			assert.Equal(t,
				outcome{(decoded{Allowed: w.Allowed, Wait: w.Wait}).decision("").Verdict, w.Playbook, w.Rule, w.RecheckAfterSeconds},
				outcome{d.Verdict, d.Playbook, d.Rule, d.RecheckAfterSeconds}, "decision %+v", d)
			assert.Contains(t, d.Message, w.MessageContains)
			assert.NotEmpty(t, d.Message, "decision lacks a message: %+v", d)
			assert.NotEmpty(t, d.Reasons, "decision lacks reasons: %+v", d)
			assert.True(t, strings.HasPrefix(d.Digest, "sha256:"), "decision lacks a sha256 digest: %+v", d)
		})
	}
}

func TestDigestFollowsSource(t *testing.T) {
	a := engine(t)
	dir := t.TempDir()
	copyPolicies(t, dir)
	b, err := FromDir(dir)
	require.NoError(t, err)
	assert.Equal(t, a.Digest(), b.Digest(), "same source, different digests")
	p := filepath.Join(dir, "release_luks_lease.cue")
	src, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, append(src, []byte("\n// changed\n")...), 0o644))
	c, err := FromDir(dir)
	require.NoError(t, err)
	assert.NotEqual(t, a.Digest(), c.Digest(), "changed source kept the digest")
}

// TestReloadSwapsOnlyCompilingPolicies: an edited policy directory (a ConfigMap
// updated in place) is picked up by Reload; a broken edit is an error and the last
// good policy keeps deciding.
func TestReloadSwapsOnlyCompilingPolicies(t *testing.T) {
	dir := t.TempDir()
	copyPolicies(t, dir)
	e, err := FromDir(dir)
	require.NoError(t, err)
	young := loadFixture(t, "testdata/unreachable-fenced-young.yaml")
	decide := func() Decision {
		t.Helper()
		d, err := e.Decide(young.Input)
		require.NoError(t, err)
		return d
	}
	changed, err := e.Reload()
	require.NoError(t, err, "reload of an unchanged dir")
	require.False(t, changed, "reload of an unchanged dir")
	first, before := e.Digest(), decide()
	require.NotEqual(t, VerdictAllow, before.Verdict, "baseline decision %+v", before)
	require.Equal(t, young.Want.Rule, before.Rule, "baseline decision %+v", before)

	// The reviewed change: fenced unreachable holders need no minimum Lease age.
	p := filepath.Join(dir, "release_luks_lease.cue")
	src, err := os.ReadFile(p)
	require.NoError(t, err)
	edited := strings.Replace(string(src), "#UnreachableMinLeaseAgeSeconds: 300", "#UnreachableMinLeaseAgeSeconds: 0", 1)
	require.NotEqual(t, string(src), edited, "the threshold to edit is not in release_luks_lease.cue")
	require.NoError(t, os.WriteFile(p, []byte(edited), 0o644))
	changed, err = e.Reload()
	require.NoError(t, err, "reload after an edit")
	require.True(t, changed, "reload after an edit")
	second, after := e.Digest(), decide()
	require.NotEqual(t, first, second, "the edit kept the digest")
	require.Equal(t, VerdictAllow, after.Verdict, "after the edit: decision %+v", after)
	require.Equal(t, second, after.Digest, "after the edit: the decision's digest is not the new policy's")

	require.NoError(t, os.WriteFile(p, []byte(edited+"\n#Policy: {"), 0o644))
	changed, err = e.Reload()
	require.Error(t, err, "reload of a broken policy")
	require.False(t, changed, "reload of a broken policy")
	assert.Equal(t, second, e.Digest(), "a broken edit replaced the last good policy")
	assert.Equal(t, VerdictAllow, decide().Verdict, "a broken edit replaced the last good policy")
	assert.Equal(t, "embedded", engine(t).Source())
	assert.Equal(t, dir, e.Source())
}

func TestFromDirRejectsBrokenPolicy(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.cue"), []byte("package policies\n#Policy: {input: _, decision: \n"), 0o644))
	_, err := FromDir(dir)
	require.Error(t, err, "a policy with a syntax error compiled")
	_, err = FromDir(t.TempDir())
	require.ErrorContains(t, err, "no .cue policy files", "empty dir")
}

// TestConcurrentDecisions runs decisions from many goroutines on one Engine; under
// -race it proves the Engine serialises access to its CUE values.
func TestConcurrentDecisions(t *testing.T) {
	e := engine(t)
	fx := loadFixture(t, "testdata/healthy-retained.yaml")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				d, err := e.Decide(fx.Input)
				if !assert.NoError(t, err, "concurrent decision") ||
					!assert.Equal(t, v1alpha1.PlaybookHealthyMoveWorkload, d.Playbook, "concurrent decision: %+v", d) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestPolicySuiteCanFail flips one expectation in a copy of the cue vet cases and
// checks that cue vet then fails, so a green policy-test means something.
func TestPolicySuiteCanFail(t *testing.T) {
	dir := t.TempDir()
	copyPolicies(t, dir)
	// make policy-test vets the whole package, the schema with the rules.
	sch := parsedSchema().file
	require.NoError(t, os.WriteFile(filepath.Join(dir, sch.name), sch.data, 0o644))
	tests, err := filepath.Glob("*_test.cue")
	require.NoError(t, err)
	require.NotEmpty(t, tests, "no *_test.cue files")
	for _, tf := range tests {
		src, err := os.ReadFile(tf)
		require.NoError(t, err)
		require.NoError(t, vet(t, dir, src), "unmodified %s fails cue vet", tf)
	}
	src, err := os.ReadFile("release_luks_lease_test.cue")
	require.NoError(t, err)
	const from = `want: {allowed: true, playbook: "fenced-unreachable", rule: "unreachable-fenced"}`
	require.Contains(t, string(src), from, "release_luks_lease_test.cue no longer contains the expectation to flip")
	flipped := strings.Replace(string(src), from, `want: {allowed: false, rule: "unreachable-lease-too-young"}`, 1)
	require.Error(t, vet(t, dir, []byte(flipped)), "cue vet passed with a flipped expectation")
}

// vet runs cue vet the way `make policy-test` does: the policy files plus one test
// file on stdin (cue ignores *_test.cue files given as paths).
func vet(t *testing.T, dir string, testSrc []byte) error {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.cue"))
	cmd := exec.Command("go", append([]string{"tool", "cue", "vet", "-c"}, append(files, "-")...)...)
	cmd.Stdin = strings.NewReader(string(testSrc))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("cue vet: %s", out)
	}
	return err
}

func copyPolicies(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob("*.cue")
	require.NoError(t, err)
	for _, f := range files {
		// A policy directory holds the rules only: the schema is the binary's.
		if strings.HasSuffix(f, "_test.cue") || f == schemaFile {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), data, 0o644))
	}
}

func loadFixture(t testing.TB, f string) fixture {
	t.Helper()
	data, err := os.ReadFile(f)
	require.NoError(t, err)
	var fx fixture
	require.NoError(t, yaml.Unmarshal(data, &fx))
	return fx
}

// BenchmarkDecide measures one decision on a compiled-once policy.
func BenchmarkDecide(b *testing.B) {
	e := engine(b)
	fx := loadFixture(b, "testdata/shutdown-holder.yaml")
	b.ReportAllocs()
	for b.Loop() {
		_, err := e.Decide(fx.Input)
		require.NoError(b, err)
	}
}

// TestRulesFromADirectoryAreTheEmbeddedPolicy: a directory holding the embedded rules
// (no schema.cue) compiles to the very policy the binary embeds, digest included: the
// schema is always the binary's, and both load the same way.
func TestRulesFromADirectoryAreTheEmbeddedPolicy(t *testing.T) {
	dir := t.TempDir()
	copyPolicies(t, dir)
	_, err := os.Stat(filepath.Join(dir, schemaFile))
	require.True(t, os.IsNotExist(err), "copyPolicies copies the rules only")
	fromDir, err := FromDir(dir)
	require.NoError(t, err)
	assert.Equal(t, engine(t).Digest(), fromDir.Digest())
	fx := loadFixture(t, "testdata/shutdown-holder.yaml")
	d, err := fromDir.Decide(fx.Input)
	require.NoError(t, err)
	assert.Equal(t, fx.Want.Rule, d.Rule)
}

// TestDecisionEvaluatesTheInputSchemaOnce: a decision holds the input to #Input once,
// in #Policy. The rules' definitions take #Policy's input as it is; each of them
// holding it to #Input again evaluated the schema's defaults twice, at about 4,600
// allocations (800 KB) a decision against about 3,100 (400 KB). Counted, not timed:
// the count is the same on any machine.
func TestDecisionEvaluatesTheInputSchemaOnce(t *testing.T) {
	e := engine(t)
	fx := loadFixture(t, "testdata/shutdown-holder.yaml")
	allocs := testing.AllocsPerRun(20, func() {
		_, err := e.Decide(fx.Input)
		require.NoError(t, err)
	})
	assert.Less(t, allocs, 3800.0, "allocations per decision")
}
