package gitsync_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/internal/gitsync"
	"github.com/remediator/remediator/test/gitrepo"
	"github.com/remediator/remediator/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func request(ns, name, pv string) string {
	return `apiVersion: remediator.io/v1alpha1
kind: RemediationRequest
metadata:
  name: ` + name + `
  namespace: ` + ns + `
spec:
  remediation: release-luks-lease
  target:
    persistentVolume: ` + pv + `
  reason: Pods stuck in ContainerCreating behind a retained Lease (INC-4711).
`
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gitsync-"}}
	require.NoError(t, env.Client.Create(context.Background(), ns))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	return ns.Name
}

func newSyncer(t *testing.T, o gitsync.Options) *gitsync.Syncer {
	t.Helper()
	o.WorkDir = t.TempDir()
	o.Log = klog.NewKlogr()
	s, err := gitsync.New(env.Config, o)
	require.NoError(t, err)
	stop, err := s.Start()
	require.NoError(t, err)
	t.Cleanup(stop)
	return s
}

func sync(t *testing.T, s *gitsync.Syncer) (*gitsync.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return s.Sync(ctx)
}

func getRR(t *testing.T, ns, name string) (*v1alpha1.RemediationRequest, bool) {
	t.Helper()
	rr := &v1alpha1.RemediationRequest{}
	err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, rr)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	require.NoError(t, err)
	return rr, true
}

func TestSyncAppliesAnnotatesAndPrunes(t *testing.T) {
	ns := namespace(t)
	r := gitrepo.New(t)
	r.Write("requests/a.yaml", request(ns, "release-a", "pvc-a"))
	first := r.Commit("Release the Lease of pvc-a")

	// A request created by hand in the same namespace is not the sync's to prune.
	manual := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-hand"},
		Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target: v1alpha1.Target{PersistentVolume: "pvc-m"}, Reason: "Created with kubectl during the incident."},
	}
	require.NoError(t, env.Client.Create(context.Background(), manual))

	s := newSyncer(t, gitsync.Options{Repo: r.Bare, Revision: "main", Path: "requests", Namespaces: []string{ns}, Prune: true})
	res, err := sync(t, s)
	require.NoError(t, err, "first sync")
	require.Equal(t, first, res.Commit, "first sync result = %+v", res)
	require.Len(t, res.Applied, 1, "first sync result = %+v, want release-a applied", res)
	require.True(t, strings.HasPrefix(res.Applied[0], ns+"/release-a:"), "first sync applied %q, want release-a", res.Applied[0])
	rr, ok := getRR(t, ns, "release-a")
	require.True(t, ok, "release-a was not applied")
	assert.Equal(t, first, rr.Annotations[gitsync.AnnotationGitCommit], "commit annotation")
	assert.Equal(t, "requests/a.yaml", rr.Annotations[gitsync.AnnotationGitPath], "path annotation")

	// A second request: release-a keeps the commit of the pull request that added it.
	r.Write("requests/b.yaml", request(ns, "release-b", "pvc-b"))
	second := r.Commit("Release the Lease of pvc-b")
	_, err = sync(t, s)
	require.NoError(t, err, "second sync")
	a, ok := getRR(t, ns, "release-a")
	require.True(t, ok, "release-a is gone after the second sync")
	b, ok := getRR(t, ns, "release-b")
	require.True(t, ok, "release-b was not applied")
	require.Equal(t, second, b.Annotations[gitsync.AnnotationGitCommit], "after second commit: release-b's commit")
	require.Equal(t, first, a.Annotations[gitsync.AnnotationGitCommit], "after second commit: release-a keeps the commit that added it")

	// Removing a file from Git prunes its request, and only that one.
	r.Remove("requests/a.yaml")
	r.Commit("release-a is done")
	res, err = sync(t, s)
	require.NoError(t, err, "prune sync")
	if assert.Len(t, res.Pruned, 1, "pruned = %v, want release-a", res.Pruned) {
		assert.True(t, strings.HasPrefix(res.Pruned[0], ns+"/release-a:"), "pruned = %v, want release-a", res.Pruned)
	}
	_, ok = getRR(t, ns, "release-a")
	assert.False(t, ok, "release-a still exists after it was removed from Git")
	for _, name := range []string{"release-b", "by-hand"} {
		_, ok := getRR(t, ns, name)
		assert.True(t, ok, "%s was pruned but is not the removed request", name)
	}
}

// TestSyncPrunesTheLastRequest: the template keeps requests/README.md, so removing
// the last request leaves the directory in Git, and the sync prunes the request
// instead of failing on a missing path.
func TestSyncPrunesTheLastRequest(t *testing.T) {
	ns := namespace(t)
	r := gitrepo.New(t)
	r.Write("requests/README.md", "# requests\n")
	r.Write("requests/a.yaml", request(ns, "release-a", "pvc-a"))
	r.Commit("Release the Lease of pvc-a")
	s := newSyncer(t, gitsync.Options{Repo: r.Bare, Revision: "main", Path: "requests", Namespaces: []string{ns}, Prune: true})
	_, err := sync(t, s)
	require.NoError(t, err, "first sync")
	_, ok := getRR(t, ns, "release-a")
	require.True(t, ok, "release-a was not applied")

	r.Remove("requests/a.yaml")
	r.Commit("release-a is done; the directory keeps its README")
	res, err := sync(t, s)
	require.NoError(t, err, "the sync after the last request's removal")
	assert.Len(t, res.Pruned, 1, "pruned = %v", res.Pruned)
	_, ok = getRR(t, ns, "release-a")
	assert.False(t, ok, "release-a still exists after its file was removed from Git")
}

// Every bad revision fails the sync with a clear error and changes nothing: the
// request synced before stays as it was and nothing new appears.
func TestSyncRefusesBadInput(t *testing.T) {
	clusterRole := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: gitsync-backdoor
rules:
- apiGroups: ["*"]
  resources: ["*"]
  verbs: ["*"]
`
	cases := []struct {
		name    string
		stage   func(r *gitrepo.Repo, ns string)
		opts    func(o *gitsync.Options)
		wantErr []string
	}{
		{
			name: "cluster role next to a request",
			stage: func(r *gitrepo.Repo, ns string) {
				r.Write("requests/rbac.yaml", clusterRole+"---\n"+request(ns, "new", "pvc-n"))
			},
			wantErr: []string{"refused, nothing applied", `requests/rbac.yaml (document 1): ClusterRole "gitsync-backdoor" is not a RemediationRequest`},
		},
		{
			name: "request in a namespace that is not allowed",
			stage: func(r *gitrepo.Repo, _ string) {
				r.Write("requests/other.yaml", request("kube-system", "new", "pvc-n"))
			},
			wantErr: []string{`RemediationRequest kube-system/new is in namespace "kube-system"; allowed:`},
		},
		{
			name: "malformed manifest",
			stage: func(r *gitrepo.Repo, _ string) {
				r.Write("requests/broken.yaml", "apiVersion: remediator.io/v1alpha1\nkind: [oops\n")
			},
			wantErr: []string{"requests/broken.yaml (document 1): malformed YAML"},
		},
		{
			name: "hook annotation",
			stage: func(r *gitrepo.Repo, ns string) {
				r.Write("requests/hook.yaml", strings.Replace(request(ns, "new", "pvc-n"), "metadata:\n", "metadata:\n  annotations: {argocd.argoproj.io/hook: PreSync}\n", 1))
			},
			wantErr: []string{"annotation argocd.argoproj.io/hook is not allowed"},
		},
		{
			name: "finalizer and owner reference",
			stage: func(r *gitrepo.Repo, ns string) {
				r.Write("requests/owned.yaml", strings.Replace(request(ns, "new", "pvc-n"), "metadata:\n",
					"metadata:\n  finalizers: [example.com/keep]\n  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: owner, uid: 6f1c1d1e-0000-4000-8000-000000000001}]\n", 1))
			},
			wantErr: []string{"requests/owned.yaml (document 1): metadata.finalizers is not allowed", "requests/owned.yaml (document 1): metadata.ownerReferences is not allowed"},
		},
		{
			name: "refused at admission",
			stage: func(r *gitrepo.Repo, ns string) {
				r.Write("requests/short.yaml", strings.Replace(request(ns, "new", "pvc-n"), "reason: Pods stuck", "reason: x\n  #", 1))
			},
			wantErr: []string{"spec.reason"},
		},
		{
			// The reviewer reads the first key; a lenient reader applies the last.
			name: "duplicate key",
			stage: func(r *gitrepo.Repo, ns string) {
				r.Write("requests/dup.yaml", strings.Replace(request(ns, "new", "pvc-n"), "    persistentVolume: pvc-n\n",
					"    persistentVolume: pvc-n\n    persistentVolume: pvc-other\n", 1))
			},
			wantErr: []string{"requests/dup.yaml (document 1): malformed YAML", `"persistentVolume" already set`},
		},
		{
			name: "duplicate key in a JSON manifest",
			stage: func(r *gitrepo.Repo, ns string) {
				r.Write("requests/dup.json", `{"apiVersion": "remediator.io/v1alpha1", "kind": "RemediationRequest", "kind": "RemediationRequest",
"metadata": {"name": "new", "namespace": "`+ns+`"}, "spec": {"remediation": "release-luks-lease",
"target": {"persistentVolume": "pvc-n"}, "reason": "Pods stuck in ContainerCreating behind a retained Lease."}}`)
			},
			wantErr: []string{"requests/dup.json (document 1)", `"kind" already set`},
		},
		{
			// A misspelt field would otherwise be dropped: the request runs without it.
			name: "unknown field",
			stage: func(r *gitrepo.Repo, ns string) {
				r.Write("requests/unknown.yaml", strings.Replace(request(ns, "new", "pvc-n"), "spec:\n", "spec:\n  maintenanceWindw: {schedule: \"0 2 * * *\", duration: 1h}\n", 1))
			},
			wantErr: []string{"requests/unknown.yaml", "maintenanceWindw"},
		},
		{
			name:    "target changed (immutable)",
			stage:   func(r *gitrepo.Repo, ns string) { r.Write("requests/a2.yaml", request(ns, "release-a", "pvc-other")) },
			wantErr: []string{"refused by the API server", "immutable"},
		},
		{
			name:    "missing revision",
			opts:    func(o *gitsync.Options) { o.Revision = "release-2027" },
			wantErr: []string{`revision "release-2027" not found`},
		},
		{
			name:    "missing path",
			opts:    func(o *gitsync.Options) { o.Path = "reqeusts" },
			wantErr: []string{`path "reqeusts" does not exist at commit`, "keep a file that is not a manifest there"},
		},
		{
			name:    "unreachable repository",
			opts:    func(o *gitsync.Options) { o.Repo = filepath.Join(os.TempDir(), "no-such-remediation-repo.git") },
			wantErr: []string{"cloning", "no-such-remediation-repo.git"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t)
			r := gitrepo.New(t)
			r.Write("requests/a.yaml", request(ns, "release-a", "pvc-a"))
			good := r.Commit("Release the Lease of pvc-a")
			o := gitsync.Options{Repo: r.Bare, Revision: "main", Path: "requests", Namespaces: []string{ns}, Prune: true}
			_, err := sync(t, newSyncer(t, o))
			require.NoError(t, err, "baseline sync")
			// The bad change also removes release-a, so a sync that went ahead would prune it.
			r.Remove("requests/a.yaml")
			if tc.stage != nil {
				tc.stage(r, ns)
			}
			r.Commit("A bad change")
			if tc.opts != nil {
				tc.opts(&o)
			}
			_, err = sync(t, newSyncer(t, o))
			require.Error(t, err, "sync succeeded, want it refused")
			for _, want := range tc.wantErr {
				assert.ErrorContains(t, err, want)
			}
			a, ok := getRR(t, ns, "release-a")
			if assert.True(t, ok, "release-a pruned by a refused sync") {
				assert.Equal(t, good, a.Annotations[gitsync.AnnotationGitCommit], "release-a changed by a refused sync")
			}
			_, ok = getRR(t, ns, "new")
			assert.False(t, ok, "a request from the refused revision reached the cluster")
			err = env.Client.Get(context.Background(), client.ObjectKey{Name: "gitsync-backdoor"}, &rbacv1.ClusterRole{})
			assert.True(t, apierrors.IsNotFound(err), "ClusterRole gitsync-backdoor: err=%v, want NotFound", err)
		})
	}
}

// TestSyncAddsAndPrunesInOneCommit: a commit that adds one request and removes
// another applies the one and prunes the other in the same sync.
func TestSyncAddsAndPrunesInOneCommit(t *testing.T) {
	ns := namespace(t)
	r := gitrepo.New(t)
	r.Write("requests/README.md", "# requests\n")
	r.Write("requests/a.yaml", request(ns, "release-a", "pvc-a"))
	r.Commit("Release the Lease of pvc-a")
	s := newSyncer(t, gitsync.Options{Repo: r.Bare, Revision: "main", Path: "requests", Namespaces: []string{ns}, Prune: true})
	_, err := sync(t, s)
	require.NoError(t, err, "first sync")

	r.Remove("requests/a.yaml")
	r.Write("requests/b.yaml", request(ns, "release-b", "pvc-b"))
	r.Commit("release-a is done; release the Lease of pvc-b")
	start := time.Now()
	res, err := sync(t, s)
	t.Logf("the sync took %s", time.Since(start))
	require.NoError(t, err, "the sync adding release-b and removing release-a")
	assert.Len(t, res.Applied, 1, "applied = %v", res.Applied)
	assert.Len(t, res.Pruned, 1, "pruned = %v", res.Pruned)
	_, ok := getRR(t, ns, "release-a")
	assert.False(t, ok, "release-a still exists after its file was removed from Git")
	_, ok = getRR(t, ns, "release-b")
	assert.True(t, ok, "release-b was not applied")
}

// TestSyncWithoutPruneKeepsRemovedRequests: with Prune off, a request whose file
// was removed stays in the cluster, and the result lists it as not pruned.
func TestSyncWithoutPruneKeepsRemovedRequests(t *testing.T) {
	ns := namespace(t)
	r := gitrepo.New(t)
	r.Write("requests/README.md", "# requests\n")
	r.Write("requests/a.yaml", request(ns, "release-a", "pvc-a"))
	r.Commit("Release the Lease of pvc-a")
	s := newSyncer(t, gitsync.Options{Repo: r.Bare, Revision: "main", Path: "requests", Namespaces: []string{ns}})
	_, err := sync(t, s)
	require.NoError(t, err, "first sync")

	r.Remove("requests/a.yaml")
	r.Write("requests/b.yaml", request(ns, "release-b", "pvc-b"))
	r.Commit("release-a is done; release the Lease of pvc-b")
	res, err := sync(t, s)
	require.NoError(t, err)
	require.Len(t, res.Pruned, 1, "pruned = %v", res.Pruned)
	assert.True(t, strings.HasPrefix(res.Pruned[0], ns+"/release-a: "), "pruned = %v", res.Pruned)
	assert.Contains(t, res.Pruned[0], "pruning", "the result says why it was not pruned: %v", res.Pruned)
	_, ok := getRR(t, ns, "release-a")
	assert.True(t, ok, "release-a was pruned with Prune off")
	_, ok = getRR(t, ns, "release-b")
	assert.True(t, ok, "release-b was not applied")
}

// TestSyncDoesNotPruneATerminatingRequestAgain: a pruned request that is finishing
// its restore (held here by a finalizer, as the controller's remediator.io/restore
// holds it) is pruned once; later syncs neither delete nor report it again.
func TestSyncDoesNotPruneATerminatingRequestAgain(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	r := gitrepo.New(t)
	r.Write("requests/README.md", "# requests\n")
	r.Write("requests/a.yaml", request(ns, "release-a", "pvc-a"))
	r.Commit("Release the Lease of pvc-a")
	s := newSyncer(t, gitsync.Options{Repo: r.Bare, Revision: "main", Path: "requests", Namespaces: []string{ns}, Prune: true})
	_, err := sync(t, s)
	require.NoError(t, err, "first sync")
	rr, ok := getRR(t, ns, "release-a")
	require.True(t, ok)
	const hold = "test.remediator.io/restoring"
	rr.Finalizers = append(rr.Finalizers, hold)
	require.NoError(t, env.Client.Update(ctx, rr))

	r.Remove("requests/a.yaml")
	r.Commit("release-a is done")
	res, err := sync(t, s)
	require.NoError(t, err, "the pruning sync")
	require.Len(t, res.Pruned, 1, "pruned = %v", res.Pruned)
	rr, ok = getRR(t, ns, "release-a")
	require.True(t, ok, "the finalizer holds release-a")
	require.NotNil(t, rr.DeletionTimestamp, "release-a was not deleted")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res, err := sync(t, s)
		require.NoError(c, err, "a later sync")
		assert.Empty(c, res.Pruned, "a terminating request is reported pruned again")
	}, 30*time.Second, 200*time.Millisecond, "the cluster cache sees release-a terminating")

	rr.Finalizers = nil
	require.NoError(t, env.Client.Update(ctx, rr))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, ok := getRR(t, ns, "release-a")
		assert.False(c, ok)
	}, 30*time.Second, 200*time.Millisecond, "release-a gone once its finalizer is removed")
}
