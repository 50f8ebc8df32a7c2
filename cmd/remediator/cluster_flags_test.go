package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// planTestdata holds plan's request files.
const planTestdata = "../../internal/cmd/plan/testdata/plan/"

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
		flags []string
		want  string
	}{
		{[]string{"--node-lease-grace-period=0s"}, "--node-lease-grace-period must be positive, got 0s"},
		{[]string{"--node-lease-grace-period=-1m"}, "--node-lease-grace-period must be positive, got -1m0s"},
		{[]string{"--node-plugin-selector=app in ("}, "parsing --node-plugin-selector"},
		{[]string{"--kube-api-qps=-1"}, "--kube-api-qps must be 0 (no client-side limit) or positive"},
		{[]string{"--kube-api-qps=20", "--kube-api-burst=-1"}, "with a positive --kube-api-burst"},
	}
	for _, c := range clusterCommands {
		for _, b := range bad {
			t.Run(c.name+"/"+strings.Join(b.flags, " "), func(t *testing.T) {
				args := append(append([]string{"--kubeconfig", kubeconfig}, b.flags...), c.args...)
				_, err := execute(c.new(), args...)
				require.Error(t, err)
				assert.Contains(t, err.Error(), b.want)
			})
		}
	}
}
