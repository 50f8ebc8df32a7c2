//go:build realnode

package realnode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/remediator/remediator/test/cluster"
)

// TestCleanupRestoresTheHost brings up two real nodes with a pod on each (so that bridges,
// veths, network namespaces, overlay and shm mounts and pod cgroups exist), checks that
// hoststate.sh sees them, removes everything and checks that the host is as it was before:
// processes, mounts, links, netns, cgroups, sysctls, fixed paths, iptables.
func TestCleanupRestoresTheHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("real nodes need root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	root, err := cluster.Root()
	if err != nil {
		t.Fatal(err)
	}
	realnodeRoot := os.Getenv("REALNODE_ROOT")
	if realnodeRoot == "" {
		realnodeRoot = "/var/lib/remediator-nodes"
	}
	if _, err := os.Stat(realnodeRoot); err == nil {
		t.Fatalf("%s exists: real nodes are already up (or a run did not clean up); run make cluster-down first", realnodeRoot)
	}
	hoststate := filepath.Join(root, "test", "realnode", "hoststate.sh")
	before := filepath.Join(t.TempDir(), "before")
	runOK(t, ctx, "bash", hoststate, "snapshot", before)

	// Leave a kwok cluster someone else started running: remove only its real nodes then.
	clusterWasUp := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl"), "--kubeconfig",
		cluster.Kubeconfig(root), "get", "--raw", "/readyz", "--request-timeout=5s").Run() == nil
	down := func() error {
		if clusterWasUp {
			return exec.CommandContext(context.Background(), "bash", filepath.Join(root, "test", "realnode", "node.sh"), "down").Run()
		}
		return cluster.Down(context.Background())
	}
	t.Setenv("REAL_NODES", "2")
	start := time.Now()
	kubeconfig, err := cluster.Up(ctx)
	if err != nil {
		_ = down()
		t.Fatal(err)
	}
	t.Logf("cluster with 2 real nodes up in %s", time.Since(start).Round(time.Second))
	downDone := false
	defer func() {
		if !downDone {
			_ = down()
		}
	}()

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	nodes, err := cluster.RealNodes(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(nodes, ",") != "real-1,real-2" {
		t.Fatalf("real nodes: got %v, want [real-1 real-2]", nodes)
	}
	for _, n := range nodes {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hoststate-" + n, Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeName:                      n,
				TerminationGracePeriodSeconds: ptr.To[int64](5),
				Containers: []corev1.Container{{
					Name: "sleep", Image: "remediator.local/busybox:latest", ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"},
				}},
			},
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, n := range nodes {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "hoststate-"+n, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("busybox pods on the real nodes not Running: %v", err)
	}

	// The check must see what the nodes changed, or a clean compare below proves nothing.
	out, err := exec.CommandContext(ctx, "bash", hoststate, "compare", before).CombinedOutput()
	if err == nil {
		t.Fatalf("hoststate.sh compare found no difference with real nodes running:\n%s", out)
	}
	for _, want := range []string{"rnbr1", "rnbr2", "overlay", "/run/netns", "realnode1", "containerd --config"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("hoststate.sh compare with real nodes running does not mention %q:\n%s", want, out)
		}
	}

	start = time.Now()
	downDone = true
	if err := down(); err != nil {
		t.Fatalf("cluster down: %v", err)
	}
	t.Logf("cluster down in %s", time.Since(start).Round(time.Second))
	if out, err := exec.CommandContext(ctx, "bash", hoststate, "compare", before).CombinedOutput(); err != nil {
		t.Fatalf("make cluster-down left the host changed:\n%s", out)
	}
}

func runOK(t *testing.T, ctx context.Context, name string, args ...string) {
	t.Helper()
	if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}
