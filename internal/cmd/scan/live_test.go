package scan

import (
	"bytes"
	"context"
	"encoding/json"
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
	assert.Equal(t, "remediationrequest.remediator.io/release-lease-"+pv+"\nremediationrequest.remediator.io/release-lease-"+other+"\n", out,
		"--node keeps the stuck Leases the node holds, sorted")

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

// TestScanNodeHeldLeases: scan --node lists every PV-named Lease the node holds, the
// runbook's first step on a node, each stuck or not and why, sorted, in every
// output; only the stuck ones get a request (-o yaml and -o json stay what kubectl
// apply and the remediation repository take), and only they make --exit-code exit 3.
func TestScanNodeHeldLeases(t *testing.T) {
	env := testenv.StartT(t)
	kubeconfig := cmdtest.WriteKubeconfig(t, env.Config)
	w := &cmdtest.World{T: t, C: env.Client}
	for _, ns := range []string{"trident", "app"} {
		w.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	// kwok-node-2 is Healthy and holds two Leases: one Trident retained after a failed
	// operation (stuck), one just taken, without events (cryptsetup may be running).
	const stuck, young = "pvc-7e0b-held-stuck", "pvc-3a9c-held-young"
	w.Node("kwok-node-2", corev1.ConditionTrue, nil, time.Second)
	w.Volume(stuck, "app", "stuck", "kwok-node-2", 1)
	w.Volume(young, "app", "young", "kwok-node-2", 0)
	// kwok-node-3 holds only a young Lease: held, not found stuck.
	const only = "pvc-5d21-held-only"
	w.Node("kwok-node-3", corev1.ConditionTrue, nil, time.Second)
	w.Volume(only, "app", "only", "kwok-node-3", 0)
	scan := func(t *testing.T, args ...string) (string, int) {
		t.Helper()
		out, code, _ := runScanCommand(t, append(args, "--kubeconfig", kubeconfig)...)
		return out, code
	}

	out, code := scan(t, "--node", "kwok-node-2", "--exit-code")
	assert.Equal(t, cmdutil.ExitFinding, code, "a stuck Lease held by the node is a finding")
	_, listing, ok := strings.Cut(out, "Trident Leases held by kwok-node-2")
	require.True(t, ok, "no listing of the Leases kwok-node-2 holds:\n%s", out)
	lines := strings.Split(strings.TrimSpace(listing), "\n")
	require.Len(t, lines, 4, "the title's end, a header and the two Leases, young first (sorted):\n%s", listing)
	assert.Equal(t, ":", lines[0])
	assert.Regexp(t, `^LEASE +STUCK +NODE STATE +AGE +LEASERETAINED +SYMPTOMS +WHY$`, lines[1])
	assert.Regexp(t, `^trident/`+young+` +NotStuck +Healthy +\S+ +0 +- +young: held .*holder Healthy, renewing its node Lease`, lines[2])
	assert.Regexp(t, `^trident/`+stuck+` +Stuck +Healthy +\S+ +1 +- +1 LeaseRetained event\(s\)`, lines[3])

	out, code = scan(t, "--node", "kwok-node-2", "-o", "yaml")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "persistentVolume: "+stuck, "the stuck Lease's request")
	assert.NotContains(t, out, "persistentVolume: "+young, "no request for a Lease that is not stuck")
	assert.Regexp(t, `(?m)^#.*trident/`+young+`: NotStuck`, out, "the Lease that is not stuck is listed, as a comment")
	assert.Regexp(t, `(?m)^#.*trident/`+stuck+`: Stuck`, out)

	out, code = scan(t, "--node", "kwok-node-2", "-o", "json")
	assert.Equal(t, 0, code)
	var list struct {
		Items []struct {
			Spec struct{ Target map[string]string }
		}
		HeldLeases []struct {
			Lease   string
			Stuck   bool
			Why     string
			Request string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list.Items, 1, "one request, for the stuck Lease")
	assert.Equal(t, stuck, list.Items[0].Spec.Target["persistentVolume"])
	require.Len(t, list.HeldLeases, 2, out)
	assert.Equal(t, "trident/"+young, list.HeldLeases[0].Lease)
	assert.False(t, list.HeldLeases[0].Stuck)
	assert.Contains(t, list.HeldLeases[0].Why, "young")
	assert.Empty(t, list.HeldLeases[0].Request)
	assert.Equal(t, "trident/"+stuck, list.HeldLeases[1].Lease)
	assert.True(t, list.HeldLeases[1].Stuck)
	assert.Contains(t, list.HeldLeases[1].Why, "LeaseRetained")
	assert.Equal(t, "remediator/release-lease-"+stuck, list.HeldLeases[1].Request)

	// A node that holds a Lease nobody found stuck: listed, but nothing to remediate.
	out, code = scan(t, "--node", "kwok-node-3", "--exit-code")
	assert.Equal(t, 0, code, "a held Lease that is not stuck is no finding")
	assert.Regexp(t, `(?m)^trident/`+only+` +NotStuck +Healthy`, out)
	out, code = scan(t, "--node", "kwok-node-3", "-o", "name", "--exit-code")
	assert.Equal(t, 0, code)
	assert.Empty(t, out)

	// Without --node, nothing changes: the findings only.
	out, _ = scan(t)
	assert.NotContains(t, out, "Trident Leases held by")
	assert.NotContains(t, out, young)
}
