package chart_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/policies/kustomized"
	"github.com/remediator/remediator/test/harness/helmchart"
)

// The Argo CD path for policies: the remediation repository template's
// argocd/policies-kustomization.yaml (copied into policies/) generates a ConfigMap,
// argocd/policies.yaml's AppProject admits it and its Application applies it, and the
// chart's policiesConfigMap mounts it. The pieces are in three files and two
// directories; these tests keep their names, namespaces and kinds in agreement.

const templateDir = "../../examples/remediation-repo"

// argoGenerated builds the template's kustomization over the shipped policies, as
// Argo CD would once policies/ is set up as policies/README.md says.
func argoGenerated(t *testing.T) *kustomized.ConfigMap {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	files, err := filepath.Glob("../../policies/*.cue")
	require.NoError(t, err)
	for _, f := range files {
		// The schema is the controller's own: policies/ holds the rules only.
		if filepath.Base(f) == "schema.cue" {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, fsys.WriteFile("/policies/"+filepath.Base(f), data))
	}
	data, err := os.ReadFile(filepath.Join(templateDir, "argocd", "policies-kustomization.yaml"))
	require.NoError(t, err)
	require.NoError(t, fsys.WriteFile("/policies/kustomization.yaml", data))
	cm, err := kustomized.Check(fsys, "/policies", "remediator-policies")
	require.NoError(t, err)
	require.NotNil(t, cm)
	return cm
}

// argoObject is what these tests read of an Application or AppProject.
type argoObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		// AppProject
		SourceRepos  []string `json:"sourceRepos"`
		Destinations []struct {
			Server    string `json:"server"`
			Namespace string `json:"namespace"`
		} `json:"destinations"`
		ClusterResourceWhitelist   []struct{ Group, Kind string } `json:"clusterResourceWhitelist"`
		NamespaceResourceWhitelist []struct {
			Group string `json:"group"`
			Kind  string `json:"kind"`
		} `json:"namespaceResourceWhitelist"`
		// Application
		Project string `json:"project"`
		Source  struct {
			RepoURL   string `json:"repoURL"`
			Path      string `json:"path"`
			Kustomize *struct {
				Namespace string `json:"namespace"`
			} `json:"kustomize"`
		} `json:"source"`
		Destination struct {
			Server    string `json:"server"`
			Namespace string `json:"namespace"`
		} `json:"destination"`
	} `json:"spec"`
}

func readArgo(t *testing.T, file string) map[string]argoObject {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(templateDir, "argocd", file))
	require.NoError(t, err)
	out := map[string]argoObject{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var o argoObject
		require.NoError(t, yaml.Unmarshal([]byte(doc), &o), "%s", file)
		out[o.Kind] = o
	}
	return out
}

// admits is the project check Argo CD makes before it applies an object: the kind
// is whitelisted and the destination is one of the project's (both are literal
// here; Argo CD also allows globs, which these projects do not use).
func admits(p argoObject, group, kind, server, ns string) bool {
	kindOK, destOK := false, false
	for _, w := range p.Spec.NamespaceResourceWhitelist {
		kindOK = kindOK || (w.Group == group && w.Kind == kind)
	}
	for _, d := range p.Spec.Destinations {
		destOK = destOK || (d.Server == server && d.Namespace == ns)
	}
	return kindOK && destOK
}

func TestArgoCDPoliciesPathAgrees(t *testing.T) {
	cm := argoGenerated(t)
	policiesObjs := readArgo(t, "policies.yaml")
	project, app := policiesObjs["AppProject"], policiesObjs["Application"]
	require.NotEmpty(t, project.Metadata.Name)
	require.NotEmpty(t, app.Metadata.Name)

	assert.Equal(t, project.Metadata.Name, app.Spec.Project, "the policies Application is in the policies project")
	assert.Equal(t, "policies", app.Spec.Source.Path, "the Application builds policies/, where the kustomization is copied")
	assert.Contains(t, project.Spec.SourceRepos, app.Spec.Source.RepoURL)
	assert.Empty(t, project.Spec.ClusterResourceWhitelist, "nothing cluster-scoped")
	assert.Equal(t, cm.Namespace, app.Spec.Destination.Namespace)
	if assert.NotNil(t, app.Spec.Source.Kustomize, "the policies Application is explicitly kustomize: no kustomization, no build") {
		assert.Equal(t, cm.Namespace, app.Spec.Source.Kustomize.Namespace)
	}
	assert.True(t, admits(project, "", "ConfigMap", app.Spec.Destination.Server, cm.Namespace),
		"the policies project admits the generated ConfigMap %s", cm)
	assert.Len(t, project.Spec.NamespaceResourceWhitelist, 1, "the policies project admits ConfigMaps only")

	requestsObjs := readArgo(t, "appproject.yaml")
	requests := requestsObjs["AppProject"]
	requestsApp := readArgo(t, "application.yaml")["Application"]
	assert.Equal(t, requestsApp.Spec.Source.RepoURL, app.Spec.Source.RepoURL, "one remediation repository")
	assert.False(t, admits(requests, "", "ConfigMap", requestsApp.Spec.Destination.Server, requestsApp.Spec.Destination.Namespace),
		"the requests project still admits no ConfigMap: one slipped into requests/ is refused")
	assert.NotEqual(t, requests.Metadata.Name, project.Metadata.Name)

	// The chart, installed in the generated ConfigMap's namespace with
	// policiesConfigMap naming it, mounts it as --policies-dir and does not create it.
	objs, err := helmchart.Render(release, cm.Namespace, map[string]any{"policiesConfigMap": cm.Name})
	require.NoError(t, err)
	spec := deployment(t, objs).Spec.Template.Spec
	assert.Contains(t, spec.Containers[0].Args, "--policies-dir="+policiesDir)
	var mounted *corev1.ConfigMapVolumeSource
	for _, v := range spec.Volumes {
		if v.Name == "policies" {
			mounted = v.ConfigMap
		}
	}
	require.NotNil(t, mounted, "the policies volume")
	assert.Equal(t, cm.Name, mounted.Name)
	assert.Nil(t, mounted.Optional, "the pods wait for the ConfigMap rather than start without policies")
	assert.Nil(t, find(objs, "ConfigMap", cm.Namespace, cm.Name), "Argo CD owns the ConfigMap, not the chart")
}

func TestPoliciesConfigMapIsOneSourceOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"with policies", map[string]any{"policiesConfigMap": "remediator-policies", "policies": map[string]any{"p.cue": "package policies\n"}},
			"the controller's policies come from policies and policiesConfigMap: keep one source"},
		{"with sync.policies", map[string]any{"policiesConfigMap": "remediator-policies",
			"sync": map[string]any{"enabled": true, "repo": "https://git.example.com/r.git", "policies": map[string]any{"enabled": true}}},
			"the controller's policies come from sync.policies.enabled and policiesConfigMap: keep one source"},
		{"not a name", map[string]any{"policiesConfigMap": "Remediator_Policies"}, "policiesConfigMap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmchart.Render(release, namespace, tc.values)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
