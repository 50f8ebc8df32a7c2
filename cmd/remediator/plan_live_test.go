package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/testenv"
)

// writeKubeconfig writes a kubeconfig for an envtest rest.Config, as an operator's
// read-only kubeconfig would be passed to plan.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, p))
	return p
}

// liveWorld creates cluster objects the way kubelet, kube-controller-manager and
// Trident would leave them; envtest runs no controllers, so status is written directly.
type liveWorld struct {
	t *testing.T
	c client.Client
}

func (w *liveWorld) create(obj client.Object) {
	w.t.Helper()
	ctx := context.Background()
	var status func()
	switch o := obj.(type) {
	case *corev1.Node:
		s := o.Status
		status = func() { o.Status = s }
	case *corev1.Pod:
		s := o.Status
		status = func() { o.Status = s }
	}
	if err := w.c.Create(ctx, obj); !apierrors.IsAlreadyExists(err) {
		require.NoError(w.t, err, "creating %T %s", obj, obj.GetName())
	}
	if status != nil {
		status()
		require.NoError(w.t, w.c.Status().Update(ctx, obj), "updating status of %T %s", obj, obj.GetName())
	}
}

func (w *liveWorld) node(name string, ready corev1.ConditionStatus, taints []string, renewedAgo time.Duration) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, k := range taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoExecute})
	}
	// A reporting kubelet posts its heartbeat now; a node that went down 30 minutes
	// ago posted its last one then.
	heartbeat := metav1.Now()
	if ready != corev1.ConditionTrue {
		heartbeat = metav1.NewTime(time.Now().Add(-30 * time.Minute))
	}
	n.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady",
		LastHeartbeatTime: heartbeat, LastTransitionTime: metav1.NewTime(time.Now().Add(-30 * time.Minute)),
	}}
	w.create(n)
	if renewedAgo >= 0 {
		w.create(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-renewedAgo)))},
		})
	}
}

// volume creates a bound LUKS PV and PVC and the Lease Trident retained on it.
func (w *liveWorld) volume(pv, ns, pvc, holder string, retained int) {
	w.create(&corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			ClaimRef:    &corev1.ObjectReference{Namespace: ns, Name: pvc},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "csi.trident.netapp.io", VolumeHandle: pv, VolumeAttributes: map[string]string{"luksEncryption": "true"},
			}},
		},
	})
	w.create(&corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pvc},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
			VolumeName:  pv,
		},
	})
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder),
			AcquireTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-40 * time.Minute)))},
	}
	w.create(l)
	for i := range retained {
		w.create(&corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: fmt.Sprintf("%s.retained-%d", pv, i)},
			InvolvedObject: corev1.ObjectReference{
				APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: "trident", Name: pv, UID: l.UID,
			},
			Reason: "LeaseRetained", Type: corev1.EventTypeWarning, Count: 1,
			Message:        fmt.Sprintf("Retaining lease after failed LUKS operation on %s: cryptsetup luksOpen exited with status 5 (attempt %d)", holder, i+1),
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(),
			Source: corev1.EventSource{Component: "trident-node", Host: holder},
		})
	}
}

// TestPlanLiveFacts runs plan against a real API server (envtest) with a kubeconfig,
// as a PR check with read-only credentials would. It starts its own control plane so
// that the offline tests of this package need none.
func TestPlanLiveFacts(t *testing.T) {
	env := testenv.StartT(t)
	kubeconfig := writeKubeconfig(t, env.Config)
	ctx := context.Background()
	w := &liveWorld{t: t, c: env.Client}
	for _, ns := range []string{"trident", "app", "remediator"} {
		w.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	// The demo's incident A: kwok-node-3 powered off, kwok-node-2 cut off, kwok-node-1
	// healthy with a workload on the stuck volume.
	w.node("kwok-node-3", corev1.ConditionUnknown, []string{v1alpha1.TaintOutOfService, v1alpha1.TaintUnreachable}, -1)
	w.volume("pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30", "app", "archive", "kwok-node-3", 0)
	w.node("kwok-node-2", corev1.ConditionUnknown, []string{v1alpha1.TaintUnreachable}, 3*time.Minute)
	w.volume("pvc-3f1c2a9e-5b7d-4c1e-9a0f-2d6b8e4c7a15", "app", "reports", "kwok-node-2", 0)
	w.node("kwok-node-1", corev1.ConditionTrue, nil, time.Second)
	w.volume("pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e", "app", "data", "kwok-node-1", 3)
	w.create(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web-0"},
		Spec: corev1.PodSpec{NodeName: "kwok-node-1", Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1.4"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	})

	live := func(t *testing.T, args ...string) (string, int) {
		t.Helper()
		out, code, err := runPlanCommand(t, "", append(args, "--kubeconfig", kubeconfig)...)
		t.Logf("exit code %d (err %v), output:\n%s", code, err, out)
		return out, code
	}
	expect := func(t *testing.T, out string, want ...string) {
		t.Helper()
		for _, s := range want {
			assert.Contains(t, out, s)
		}
	}

	t.Run("shutdown holder allowed", func(t *testing.T) {
		out, code := live(t, "-f", planTestdata+"shutdown.yaml")
		assert.Equal(t, 0, code, "exit code")
		expect(t, out, "facts:     live, gathered at",
			"node      kwok-node-3 Shutdown (Ready=Unknown for 30m",
			"taints node.kubernetes.io/out-of-service,node.kubernetes.io/unreachable; no node Lease in kube-node-lease)",
			"ALLOWED by rule holder-shutdown: playbook node-shutdown (phase Running)", "steps:     1. deleteLease")
	})
	t.Run("unreachable holder rejected", func(t *testing.T) {
		out, code := live(t, "-f", planTestdata+"unreachable-not-fenced.yaml")
		assert.Equal(t, ExitPlanRejected, code, "exit code")
		expect(t, out, "node      kwok-node-2 Unreachable", "REJECTED by rule unreachable-not-fenced", "set spec.fencing.confirmed: true")
	})
	t.Run("healthy holder allowed, then waits for a running request on the same Lease", func(t *testing.T) {
		out, code := live(t, "-o", "json", "-f", planTestdata+"dryrun.yaml")
		assert.Equal(t, 0, code, "exit code")
		var r planReport
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		assert.Equal(t, "live", r.FactsSource)
		require.NotEmpty(t, r.Requests)
		res := r.Requests[0]
		assert.Equal(t, "live", res.FactsFrom, "result %+v", res)
		require.NotNil(t, res.Decision, "result %+v", res)
		assert.Equal(t, "healthy-lease-stuck", res.Decision.Rule, "decision %+v", res.Decision)
		require.NotNil(t, res.Facts, "result %+v", res)
		if assert.Len(t, res.Facts.AffectedPods, 1, "affected pods") {
			assert.Equal(t, "web-0", res.Facts.AffectedPods[0].Name, "affected pod")
		}
		require.NotNil(t, res.Facts.Lease, "facts %+v", res.Facts)
		assert.Equal(t, int32(3), res.Facts.Lease.RetainedEvents, "LeaseRetained events")
		assert.Len(t, res.Steps, 5, "steps")

		// Another request on the same Lease is Running, as the controller records it.
		running := &v1alpha1.RemediationRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "release-lease-pvc-75a6fd7f"},
			Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
				Target: v1alpha1.Target{PersistentVolume: "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e"}, Reason: "Pods of app/db are stuck in ContainerCreating"},
		}
		require.NoError(t, env.Client.Create(ctx, running))
		running.Status = v1alpha1.RemediationRequestStatus{Phase: v1alpha1.PhaseRunning, Facts: res.Facts}
		require.NoError(t, env.Client.Status().Update(ctx, running))
		out, code = live(t, "-f", planTestdata+"dryrun.yaml")
		assert.Equal(t, ExitPlanWaiting, code, "exit code")
		expect(t, out, "conflict  remediator/release-lease-pvc-75a6fd7f (Running, on Lease trident/pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e)",
			"WOULD WAIT by rule one-remediation-at-a-time (phase Waiting)")

		// Planning the running request itself: not its own conflict, and the reviewer
		// is told that a change to it would not be decided again.
		obj, spec := validRequest("release-lease-pvc-75a6fd7f")
		spec["target"] = map[string]any{"persistentVolume": "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e"}
		out, code = live(t, "-f", writeYAML(t, t.TempDir(), "self.yaml", obj))
		assert.Equal(t, 0, code, "exit code")
		expect(t, out, "ALLOWED by rule healthy-lease-stuck", "already exists and is Running: applying this file changes its spec but it is not decided again")
	})
	t.Run("API unreachable", func(t *testing.T) {
		cfg := rest.CopyConfig(env.Config)
		cfg.Host = "https://127.0.0.1:1"
		_, code, err := runPlanCommand(t, "", "-f", planTestdata+"shutdown.yaml", "--kubeconfig", writeKubeconfig(t, cfg))
		assert.Equal(t, 1, code, "exit code (err %v)", err)
	})

	// plan's field checks and the API server's admission agree on every refusal.
	t.Run("admission agrees", func(t *testing.T) {
		for i, tc := range invalidRequests {
			obj, spec := validRequest(fmt.Sprintf("admission-%d", i))
			tc.edit(obj, spec)
			err := env.Client.Create(ctx, &unstructured.Unstructured{Object: obj}, client.DryRunAll)
			if !assert.Error(t, err, "%s: the API server accepted it", tc.name) {
				continue
			}
			for _, w := range tc.want[:1] {
				field := strings.SplitN(w, ":", 2)[0]
				assert.ErrorContains(t, err, field, "%s: the API server's error does not name the field", tc.name)
			}
		}
		obj, _ := validRequest("admission-ok")
		assert.NoError(t, env.Client.Create(ctx, &unstructured.Unstructured{Object: obj}, client.DryRunAll), "valid request refused")
	})
}
