package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Module is the module path whose go.mod marks the repository root.
const Module = "github.com/remediator/remediator"

// Root returns the repository root: $ROOT if set, else the nearest directory at or above the
// working directory whose go.mod declares Module (go test runs in the package directory).
func Root() (string, error) {
	if r := os.Getenv("ROOT"); r != "" {
		return filepath.Abs(r)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if declaresModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod for module %s at or above the working directory; set ROOT", Module)
		}
		dir = parent
	}
}

func declaresModule(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == Module
		}
	}
	return false
}

// Kubeconfig returns the admin kubeconfig path that up.sh writes for the repository at root.
// It honours $BIN like the scripts do.
func Kubeconfig(root string) string {
	return filepath.Join(binDir(root), "cluster", "kubeconfig")
}

// WorkDir is the directory kwokctl keeps the cluster whose admin kubeconfig is
// kubeconfig in (up.sh's CLUSTER_NAME, remediator): its pid files, logs and audit
// log.
func WorkDir(kubeconfig string) string {
	return filepath.Join(filepath.Dir(kubeconfig), "clusters", "remediator")
}

func binDir(root string) string {
	if b := os.Getenv("BIN"); b != "" {
		return b
	}
	return filepath.Join(root, "bin")
}

// Up creates the cluster, or re-applies its manifests if it is already running, waits until the
// baseline is ready and returns the admin kubeconfig path. The binaries must already be in bin/
// (`make bins`). The environment is passed on, so CRD_DIR, UP_TIMEOUT and BIN apply.
func Up(ctx context.Context) (kubeconfig string, err error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	if err := run(ctx, root, "up.sh"); err != nil {
		return "", err
	}
	return Kubeconfig(root), nil
}

// Down deletes the cluster and makes sure none of its processes is left. It succeeds if there is
// no cluster.
func Down(ctx context.Context) error {
	root, err := Root()
	if err != nil {
		return err
	}
	return run(ctx, root, "down.sh")
}

func run(ctx context.Context, root, script string, args ...string) error {
	path := filepath.Join(root, "test", "cluster", script)
	if filepath.IsAbs(script) {
		path = script
	}
	cmd := exec.CommandContext(ctx, "bash", append([]string{path}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "ROOT="+root)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// The cluster's processes outlive the script by design. They write to their own log files,
	// but should one ever inherit our pipe, do not wait for it to close.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		return fmt.Errorf("%s: %w\n%s", path, err, out.String())
	}
	return nil
}

// DisconnectedHolder is the holderIdentity Disconnect puts on a node's Lease. up.sh gives such
// Leases back to kwok, so rerunning it reconnects every baseline node.
const DisconnectedHolder = "remediator-test/disconnected"

// Disconnect simulates losing contact with node's kubelet. kwok only acts for a node while it
// holds the node's Lease in kube-node-lease, so Disconnect takes that Lease over: renewed once
// now and never again, with a duration long enough that kwok will not reclaim it. The node
// lifecycle controller then sees no renewal for node-monitor-grace-period (20s) and marks the
// node Ready=Unknown with the node.kubernetes.io/unreachable taints (~22s in total).
func Disconnect(ctx context.Context, cs kubernetes.Interface, node string) error {
	patch := fmt.Sprintf(`{"spec":{"holderIdentity":%q,"leaseDurationSeconds":86400,"renewTime":%q}}`,
		DisconnectedHolder, metav1.NowMicro().UTC().Format(metav1.RFC3339Micro))
	_, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Patch(ctx, node,
		types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("disconnect node %s: take over its lease: %w", node, err)
	}
	return nil
}

// Reconnect undoes Disconnect. It deletes the node's Lease: kwok, which still considers the
// node its own, recreates and renews it, re-initialises the node's status, and the node
// lifecycle controller marks it Ready and removes the unreachable taints (~5s).
func Reconnect(ctx context.Context, cs kubernetes.Interface, node string) error {
	err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, node, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reconnect node %s: delete its lease: %w", node, err)
	}
	return nil
}

// RealNodeLabel marks the real kubelet nodes (real-1..real-N) that up.sh starts with
// REAL_NODES=N (test/realnode/node.sh); kwok nodes do not have it.
const RealNodeLabel = "node.remediator.io/real"

// RealNodes returns the names of the cluster's real kubelet nodes, sorted (real-1, real-2, ...).
func RealNodes(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: RealNodeLabel + "=true"})
	if err != nil {
		return nil, fmt.Errorf("list real nodes: %w", err)
	}
	names := make([]string, 0, len(list.Items))
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	return names, nil
}

// NodeOff powers real node name off, as `make node-off NODE=name` does: its kubelet, every
// container and shim, and its containerd are killed at once, and its mounts are gone. The node
// turns Ready=Unknown after kube-controller-manager's grace period (20s).
func NodeOff(ctx context.Context, name string) error { return realNode(ctx, "off", name) }

// NodePartition stops only real node name's kubelet, as `make node-partition NODE=name` does:
// its containers keep running (a network partition as the control plane sees it).
func NodePartition(ctx context.Context, name string) error {
	return realNode(ctx, "partition", name)
}

// NodeOn brings real node name back after NodeOff or NodePartition, as `make node-on
// NODE=name` does (containerd if stopped, then the kubelet), and returns once the kubelet
// has reported the node Ready.
func NodeOn(ctx context.Context, name string) error { return realNode(ctx, "on", name) }

// ImportImage imports the image archive tar (docker's `save` format or an OCI layout
// tarball, such as the release's) into real node name's containerd, as a registry pull
// would have put it there.
func ImportImage(ctx context.Context, name, tar string) error {
	return realNode(ctx, "import", name, tar)
}

func realNode(ctx context.Context, verb, name string, args ...string) error {
	root, err := Root()
	if err != nil {
		return err
	}
	return run(ctx, root, filepath.Join(root, "test", "realnode", "node.sh"), append([]string{verb, name}, args...)...)
}
