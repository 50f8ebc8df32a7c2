package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/internal/cmd/cmdutil"
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
		g, err := c.Floor()
		require.NoError(t, err)
		assert.Equal(t, []string{"trident"}, g.TridentNamespaces)
		assert.Equal(t, []string{"trident"}, g.Settings().TridentNamespaces)
		fc, err := c.FactsConfig()
		require.NoError(t, err)
		assert.Empty(t, fc.AllowedTridentNamespaces)
	})
	t.Run("listed, comma-separated", func(t *testing.T) {
		c := parse(t, "--trident-namespace=trident", "--allowed-trident-namespaces=trident-b,netapp-trident")
		g, err := c.Floor()
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
		g, err := c.Floor()
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
