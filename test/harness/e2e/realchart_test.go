//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/cluster"
	"github.com/remediator/remediator/test/gitrepo"
)

// The controller's image built by `make image` is imported into each of the local
// cluster's real nodes (`make cluster REAL_NODES=N`).
const (
	realChartImage  = "remediator.local/remediator"
	realChartTag    = "latest"
	leaderElection  = "remediator.remediator.io" // the chart's leaderElectionID
	realNodesEnvVar = "E2E_REAL_NODES"
)

// readyRealNodes returns the local cluster's Ready real nodes and whether there are at
// least want of them. Fewer fails the test when E2E_REAL_NODES is set (`make
// test-e2e` sets it and brings the cluster up with REAL_NODES): a suite that must
// prove something on real kubelets may not pass without them. Otherwise the caller
// skips, or runs its kwok-only variant.
func readyRealNodes(t *testing.T, want int) ([]string, bool) {
	t.Helper()
	ctx := context.Background()
	names, err := cluster.RealNodes(ctx, clientset(t))
	require.NoError(t, err)
	var ready []string
	for _, name := range names {
		n := &corev1.Node{}
		require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: name}, n))
		if nodeReady(n) {
			ready = append(ready, name)
		}
	}
	if len(ready) >= want {
		return ready, true
	}
	if v := os.Getenv(realNodesEnvVar); v != "" {
		require.Failf(t, "real nodes missing", "%s=%s but the cluster has %d Ready node(s) labelled %s=true (%v), want %d: run `make cluster REAL_NODES=2`",
			realNodesEnvVar, v, len(ready), cluster.RealNodeLabel, ready, want)
	}
	return ready, false
}

// apiServerForPods is where a pod on a real node reaches the API server: the address
// and port of the `kubernetes` Service's endpoints, which kube-proxy would forward
// the Service's ClusterIP to. The local cluster runs no kube-proxy, so the pods are
// given these directly (KUBERNETES_SERVICE_HOST and _PORT, through the chart's
// extraEnv); the address is this machine's, on which the API server listens and
// which its serving certificate names.
func apiServerForPods(t *testing.T) (host, port string) {
	t.Helper()
	list := &discoveryv1.EndpointSliceList{}
	require.NoError(t, k8s.List(context.Background(), list, client.InNamespace(metav1.NamespaceDefault),
		client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}))
	for _, s := range list.Items {
		for _, p := range s.Ports {
			if p.Port == nil || ptr.Deref(p.Name, "") != "https" {
				continue
			}
			for _, e := range s.Endpoints {
				if len(e.Addresses) > 0 {
					return e.Addresses[0], strconv.Itoa(int(*p.Port))
				}
			}
		}
	}
	require.FailNow(t, "the kubernetes Service has no https endpoint", "%+v", list.Items)
	return "", ""
}

// realChartValues are what `helm install` needs on the local cluster's real nodes
// besides the chart's defaults: the image `make image` built and the bring-up
// imported into each node (there is no registry to pull from), the real nodes for
// both pods, and the API server's address for both (no kube-proxy). Nothing else
// differs from a default install: two replicas electing a leader, the default probes,
// ports, security context and HTTPS metrics.
//
// No hostNetwork: the real nodes share this machine's network namespace, so two
// replicas on the host network would bind the same metrics and probe ports (and
// report the host's name as their leader identity). On the nodes' pod network each
// pod has its own IP and ports, as on any cluster, and reaches this machine's
// address through its bridge.
func realChartValues(t *testing.T) map[string]any {
	t.Helper()
	host, port := apiServerForPods(t)
	env := []any{
		map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": host},
		map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": port},
	}
	return map[string]any{
		"image":        map[string]any{"repository": realChartImage, "tag": realChartTag, "pullPolicy": string(corev1.PullNever)},
		"nodeSelector": map[string]any{cluster.RealNodeLabel: "true"},
		"extraEnv":     env,
		"sync":         map[string]any{"extraEnv": env},
	}
}

// mergeValues merges over onto base, maps key by key, as Helm merges --values files.
func mergeValues(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		b, okb := out[k].(map[string]any)
		o, oko := v.(map[string]any)
		if okb && oko {
			out[k] = mergeValues(b, o)
			continue
		}
		out[k] = v
	}
	return out
}

// realRelease is the chart installed on the real nodes.
type realRelease struct {
	name, namespace string
	// sa is the controller's ServiceAccount, fullname the release's full name.
	sa, fullname string
}

// installOnRealNodes installs the chart into ns with realChartValues and values,
// and waits until its Deployments are available: the kubelets pulled nothing, started
// the containers and ran the readiness probes.
func installOnRealNodes(t *testing.T, release, ns string, values map[string]any) realRelease {
	t.Helper()
	sa := installChartWith(t, release, ns, mergeValues(realChartValues(t), values))
	return realRelease{name: release, namespace: ns, sa: sa, fullname: sa}
}

// controllerPods lists the release's controller pods that are not being deleted.
func (r realRelease) controllerPods(t require.TestingT) []corev1.Pod { return r.pods(t, "controller") }

// pods lists the release's pods of a component (controller, sync) that are not
// being deleted.
func (r realRelease) pods(t require.TestingT, component string) []corev1.Pod {
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(context.Background(), pods, client.InNamespace(r.namespace), client.MatchingLabels{
		"app.kubernetes.io/instance": r.name, "app.kubernetes.io/component": component}))
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// leader is the pod holding the leader-election Lease. Its holderIdentity is
// controller-runtime's: the pod's hostname, which is the pod's name, then "_" and a
// UUID of the process.
func (r realRelease) leader(t require.TestingT) string {
	l := &coordinationv1.Lease{}
	require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: r.namespace, Name: leaderElection}, l))
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	name, _, ok := strings.Cut(holder, "_")
	require.True(t, ok, "holderIdentity %q is not <hostname>_<uuid>", holder)
	return name
}

// podLogs returns the log of a pod's container through the API server and the pod's
// kubelet, as `kubectl logs` does.
func podLogs(t require.TestingT, ns, pod, container string) string {
	cs, err := kubernetes.NewForConfig(chartRestConfig(t))
	require.NoError(t, err)
	out, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
	require.NoError(t, err, "logs of %s/%s", ns, pod)
	return string(out)
}

func chartRestConfig(t require.TestingT) *rest.Config {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	return cfg
}

// controllerLogs concatenates the logs of the release's controller pods.
func (r realRelease) controllerLogs(t require.TestingT) string {
	var b strings.Builder
	for _, p := range r.controllerPods(t) {
		fmt.Fprintf(&b, "==> %s (%s)\n%s\n", p.Name, p.Spec.NodeName, podLogs(t, r.namespace, p.Name, "controller"))
	}
	return b.String()
}

// podToken returns a token of the pod's ServiceAccount bound to the pod, as the
// token the kubelet projects into it is: the API server sees the ServiceAccount and
// the pod's name and UID in the user's extra fields.
func podToken(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	tr, err := clientset(t).CoreV1().ServiceAccounts(pod.Namespace).CreateToken(context.Background(), pod.Spec.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// tokenClientset is a clientset that authenticates with token only.
func tokenClientset(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(chartRestConfig(t))
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return cs
}

// gitWriter is Argo CD's application controller (the chart's default Git writer),
// impersonated, with the release's edit role in ns: a request written as it is one
// Git applied, which the chart's admission policy lets through.
func gitWriter(t *testing.T, ns, fullname string) client.Client {
	t.Helper()
	bind(t, ns, fullname+"-edit", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "argocd", Name: "argocd-application-controller"})
	return impersonate(t, argoCDUser, "system:serviceaccounts", "system:serviceaccounts:argocd")
}

// createRequest creates a request as c; RBAC bindings take a moment to reach the
// authorizer, so a Forbidden is retried for a while.
func createRequest(t *testing.T, c client.Client, ns string, spec v1alpha1.RemediationRequestSpec) types.NamespacedName {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "rr-"}, Spec: spec}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, c.Create(context.Background(), rr))
	}, 30*time.Second, poll, "creating a request in %s", ns)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), rr) })
	return client.ObjectKeyFromObject(rr)
}

// serveGitOn serves the bare origin over Git's smart HTTP on ip, behind basic auth,
// as gitrepo.ServeSmartHTTP does on 127.0.0.1, which a pod (in its own network
// namespace) cannot reach; ip is this machine's address that the pods reach.
func serveGitOn(t *testing.T, repo *gitrepo.Repo, ip, user, password string) string {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err, "the smart-HTTP test server needs the git binary")
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	require.NoError(t, err, "listening on %s, where the pods reach this machine", ip)
	backend := &cgi.Handler{Path: gitBin, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(repo.Bare), "GIT_HTTP_EXPORT_ALL=1"}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, req)
	}))
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/" + filepath.Base(repo.Bare)
}

// scrapeSecure gets https://addr/metrics with bearer (none if empty), skipping the
// verification of the controller's self-signed certificate as the chart's
// ServiceMonitor does.
func scrapeSecure(t require.TestingT, addr, bearer string) (int, string) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the controller's self-signed certificate
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	require.NoError(t, err)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// metricsEndpoints are the ready endpoints of the release's metrics Service, as
// Prometheus' endpoints discovery finds them: pod name -> ip:port.
func (r realRelease) metricsEndpoints(t require.TestingT) map[string]string {
	list := &discoveryv1.EndpointSliceList{}
	require.NoError(t, k8s.List(context.Background(), list, client.InNamespace(r.namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: r.fullname + "-metrics"}))
	out := map[string]string{}
	for _, s := range list.Items {
		var port int32
		for _, p := range s.Ports {
			if ptr.Deref(p.Name, "") == "http-metrics" && p.Port != nil {
				port = *p.Port
			}
		}
		for _, e := range s.Endpoints {
			if !ptr.Deref(e.Conditions.Ready, false) || e.TargetRef == nil || len(e.Addresses) == 0 || port == 0 {
				continue
			}
			out[e.TargetRef.Name] = net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(port)))
		}
	}
	return out
}

// TestChartOnRealNodes installs the chart as a user would (its defaults, plus the
// image, the nodes and the API server's address this cluster needs) with the sync
// agent on, onto real kubelets (rendered by Helm's engine as `helm install` renders
// it, and created as installChartWith does): both controller replicas and the sync
// agent run from the image and pass the kubelet's probes; one replica leads; a
// request committed to Git is applied by the sync pod and decided and carried out
// by the leader pod; the metrics are served over HTTPS to a token the chart's
// metrics-reader role allows and to no one else; and deleting the leader pod hands
// the Lease to another replica, which then decides the next request.
func TestChartOnRealNodes(t *testing.T) {
	nodes, ok := readyRealNodes(t, 2)
	if !ok {
		t.Skipf("needs 2 Ready real nodes (make cluster REAL_NODES=2; found %v); set %s to make their absence a failure", nodes, realNodesEnvVar)
	}
	ctx := context.Background()
	start := time.Now()
	const release = "realchart"
	system := namespace(t, "e2e-realchart-system")
	apps := namespace(t, "e2e-realchart-apps")
	// The chart creates it (requestNamespace.create, a default), and deletes it at cleanup.
	requestNS := "e2e-realchart-" + rand.String(5)

	// A holder that was powered off: its out-of-service taint makes it Shutdown, and
	// the request to release its Lease is allowed without a Lease-age gate.
	down := extraNode(t, "e2e-realchart-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	pv, _ := luksVolume(t, apps, down, 20*time.Minute, 1)
	repo := gitrepo.New(t)
	repo.Write("requests/release-lease-shutdown.yaml", shutdownRequestYAML(requestNS, pv, down, "INC-5123"))
	commit := repo.Commit("Release the stuck Lease of " + pv)
	apiHost, _ := apiServerForPods(t)
	const user, password = "sync-bot", "glpat-e2e-realchart"
	url := serveGitOn(t, repo, apiHost, user, password)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: "remediation-repo"},
		StringData: map[string]string{"password": password}})

	rel := installOnRealNodes(t, release, system, map[string]any{
		"requestNamespaces": []any{requestNS},
		// serveGitOn speaks plain HTTP, which the agent refuses without allowInsecureTransport.
		"sync": map[string]any{"enabled": true, "repo": url, "revision": "main", "allowInsecureTransport": true,
			"credentials": map[string]any{"secretName": "remediation-repo", "type": "https", "username": user}},
	})
	t.Logf("installed and available after %s", time.Since(start).Round(time.Second))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller logs:\n%s", tail(rel.controllerLogs(t), 20000))
			for _, p := range rel.pods(t, "sync") {
				t.Logf("sync log of %s:\n%s", p.Name, tail(podLogs(t, system, p.Name, "sync"), 5000))
			}
		}
	})

	// Both replicas run on real nodes from the local image, Ready by the kubelet's
	// probes; so does the sync agent.
	pods := rel.controllerPods(t)
	require.Len(t, pods, 2, "controller pods")
	for _, p := range append(pods, syncPod(t, rel)) {
		assert.Contains(t, nodes, p.Spec.NodeName, "pod %s is not on a real node", p.Name)
		assert.True(t, chartPodReady(&p), "pod %s is not Ready: %+v", p.Name, p.Status.Conditions)
		if assert.Len(t, p.Status.ContainerStatuses, 1, "pod %s containers", p.Name) {
			cs := p.Status.ContainerStatuses[0]
			assert.Equal(t, realChartImage+":"+realChartTag, cs.Image, "pod %s image", p.Name)
			assert.NotEmpty(t, cs.ContainerID, "pod %s: no container ID, no container ran", p.Name)
			assert.True(t, strings.HasPrefix(cs.ContainerID, "containerd://"), "pod %s: container %s not run by containerd (a kwok pod?)", p.Name, cs.ContainerID)
			assert.NotNil(t, cs.State.Running, "pod %s: container state %+v", p.Name, cs.State)
		}
		t.Logf("pod %s on %s, IP %s, container %s", p.Name, p.Spec.NodeName, p.Status.PodIP, p.Status.ContainerStatuses[0].ContainerID)
	}
	for _, p := range pods {
		c := p.Spec.Containers[0]
		require.NotNil(t, c.ReadinessProbe, "the chart's readiness probe")
		assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, "the chart's readiness probe")
	}

	// One leader: its log says it acquired the Lease; the other's does not.
	var leaderPod string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		leaderPod = rel.leader(c)
		assert.True(c, slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == leaderPod }), "the Lease holder %s is none of %s's pods", leaderPod, release)
	}, 60*time.Second, poll, "a leader among the pods")
	standbyPod := pods[0].Name
	if standbyPod == leaderPod {
		standbyPod = pods[1].Name
	}
	t.Logf("leader %s, standby %s", leaderPod, standbyPod)

	// The request committed to Git: the sync pod applies it, the leader pod decides
	// and runs it.
	key := types.NamespacedName{Namespace: requestNS, Name: "release-lease-shutdown"}
	rr := waitPhase(t, key, 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
	require.Equal(t, "node-shutdown", string(decision(t, rr).Playbook), describe(rr))
	assert.False(t, leaseExists(t, pv), "the Lease still exists after the request Succeeded")
	assert.Equal(t, commit, rr.Annotations["remediator.io/git-commit"], "the request's commit: applied by the sync agent")
	t.Logf("request %s %s after %s: %s", key, rr.Status.Phase, time.Since(start).Round(time.Second), decision(t, rr).Message)
	assert.True(t, logLine(podLogs(t, system, syncPod(t, rel).Name, "sync"), `"Applied"`, `request="`+key.String()+`"`, `commit="`+commit+`"`),
		"the sync pod's log does not record the apply")
	leaderLog, standbyLog := podLogs(t, system, leaderPod, "controller"), podLogs(t, system, standbyPod, "controller")
	assert.Contains(t, leaderLog, acquiredLease, "the leader's log")
	assert.True(t, logLine(leaderLog, `"Decided"`, key.Name, `playbook="node-shutdown"`),
		"the leader pod's log has no decision on %s:\n%s", key, tail(leaderLog, 4000))
	for _, acted := range []string{acquiredLease, "Decided", key.Name} {
		assert.NotContains(t, standbyLog, acted, "the standby pod acted while %s led", leaderPod)
	}

	// Metrics over HTTPS, from each pod behind the metrics Service, to a token the
	// chart's metrics-reader ClusterRole is bound to (as a user binds Prometheus).
	const prometheus, stranger = "prometheus", "stranger"
	for _, sa := range []string{prometheus, stranger} {
		create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: sa}})
	}
	create(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-realchart-metrics-"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: rel.fullname + "-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: system, Name: prometheus}}})
	token := func(sa string) string {
		tr, err := clientset(t).CoreV1().ServiceAccounts(system).CreateToken(ctx, sa,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}
	reader, strangerToken := token(prometheus), token(stranger)
	var endpoints map[string]string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		endpoints = rel.metricsEndpoints(c)
		assert.Len(c, endpoints, 2, "ready endpoints of %s-metrics", rel.fullname)
	}, 30*time.Second, poll, "the metrics Service's endpoints")
	const lr = string(v1alpha1.RemediationReleaseLUKSLease)
	for pod, addr := range endpoints {
		var body string
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var code int
			code, body = scrapeSecure(c, addr, reader)
			assert.Equal(c, http.StatusOK, code, body)
		}, 30*time.Second, poll, "scraping %s (%s) with the metrics reader's token", pod, addr)
		var parser expfmt.TextParser
		families, err := parser.TextToMetricFamilies(strings.NewReader(body))
		require.NoError(t, err, "the metrics of %s", pod)
		assert.NotNil(t, families["remediator_build_info"], "%s: no remediator_build_info", pod)
		master, _ := metricValue(families, "leader_election_master_status", map[string]string{"name": leaderElection})
		succeeded, _ := metricValue(families, "remediator_requests_total", map[string]string{"remediation": lr, "outcome": "Succeeded"})
		if pod == leaderPod {
			assert.Equal(t, float64(1), master, "%s (the leader): leader_election_master_status", pod)
			assert.Equal(t, float64(1), succeeded, "%s (the leader): remediator_requests_total Succeeded", pod)
		} else {
			assert.Equal(t, float64(0), master, "%s (the standby): leader_election_master_status", pod)
			assert.Equal(t, float64(0), succeeded, "%s (the standby): remediator_requests_total Succeeded", pod)
		}
		t.Logf("scraped https://%s/metrics (%s) with the metrics reader's token: %d bytes, leader_election_master_status %v, requests Succeeded %v",
			addr, pod, len(body), master, succeeded)
		code, _ := scrapeSecure(t, addr, "")
		assert.Equal(t, http.StatusUnauthorized, code, "%s: no token", pod)
		code, _ = scrapeSecure(t, addr, strangerToken)
		assert.Equal(t, http.StatusForbidden, code, "%s: a token without get on /metrics", pod)
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			_ = resp.Body.Close()
			assert.NotEqual(t, http.StatusOK, resp.StatusCode, "%s: plain-HTTP metrics", pod)
		}
	}

	// Failover: delete the leader pod (SIGTERM, its grace period). Once its Lease
	// expires another replica takes it: the standby, or the pod the Deployment
	// started in its place, whichever asks first. The new leader decides the next
	// request, which Argo CD (the default Git writer) applies; the other live replica
	// does not.
	killed := time.Now()
	require.NoError(t, k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: leaderPod}}))
	var newLeader string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		newLeader = rel.leader(c)
		require.NotEqual(c, leaderPod, newLeader, "the Lease holder")
		assert.True(c, slices.ContainsFunc(rel.controllerPods(c), func(p corev1.Pod) bool { return p.Name == newLeader }),
			"the Lease holder %s is none of the live pods", newLeader)
	}, 60*time.Second, poll, "another replica taking the Lease over from %s", leaderPod)
	role := "the standby"
	if newLeader != standbyPod {
		role = "the deleted pod's replacement"
	}
	t.Logf("%s (%s) took the Lease over %s after %s was deleted", newLeader, role, time.Since(killed).Round(time.Second), leaderPod)
	down2 := extraNode(t, "e2e-realchart-down", false, corev1.Taint{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	pv2, _ := luksVolume(t, apps, down2, 20*time.Minute, 1)
	key2 := createRequest(t, gitWriter(t, requestNS, rel.fullname), requestNS, v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{PersistentVolume: pv2},
		Reason: down2 + " was powered off too (INC-5124)",
	})
	rr = waitPhase(t, key2, 60*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, describe(rr))
	assert.False(t, leaseExists(t, pv2), "the second Lease still exists after its request Succeeded")
	for _, p := range rel.controllerPods(t) {
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting != nil {
			continue // not started yet: it cannot have acted
		}
		l := podLogs(t, system, p.Name, "controller")
		if p.Name == newLeader {
			assert.Contains(t, l, acquiredLease, "the new leader's log")
			assert.True(t, logLine(l, `"Decided"`, key2.Name), "the new leader's log has no decision on %s:\n%s", key2, tail(l, 4000))
			continue
		}
		for _, acted := range []string{acquiredLease, "Decided"} {
			assert.NotContains(t, l, acted, "%s acted while %s led", p.Name, newLeader)
		}
	}
	// Both replicas Ready again on the real nodes, one leading.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		now := rel.controllerPods(c)
		assert.Len(c, now, 2, "controller pods")
		for _, p := range now {
			assert.True(c, chartPodReady(&p), "pod %s Ready", p.Name)
			assert.Contains(c, nodes, p.Spec.NodeName, "pod %s node", p.Name)
		}
	}, 60*time.Second, poll, "two Ready replicas again")
	t.Logf("done after %s", time.Since(start).Round(time.Second))
}

// syncPod is the release's sync agent pod.
func syncPod(t require.TestingT, r realRelease) corev1.Pod {
	live := r.pods(t, "sync")
	require.Len(t, live, 1, "sync pods")
	return live[0]
}

func chartPodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
