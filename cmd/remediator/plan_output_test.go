package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestPlanErrors: plan itself fails (exit 1) with a message naming the file or flag.
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
			"", "loading policies from testdata/plan/bad-policies: loading policies:"},
		{"policies dir without policies", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "--policies-dir", emptyDir},
			"", "no .cue policy files found"},
		{"bad --at", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "--at", "tonight"},
			"", `parsing --at "tonight"`},
		{"unknown output", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "-o", "yaml"},
			"", `unknown --output "yaml"`},
		{"no -f", []string{"--facts", planTestdata + "facts/shutdown.yaml"}, "", `required flag(s) "filename" not set`},
		{"--facts and --kubeconfig", []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml", "--kubeconfig", "k"},
			"", "none of the others can be"},
		{"stdin twice", []string{"-f", "-", "--facts", "-"}, "", "stdin (-) can be read only once"},
		{"an invalid request needs no cluster", []string{"-f", planTestdata + "unknown-field.yaml", "--kubeconfig", filepath.Join(emptyDir, "kubeconfig")},
			`unknown field "spec.fencing.confirmedBy"`, ""},
		{"API unreachable", []string{"-f", planTestdata + "shutdown.yaml", "--kubeconfig", filepath.Join(emptyDir, "kubeconfig")},
			"", "loading kubeconfig"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code, err := runPlanCommand(t, "", tc.args...)
			if code != 1 {
				t.Fatalf("exit code %d, want 1 (err %v); output:\n%s", code, err, out)
			}
			if tc.inOutput != "" && !strings.Contains(out, tc.inOutput) {
				t.Errorf("output lacks %q:\n%s", tc.inOutput, out)
			}
			if tc.inErr != "" && (err == nil || !strings.Contains(err.Error(), tc.inErr)) {
				t.Errorf("error %v lacks %q", err, tc.inErr)
			}
		})
	}
}

// TestPlanJSON pins the machine-readable shape and that it is deterministic.
func TestPlanJSON(t *testing.T) {
	args := []string{"-o", "json", "-f", planTestdata + "multi.yaml", "-f", planTestdata + "wrong-kind.yaml",
		"--facts", planTestdata + "facts/shutdown.yaml", "--facts", planTestdata + "facts/unreachable.json", "--at", "2026-11-19T12:00:00Z"}
	out, code, _ := runPlanCommand(t, "", args...)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	again, _, _ := runPlanCommand(t, "", args...)
	if again != out {
		t.Errorf("output differs between two runs")
	}

	var r planReport
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("decoding: %v\n%s", err, out)
	}
	if r.ExitCode != 1 || r.FactsSource != "saved" || r.At != "2026-11-19T12:00:00Z" ||
		r.Policy.Source != "embedded" || r.Policy.Digest != embeddedDigest(t) {
		t.Errorf("report header = %+v", r)
	}
	if r.Summary != (planSummary{Allowed: 1, Rejected: 1, Failed: 1}) {
		t.Errorf("summary = %+v", r.Summary)
	}
	if len(r.Requests) != 3 {
		t.Fatalf("want 3 results, got %d", len(r.Requests))
	}
	// Sorted: the unnamed wrong-kind document first, then by name.
	bad, unreach, shut := r.Requests[0], r.Requests[1], r.Requests[2]
	if bad.ExitCode != 1 || bad.Decision != nil || len(bad.Errors) != 1 || bad.Request.Source != planTestdata+"wrong-kind.yaml" {
		t.Errorf("wrong-kind result = %+v", bad)
	}
	if unreach.Request.Name != "release-lease-kwok-node-2" || unreach.Request.Document != 2 || unreach.ExitCode != 2 ||
		unreach.Decision.Outcome != "rejected" || unreach.Decision.Rule != "unreachable-not-fenced" || unreach.Decision.Phase != v1alpha1.PhaseRejected ||
		len(unreach.Steps) != 0 || unreach.Facts.Node.State != v1alpha1.NodeUnreachable || unreach.Request.Spec.Mode != v1alpha1.ModeApply {
		t.Errorf("unreachable result = %+v", unreach)
	}
	if shut.Request.Name != "release-lease-shutdown-kwok-node-3" || shut.ExitCode != 0 || shut.Decision.Outcome != "allowed" ||
		shut.Decision.Playbook != "node-shutdown" || shut.Decision.PolicyDigest != r.Policy.Digest ||
		strings.Join(shut.Steps, ",") != "deleteLease" || shut.FactsFrom != planTestdata+"facts/shutdown.yaml (document 1)" {
		t.Errorf("shutdown result = %+v", shut)
	}

	// The field names tools rely on.
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	first := raw["requests"].([]any)[2].(map[string]any)
	for _, k := range []string{"request", "factsFrom", "facts", "conflicts", "decision", "steps", "notes", "exitCode"} {
		if _, ok := first[k]; !ok {
			t.Errorf("result has no %q field: %v", k, first)
		}
	}
	decision := first["decision"].(map[string]any)
	for _, k := range []string{"outcome", "phase", "allowed", "wait", "rule", "playbook", "reasons", "message", "policyDigest"} {
		if _, ok := decision[k]; !ok {
			t.Errorf("decision has no %q field: %v", k, decision)
		}
	}
}
