package gitsync

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/test/gitrepo"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:tok3n@git.example.com/repo.git":          "https://redacted@git.example.com/repo.git",
		"https://ghp_abc123@github.com/org/repo":               "https://redacted@github.com/org/repo",
		"cloning ssh://git:pw@host:22/r.git: auth failed":      "cloning ssh://redacted@host:22/r.git: auth failed",
		"a http://u:p@a/x and https://v:q@b/y":                 "a http://redacted@a/x and https://redacted@b/y",
		"https://git.example.com/repo.git":                     "https://git.example.com/repo.git",
		"git@github.com:org/repo.git":                          "git@github.com:org/repo.git",
		"/srv/git/repo.git":                                    "/srv/git/repo.git",
		"https://git.example.com/a@b":                          "https://git.example.com/a@b",
		"revision \"x\" not found in https://u:p%40ss@h/r.git": "revision \"x\" not found in https://redacted@h/r.git",
	} {
		assert.Equal(t, want, RedactURL(in), in)
	}
}

func TestCredentialsOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       Options
		wantErr string
	}{
		{name: "https token", o: Options{Repo: "https://h/r.git", GitPasswordFile: "/p"}},
		{name: "ssh key", o: Options{Repo: "git@h:r.git", GitSSHKeyFile: "/k", GitKnownHostsFile: "/kh"}},
		{name: "ssh key without known_hosts", o: Options{Repo: "ssh://git@h/r.git", GitSSHKeyFile: "/k"}, wantErr: "needs a known_hosts file"},
		{name: "both", o: Options{Repo: "https://h/r.git", GitPasswordFile: "/p", GitSSHKeyFile: "/k", GitKnownHostsFile: "/kh"}, wantErr: "not both"},
		{name: "key for https", o: Options{Repo: "https://u:secret@h/r.git", GitSSHKeyFile: "/k", GitKnownHostsFile: "/kh"}, wantErr: "https://redacted@h/r.git"},
		{name: "password for ssh", o: Options{Repo: "ssh://git@h/r.git", GitPasswordFile: "/p"}, wantErr: "give an SSH key file"},
		{name: "password for a local path", o: Options{Repo: "/srv/r.git", GitPasswordFile: "/p"}, wantErr: "takes none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newCredentials(tc.o)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			assert.NotContains(t, err.Error(), "secret")
		})
	}
}

func TestSSHCredentialsVerifyHostKeys(t *testing.T) {
	c, err := newCredentials(Options{Repo: "ssh://git@h/r.git", GitSSHKeyFile: filepath.Join(t.TempDir(), "missing"), GitKnownHostsFile: "/kh"})
	require.NoError(t, err)
	_, err = c.method("ssh://git@h/r.git")
	require.ErrorContains(t, err, "reading the SSH key file")
}

// TestLastChangeMatchesGitLog: the commit annotation is what `git log -1 -- file`
// prints, also across merges (a merge that took a file from one side is not the
// file's commit; one that resolved a conflict in it is).
func TestLastChangeMatchesGitLog(t *testing.T) {
	r := gitrepo.New(t)
	r.Write("requests/a.yaml", "a: 1\n")
	r.Write("requests/b.yaml", "b: 1\n")
	r.Write("requests/c.yaml", "c: 1\n")
	r.Commit("a, b and c")
	r.Git(r.Work, "checkout", "--quiet", "-b", "feature")
	r.Write("requests/b.yaml", "b: feature\n")
	r.Write("requests/c.yaml", "c: feature\n")
	r.Write("requests/d.yaml", "d: feature\n")
	r.Git(r.Work, "commit", "--quiet", "-am", "feature edits b and c")
	r.Git(r.Work, "add", "-A")
	r.Git(r.Work, "commit", "--quiet", "-m", "feature adds d")
	r.Git(r.Work, "checkout", "--quiet", "main")
	r.Write("requests/a.yaml", "a: main\n")
	r.Write("requests/c.yaml", "c: main\n")
	r.Git(r.Work, "commit", "--quiet", "-am", "main edits a and c")
	// c conflicts; resolve it with a third content, so the merge itself changed it.
	merge := exec.Command("git", "merge", "--quiet", "--no-ff", "feature")
	merge.Dir = r.Work
	out, err := merge.CombinedOutput()
	require.Error(t, err, "the merge was meant to conflict: %s", out)
	require.NoError(t, os.WriteFile(filepath.Join(r.Work, "requests/c.yaml"), []byte("c: merged\n"), 0o644))
	head := r.Commit("Merge feature")
	r.Write("requests/e.yaml", "e: 1\n")
	head2 := r.Commit("e")

	m := newMirror(r.Bare, t.TempDir(), nil)
	ctx := context.Background()
	require.NoError(t, m.fetch(ctx))
	for _, commit := range []string{head, head2} {
		files, err := m.files(ctx, commit, "requests")
		require.NoError(t, err)
		require.Len(t, files, map[string]int{head: 4, head2: 5}[commit])
		for _, f := range files {
			want := r.Git(r.Work, "log", "-1", "--format=%H", commit, "--", f.Path)
			assert.Equal(t, want, f.Commit, "%s at %s", f.Path, ShortRevision(commit))
		}
	}
	got, err := m.resolve(ctx, "HEAD")
	require.NoError(t, err)
	assert.Equal(t, head2, got)
}
