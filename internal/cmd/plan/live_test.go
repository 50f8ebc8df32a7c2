package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/internal/cmd/cmdtest"
	"github.com/remediator/remediator/test/testenv"
)

// TestPlanLiveFacts runs plan against a real API server (envtest) with a kubeconfig,
// as a PR check with read-only credentials would. It starts its own control plane so
// that the offline tests of this package need none.
func TestPlanLiveFacts(t *testing.T) {
	env := testenv.StartT(t)
	kubeconfig := cmdtest.WriteKubeconfig(t, env.Config)
	ctx := context.Background()
	w := &cmdtest.World{T: t, C: env.Client}
	for _, ns := range []string{"trident", "app", "remediator"} {
		w.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	// The demo's incident A: kwok-node-3 powered off, kwok-node-2 cut off, kwok-node-1
	// healthy with a workload on the stuck volume.
	w.Node("kwok-node-3", corev1.ConditionUnknown, []string{v1alpha1.TaintOutOfService, v1alpha1.TaintUnreachable}, -1)
	w.Volume("pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30", "app", "archive", "kwok-node-3", 0)
	w.Node("kwok-node-2", corev1.ConditionUnknown, []string{v1alpha1.TaintUnreachable}, 3*time.Minute)
	w.Volume("pvc-3f1c2a9e-5b7d-4c1e-9a0f-2d6b8e4c7a15", "app", "reports", "kwok-node-2", 0)
	w.Node("kwok-node-1", corev1.ConditionTrue, nil, time.Second)
	w.Volume("pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e", "app", "data", "kwok-node-1", 3)
	w.Create(&corev1.Pod{
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
		assert.Equal(t, 3, code, "exit code")
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
		assert.Equal(t, 0, code, "exit code: a request that would wait is valid and starts later")
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
		_, code, err := runPlanCommand(t, "", "-f", planTestdata+"shutdown.yaml", "--kubeconfig", cmdtest.WriteKubeconfig(t, cfg))
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
