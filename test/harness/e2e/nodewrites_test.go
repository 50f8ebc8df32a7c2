//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kubectlResult runs kubectl against the local cluster and returns its output and
// error, for a write the test expects to be refused.
func kubectlResult(args ...string) (string, error) {
	out, err := exec.Command(filepath.Join(root, "bin", "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// TestControllerUncordonsOnlyItsOwnCordon: with the chart's node policy in force,
// the controller's ServiceAccount cannot uncordon a node someone else cordoned
// (`kubectl cordon`, then `kubectl --as=<the controller> uncordon`), nor make that
// cordon look like its own by adding its mark first; it still uncordons the node it
// cordoned itself, which carries the mark.
func TestControllerUncordonsOnlyItsOwnCordon(t *testing.T) {
	ctx := context.Background()
	system := namespace(t, "e2e-nodewrites")
	controllerSA, _ := installAdmission(t, "nodewrites", system, map[string]any{
		"trident":           map[string]any{"namespace": tridentNS},
		"requestNamespaces": []any{system},
		"requestNamespace":  map[string]any{"create": false},
	})
	user := "system:serviceaccount:" + system + ":" + controllerSA
	asController := []string{"--as", user, "--as-group", "system:serviceaccounts", "--as-group", "system:serviceaccounts:" + system}
	controller := impersonate(t, user, "system:serviceaccounts", "system:serviceaccounts:"+system)
	name := extraNode(t, "e2e-nodewrites", false)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	const refusal = "the controller's ServiceAccount may not uncordon node "

	// Someone else's cordon: an administrator's kubectl cordon.
	kubectl(t, "", "cordon", name)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := mergePatch(ctx, controller, node, map[string]any{"spec": map[string]any{"unschedulable": nil}})
		if err == nil {
			kubectl(t, "", "cordon", name) // the policy was not in force yet: cordon again
		}
		require.Error(c, err, "the controller uncordoned someone else's cordon")
		assert.Contains(c, err.Error(), refusal+name)
	}, 60*time.Second, poll, "the node policy refuses the controller's uncordon of someone else's cordon")

	// kubectl uncordon prints a refused patch ("error: unable to uncordon node") but
	// exits 0, so the refusal is read from its output and from the node itself.
	out, _ := kubectlResult(append(asController, "uncordon", name)...)
	assert.Contains(t, out, refusal+name+": it carries no annotation remediator.io/cordoned-by", "kubectl uncordon as the controller")
	out, err := kubectlResult(append(asController, "annotate", "node", name, "remediator.io/cordoned-by="+system+"/rr-1")...)
	require.Error(t, err, "the controller marked someone else's cordon as its own:\n%s", out)
	assert.Contains(t, out, "may add the annotation remediator.io/cordoned-by to node "+name+" only in the write that cordons it")
	got := &corev1.Node{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(node), got))
	assert.True(t, got.Spec.Unschedulable, "the administrator's cordon stays")
	assert.NotContains(t, got.Annotations, "remediator.io/cordoned-by", "the node carries the controller's mark")

	// The controller's own cordon, with its mark: its uncordon is allowed.
	kubectl(t, "", "uncordon", name)
	require.NoError(t, mergePatch(ctx, controller, node, map[string]any{
		"spec":     map[string]any{"unschedulable": true},
		"metadata": map[string]any{"annotations": map[string]any{"remediator.io/cordoned-by": system + "/rr-1"}},
	}), "the controller cordons the node, with its mark")
	out, err = kubectlResult(append(asController, "uncordon", name)...)
	require.NoError(t, err, "kubectl --as=%s uncordon %s of its own cordon:\n%s", user, name, out)
	require.NoError(t, mergePatch(ctx, controller, node, map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{"remediator.io/cordoned-by": nil}},
	}), "the controller removes its mark")
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(node), got))
	assert.False(t, got.Spec.Unschedulable, "the controller's own cordon is undone")
	assert.NotContains(t, got.Annotations, "remediator.io/cordoned-by", "the mark is gone")
}
