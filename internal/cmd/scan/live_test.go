package scan

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/internal/cmd/cmdtest"
	"github.com/remediator/remediator/internal/cmd/cmdutil"
	"github.com/remediator/remediator/test/testenv"
)

// runScanCommand runs scan with args, as main does, and returns its standard output
// and the exit code main would exit with.
func runScanCommand(t *testing.T, args ...string) (string, int, error) {
	t.Helper()
	cmd := NewCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmdutil.MarkUsageErrors(cmd) // as main does
	err := cmd.ExecuteContext(context.Background())
	code, _ := cmdutil.ExitCode(err)
	t.Logf("scan %s: exit code %d (err %v):\n%s", strings.Join(args, " "), code, err, out.String())
	return out.String(), code, err
}

// TestScanExitCode: scan exits 0 on findings, so that `set -o pipefail` pipelines
// into kubectl apply go on, unless --exit-code asks for 3 (as git diff --exit-code);
// with nothing found it exits 0 either way. -o name and jsonpath read the live
// findings' suggested requests.
func TestScanExitCode(t *testing.T) {
	env := testenv.StartT(t)
	kubeconfig := cmdtest.WriteKubeconfig(t, env.Config)
	w := &cmdtest.World{T: t, C: env.Client}
	for _, ns := range []string{"trident", "app"} {
		w.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	const pv = "pvc-5c1d7e2a-scan-exit-code"
	w.Node("kwok-node-1", corev1.ConditionTrue, nil, time.Second)
	w.Volume(pv, "app", "data", "kwok-node-1", 2)
	scan := func(t *testing.T, args ...string) (string, int) {
		t.Helper()
		out, code, _ := runScanCommand(t, append(args, "--kubeconfig", kubeconfig)...)
		return out, code
	}

	out, code := scan(t)
	assert.Equal(t, 0, code, "findings without --exit-code")
	assert.Contains(t, out, "StuckLease")
	assert.Contains(t, out, "trident/"+pv)

	out, code = scan(t, "--exit-code")
	assert.Equal(t, cmdutil.ExitFinding, code, "findings with --exit-code")
	assert.Equal(t, 3, code, "the documented code of a finding")
	assert.Contains(t, out, "StuckLease", "the findings are printed before the exit code")

	out, code = scan(t, "-o", "yaml")
	assert.Equal(t, 0, code, "scan -o yaml | kubectl apply -f - under set -o pipefail")
	assert.Contains(t, out, "persistentVolume: "+pv)

	out, code = scan(t, "-o", "name")
	assert.Equal(t, 0, code)
	assert.Equal(t, "remediationrequest.remediator.io/release-lease-"+pv+"\n", out)

	out, code = scan(t, "-o", "jsonpath={.items[0].metadata.namespace}/{.items[0].metadata.name}", "--request-namespace", "oncall")
	assert.Equal(t, 0, code)
	assert.Equal(t, "oncall/release-lease-"+pv, out)

	// --lease keeps the one Lease an alert names; --node only node findings.
	const other = "pvc-5c1d7e2a-scan-other"
	w.Volume(other, "app", "data2", "kwok-node-1", 2)
	out, _ = scan(t, "-o", "name", "--lease", pv)
	assert.Equal(t, "remediationrequest.remediator.io/release-lease-"+pv+"\n", out, "--lease")
	out, _ = scan(t, "-o", "name", "--node", "kwok-node-1")
	assert.Empty(t, out, "--node keeps the findings whose request targets the node, not the Leases it holds")

	// The controller's settings: scan looks where the controller looks, unless a flag
	// says otherwise.
	w.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "remediator-system"}})
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator-system", Name: "remediator-settings"},
		Data: map[string]string{"trident-namespace": "netapp-trident", "max-concurrent-remediations": "2"}}
	w.Create(settings)
	out, _ = scan(t, "-o", "name")
	assert.Empty(t, out, "the settings' Trident namespace has no Leases")
	out, _ = scan(t, "-o", "name", "--lease", pv, "--trident-namespace", "trident")
	assert.Equal(t, "remediationrequest.remediator.io/release-lease-"+pv+"\n", out, "the flag wins over the settings")
	require.NoError(t, env.Client.Delete(context.Background(), settings))
	require.NoError(t, env.Client.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: other}}))

	out, code = scan(t, "-o", "xml")
	assert.Equal(t, 2, code, "an unknown output is a usage error")
	assert.Empty(t, out, "refused before scanning")

	// Nothing left to find: 0 with or without --exit-code.
	require.NoError(t, env.Client.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv}}))
	out, code = scan(t, "--exit-code")
	assert.Equal(t, 0, code, "nothing found, with --exit-code")
	assert.Contains(t, out, "No stuck Leases")
	out, code = scan(t, "-o", "name", "--exit-code")
	assert.Equal(t, 0, code)
	assert.Empty(t, out)
}
