//go:build e2e

package e2e

// The real Argo CD for the Argo CD e2e tests: application-controller and repo-server of
// Argo CD v3.2.6 (bin/argocd, built from the Go module proxy by test/argocd, `make argocd`),
// with Debian's redis-server, run as local processes against the local cluster, configured
// from Argo CD's own manifests of the same version (bin/argocd-manifests). argocd-server is
// not run: nothing here needs its API or UI, and the two objects it would create are made
// by hand (argocd-secret's server.secretkey, which the controller's sharding needs).

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// argoNamespace is Argo CD's namespace, as in its install manifests.
const argoNamespace = "argocd"

var applicationGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"}

// process is a background process of the test, stopped when the test ends.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan error
	log  string
}

// startProcess runs bin with args and env added to the test's environment, logging to a
// file that is printed when the test fails; it is stopped (SIGTERM, then SIGKILL) at cleanup.
func startProcess(t *testing.T, name, bin string, env []string, args ...string) *process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start(), "starting %s", name)
	p := &process{name: name, cmd: cmd, done: make(chan error, 1), log: logPath}
	go func() { p.done <- cmd.Wait(); _ = f.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done: //nolint:errcheck // the exit status of a stopped process is not news
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done //nolint:errcheck // the exit status of a killed process is not news
		}
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("%s log (last 8 KiB):\n%s", name, lastBytes(out, 8<<10))
		}
	})
	return p
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// waitListening waits until addr accepts TCP connections, failing early if p exited.
func waitListening(t *testing.T, p *process, addr string) {
	t.Helper()
	require.Eventually(t, func() bool {
		select {
		case err := <-p.done:
			p.done <- err
			return true
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}, 60*time.Second, poll, "%s listening on %s", p.name, addr)
	select {
	case err := <-p.done:
		out, _ := os.ReadFile(p.log)
		t.Fatalf("%s exited: %v\n%s", p.name, err, lastBytes(out, 8<<10))
	default:
	}
}

// kubectl runs bin/kubectl against the local cluster, as an operator would, and returns
// its output.
func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "bin", "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "kubectl %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// startArgoCD installs Argo CD's CRDs and base configuration into namespace argocd, with
// Remediator's health check merged into argocd-cm as the template's README says, and runs
// redis, the repo-server and the application-controller until the test ends. The
// Applications the test creates are deleted (orphaning what they manage) before the
// controller stops.
func startArgoCD(t *testing.T) {
	t.Helper()
	bin := filepath.Join(root, "bin", "argocd")
	manifests := filepath.Join(root, "bin", "argocd-manifests")
	for _, p := range []string{bin, manifests} {
		_, err := os.Stat(p)
		require.NoError(t, err, "Argo CD is not built: run `make argocd`")
	}
	redis, err := exec.LookPath("redis-server")
	require.NoError(t, err, "redis-server is not installed: run `make argocd-deps`")

	// A namespace left Terminating by an earlier run on a kept cluster must be gone first.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8s.Get(context.Background(), types.NamespacedName{Name: argoNamespace}, &corev1.Namespace{})
		assert.True(c, apierrors.IsNotFound(err), "namespace %s still exists (%v)", argoNamespace, err)
	}, 2*time.Minute, poll, "no namespace %s left by an earlier run", argoNamespace)
	kubectl(t, "", "create", "namespace", argoNamespace)
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: argoNamespace}})
	})
	kubectl(t, "", "apply", "--server-side", "-f", filepath.Join(manifests, "crds"))
	// Polled rather than `kubectl wait --for=condition=Established`, which fails at once
	// ("<nil> is of the type <nil>") on a CRD whose status has no conditions yet.
	for _, crd := range []string{"applications.argoproj.io", "appprojects.argoproj.io"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
			require.NoError(c, k8s.Get(context.Background(), types.NamespacedName{Name: crd}, u))
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			established := false
			for _, cond := range conds {
				if m, ok := cond.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					established = true
				}
			}
			assert.True(c, established, "CRD %s not Established: %v", crd, conds)
		}, 60*time.Second, poll, "CRD %s Established", crd)
	}
	kubectl(t, "", "apply", "-n", argoNamespace, "-k", filepath.Join(manifests, "config"))
	// What argocd-server would generate at its first start.
	kubectl(t, "", "patch", "secret", "argocd-secret", "-n", argoNamespace, "--type", "merge",
		"-p", `{"stringData":{"server.secretkey":"e2e-`+rand.String(16)+`"}}`)
	// The health check, installed exactly as the template's README and argocd-cm.yaml say.
	kubectl(t, "", "patch", "configmap", "argocd-cm", "-n", argoNamespace, "--type", "merge",
		"--patch-file", filepath.Join(root, "charts", "remediator", "files", "argocd", "argocd-cm.yaml"))

	dir := t.TempDir()
	redisAddr := freeAddr(t)
	_, redisPort, err := net.SplitHostPort(redisAddr)
	require.NoError(t, err)
	rd := startProcess(t, "redis", redis, nil, "--port", redisPort, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	waitListening(t, rd, redisAddr)

	// The repo-server's sockets and scratch space off the shared /tmp defaults.
	for _, d := range []string{"tmp", "ssh", "tls", "plugins", "gpg"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	env := []string{
		"ARGOCD_GPG_ENABLED=false",
		"ARGOCD_GNUPGHOME=" + filepath.Join(dir, "gpg"),
		"ARGOCD_ASK_PASS_SOCK=" + filepath.Join(dir, "askpass.sock"),
		"ARGOCD_PLUGINSOCKFILEPATH=" + filepath.Join(dir, "plugins"),
		"ARGOCD_SSH_DATA_PATH=" + filepath.Join(dir, "ssh"),
		"ARGOCD_TLS_DATA_PATH=" + filepath.Join(dir, "tls"),
		"TMPDIR=" + filepath.Join(dir, "tmp"),
		"KUBECONFIG=" + kubeconfig,
		// The repo-server's git asks for credentials through GIT_ASKPASS=argocd.
		"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
		// The in-cluster destination https://kubernetes.default.svc is this kubeconfig's
		// cluster: no cluster Secret is needed.
		"ARGOCD_FAKE_IN_CLUSTER=true",
	}
	repoAddr := freeAddr(t)
	repoHost, repoPort, err := net.SplitHostPort(repoAddr)
	require.NoError(t, err)
	rs := startProcess(t, "argocd-repo-server", bin, env, "repo-server",
		"--address", repoHost, "--port", repoPort, "--disable-tls", "--redis", redisAddr,
		"--metrics-address", "127.0.0.1", "--metrics-port", portOf(t, freeAddr(t)), "--loglevel", "info")
	waitListening(t, rs, repoAddr)
	startProcess(t, "argocd-application-controller", bin, env, "application-controller",
		"--kubeconfig", kubeconfig, "--namespace", argoNamespace,
		"--repo-server", repoAddr, "--repo-server-plaintext", "--redis", redisAddr,
		"--metrics-port", portOf(t, freeAddr(t)), "--loglevel", "info",
		// Refresh often: the tests also ask for a refresh after each commit, as a Git
		// host's webhook would.
		"--app-resync", "30", "--app-resync-jitter", "0")
	// Registered after the controller started, so it runs before the controller stops:
	// an Application with resources-finalizer needs the controller to go away.
	t.Cleanup(func() { deleteApplications(t) })
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	return p
}

// deleteApplications deletes every Application without cascading: the test's namespaces
// and their cleanup own what was synced.
func deleteApplications(t *testing.T) {
	ctx := context.Background()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(applicationGVK.GroupVersion().WithKind("ApplicationList"))
	if err := k8s.List(ctx, list, client.InNamespace(argoNamespace)); err != nil {
		t.Logf("listing Applications: %v", err)
		return
	}
	for i := range list.Items {
		app := &list.Items[i]
		patch := client.MergeFrom(app.DeepCopy())
		app.SetFinalizers(nil)
		if err := k8s.Patch(ctx, app, patch); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("removing the finalizers of Application %s: %v", app.GetName(), err)
		}
		if err := k8s.Delete(ctx, app); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting Application %s: %v", app.GetName(), err)
		}
	}
}

// application reads an Application.
func application(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(applicationGVK)
	err := k8s.Get(ctx, types.NamespacedName{Namespace: argoNamespace, Name: name}, app)
	return app, err
}

// appState is what Argo CD itself reports about an Application: its sync status and
// revision, and its health, from .status.
type appState struct {
	Sync, Revision, Health, HealthMessage, OperationPhase, OperationMessage string
	Conditions                                                              []string
}

func (s appState) String() string {
	return fmt.Sprintf("sync %s at %.12s, health %s (%s), last operation %s (%s), conditions %v",
		s.Sync, s.Revision, s.Health, s.HealthMessage, s.OperationPhase, s.OperationMessage, s.Conditions)
}

func readAppState(app *unstructured.Unstructured) appState {
	str := func(fields ...string) string {
		v, _, _ := unstructured.NestedString(app.Object, fields...)
		return v
	}
	s := appState{
		Sync:             str("status", "sync", "status"),
		Revision:         str("status", "sync", "revision"),
		Health:           str("status", "health", "status"),
		HealthMessage:    str("status", "health", "message"),
		OperationPhase:   str("status", "operationState", "phase"),
		OperationMessage: str("status", "operationState", "message"),
	}
	conds, _, _ := unstructured.NestedSlice(app.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok {
			s.Conditions = append(s.Conditions, fmt.Sprintf("%v: %v", m["type"], m["message"]))
		}
	}
	return s
}

// refresh asks Argo CD to compare the Application with Git now, as a Git host's webhook
// would after a push, instead of waiting for the next poll.
func refresh(t *testing.T, name string) {
	t.Helper()
	kubectl(t, "", "annotate", "application", name, "-n", argoNamespace, "--overwrite", "argocd.argoproj.io/refresh=normal")
}

// waitApp waits until Argo CD reports the Application synced to revision with the given
// health, and returns that state.
func waitApp(t *testing.T, name, revision, health string, timeout time.Duration) appState {
	t.Helper()
	var s appState
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		app, err := application(context.Background(), name)
		require.NoError(c, err)
		s = readAppState(app)
		assert.Equal(c, "Synced", s.Sync, "%s", s)
		assert.Equal(c, revision, s.Revision, "%s", s)
		assert.Equal(c, health, s.Health, "%s", s)
	}, timeout, poll, "Application %s synced to %.12s and %s", name, revision, health)
	return s
}
