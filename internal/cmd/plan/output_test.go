package plan

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestPlanErrors: plan itself fails (exit 1), or its flags alone are wrong (exit 2),
// with a message naming the file or flag.
func TestPlanErrors(t *testing.T) {
	emptyDir := t.TempDir()
	cases := []struct {
		name string
		args []string
		// inOutput is looked for in the report (per-request problems); inErr in the
		// returned error (problems that stop the whole plan).
		inOutput, inErr string
	}{
		{"malformed YAML", []string{"-f", planTestdata + "malformed.yaml", "--facts", planTestdata + "facts/shutdown.yaml"},
			"testdata/plan/malformed.yaml (document 1): malformed YAML", ""},
		{"no document", []string{"-f", planTestdata + "empty.yaml", "--facts", planTestdata + "facts/shutdown.yaml"},
			"testdata/plan/empty.yaml holds no YAML document", ""},
		{"wrong kind", []string{"-f", planTestdata + "wrong-kind.yaml", "--facts", planTestdata + "facts/shutdown.yaml"},
			`testdata/plan/wrong-kind.yaml (document 1): v1 ConfigMap named "release-lease" is not a remediator.io/v1alpha1 RemediationRequest`, ""},
		{"unknown field", []string{"-f", planTestdata + "unknown-field.yaml", "--facts", planTestdata + "facts/shutdown.yaml"},
			"testdata/plan/unknown-field.yaml (document 1): RemediationRequest remediator/release-lease-typo is invalid (the API server would refuse it):\n             unknown field \"spec.fencing.confirmedBy\"", ""},
		{"unreadable request file", []string{"-f", planTestdata + "missing.yaml", "--facts", planTestdata + "facts/shutdown.yaml"},
			"reading -f testdata/plan/missing.yaml: open testdata/plan/missing.yaml: no such file or directory", ""},
		{"no saved facts for the target", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/unreachable.json"},
			"no saved facts for PersistentVolume pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30: the --facts given are for PersistentVolume pvc-3f1c2a9e-5b7d-4c1e-9a0f-2d6b8e4c7a15", ""},
		{"missing facts file", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/missing.yaml"},
			"", "reading --facts testdata/plan/facts/missing.yaml: open testdata/plan/facts/missing.yaml: no such file or directory"},
		{"facts with an unknown field", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/typo.yaml"},
			"", `--facts testdata/plan/facts/typo.yaml: testdata/plan/facts/typo.yaml (document 1): decoding facts: unknown field "target.fund"`},
		{"facts from a request without status.facts", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "shutdown.yaml"},
			"", `--facts testdata/plan/shutdown.yaml: testdata/plan/shutdown.yaml (document 1): RemediationRequest remediator/release-lease-shutdown-kwok-node-3 has no status.facts`},
		{"facts that are not facts", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "wrong-kind.yaml"},
			"", `v1 ConfigMap named "release-lease" is neither a Facts document nor a RemediationRequest with status.facts`},
		{"policies that do not compile", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "--policies-dir", planTestdata + "bad-policies"},
			"", "loading policies from testdata/plan/bad-policies: parsing policy policy.cue:"},
		{"policies dir without policies", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "--policies-dir", emptyDir},
			"", "no .cue policy files found"},
		{"bad --at", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "--at", "tonight"},
			"", `parsing --at "tonight"`},
		{"unknown output", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "-o", "xml"},
			"", `unknown --output "xml": leave it out for the output for people, or use one of go-template, go-template-file, json, jsonpath, jsonpath-as-json, jsonpath-file, name, template, templatefile, wide, yaml`},
		{"jsonpath without a template", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "-o", "jsonpath="},
			"", "template format specified but no template given"},
		{"jsonpath that does not parse", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "-o", "jsonpath={.summary"},
			"", "error parsing jsonpath {.summary"},
		{"no -f", []string{"--facts", planTestdata + "facts/shutdown.yaml"}, "", "-f is required: the requests to plan"},
		{"--facts and --kubeconfig", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "--kubeconfig", "k"},
			"", "none of the others can be"},
		{"stdin twice", []string{"-f", "-", "--facts", "-"}, "", "stdin (-) can be read only once"},
		{"an invalid request needs no cluster", []string{"-f", planTestdata + "unknown-field.yaml", "--kubeconfig", filepath.Join(emptyDir, "kubeconfig")},
			`unknown field "spec.fencing.confirmedBy"`, ""},
		{"API unreachable", []string{"-f", planTestdata + "shutdown.yaml", "--kubeconfig", filepath.Join(emptyDir, "kubeconfig")},
			"", "loading kubeconfig"},
	}
	// The flags alone are wrong: a usage error, refused before anything is read.
	usage := map[string]bool{"bad --at": true, "unknown output": true, "jsonpath without a template": true,
		"jsonpath that does not parse": true, "no -f": true, "--facts and --kubeconfig": true}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code, err := runPlanCommand(t, "", tc.args...)
			want := 1
			if usage[tc.name] {
				want = 2
			}
			require.Equal(t, want, code, "exit code (err %v); output:\n%s", err, out)
			if tc.inOutput != "" {
				assert.Contains(t, out, tc.inOutput)
			}
			if tc.inErr != "" {
				assert.ErrorContains(t, err, tc.inErr)
			}
		})
	}
}

// TestPlanJSON pins the machine-readable shape and that it is deterministic.
func TestPlanJSON(t *testing.T) {
	args := []string{"-o", "json", "-f", planTestdata + "multi.yaml", "-f", planTestdata + "wrong-kind.yaml",
		"--facts", planTestdata + "facts/shutdown.yaml", "--facts", planTestdata + "facts/unreachable.json", "--at", "2026-11-19T12:00:00Z"}
	out, code, _ := runPlanCommand(t, "", args...)
	assert.Equal(t, 1, code, "exit code")
	again, _, _ := runPlanCommand(t, "", args...)
	assert.Equal(t, out, again, "output differs between two runs")

	var r planReport
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&r), "decoding:\n%s", out)
	// The report's header.
	assert.Equal(t, 1, r.ExitCode, "report exit code")
	assert.Equal(t, "saved", r.FactsSource)
	assert.Equal(t, "2026-11-19T12:00:00Z", r.At)
	assert.Equal(t, planPolicy{Source: "embedded", Digest: embeddedDigest(t)}, r.Policy)
	assert.Equal(t, planSummary{Allowed: 1, Rejected: 1, Failed: 1}, r.Summary)
	require.Len(t, r.Requests, 3)
	// Sorted: the unnamed wrong-kind document first, then by name.
	bad, unreach, shut := r.Requests[0], r.Requests[1], r.Requests[2]

	assert.Equal(t, 1, bad.ExitCode, "wrong-kind result %+v", bad)
	assert.Nil(t, bad.Decision, "wrong-kind result %+v", bad)
	assert.Len(t, bad.Errors, 1, "wrong-kind result %+v", bad)
	assert.Equal(t, planTestdata+"wrong-kind.yaml", bad.Request.Source, "wrong-kind result %+v", bad)

	assert.Equal(t, "release-lease-kwok-node-2", unreach.Request.Name, "unreachable result %+v", unreach)
	assert.Equal(t, 2, unreach.Request.Document, "unreachable result %+v", unreach)
	assert.Equal(t, 3, unreach.ExitCode, "unreachable result %+v", unreach)
	require.NotNil(t, unreach.Decision, "unreachable result %+v", unreach)
	assert.Equal(t, "rejected", unreach.Decision.Outcome, "unreachable decision %+v", unreach.Decision)
	assert.Equal(t, "unreachable-not-fenced", unreach.Decision.Rule, "unreachable decision %+v", unreach.Decision)
	assert.Equal(t, v1alpha1.PhaseRejected, unreach.Decision.Phase, "unreachable decision %+v", unreach.Decision)
	assert.Empty(t, unreach.Steps, "unreachable result %+v", unreach)
	require.NotNil(t, unreach.Facts, "unreachable result %+v", unreach)
	require.NotNil(t, unreach.Facts.Node, "unreachable facts %+v", unreach.Facts)
	assert.Equal(t, v1alpha1.NodeUnreachable, unreach.Facts.Node.State, "unreachable facts %+v", unreach.Facts)
	require.NotNil(t, unreach.Request.Spec, "unreachable result %+v", unreach)
	assert.Equal(t, v1alpha1.ModeApply, unreach.Request.Spec.Mode, "unreachable request %+v", unreach.Request)

	assert.Equal(t, "release-lease-shutdown-kwok-node-3", shut.Request.Name, "shutdown result %+v", shut)
	assert.Equal(t, 0, shut.ExitCode, "shutdown result %+v", shut)
	require.NotNil(t, shut.Decision, "shutdown result %+v", shut)
	assert.Equal(t, "allowed", shut.Decision.Outcome, "shutdown decision %+v", shut.Decision)
	assert.Equal(t, "node-shutdown", shut.Decision.Playbook, "shutdown decision %+v", shut.Decision)
	assert.Equal(t, r.Policy.Digest, shut.Decision.PolicyDigest, "shutdown decision %+v", shut.Decision)
	assert.Equal(t, []string{"deleteLease"}, shut.Steps, "shutdown result %+v", shut)
	assert.Equal(t, planTestdata+"facts/shutdown.yaml (document 1)", shut.FactsFrom, "shutdown result %+v", shut)

	// The field names tools rely on.
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	first := raw["requests"].([]any)[2].(map[string]any)
	for _, k := range []string{"request", "factsFrom", "facts", "conflicts", "decision", "steps", "notes", "exitCode"} {
		assert.Contains(t, first, k, "result has no %q field", k)
	}
	decision := first["decision"].(map[string]any)
	for _, k := range []string{"outcome", "phase", "allowed", "wait", "rule", "playbook", "reasons", "message", "policyDigest"} {
		assert.Contains(t, decision, k, "decision has no %q field", k)
	}
}

// TestPlanDirectoryAndYAML: -f takes a directory's manifests, as kubectl does, and
// -o yaml prints the same report as -o json.
func TestPlanDirectoryAndYAML(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"shutdown.yaml", "dryrun.yaml"} {
		data, err := os.ReadFile(planTestdata + f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), data, 0o600))
	}
	// Not a manifest: the template keeps a README in requests/ so that the directory
	// survives its last request's removal.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("# requests\n"), 0o600))
	facts := []string{"--facts", planTestdata + "facts/shutdown.yaml", "--facts", planTestdata + "facts/rr-healthy.yaml"}

	asJSON, code, err := runPlanCommand(t, "", append([]string{"-f", dir, "-o", "json"}, facts...)...)
	require.NoError(t, err, asJSON)
	assert.Equal(t, 0, code)
	var report planReport
	require.NoError(t, json.Unmarshal([]byte(asJSON), &report))
	var sources []string
	for _, r := range report.Requests {
		sources = append(sources, filepath.Base(r.Request.Source))
	}
	assert.ElementsMatch(t, []string{"dryrun.yaml", "shutdown.yaml"}, sources)

	asYAML, code, err := runPlanCommand(t, "", append([]string{"-f", dir, "-o", "yaml"}, facts...)...)
	require.NoError(t, err, asYAML)
	assert.Equal(t, 0, code)
	j, err := yaml.YAMLToJSON([]byte(asYAML))
	require.NoError(t, err)
	// The reports differ only in the time plan ran.
	var a, b map[string]any
	require.NoError(t, json.Unmarshal([]byte(asJSON), &a))
	require.NoError(t, json.Unmarshal(j, &b))
	delete(a, "at")
	delete(b, "at")
	assert.Equal(t, a, b)

	empty := t.TempDir()
	out, code, _ := runPlanCommand(t, "", append([]string{"-f", empty}, facts...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "holds no .json, .yaml, .yml file")
}

// TestPlanPrinterFlags: plan takes kubectl's printer flags. The default output for
// people is what it was (table and text are the same), wide adds the facts' details,
// name lists the requests planned, and jsonpath and go-template read the report as -o
// json prints it; the exit code is the plan's whatever the output.
func TestPlanPrinterFlags(t *testing.T) {
	args := []string{"-f", planTestdata + "multi.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "--facts", planTestdata + "facts/unreachable.json",
		"--at", "2026-11-19T12:00:00Z"}
	plan := func(t *testing.T, extra ...string) string {
		t.Helper()
		out, code, err := runPlanCommand(t, "", append(slices.Clone(args), extra...)...)
		require.Equal(t, 3, code, "exit code (err %v); output:\n%s", err, out)
		return out
	}
	people := plan(t)
	assert.Contains(t, people, "decision:  ALLOWED by rule holder-shutdown")
	assert.Equal(t, people, plan(t, "-o", "table"), "-o table is the default output")
	assert.Equal(t, people, plan(t, "-o", "text"), "-o text is the default output")
	assert.NotContains(t, people, "uid=", "the default output has no facts' details")

	wide := plan(t, "-o", "wide")
	for _, want := range []string{
		"uid=0f5a3c2e-9b1d-4e7a-8c6f-2d4b1a9e7c53 resourceVersion=1843 age from -, acquired 2026-11-19T05:50:00Z, created 2026-11-19T05:50:00Z",
		"exists=true Ready=Unknown for 2100s",
		"taints=[node.kubernetes.io/out-of-service,node.kubernetes.io/unreachable]",
		"uniqueName=kubernetes.io/csi/csi.trident.netapp.io^pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30 volumeAttachment=csi-",
		"created 2026-11-19T05:10:00Z, deleting -, csiDriver=true",
		"decision:  ALLOWED by rule holder-shutdown",
	} {
		assert.Contains(t, wide, want, "-o wide")
	}
	for _, line := range strings.Split(people, "\n") {
		assert.Contains(t, wide, line, "-o wide keeps every line of the default output")
	}

	assert.Equal(t, "remediationrequest.remediator.io/release-lease-kwok-node-2\nremediationrequest.remediator.io/release-lease-shutdown-kwok-node-3\n",
		plan(t, "-o", "name"))
	assert.Equal(t, "1 1", plan(t, "-o", "jsonpath={.summary.allowed} {.summary.rejected}"))
	assert.Equal(t, "unreachable-not-fenced holder-shutdown", plan(t, "-o", "jsonpath={.requests[*].decision.rule}"))
	assert.Equal(t, "release-lease-kwok-node-2=rejected\nrelease-lease-shutdown-kwok-node-3=allowed\n",
		plan(t, "-o", `jsonpath={range .requests[*]}{.request.name}={.decision.outcome}{"\n"}{end}`))
	assert.JSONEq(t, `[3]`, plan(t, "-o", "jsonpath-as-json={.exitCode}"))
	assert.Equal(t, "exit 3: 1 rejected", plan(t, "-o", "go-template=exit {{.exitCode}}: {{.summary.rejected}} rejected"))
	file := filepath.Join(t.TempDir(), "rules.jsonpath")
	require.NoError(t, os.WriteFile(file, []byte("{.requests[0].decision.rule}"), 0o600))
	assert.Equal(t, "unreachable-not-fenced", plan(t, "-o", "jsonpath-file="+file))
}

// TestPlanNamespaceFlag: -n places a request whose manifest names no namespace, as
// kubectl apply -n would, and refuses one that names another.
func TestPlanNamespaceFlag(t *testing.T) {
	manifest := func(ns string) string {
		s := `apiVersion: remediator.io/v1alpha1
kind: RemediationRequest
metadata:
  name: release-lease-shutdown-kwok-node-3
`
		if ns != "" {
			s += "  namespace: " + ns + "\n"
		}
		return s + `spec:
  remediation: release-luks-lease
  target:
    persistentVolume: pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30
  reason: kwok-node-3 was powered off after a kernel panic (INC-4790)
`
	}
	saved := []string{"--facts", planTestdata + "facts/shutdown.yaml", "-o", "json"}

	requestNamespace := func(out string) string {
		var r planReport
		require.NoError(t, json.Unmarshal([]byte(out), &r), out)
		require.Len(t, r.Requests, 1)
		return r.Requests[0].Request.Namespace
	}
	out, code, err := runPlanCommand(t, manifest(""), append([]string{"-f", "-", "-n", "ops"}, saved...)...)
	require.NoError(t, err, out)
	assert.Equal(t, 0, code)
	assert.Equal(t, "ops", requestNamespace(out))

	out, code, _ = runPlanCommand(t, manifest("remediator"), append([]string{"-f", "-", "-n", "ops"}, saved...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `the request's namespace \"remediator\" does not match --namespace \"ops\"`)

	out, code, err = runPlanCommand(t, manifest(""), append([]string{"-f", "-"}, saved...)...)
	require.NoError(t, err, out)
	assert.Equal(t, 0, code)
	assert.Empty(t, requestNamespace(out), "without -n a request stays without a namespace")
}
