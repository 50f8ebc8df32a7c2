package examples_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
)

var templateFlux = filepath.Join(root, "examples", "remediation-repo", "flux")

// The values the template's manifests ship with, and the ones the tests below set
// instead, each in its one place.
const (
	shippedRepoURL    = "https://git.example.com/platform/remediation.git"
	shippedRevision   = "main"
	shippedRequestNS  = "remediator"
	shippedControlNS  = "remediator-system"
	otherRepoURL      = "https://git.other.example/sre/requests.git"
	otherRevision     = "production"
	otherRequestNS    = "storage-remediation"
	otherControllerNS = "storage-system"
)

// kustomizeDir copies the template's directory dir into an in-memory file system,
// applies edit to each of its files by name, and builds it as `kustomize build` (and
// `kubectl apply -k`) does.
func kustomizeDir(t *testing.T, dir string, edit func(name, content string) string) []map[string]any {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		content := string(readFile(t, filepath.Join(dir, e.Name())))
		if edit != nil {
			content = edit(e.Name(), content)
		}
		require.NoError(t, fsys.WriteFile("/repo/"+e.Name(), []byte(content)))
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, "/repo")
	require.NoError(t, err, "kustomize build %s", dir)
	out, err := resMap.AsYaml()
	require.NoError(t, err)
	var objs []map[string]any
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		obj := map[string]any{}
		require.NoError(t, yaml.Unmarshal(doc, &obj))
		objs = append(objs, obj)
	}
	return objs
}

// replaceIn replaces old by new in content, failing when content has no old: an edit
// that no longer applies must not leave the test checking the shipped values.
func replaceIn(t *testing.T, name, content, old, new string) string {
	t.Helper()
	require.Contains(t, content, old, "%s no longer contains what this test edits", name)
	return strings.Replace(content, old, new, 1)
}

// kinds returns each object as "Kind/namespace/name".
func kinds(objs []map[string]any) []string {
	var ids []string
	for _, o := range objs {
		meta, _ := o["metadata"].(map[string]any)
		ids = append(ids, o["kind"].(string)+"/"+str(meta["namespace"])+"/"+str(meta["name"]))
	}
	return ids
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// strict decodes obj into out, refusing a field the type does not have.
func strict(t *testing.T, obj map[string]any, out any) {
	t.Helper()
	data, err := yaml.Marshal(obj)
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(data, out), "%s", data)
}

// TestArgoCDKustomizationBuildsTheFiles: `kustomize build argocd/` as shipped yields the
// AppProject and the Application of a single cluster, exactly as the files are (each
// also applies alone with kubectl apply -f), without the local settings.
func TestArgoCDKustomizationBuildsTheFiles(t *testing.T) {
	objs := kustomizeDir(t, templateArgoCD, nil)
	require.Equal(t, []string{"AppProject/argocd/remediation", "Application/argocd/remediation-requests"}, kinds(objs),
		"the settings are local configuration, not applied")
	for i, file := range []string{"appproject.yaml", "application.yaml"} {
		want := map[string]any{}
		require.NoError(t, yaml.Unmarshal(readFile(t, filepath.Join(templateArgoCD, file)), &want))
		assert.Equal(t, want, objs[i], "kustomize build changes %s", file)
	}
	strict(t, objs[0], &appv1.AppProject{})
	strict(t, objs[1], &appv1.Application{})
}

// TestArgoCDKustomizationSetsEachValueInOnePlace: with Argo CD's namespace changed in
// kustomization.yaml and the repository, branch and namespaces in settings.yaml, every
// manifest (the fleet's and the policies' included) carries the new values and none of
// the shipped ones.
func TestArgoCDKustomizationSetsEachValueInOnePlace(t *testing.T) {
	objs := kustomizeDir(t, templateArgoCD, func(name, content string) string {
		switch name {
		case "kustomization.yaml":
			content = replaceIn(t, name, content, "\nnamespace: argocd\n", "\nnamespace: openshift-gitops\n")
			content = replaceIn(t, name, content, "  # - applicationset.yaml\n", "  - applicationset.yaml\n")
			content = replaceIn(t, name, content, "  # - policies.yaml\n", "  - policies.yaml\n")
		case "settings.yaml":
			content = replaceIn(t, name, content, "repoURL: "+shippedRepoURL+"\n", "repoURL: "+otherRepoURL+"\n")
			content = replaceIn(t, name, content, "revision: "+shippedRevision+"\n", "revision: "+otherRevision+"\n")
			content = replaceIn(t, name, content, "requestNamespace: "+shippedRequestNS+"\n", "requestNamespace: "+otherRequestNS+"\n")
			content = replaceIn(t, name, content, "controllerNamespace: "+shippedControlNS+"\n", "controllerNamespace: "+otherControllerNS+"\n")
		}
		return content
	})
	require.ElementsMatch(t, []string{
		"AppProject/openshift-gitops/remediation", "Application/openshift-gitops/remediation-requests",
		"AppProject/openshift-gitops/remediation-fleet", "ApplicationSet/openshift-gitops/remediation-requests",
		"AppProject/openshift-gitops/remediation-policies", "Application/openshift-gitops/remediation-policies",
	}, kinds(objs))
	all, err := yaml.Marshal(objs)
	require.NoError(t, err)
	for _, shipped := range []*regexp.Regexp{
		regexp.MustCompile(regexp.QuoteMeta(shippedRepoURL)),
		regexp.MustCompile(`(?m)(namespace|[rR]evision|branch): (argocd|` + shippedRevision + `|` + shippedRequestNS + `|` + shippedControlNS + `)$`),
	} {
		assert.NotRegexp(t, shipped, string(all), "a shipped value the settings do not reach")
	}

	for _, o := range objs {
		name := str(o["metadata"].(map[string]any)["name"])
		switch o["kind"] {
		case "AppProject":
			p := &appv1.AppProject{}
			strict(t, o, p)
			assert.Equal(t, []string{otherRepoURL}, p.Spec.SourceRepos, name)
			require.NotEmpty(t, p.Spec.Destinations, name)
			for _, d := range p.Spec.Destinations {
				want := otherRequestNS
				if name == "remediation-policies" {
					want = otherControllerNS
				}
				assert.Equal(t, want, d.Namespace, "%s: %+v", name, d)
			}
		case "Application":
			a := &appv1.Application{}
			strict(t, o, a)
			assert.Equal(t, otherRepoURL, a.Spec.Source.RepoURL, name)
			assert.Equal(t, otherRevision, a.Spec.Source.TargetRevision, name)
			if name == "remediation-policies" {
				assert.Equal(t, otherControllerNS, a.Spec.Destination.Namespace, name)
				require.NotNil(t, a.Spec.Source.Kustomize, name)
				assert.Equal(t, otherControllerNS, a.Spec.Source.Kustomize.Namespace, name)
			} else {
				assert.Equal(t, otherRequestNS, a.Spec.Destination.Namespace, name)
			}
		case "ApplicationSet":
			s := &appv1.ApplicationSet{}
			strict(t, o, s)
			require.Len(t, s.Spec.Generators, 1)
			require.NotNil(t, s.Spec.Generators[0].Git)
			assert.Equal(t, otherRepoURL, s.Spec.Generators[0].Git.RepoURL)
			assert.Equal(t, otherRevision, s.Spec.Generators[0].Git.Revision)
			require.NotNil(t, s.Spec.Template.Spec.Source)
			assert.Equal(t, otherRepoURL, s.Spec.Template.Spec.Source.RepoURL)
			assert.Equal(t, otherRevision, s.Spec.Template.Spec.Source.TargetRevision)
			assert.Equal(t, otherRequestNS, s.Spec.Template.Spec.Destination.Namespace)
		}
	}
}

// TestFluxManifests checks flux/ as far as it can be without Flux's CRDs: the objects
// kustomize builds, the fields Flux's source-controller and kustomize-controller need,
// and that the settings reach them. The Kustomization names no service account, so the
// Git writer is kustomize-controller itself (the chart's admissionPolicy.gitWriters).
func TestFluxManifests(t *testing.T) {
	type gitRepository struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name, Namespace string }
		Spec       struct {
			Interval  string `json:"interval"`
			URL       string `json:"url"`
			Ref       struct{ Branch string }
			Ignore    string         `json:"ignore"`
			SecretRef map[string]any `json:"secretRef"`
		}
	}
	type kustomization struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name, Namespace string }
		Spec       struct {
			Interval           string `json:"interval"`
			RetryInterval      string `json:"retryInterval"`
			Timeout            string `json:"timeout"`
			SourceRef          struct{ Kind, Name, Namespace string }
			Path               string `json:"path"`
			Prune              *bool  `json:"prune"`
			TargetNamespace    string `json:"targetNamespace"`
			Wait               *bool  `json:"wait"`
			ServiceAccountName string `json:"serviceAccountName"`
		}
	}
	check := func(t *testing.T, objs []map[string]any, ns, url, branch, requestNS string) {
		t.Helper()
		require.ElementsMatch(t, []string{"GitRepository/" + ns + "/remediation", "Kustomization/" + ns + "/remediation-requests"}, kinds(objs))
		var repo gitRepository
		var ks kustomization
		for _, o := range objs {
			if o["kind"] == "GitRepository" {
				strict(t, o, &repo)
			} else {
				strict(t, o, &ks)
			}
		}
		assert.Equal(t, "source.toolkit.fluxcd.io/v1", repo.APIVersion)
		assert.NotEmpty(t, repo.Spec.Interval)
		assert.Equal(t, url, repo.Spec.URL)
		assert.Equal(t, branch, repo.Spec.Ref.Branch)
		assert.Equal(t, "/*\n!/requests/\n", repo.Spec.Ignore, "only requests/ is fetched")

		assert.Equal(t, "kustomize.toolkit.fluxcd.io/v1", ks.APIVersion)
		assert.NotEmpty(t, ks.Spec.Interval)
		assert.Equal(t, "GitRepository", ks.Spec.SourceRef.Kind)
		assert.Equal(t, repo.Metadata.Name, ks.Spec.SourceRef.Name)
		assert.Contains(t, []string{"", repo.Metadata.Namespace}, ks.Spec.SourceRef.Namespace)
		assert.Equal(t, "./requests", ks.Spec.Path)
		assert.DirExists(t, filepath.Join(templateFlux, "..", ks.Spec.Path), "the path Flux applies")
		if assert.NotNil(t, ks.Spec.Prune) {
			assert.True(t, *ks.Spec.Prune, "removing a request's file deletes the request")
		}
		assert.Equal(t, requestNS, ks.Spec.TargetNamespace)
		assert.Empty(t, ks.Spec.ServiceAccountName, "the Git writer is kustomize-controller (admissionPolicy.gitWriters)")
	}
	t.Run("as shipped", func(t *testing.T) {
		check(t, kustomizeDir(t, templateFlux, nil), "flux-system", shippedRepoURL, shippedRevision, shippedRequestNS)
	})
	t.Run("with the settings changed", func(t *testing.T) {
		objs := kustomizeDir(t, templateFlux, func(name, content string) string {
			switch name {
			case "kustomization.yaml":
				content = replaceIn(t, name, content, "\nnamespace: flux-system\n", "\nnamespace: gitops\n")
			case "settings.yaml":
				content = replaceIn(t, name, content, "repoURL: "+shippedRepoURL+"\n", "repoURL: "+otherRepoURL+"\n")
				content = replaceIn(t, name, content, "revision: "+shippedRevision+"\n", "revision: "+otherRevision+"\n")
				content = replaceIn(t, name, content, "requestNamespace: "+shippedRequestNS+"\n", "requestNamespace: "+otherRequestNS+"\n")
			}
			return content
		})
		check(t, objs, "gitops", otherRepoURL, otherRevision, otherRequestNS)
	})
}
