package policies

import (
	"github.com/remediator/remediator/api/v1alpha1"

	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"
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
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestGoldenFixtures decides each testdata/*.yaml input (status.facts as the
// controller writes them) and compares with its expected decision.
func TestGoldenFixtures(t *testing.T) {
	e := engine(t)
	files, _ := filepath.Glob("testdata/*.yaml")
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var fx fixture
			if err := yaml.UnmarshalStrict(data, &fx); err != nil {
				t.Fatalf("parsing fixture: %v", err)
			}
			d, err := e.Decide(fx.Input)
			if err != nil {
				t.Fatal(err)
			}
			w := fx.Want
			if d.Verdict != (decoded{Allowed: w.Allowed, Wait: w.Wait}).decision("").Verdict || d.Playbook != w.Playbook || d.Rule != w.Rule || d.RecheckAfterSeconds != w.RecheckAfterSeconds {
				t.Errorf("decision = %+v\nwant %+v", d, w)
			}
			if !strings.Contains(d.Message, w.MessageContains) {
				t.Errorf("message %q does not contain %q", d.Message, w.MessageContains)
			}
			if d.Message == "" || len(d.Reasons) == 0 || !strings.HasPrefix(d.Digest, "sha256:") {
				t.Errorf("decision lacks message, reasons or digest: %+v", d)
			}
		})
	}
}

func TestDigestFollowsSource(t *testing.T) {
	a := engine(t)
	dir := t.TempDir()
	copyPolicies(t, dir)
	b, err := FromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest() != b.Digest() {
		t.Errorf("same source, different digests: %s %s", a.Digest(), b.Digest())
	}
	p := filepath.Join(dir, "release_luks_lease.cue")
	src, _ := os.ReadFile(p)
	if err := os.WriteFile(p, append(src, []byte("\n// changed\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := FromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest() == a.Digest() {
		t.Error("changed source kept the digest")
	}
}

// TestReloadSwapsOnlyCompilingPolicies: an edited policy directory (a ConfigMap
// updated in place) is picked up by Reload; a broken edit is an error and the last
// good policy keeps deciding.
func TestReloadSwapsOnlyCompilingPolicies(t *testing.T) {
	dir := t.TempDir()
	copyPolicies(t, dir)
	e, err := FromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	young := loadFixture(t, "testdata/unreachable-fenced-young.yaml")
	decide := func() Decision {
		t.Helper()
		d, err := e.Decide(young.Input)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if changed, err := e.Reload(); changed || err != nil {
		t.Fatalf("reload of an unchanged dir: changed=%v err=%v", changed, err)
	}
	first, before := e.Digest(), decide()
	if before.Verdict == VerdictAllow || before.Rule != young.Want.Rule {
		t.Fatalf("baseline decision %+v, want rule %s", before, young.Want.Rule)
	}

	// The reviewed change: fenced unreachable holders need no minimum Lease age.
	p := filepath.Join(dir, "release_luks_lease.cue")
	src, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(src), "#UnreachableMinLeaseAgeSeconds: 300", "#UnreachableMinLeaseAgeSeconds: 0", 1)
	if edited == string(src) {
		t.Fatal("the threshold to edit is not in release_luks_lease.cue")
	}
	if err := os.WriteFile(p, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := e.Reload(); !changed || err != nil {
		t.Fatalf("reload after an edit: changed=%v err=%v", changed, err)
	}
	second, after := e.Digest(), decide()
	if second == first || after.Verdict != VerdictAllow || after.Digest != second {
		t.Fatalf("after the edit: digest %s (was %s), decision %+v; want a new digest and an allowed decision", second, first, after)
	}

	if err := os.WriteFile(p, []byte(edited+"\n#Policy: {"), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := e.Reload(); changed || err == nil {
		t.Fatalf("reload of a broken policy: changed=%v err=%v; want an error", changed, err)
	}
	if e.Digest() != second || decide().Verdict != VerdictAllow {
		t.Error("a broken edit replaced the last good policy")
	}
	if emb := engine(t); emb.Source() != "embedded" || e.Source() != dir {
		t.Errorf("sources: %q, %q", emb.Source(), e.Source())
	}
}

func TestFromDirRejectsBrokenPolicy(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte("package policies\n#Policy: {input: _, decision: \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FromDir(dir); err == nil {
		t.Fatal("a policy with a syntax error compiled")
	}
	if _, err := FromDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no .cue policy files") {
		t.Fatalf("empty dir: %v", err)
	}
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
				if err != nil || d.Playbook != v1alpha1.PlaybookHealthyMoveWorkload {
					t.Errorf("concurrent decision: %+v, %v", d, err)
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
	tests, _ := filepath.Glob("*_test.cue")
	if len(tests) == 0 {
		t.Fatal("no *_test.cue files")
	}
	for _, tf := range tests {
		src, err := os.ReadFile(tf)
		if err != nil {
			t.Fatal(err)
		}
		if err := vet(t, dir, src); err != nil {
			t.Fatalf("unmodified %s fails cue vet: %v", tf, err)
		}
	}
	src, _ := os.ReadFile("release_luks_lease_test.cue")
	const from = `want: {allowed: true, playbook: "fenced-unreachable", rule: "unreachable-fenced"}`
	if !strings.Contains(string(src), from) {
		t.Fatalf("release_luks_lease_test.cue no longer contains %q", from)
	}
	flipped := strings.Replace(string(src), from, `want: {allowed: false, rule: "unreachable-lease-too-young"}`, 1)
	if err := vet(t, dir, []byte(flipped)); err == nil {
		t.Fatal("cue vet passed with a flipped expectation")
	}
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
	files, _ := filepath.Glob("*.cue")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.cue") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func loadFixture(t testing.TB, f string) fixture {
	t.Helper()
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var fx fixture
	if err := yaml.Unmarshal(data, &fx); err != nil {
		t.Fatal(err)
	}
	return fx
}

// BenchmarkDecide measures one decision on a compiled-once policy.
func BenchmarkDecide(b *testing.B) {
	e := engine(b)
	fx := loadFixture(b, "testdata/shutdown-holder.yaml")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Decide(fx.Input); err != nil {
			b.Fatal(err)
		}
	}
}
