package cmdutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/internal/cmd/cmdtest"
)

// TestClusterFlagsReachTheKubeconfig: --context is kubectl's, and names the context
// the connection uses.
func TestClusterFlagsReachTheKubeconfig(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://a.example:6443"}
- name: b
  cluster: {server: "https://b.example:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: ctx-a
  context: {cluster: a, user: u}
- name: ctx-b
  context: {cluster: b, user: u}
current-context: ctx-a
`), 0o600))
	c := NewClusterFlags(true)
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	c.AddFlags(cmd.Flags(), "")
	_, err := cmdtest.Execute(cmd, "--kubeconfig", kubeconfig, "--context", "ctx-b", "--as", "system:serviceaccount:ci:plan", "--request-timeout", "7s", "-n", "ops")
	require.NoError(t, err)
	cfg, err := c.RESTConfig()
	require.NoError(t, err)
	assert.Equal(t, "https://b.example:6443", cfg.Host)
	assert.Equal(t, "system:serviceaccount:ci:plan", cfg.Impersonate.UserName)
	assert.Equal(t, "7s", cfg.Timeout.String())
	assert.Equal(t, float32(50), cfg.QPS)
	assert.Equal(t, 100, cfg.Burst)
	assert.Equal(t, "ops", c.Namespace())
}
