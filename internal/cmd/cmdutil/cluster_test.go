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
	assert.Less(t, cfg.QPS, float32(0), "no client-side limit by default: client-go reads 0 as 5 a second")
	assert.Equal(t, "ops", c.Namespace())
}

// TestKubeAPIRateLimit: 0 sets no client-side limit, a positive rate sets client-go's
// token bucket, anything else is refused.
func TestKubeAPIRateLimit(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: a, cluster: {server: "https://a.example:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: a, context: {cluster: a, user: u}}]
current-context: a
`), 0o600))
	for _, tc := range []struct {
		name      string
		args      []string
		qps       float32
		burst     int
		wantError string
	}{
		{name: "default", qps: -1, burst: 100},
		{name: "zero", args: []string{"--kube-api-qps=0"}, qps: -1, burst: 100},
		{name: "a limit", args: []string{"--kube-api-qps=20", "--kube-api-burst=30"}, qps: 20, burst: 30},
		{name: "negative", args: []string{"--kube-api-qps=-1"}, wantError: "--kube-api-qps must be 0"},
		{name: "a limit without burst", args: []string{"--kube-api-qps=20", "--kube-api-burst=0"}, wantError: "positive --kube-api-burst"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewClusterFlags(false)
			cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
			c.AddFlags(cmd.Flags(), "")
			_, err := cmdtest.Execute(cmd, append([]string{"--kubeconfig", kubeconfig}, tc.args...)...)
			require.NoError(t, err)
			cfg, err := c.RESTConfig()
			if tc.wantError != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantError)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.qps, cfg.QPS)
			assert.Equal(t, tc.burst, cfg.Burst)
		})
	}
}
