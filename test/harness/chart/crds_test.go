package chart_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	chart "github.com/remediator/remediator/charts/remediator"
)

// The CRD is a template, so that `helm upgrade` updates it (Helm installs crds/ once and
// never again), rendered from the generated file the controller's own code embeds.
func TestCRDsAreTemplated(t *testing.T) {
	var generated apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.Unmarshal(chart.RemediationRequestCRD, &generated))

	t.Run("default: installed, upgraded and kept", func(t *testing.T) {
		crd := typed[apiextensionsv1.CustomResourceDefinition](t, find(render(t, nil), "CustomResourceDefinition", "", generated.Name))
		assert.Equal(t, generated.Spec, crd.Spec, "the rendered CRD is the generated one")
		assert.Equal(t, "keep", crd.Annotations["helm.sh/resource-policy"], "uninstall must not delete every request")
		assert.Equal(t, generated.Annotations["controller-gen.kubebuilder.io/version"], crd.Annotations["controller-gen.kubebuilder.io/version"])
	})
	t.Run("keep off", func(t *testing.T) {
		crd := typed[apiextensionsv1.CustomResourceDefinition](t, find(render(t, map[string]any{"crds": map[string]any{"keep": false}}), "CustomResourceDefinition", "", generated.Name))
		assert.NotContains(t, crd.Annotations, "helm.sh/resource-policy")
	})
	t.Run("disabled", func(t *testing.T) {
		for _, o := range render(t, map[string]any{"crds": map[string]any{"enabled": false}}) {
			assert.NotEqual(t, "CustomResourceDefinition", o.GetKind(), "crds.enabled=false renders %s", ref(o))
		}
	})
}
