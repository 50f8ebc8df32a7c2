package chart_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// operatorExample is the argocd-operator form of the health check in the remediation
// repository template, from the chart's directory (TestMain runs there).
const operatorExample = "../../examples/remediation-repo/argocd/argocd-operator.yaml"

// argoCDOperatorResource is the part of the argocd-operator's ArgoCD (argoproj.io/v1beta1)
// that the example sets; UnmarshalStrict refuses any other field, so a misspelt one
// (resourceHealthCheck, lua) fails here instead of being ignored by the operator.
type argoCDOperatorResource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		ResourceHealthChecks []struct {
			Group string `json:"group"`
			Kind  string `json:"kind"`
			Check string `json:"check"`
		} `json:"resourceHealthChecks"`
	} `json:"spec"`
}

// TestArgoCDOperatorHealthCheckIsTheShippedOne: the ArgoCD resource's
// spec.resourceHealthChecks entry for RemediationRequest is byte for byte health.lua,
// and so argocd-cm.yaml's value: the two ways to install the check never drift apart.
func TestArgoCDOperatorHealthCheckIsTheShippedOne(t *testing.T) {
	script := readFile(t, filepath.Join(argoCDDir, "health.lua"))
	var cm corev1.ConfigMap
	require.NoError(t, yaml.UnmarshalStrict([]byte(readFile(t, filepath.Join(argoCDDir, "argocd-cm.yaml"))), &cm), "argocd-cm.yaml")
	require.True(t, cm.Data[healthKey] == script, "argocd-cm.yaml's check differs from health.lua (TestArgoCDConfigMapEmbedsHealthScript)")

	var argocd argoCDOperatorResource
	require.NoError(t, yaml.UnmarshalStrict([]byte(readFile(t, operatorExample)), &argocd), operatorExample)
	assert.Equal(t, "argoproj.io/v1beta1", argocd.APIVersion, "apiVersion")
	assert.Equal(t, "ArgoCD", argocd.Kind, "kind")
	var checks []string
	for _, c := range argocd.Spec.ResourceHealthChecks {
		// The operator writes the key resource.customizations.health.<group>_<kind>.
		if "resource.customizations.health."+c.Group+"_"+c.Kind == healthKey {
			checks = append(checks, c.Check)
		}
	}
	require.Len(t, checks, 1, "%s: want exactly one resourceHealthChecks entry for group remediator.io, kind RemediationRequest", operatorExample)
	// assert.True, not Equal: the whole script twice would bury the first difference.
	assert.True(t, checks[0] == script, "%s's check differs from health.lua; copy health.lua into it, indented by eight spaces. First difference %s",
		operatorExample, firstDifference(checks[0], script))
	assert.True(t, checks[0] == cm.Data[healthKey], "%s's check differs from argocd-cm.yaml's", operatorExample)
}
