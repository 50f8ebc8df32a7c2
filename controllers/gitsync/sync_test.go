package gitsync_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/gitsync"
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
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	return ns.Name
}

func newSyncer(t *testing.T, o gitsync.Options) *gitsync.Syncer {
	t.Helper()
	o.WorkDir = t.TempDir()
	o.Log = klog.NewKlogr()
	s, err := gitsync.New(env.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
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
	if err := env.Client.Create(context.Background(), manual); err != nil {
		t.Fatal(err)
	}

	s := newSyncer(t, gitsync.Options{Repo: r.Bare, Revision: "main", Path: "requests", Namespaces: []string{ns}, Prune: true})
	res, err := sync(t, s)
	if err != nil {
		t.Fatalf("first sync: %v", err)
	}
	if res.Commit != first || len(res.Applied) != 1 || !strings.HasPrefix(res.Applied[0], ns+"/release-a:") {
		t.Fatalf("first sync result = %+v, want release-a applied at %s", res, first)
	}
	rr, ok := getRR(t, ns, "release-a")
	if !ok {
		t.Fatal("release-a was not applied")
	}
	if got := rr.Annotations[gitsync.AnnotationGitCommit]; got != first {
		t.Errorf("commit annotation = %q, want %q", got, first)
	}
	if got := rr.Annotations[gitsync.AnnotationGitPath]; got != "requests/a.yaml" {
		t.Errorf("path annotation = %q", got)
	}

	// A second request: release-a keeps the commit of the pull request that added it.
	r.Write("requests/b.yaml", request(ns, "release-b", "pvc-b"))
	second := r.Commit("Release the Lease of pvc-b")
	if _, err := sync(t, s); err != nil {
		t.Fatalf("second sync: %v", err)
	}
	a, _ := getRR(t, ns, "release-a")
	b, ok := getRR(t, ns, "release-b")
	if !ok || b.Annotations[gitsync.AnnotationGitCommit] != second || a.Annotations[gitsync.AnnotationGitCommit] != first {
		t.Fatalf("after second commit: a=%v b=%v (ok=%v), want a@%s b@%s", a.Annotations, b, ok, first, second)
	}

	// Removing a file from Git prunes its request, and only that one.
	r.Remove("requests/a.yaml")
	r.Commit("release-a is done")
	res, err = sync(t, s)
	if err != nil {
		t.Fatalf("prune sync: %v", err)
	}
	if len(res.Pruned) != 1 || !strings.HasPrefix(res.Pruned[0], ns+"/release-a:") {
		t.Errorf("pruned = %v, want release-a", res.Pruned)
	}
	if _, ok := getRR(t, ns, "release-a"); ok {
		t.Error("release-a still exists after it was removed from Git")
	}
	for _, name := range []string{"release-b", "by-hand"} {
		if _, ok := getRR(t, ns, name); !ok {
			t.Errorf("%s was pruned but is not the removed request", name)
		}
	}
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
			wantErr: []string{"requests/broken.yaml: malformed manifest"},
		},
		{
			name: "hook annotation",
			stage: func(r *gitrepo.Repo, ns string) {
				r.Write("requests/hook.yaml", strings.Replace(request(ns, "new", "pvc-n"), "metadata:\n", "metadata:\n  annotations: {argocd.argoproj.io/hook: PreSync}\n", 1))
			},
			wantErr: []string{"annotation argocd.argoproj.io/hook is not allowed"},
		},
		{
			name: "refused at admission",
			stage: func(r *gitrepo.Repo, ns string) {
				r.Write("requests/short.yaml", strings.Replace(request(ns, "new", "pvc-n"), "reason: Pods stuck", "reason: x\n  #", 1))
			},
			wantErr: []string{"spec.reason"},
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
			wantErr: []string{`path "reqeusts" does not exist at commit`},
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
			if _, err := sync(t, newSyncer(t, o)); err != nil {
				t.Fatalf("baseline sync: %v", err)
			}
			// The bad change also removes release-a, so a sync that went ahead would prune it.
			r.Remove("requests/a.yaml")
			if tc.stage != nil {
				tc.stage(r, ns)
			}
			r.Commit("A bad change")
			if tc.opts != nil {
				tc.opts(&o)
			}
			_, err := sync(t, newSyncer(t, o))
			if err == nil {
				t.Fatal("sync succeeded, want it refused")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			a, ok := getRR(t, ns, "release-a")
			if !ok || a.Annotations[gitsync.AnnotationGitCommit] != good {
				t.Errorf("release-a changed or pruned by a refused sync (exists=%v)", ok)
			}
			if _, ok := getRR(t, ns, "new"); ok {
				t.Error("a request from the refused revision reached the cluster")
			}
			err = env.Client.Get(context.Background(), client.ObjectKey{Name: "gitsync-backdoor"}, &rbacv1.ClusterRole{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("ClusterRole gitsync-backdoor: err=%v, want NotFound", err)
			}
		})
	}
}
