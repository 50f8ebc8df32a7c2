package plan

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/internal/cmd/cmdtest"
	"github.com/remediator/remediator/test/testenv"
)

// TestPlanReadsTheAllowedTridentNamespaces: plan takes allowed-trident-namespaces from
// the controller's settings ConfigMap, as the controller takes it from the chart: a
// request naming a namespace it does not list is rejected without a read there, one
// it lists is looked up there.
func TestPlanReadsTheAllowedTridentNamespaces(t *testing.T) {
	env := testenv.StartT(t)
	kubeconfig := cmdtest.WriteKubeconfig(t, env.Config)
	w := &cmdtest.World{T: t, C: env.Client}
	for _, ns := range []string{"trident", "netapp-trident", "tenant", "app", "remediator-system"} {
		w.Create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	w.Node("kwok-node-3", corev1.ConditionUnknown, nil, time.Hour)
	w.Volume("pvc-6a0c2f4e-1b7d-4c9a-8e3f-2d5b7a9c1e40", "app", "archive", "kwok-node-3", 0)
	w.Create(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator-system", Name: "remediator-settings"},
		Data:       map[string]string{"trident-namespace": "trident", "allowed-trident-namespaces": "netapp-trident"},
	})
	request := func(ns string) string {
		return `apiVersion: remediator.io/v1alpha1
kind: RemediationRequest
metadata:
  name: release-lease-kwok-node-3
  namespace: remediator
spec:
  remediation: release-luks-lease
  tridentNamespace: ` + ns + `
  target:
    persistentVolume: pvc-6a0c2f4e-1b7d-4c9a-8e3f-2d5b7a9c1e40
  reason: pods of app/archive hang in ContainerCreating
`
	}
	const from = "(configmap remediator-system/remediator-settings)"

	out, code, err := runPlanCommand(t, request("tenant"), "-f", "-", "--kubeconfig", kubeconfig)
	t.Logf("exit code %d (err %v), output:\n%s", code, err, out)
	assert.Equal(t, 3, code, "exit code")
	assert.Contains(t, out, "           allowed-trident-namespaces=[netapp-trident] "+from+"\n")
	assert.Contains(t, out, `spec.tridentNamespace "tenant" is not a Trident namespace of this controller, which acts only in "netapp-trident", "trident"`)

	out, code, err = runPlanCommand(t, request("netapp-trident"), "-f", "-", "--kubeconfig", kubeconfig)
	t.Logf("exit code %d (err %v), output:\n%s", code, err, out)
	assert.Equal(t, 3, code, "exit code")
	assert.Contains(t, out, "netapp-trident/pvc-6a0c2f4e-1b7d-4c9a-8e3f-2d5b7a9c1e40 does not exist", "the Lease is looked up in the allowed namespace")
}
