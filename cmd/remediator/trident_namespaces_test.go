package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/internal/cmd/cmdtest"
	"github.com/remediator/remediator/internal/cmd/cmdutil"
	"github.com/remediator/remediator/test/testenv"
)

// TestAllowedTridentNamespaces: --allowed-trident-namespaces lists the Trident
// namespaces a request may name besides --trident-namespace; the gatherer reads in
// those only, and the safety floor acts in those only (status.decision.floor records
// them).
func TestAllowedTridentNamespaces(t *testing.T) {
	parse := func(t *testing.T, args ...string) *cmdutil.ClusterFlags {
		t.Helper()
		c := cmdutil.NewClusterFlags(false)
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		c.AddFlags(fs, "")
		require.NoError(t, fs.Parse(args))
		return c
	}
	t.Run("none by default", func(t *testing.T) {
		c := parse(t)
		g, err := c.Gates()
		require.NoError(t, err)
		assert.Equal(t, []string{"trident"}, g.TridentNamespaces)
		assert.Equal(t, []string{"trident"}, g.Settings().TridentNamespaces)
		fc, err := c.FactsConfig()
		require.NoError(t, err)
		assert.Empty(t, fc.AllowedTridentNamespaces)
	})
	t.Run("listed, comma-separated", func(t *testing.T) {
		c := parse(t, "--trident-namespace=trident", "--allowed-trident-namespaces=trident-b,netapp-trident")
		g, err := c.Gates()
		require.NoError(t, err)
		assert.Equal(t, []string{"netapp-trident", "trident", "trident-b"}, g.TridentNamespaces, "sorted, the configured one among them")
		fc, err := c.FactsConfig()
		require.NoError(t, err)
		assert.Equal(t, []string{"trident-b", "netapp-trident"}, fc.AllowedTridentNamespaces)
		assert.Equal(t, []string{"netapp-trident", "trident", "trident-b"}, fc.TridentNamespaces())
	})
	t.Run("an empty value lists none", func(t *testing.T) {
		// The chart passes the settings key as $(ENV), empty when it lists none.
		c := parse(t, "--allowed-trident-namespaces=")
		g, err := c.Gates()
		require.NoError(t, err)
		assert.Equal(t, []string{"trident"}, g.TridentNamespaces)
	})

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600))
	for _, c := range clusterCommands {
		for _, bad := range []string{"Tenant_A", "trident,,b", "a/b"} {
			t.Run(c.name+" refuses "+bad, func(t *testing.T) {
				args := append([]string{"--kubeconfig", kubeconfig, "--allowed-trident-namespaces=" + bad}, c.args...)
				_, err := execute(c.new(), args...)
				require.Error(t, err)
				assert.Contains(t, err.Error(), "--trident-namespace and --allowed-trident-namespaces take namespace names")
			})
		}
	}
}

// TestPlanReadsTheAllowedTridentNamespaces: plan takes allowed-trident-namespaces from
// the controller's settings ConfigMap, as the controller takes it from the chart: a
// request naming a namespace it does not list is rejected without a read there, one
// it lists is looked up there.
func TestPlanReadsTheAllowedTridentNamespaces(t *testing.T) {
	env := testenv.StartT(t)
	kubeconfig := cmdtest.WriteKubeconfig(t, env.Config)
	w := &cmdtest.World{T: t, C: env.Client}
	for _, ns := range []string{"trident", "netapp-trident", "tenant", "app", "remediator-system"} {
		w.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	w.Node("kwok-node-3", corev1.ConditionUnknown, nil, time.Hour)
	w.Volume("pvc-6a0c2f4e-1b7d-4c9a-8e3f-2d5b7a9c1e40", "app", "archive", "kwok-node-3", 0)
	w.Create(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator-system", Name: "remediator-settings"},
		Data:       map[string]string{"trident-namespace": "trident", "allowed-trident-namespaces": "netapp-trident"},
	})
	request := func(ns string) string {
		return `apiVersion: remediator.io/v1alpha1
kind: RemediationRequest
metadata:
  name: release-lease-kwok-node-3
  namespace: remediator
spec:
  remediation: release-luks-lease
  tridentNamespace: ` + ns + `
  target:
    persistentVolume: pvc-6a0c2f4e-1b7d-4c9a-8e3f-2d5b7a9c1e40
  reason: pods of app/archive hang in ContainerCreating
`
	}
	const from = "(configmap remediator-system/remediator-settings)"

	out, code, err := runPlanCommand(t, request("tenant"), "-f", "-", "--kubeconfig", kubeconfig)
	t.Logf("exit code %d (err %v), output:\n%s", code, err, out)
	assert.Equal(t, ExitPlanRejected, code, "exit code")
	assert.Contains(t, out, "           allowed-trident-namespaces=[netapp-trident] "+from+"\n")
	assert.Contains(t, out, `spec.tridentNamespace "tenant" is not a Trident namespace of this controller, which acts only in "netapp-trident", "trident"`)

	out, code, err = runPlanCommand(t, request("netapp-trident"), "-f", "-", "--kubeconfig", kubeconfig)
	t.Logf("exit code %d (err %v), output:\n%s", code, err, out)
	assert.Equal(t, ExitPlanRejected, code, "exit code")
	assert.Contains(t, out, "netapp-trident/pvc-6a0c2f4e-1b7d-4c9a-8e3f-2d5b7a9c1e40 does not exist", "the Lease is looked up in the allowed namespace")
}
