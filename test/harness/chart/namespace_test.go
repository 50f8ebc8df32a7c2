package chart_test

// This file owns the request namespaces the chart creates (requestNamespace.create).

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func namespaces(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			out = append(out, o.GetName())
		}
	}
	return out
}

// TestRequestNamespace: a fresh install has the namespace requests go to, so that
// `scan -o yaml | kubectl apply -f -` works, and uninstalling keeps it (and the
// requests in it).
func TestRequestNamespace(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		objs := render(t, nil)
		require.Equal(t, []string{"remediator"}, namespaces(objs), "want the default request namespace")
		ns := typed[corev1.Namespace](t, find(objs, "Namespace", "", "remediator"))
		assert.Equal(t, "keep", ns.Annotations["helm.sh/resource-policy"], "uninstall must not delete the requests")
		assert.Equal(t, "requests", ns.Labels["app.kubernetes.io/component"])
		assert.Equal(t, "Namespace", objs[0].GetKind(), "Helm installs Namespaces first")
	})
	t.Run("disabled", func(t *testing.T) {
		assert.Empty(t, namespaces(render(t, map[string]any{"requestNamespace": map[string]any{"create": false}})))
	})
	t.Run("every listed namespace", func(t *testing.T) {
		objs := render(t, map[string]any{"requestNamespaces": []any{"team-a", "team-b"}})
		assert.Equal(t, []string{"team-a", "team-b"}, namespaces(objs))
	})
	t.Run("not the release namespace", func(t *testing.T) {
		// helm install --create-namespace makes it; a second owner would conflict.
		objs := render(t, map[string]any{"requestNamespaces": []any{namespace, "team-a"}})
		assert.Equal(t, []string{"team-a"}, namespaces(objs))
	})
	t.Run("every namespace", func(t *testing.T) {
		assert.Empty(t, namespaces(render(t, map[string]any{"watchAllNamespaces": true})))
	})
}
