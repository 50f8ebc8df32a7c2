package plan

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/internal/cmd/cmdutil"
	"github.com/remediator/remediator/policies"
)

const planTestdata = "testdata/plan/"

// runPlanCommand runs `remediator plan args...` in-process and returns its stdout and
// the exit code main would give it.
func runPlanCommand(t *testing.T, stdin string, args ...string) (string, int, error) {
	t.Helper()
	cmd := NewCommand("dev")
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmdutil.MarkUsageErrors(cmd) // as main does
	err := cmd.ExecuteContext(context.Background())
	code, _ := cmdutil.ExitCode(err)
	return out.String(), code, err
}

func embeddedDigest(t *testing.T) string {
	t.Helper()
	e, err := policies.Embedded()
	require.NoError(t, err)
	return e.Digest()
}

// TestPlanSavedFacts covers each outcome on saved facts, with the exit code and the
// lines a reviewer reads.
func TestPlanSavedFacts(t *testing.T) {
	digest := embeddedDigest(t)
	facts := []string{"--facts", planTestdata + "facts/shutdown.yaml", "--facts", planTestdata + "facts/unreachable.json", "--facts", planTestdata + "facts/rr-healthy.yaml"}
	cases := []struct {
		name  string
		args  []string
		stdin string
		code  int
		want  []string
		deny  []string
	}{{
		name: "shutdown holder is allowed: node-shutdown deletes the Lease",
		args: []string{"-f", planTestdata + "shutdown.yaml", "--facts", planTestdata + "facts/shutdown.yaml"},
		code: 0,
		want: []string{
			"== RemediationRequest remediator/release-lease-shutdown-kwok-node-3 from testdata/plan/shutdown.yaml (document 1)",
			"decision:  ALLOWED by rule holder-shutdown: playbook node-shutdown (phase Running)",
			"- holder node kwok-node-3 is shut down: Ready=Unknown for 35m0s; taints node.kubernetes.io/out-of-service,node.kubernetes.io/unreachable",
			"volume    on kwok-node-3: inUse=true (kubelet posted 2140s ago), VolumeAttachment attached=true, attachRequired=true\n",
			"steps:     1. deleteLease\n",
			"policy:    " + digest + " (embedded)",
			"exit code: 0",
			"Summary: 1 allowed, 0 rejected, 0 would wait, 0 failed; exit code 0 (every request would be allowed)",
		},
		deny: []string{"2. "},
	}, {
		name: "unreachable holder without fencing is rejected and told what to do",
		args: []string{"-f", planTestdata + "unreachable-not-fenced.yaml", "--facts", planTestdata + "facts/unreachable.json"},
		code: 3,
		want: []string{
			"decision:  REJECTED by rule unreachable-not-fenced (phase Rejected)",
			"- spec.fencing.confirmed is not true",
			"Shut the node down (preferred;",
			"set spec.fencing.confirmed: true, spec.fencing.method and spec.fencing.node: kwok-node-2",
			"steps:     none",
			"exit code: 3",
		},
	}, {
		name: "fenced holder outside its maintenance window would wait",
		args: []string{"-f", planTestdata + "fenced-window.yaml", "--facts", planTestdata + "facts/unreachable.json", "--at", "2026-11-19T12:00:00Z"},
		code: 0, // valid: it starts by itself once the window opens
		want: []string{
			"decision:  WOULD WAIT by rule unreachable-fenced: playbook fenced-unreachable (phase Waiting)",
			"- fencing of kwok-node-2 confirmed (NodeShutdown)",
			"steps:     1. deleteLease",
			"which is closed at 2026-11-19T12:00:00Z and opens at 2026-11-20T02:00:00Z",
			"Summary: 0 allowed, 0 rejected, 1 would wait, 0 failed; exit code 0 (nothing would be rejected; a request would wait and starts by itself later)",
		},
	}, {
		name: "fenced holder inside its maintenance window is allowed",
		args: []string{"-f", planTestdata + "fenced-window.yaml", "--facts", planTestdata + "facts/unreachable.json", "--at", "2026-11-20T03:30:00Z"},
		code: 0,
		want: []string{
			"decision:  ALLOWED by rule unreachable-fenced: playbook fenced-unreachable (phase Running)",
			"The maintenance window (0 2 * * * for 2h0m0s) is open at 2026-11-20T03:30:00Z",
		},
	}, {
		name: "dry run with a whole request's status.facts: allowed, changes nothing",
		args: []string{"-f", planTestdata + "dryrun.yaml", "--facts", planTestdata + "facts/rr-healthy.yaml"},
		code: 0,
		want: []string{
			"facts:     testdata/plan/facts/rr-healthy.yaml (document 1), RemediationRequest remediator/release-lease-app-data, gathered at 2026-11-19T06:30:00Z",
			"pod       app/web-0 Running on kwok-node-1",
			"decision:  ALLOWED by rule healthy-lease-stuck: playbook healthy-move-workload (phase Pending)",
			"steps:     1. cordon\n             2. deleteAffectedPods\n             3. waitPodsGone\n             4. deleteLease\n             5. uncordon\n",
			"note:      spec.mode is DryRun",
		},
	}, {
		name: "the holder's Trident log shows cryptsetup running: refused, the line quoted",
		args: []string{"-f", planTestdata + "dryrun.yaml", "--facts", planTestdata + "facts/rr-healthy-log-running.yaml", "-o", "wide"},
		code: 3,
		want: []string{
			"logs      trident/trident-node-kwok-node-1 -c trident-main since 2026-11-19T05:49:00Z: Running (8192 bytes read, truncated=false)\n",
			`          "time=\"2026-11-19T06:29:12Z\" level=debug msg=\">>>> EnsureCryptsetupFormattedAndMappedOnHost\"`,
			"          volume names=[luks-trident_pvc_75a6fd7f,pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e,trident_pvc_75a6fd7f], newest line 2026-11-19T06:29:40Z, newest about the volume 2026-11-19T06:29:12Z\n",
			`          | "time=\"2026-11-19T06:29:12Z\" level=info msg=\"Opening encrypted volume.\"`,
			"REJECTED by rule healthy-operation-running-in-log",
		},
	}, {
		name: "several requests: worst exit code wins, output sorted by name",
		args: append([]string{"-f", planTestdata + "multi.yaml"}, facts...),
		code: 3,
		want: []string{
			"remediator/release-lease-kwok-node-2 from testdata/plan/multi.yaml (document 2)",
			"remediator/release-lease-shutdown-kwok-node-3 from testdata/plan/multi.yaml (document 3)",
			"Summary: 1 allowed, 1 rejected, 0 would wait, 0 failed; exit code 3 (a request would be rejected)",
		},
	}, {
		name: "a rejection and a wait: the rejection's 3 wins",
		args: append([]string{"-f", planTestdata + "fenced-window.yaml", "-f", planTestdata + "unreachable-not-fenced.yaml", "--at", "2026-11-19T12:00:00Z"}, facts...),
		code: 3,
		want: []string{"Summary: 0 allowed, 1 rejected, 1 would wait, 0 failed; exit code 3"},
	}, {
		name: "an invalid request beats a rejection; the others are still planned",
		args: append([]string{"-f", planTestdata + "unreachable-not-fenced.yaml", "-f", planTestdata + "malformed.yaml", "-f", planTestdata + "shutdown.yaml"}, facts...),
		code: 1,
		want: []string{
			"REJECTED by rule unreachable-not-fenced",
			"ALLOWED by rule holder-shutdown",
			"error:     testdata/plan/malformed.yaml (document 1): malformed YAML: yaml: line 8",
			"Summary: 1 allowed, 1 rejected, 0 would wait, 1 failed; exit code 1 (a request could not be planned)",
		},
	}, {
		name:  "request from stdin",
		args:  []string{"-f", "-", "--facts", planTestdata + "facts/shutdown.yaml"},
		stdin: mustRead(t, planTestdata+"shutdown.yaml"),
		code:  0,
		want:  []string{"remediator/release-lease-shutdown-kwok-node-3 from - (document 1)", "ALLOWED by rule holder-shutdown"},
	}, {
		name:  "facts from stdin",
		args:  []string{"-f", planTestdata + "unreachable-not-fenced.yaml", "--facts", "-"},
		stdin: mustRead(t, planTestdata+"facts/unreachable.json"),
		code:  3,
		want:  []string{"facts:     - (document 1), gathered at 2026-11-19T06:30:00Z", "REJECTED by rule unreachable-not-fenced"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code, _ := runPlanCommand(t, tc.stdin, tc.args...)
			assert.Equal(t, tc.code, code, "exit code")
			for _, w := range tc.want {
				assert.Contains(t, out, w)
			}
			for _, d := range tc.deny {
				assert.NotContains(t, out, d)
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

// TestPlanPoliciesDir: an override directory is what decides. The override makes
// fenced Leases wait an hour instead of 5 minutes, so the 40-minute-old Lease that
// the embedded policies release is rejected.
func TestPlanPoliciesDir(t *testing.T) {
	dir := t.TempDir()
	srcs, err := filepath.Glob("../../../policies/*.cue")
	require.NoError(t, err)
	require.NotEmpty(t, srcs, "no policies found")
	for _, src := range srcs {
		// The schema is the controller's own: a policy directory holds the rules only.
		if filepath.Base(src) == "schema.cue" {
			continue
		}
		data, err := os.ReadFile(src)
		require.NoError(t, err)
		data = bytes.Replace(data, []byte("#UnreachableMinLeaseAgeSeconds: 300"), []byte("#UnreachableMinLeaseAgeSeconds: 3600"), 1)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, 0o644))
	}
	args := []string{"-f", planTestdata + "fenced-window.yaml", "--facts", planTestdata + "facts/unreachable.json", "--at", "2026-11-20T03:00:00Z"}
	embOut, embCode, _ := runPlanCommand(t, "", args...)
	require.Equal(t, 0, embCode, "embedded policies: exit code; output:\n%s", embOut)
	require.Contains(t, embOut, "ALLOWED by rule unreachable-fenced", "embedded policies")
	out, code, _ := runPlanCommand(t, "", append(args, "--policies-dir", dir)...)
	assert.Equal(t, 3, code, "override: exit code")
	for _, w := range []string{
		"REJECTED by rule unreachable-lease-too-young",
		"the request becomes eligible in 1200s",
		"(the controller decides again after 1200s, on fresh facts)",
		"(" + dir + ")",
	} {
		assert.Contains(t, out, w)
	}
	assert.NotContains(t, out, embeddedDigest(t), "the override's digest is the embedded one")
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(data)
}
