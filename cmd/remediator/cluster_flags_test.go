package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The commands that read the cluster, each with the arguments it needs besides the
// shared flags.
var clusterCommands = []struct {
	name string
	new  func() *cobra.Command
	args []string
}{
	{"controller", newControllerCommand, nil},
	{"plan", newPlanCommand, []string{"-f", planTestdata + "shutdown.yaml"}},
	{"scan", newScanCommand, nil},
}

func execute(cmd *cobra.Command, args ...string) (string, error) {
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(""))
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// TestClusterFlagsAreShared: the controller, plan and scan take the same connection
// and Trident flags, kubectl's among them, and refuse the same bad values. scan used
// to accept a --node-lease-grace-period of zero or less, which made every node with
// a kube-node-lease look unreachable.
func TestClusterFlagsAreShared(t *testing.T) {
	shared := []string{"kubeconfig", "context", "cluster", "user", "as", "as-group", "request-timeout", "server",
		"kube-api-qps", "kube-api-burst", "trident-namespace", "driver-name", "node-plugin-selector", "node-lease-grace-period"}
	for _, c := range clusterCommands {
		t.Run(c.name, func(t *testing.T) {
			fs := c.new().Flags()
			for _, name := range shared {
				assert.NotNil(t, fs.Lookup(name), "--%s", name)
			}
			if c.name == "controller" {
				assert.Nil(t, fs.Lookup("namespace"), "the controller has --request-namespaces instead")
			} else {
				require.NotNil(t, fs.Lookup("namespace"))
				assert.Equal(t, "n", fs.Lookup("namespace").Shorthand)
			}
		})
	}
}

func TestClusterFlagsRefuseBadValues(t *testing.T) {
	// A kubeconfig that exists but names no cluster: a value the flags let through
	// would fail on it, later, with a different error.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600))
	bad := []struct {
		flag, value, want string
	}{
		{"node-lease-grace-period", "0s", "--node-lease-grace-period must be positive, got 0s"},
		{"node-lease-grace-period", "-1m", "--node-lease-grace-period must be positive, got -1m0s"},
		{"node-plugin-selector", "app in (", "parsing --node-plugin-selector"},
		{"kube-api-qps", "0", "--kube-api-qps and --kube-api-burst must be positive"},
		{"kube-api-burst", "-1", "--kube-api-qps and --kube-api-burst must be positive"},
	}
	for _, c := range clusterCommands {
		for _, b := range bad {
			t.Run(c.name+"/"+b.flag+"="+b.value, func(t *testing.T) {
				args := append([]string{"--kubeconfig", kubeconfig, "--" + b.flag + "=" + b.value}, c.args...)
				_, err := execute(c.new(), args...)
				require.Error(t, err)
				assert.Contains(t, err.Error(), b.want)
			})
		}
	}
}

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
	c := newClusterFlags(true)
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	c.addFlags(cmd.Flags(), "")
	_, err := execute(cmd, "--kubeconfig", kubeconfig, "--context", "ctx-b", "--as", "system:serviceaccount:ci:plan", "--request-timeout", "7s", "-n", "ops")
	require.NoError(t, err)
	cfg, err := c.restConfig()
	require.NoError(t, err)
	assert.Equal(t, "https://b.example:6443", cfg.Host)
	assert.Equal(t, "system:serviceaccount:ci:plan", cfg.Impersonate.UserName)
	assert.Equal(t, "7s", cfg.Timeout.String())
	assert.Equal(t, float32(50), cfg.QPS)
	assert.Equal(t, 100, cfg.Burst)
	assert.Equal(t, "ops", c.namespace())
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

// TestScanNamespaceFlag: -n is where the suggested requests go, and it may not
// contradict --request-namespace.
func TestScanNamespaceFlag(t *testing.T) {
	_, err := execute(newScanCommand(), "-n", "ops", "--request-namespace", "remediator")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--namespace "ops" and --request-namespace "remediator" disagree`)
}
