package examples_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	log "github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"github.com/argoproj/argo-cd/v3/applicationset/controllers/template"
	"github.com/argoproj/argo-cd/v3/applicationset/generators"
	"github.com/argoproj/argo-cd/v3/applicationset/utils"
	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
)

// repoDirectories is what Argo CD's repo-server lists for a remediation repository with
// the fleet layout (every directory, at any depth, as GetDirectories returns them), with
// the ones that must not become clusters: a subdirectory of a cluster's requests, a
// requests directory one level too deep, and the single-cluster requests/.
var repoDirectories = []string{
	".github", ".github/workflows", "argocd", "flux", "facts", "policies", "requests", "examples", "examples/requests", "examples/facts",
	"clusters", "clusters/east", "clusters/east/requests", "clusters/east/requests/sub", "clusters/east/facts",
	"clusters/west", "clusters/west/requests",
	"clusters/north/old/requests", "clusters/requests",
}

// fakeRepos is the repo-server for the git generator: the repository's directories.
type fakeRepos struct{ dirs []string }

func (r fakeRepos) GetFiles(context.Context, string, string, string, string, bool, bool) (map[string][]byte, error) {
	return nil, errors.New("the fleet ApplicationSet uses no files generator")
}

func (r fakeRepos) GetDirectories(context.Context, string, string, string, bool, bool) ([]string, error) {
	return r.dirs, nil
}

// fleet reads argocd/applicationset.yaml: the AppProject and the ApplicationSet.
func fleet(t *testing.T) (*appv1.AppProject, *appv1.ApplicationSet) {
	t.Helper()
	docs := bytes.Split(readFile(t, filepath.Join(templateArgoCD, "applicationset.yaml")), []byte("\n---\n"))
	require.Len(t, docs, 2, "applicationset.yaml: an AppProject and an ApplicationSet")
	proj, appSet := &appv1.AppProject{}, &appv1.ApplicationSet{}
	require.NoError(t, yaml.UnmarshalStrict(docs[0], proj), "applicationset.yaml's AppProject")
	require.NoError(t, yaml.UnmarshalStrict(docs[1], appSet), "applicationset.yaml's ApplicationSet")
	require.Equal(t, "AppProject", proj.Kind)
	require.Equal(t, "ApplicationSet", appSet.Kind)
	return proj, appSet
}

// generate renders the ApplicationSet as Argo CD's ApplicationSet controller does
// (controllers/template.GenerateApplications with its git generator and renderer) on a
// repository holding dirs.
func generate(t *testing.T, dirs []string) ([]appv1.Application, *appv1.AppProject) {
	t.Helper()
	proj, appSet := fleet(t)
	scheme := runtime.NewScheme()
	require.NoError(t, appv1.AddToScheme(scheme))
	// The git generator reads the template's project from the controller's namespace.
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(proj).Build()
	gens := map[string]generators.Generator{"Git": generators.NewGitGenerator(fakeRepos{dirs}, appSet.Namespace)}
	apps, reason, err := template.GenerateApplications(log.NewEntry(log.StandardLogger()), *appSet, gens, &utils.Render{}, c)
	require.NoError(t, err, "generating: %s", reason)
	return apps, proj
}

// generatedApplications renders the ApplicationSet on a repository whose only clusters
// are the given ones.
func generatedApplications(t *testing.T, clusters ...string) []appv1.Application {
	t.Helper()
	var dirs []string
	for _, c := range clusters {
		dirs = append(dirs, "clusters/"+c, "clusters/"+c+"/requests")
	}
	apps, _ := generate(t, dirs)
	require.Len(t, apps, len(clusters))
	return apps
}

// TestFleetApplicationSetOneApplicationPerCluster: with Argo CD's own generator and
// templating, clusters/<c>/requests becomes exactly one Application, which syncs that
// directory alone (not recursively) to the cluster named <c> (by name, in namespace
// remediator) and which the fleet's AppProject permits; no other directory (a
// subdirectory of a cluster's requests, a requests directory at another depth) becomes a
// cluster.
func TestFleetApplicationSetOneApplicationPerCluster(t *testing.T) {
	apps, proj := generate(t, repoDirectories)
	byCluster := map[string]appv1.Application{}
	for _, a := range apps {
		byCluster[a.Spec.Destination.Name] = a
	}
	require.Len(t, apps, 2, "one Application per clusters/*/requests, got %v", names(apps))
	require.Len(t, byCluster, 2, "two Applications for the same cluster: %v", names(apps))
	for _, cluster := range []string{"east", "west"} {
		a, ok := byCluster[cluster]
		if !assert.True(t, ok, "no Application for cluster %s: %v", cluster, names(apps)) {
			continue
		}
		assert.Equal(t, "remediation-requests-"+cluster, a.Name)
		assert.Equal(t, "argocd", a.Namespace)
		src := a.Spec.GetSource()
		assert.Equal(t, "clusters/"+cluster+"/requests", src.Path, "%s syncs exactly its own directory", a.Name)
		require.NotNil(t, src.Directory, "%s: directory source", a.Name)
		assert.False(t, src.Directory.Recurse, "%s: clusters/%s/requests/sub must not be synced", a.Name, cluster)
		assert.Empty(t, a.Spec.Destination.Server, "%s: by name only", a.Name)
		assert.Equal(t, "remediator", a.Spec.Destination.Namespace)
		assert.Equal(t, cluster, a.Labels["remediator.io/cluster"])
		assert.Equal(t, "on-call", a.Labels["remediator.io/notify"], "%s: notifications-cm.yaml's subscription", a.Name)
		assert.Equal(t, "remediation-fleet", a.Spec.Project)
		assert.Contains(t, a.Finalizers, "resources-finalizer.argocd.argoproj.io")
		permitted, err := proj.IsDestinationPermitted(&appv1.Cluster{Name: cluster, Server: "https://" + cluster + ".example.com"}, a.Spec.Destination.Namespace,
			func(string) ([]*appv1.Cluster, error) { return nil, nil })
		require.NoError(t, err)
		assert.True(t, permitted, "%s: the AppProject refuses cluster %s", a.Name, cluster)
		// Each cluster's Application is the single-cluster one's, but for where it goes.
		single := &appv1.Application{}
		require.NoError(t, yaml.UnmarshalStrict(readFile(t, filepath.Join(templateArgoCD, "application.yaml")), single))
		assert.Equal(t, single.Spec.SyncPolicy, a.Spec.SyncPolicy, "%s: syncPolicy differs from application.yaml's", a.Name)
		assert.Equal(t, single.Spec.Source.RepoURL, src.RepoURL)
		assert.Equal(t, single.Spec.Source.TargetRevision, src.TargetRevision)
	}
	for _, a := range apps {
		assert.NotContains(t, []string{"sub", "requests", "old", "north", ""}, a.Spec.Destination.Name, "%s", a.Name)
	}
	// The project refuses a cluster it does not list, and a server URL for a listed name.
	for _, c := range []*appv1.Cluster{{Name: "north", Server: "https://north.example.com"}, {Name: "in-cluster", Server: appv1.KubernetesInternalAPIServerAddr}} {
		permitted, err := proj.IsDestinationPermitted(c, "remediator", func(string) ([]*appv1.Cluster, error) { return nil, nil })
		require.NoError(t, err)
		assert.False(t, permitted, "the fleet project permits cluster %s", c.Name)
	}
}

// TestFleetApplicationSetNoClusters: a repository with only the single-cluster
// requests/ (or a cluster directory without requests/) generates nothing.
func TestFleetApplicationSetNoClusters(t *testing.T) {
	apps, _ := generate(t, []string{"requests", "argocd", "clusters", "clusters/east", "clusters/east/facts", "clusters/east/requests-old"})
	assert.Empty(t, names(apps))
}

func names(apps []appv1.Application) []string {
	var n []string
	for _, a := range apps {
		n = append(n, a.Name+" -> "+a.Spec.Destination.Name+" "+a.Spec.GetSource().Path)
	}
	slices.Sort(n)
	return n
}
