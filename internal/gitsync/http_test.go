package gitsync_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/internal/gitsync"
	"github.com/remediator/remediator/test/gitrepo"
)

const (
	httpUser     = "sync-bot"
	httpPassword = "s3cret-token-4711"
)

func passwordFile(t *testing.T, password string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "password")
	require.NoError(t, os.WriteFile(p, []byte(password+"\n"), 0o600))
	return p
}

// withoutGit runs f with a PATH that holds no git, as in the distroless image: the
// sync must not exec it. The test's own git (gitrepo) runs outside f.
func withoutGit(t *testing.T, f func()) {
	t.Helper()
	t.Setenv("PATH", os.Getenv("PATH")) // restored at the end even if f fails
	old := os.Getenv("PATH")
	require.NoError(t, os.Setenv("PATH", t.TempDir()))
	defer func() { _ = os.Setenv("PATH", old) }()
	_, err := exec.LookPath("git")
	require.Error(t, err, "git is still on PATH")
	f()
}

func TestSyncOverSmartHTTPWithoutGitBinary(t *testing.T) {
	ns := namespace(t)
	r := gitrepo.New(t)
	r.Write("requests/a.yaml", request(ns, "release-a", "pvc-a"))
	first := r.Commit("Release the Lease of pvc-a")
	url := r.ServeSmartHTTP(t, httpUser, httpPassword)

	s := newSyncer(t, gitsync.Options{Repo: url, AllowInsecureTransport: true, GitUsername: httpUser, GitPasswordFile: passwordFile(t, httpPassword),
		Path: "requests", Namespaces: []string{ns}, Prune: true})
	var (
		res *gitsync.Result
		err error
	)
	withoutGit(t, func() { res, err = sync(t, s) })
	require.NoError(t, err, "sync over HTTP")
	require.Equal(t, first, res.Commit, "HEAD is the remote's default branch")
	rr, ok := getRR(t, ns, "release-a")
	require.True(t, ok, "release-a was not applied")
	assert.Equal(t, first, rr.Annotations[gitsync.AnnotationGitCommit])

	// A second fetch into the same mirror, with a pruned request.
	r.Remove("requests/a.yaml")
	second := r.Commit("release-a is done")
	// The prune works from gitops-engine's cluster cache, which sees release-a by a
	// watch event a moment after the first sync created it; under load (the
	// clean-clone make test, -race) that moment came after this second sync once, and
	// release-a was pruned one sync later, as the sync loop does. So sync until it is.
	var pruned []string
	for deadline := time.Now().Add(20 * time.Second); len(pruned) == 0 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		withoutGit(t, func() { res, err = sync(t, s) })
		require.NoError(t, err, "second sync over HTTP")
		pruned = append(pruned, res.Pruned...)
	}
	assert.Equal(t, second, res.Commit)
	assert.Len(t, pruned, 1, "pruned = %v", pruned)
	_, ok = getRR(t, ns, "release-a")
	assert.False(t, ok, "release-a still exists after it was removed from Git")
}

func TestSyncLocalPathWithoutGitBinary(t *testing.T) {
	ns := namespace(t)
	r := gitrepo.New(t)
	r.Write("requests/a.yaml", request(ns, "release-a", "pvc-a"))
	first := r.Commit("Release the Lease of pvc-a")
	r.Git(r.Work, "tag", "-a", "-m", "v1", "v1")
	r.Git(r.Work, "push", "--quiet", "origin", "v1")
	r.Write("requests/b.yaml", request(ns, "release-b", "pvc-b"))
	r.Commit("Release the Lease of pvc-b")

	withoutGit(t, func() {
		for _, repo := range []string{r.Bare, "file://" + r.Bare, r.Work} {
			for _, rev := range []string{"v1", first, first[:12]} {
				res, err := sync(t, newSyncer(t, gitsync.Options{Repo: repo, Revision: rev, Path: "requests", Namespaces: []string{ns}}))
				require.NoError(t, err, "sync of %s at %s", repo, rev)
				assert.Equal(t, first, res.Commit, "%s at %s", repo, rev)
			}
		}
	})
}

func TestSyncCredentialsNeverInErrors(t *testing.T) {
	ns := namespace(t)
	r := gitrepo.New(t)
	r.Write("requests/a.yaml", request(ns, "release-a", "pvc-a"))
	r.Commit("Release the Lease of pvc-a")
	url := r.ServeSmartHTTP(t, httpUser, httpPassword)
	const wrong = "not-the-token-0815"

	t.Run("wrong password", func(t *testing.T) {
		_, err := sync(t, newSyncer(t, gitsync.Options{Repo: url, AllowInsecureTransport: true, GitUsername: httpUser, GitPasswordFile: passwordFile(t, wrong),
			Path: "requests", Namespaces: []string{ns}}))
		require.Error(t, err)
		assert.ErrorContains(t, err, "cloning")
		assert.NotContains(t, err.Error(), wrong)
	})
	t.Run("credentials in the URL", func(t *testing.T) {
		withCreds := strings.Replace(url, "http://", "http://"+httpUser+":"+wrong+"@", 1)
		_, err := sync(t, newSyncer(t, gitsync.Options{Repo: withCreds, AllowInsecureTransport: true, Path: "requests", Namespaces: []string{ns}}))
		require.Error(t, err)
		assert.NotContains(t, err.Error(), wrong)
		assert.NotContains(t, err.Error(), httpUser)
		assert.ErrorContains(t, err, "http://redacted@")
	})
	t.Run("right credentials in the URL", func(t *testing.T) {
		withCreds := strings.Replace(url, "http://", "http://"+httpUser+":"+httpPassword+"@", 1)
		_, err := sync(t, newSyncer(t, gitsync.Options{Repo: withCreds, AllowInsecureTransport: true, Path: "requests", Namespaces: []string{ns}, Revision: "no-such-branch"}))
		require.Error(t, err)
		assert.ErrorContains(t, err, `revision "no-such-branch" not found in http://redacted@`)
		assert.NotContains(t, err.Error(), httpPassword)
	})
}
