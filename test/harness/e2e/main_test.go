//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/cluster"
	"github.com/remediator/remediator/test/harness/controllerproc"
)

var (
	root       string
	kubeconfig string
	k8s        client.Client
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	if root, err = cluster.Root(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The tests run their own controller processes: one left by `make demo` would
	// reconcile the same requests.
	if out, err := exec.CommandContext(ctx, "bash", filepath.Join(root, "test", "demo.sh"), "stop").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the demo controller: %v\n%s", err, out)
		return 1
	}
	// Leave a cluster someone else started (make cluster) running; stop one we start.
	startedHere := !reachable(cluster.Kubeconfig(root))
	if kubeconfig, err = cluster.Up(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "starting the local cluster:", err)
		return 1
	}
	if startedHere && os.Getenv("E2E_KEEP_CLUSTER") == "" {
		defer func() {
			if err := cluster.Down(context.Background()); err != nil {
				fmt.Fprintln(os.Stderr, "stopping the local cluster:", err)
			}
		}()
	}
	utilruntime.Must(v1alpha1.AddToScheme(scheme.Scheme))
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme.Scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func reachable(kubeconfig string) bool {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return false
	}
	cfg.Timeout = 2 * time.Second
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return false
	}
	return c.List(context.Background(), &corev1.NamespaceList{}) == nil
}

// startController runs bin/remediator-controller against the local cluster
// (controllerproc) and waits until it reports ready. It is stopped when the test
// ends, and its log is printed if the test failed.
func startController(t *testing.T, extraArgs ...string) *controllerproc.Process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "controller.log")
	c, err := controllerproc.Start(context.Background(), controllerproc.Options{
		Binary:     filepath.Join(root, "bin", "remediator-controller"),
		Kubeconfig: kubeconfig,
		Args: append([]string{
			// The safety floor's gates, shortened as shortGatePolicies shortens the
			// policies' (the embedded policies keep the runbook's, which are stricter).
			"--floor-unreachable-lease-age", shortUnreachableGate.String(),
			"--floor-healthy-lease-age", shortHealthyGate.String(),
		}, extraArgs...),
		Log: logPath,
	})
	if err != nil {
		out, _ := os.ReadFile(logPath)
		require.NoError(t, err, "controller log:\n%s", out)
	}
	t.Cleanup(func() {
		c.Stop()
		// E2E_CONTROLLER_LOG=1 prints it after a passing test too, to compare timelines.
		if t.Failed() || os.Getenv("E2E_CONTROLLER_LOG") != "" {
			t.Logf("controller log:\n%s", c.Logs())
		}
	})
	return c
}

// Shortened Lease-age gates for shortGatePolicies. Lease age counts from the Lease's
// creationTimestamp (server time, which a test cannot backdate) or a later
// acquireTime, so the runbook's gates of 300s (unreachable or NotFound holder, fenced)
// and 600s (healthy holder without LeaseRetained events) cannot be reached in a test
// without waiting that long.
const (
	shortUnreachableGate = 30 * time.Second
	shortHealthyGate     = 40 * time.Second
)

// shortGatePolicies writes a copy of the real policies (policies/*.cue without the
// *_test.cue cases) in which only #UnreachableMinLeaseAgeSeconds and
// #HealthyStuckLeaseAgeSeconds are shortened to shortUnreachableGate and
// shortHealthyGate, and returns its directory for `controller --policies-dir`. Every
// rule, message and playbook is the product's own; the test fails if a constant is
// not found, so a renamed constant cannot silently leave the 5-minute gate in place
// (or a test pass without it). Tests where the age does not matter use the embedded
// policies.
func shortGatePolicies(t *testing.T) string {
	t.Helper()
	return gatePolicies(t, int(shortUnreachableGate/time.Second), int(shortHealthyGate/time.Second))
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := controllerproc.FreeAddr()
	require.NoError(t, err)
	return addr
}

// poll is the tick of every require.EventuallyWithT in the suite. Its conditions run
// in a goroutine of their own, so they assert on the *assert.CollectT they are given
// and never on the test's t: a failed tick is retried, and the last tick's failures
// are reported when the wait times out.
const poll = 250 * time.Millisecond

// describe says where a request stands, for failure messages.
func describe(rr *v1alpha1.RemediationRequest) string {
	return fmt.Sprintf("phase %s decision %+v steps %+v", rr.Status.Phase, rr.Status.Decision, rr.Status.Steps)
}

// decision returns the request's decision, stopping the test if it has none.
func decision(t *testing.T, rr *v1alpha1.RemediationRequest) *v1alpha1.Decision {
	t.Helper()
	require.NotNil(t, rr.Status.Decision, "no decision: %s", describe(rr))
	return rr.Status.Decision
}

// namespace creates a namespace for one test and deletes it afterwards.
func namespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	require.NoError(t, k8s.Create(context.Background(), ns))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	return ns.Name
}
