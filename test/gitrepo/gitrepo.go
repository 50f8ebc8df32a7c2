package gitrepo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Repo is a bare origin plus a working clone on branch main.
type Repo struct {
	t *testing.T
	// Bare is the origin's path, what `remediator sync --repo` is given.
	Bare string
	Work string
}

// New creates the repository with requests/README.md committed: git has no empty
// directories, and the README keeps requests/ when its last request is removed.
func New(t *testing.T) *Repo {
	t.Helper()
	dir := t.TempDir()
	r := &Repo{t: t, Bare: filepath.Join(dir, "origin.git"), Work: filepath.Join(dir, "work")}
	r.Git(dir, "init", "--quiet", "--bare", "--initial-branch=main", r.Bare)
	r.Git(dir, "clone", "--quiet", r.Bare, r.Work)
	r.Git(r.Work, "checkout", "--quiet", "-B", "main")
	r.Write("requests/README.md", "Remediation requests, one per file.\n")
	r.Commit("Add requests directory")
	return r
}

// Git runs git in dir with a fixed identity and returns its trimmed output.
func (r *Repo) Git(dir string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Operator", "GIT_AUTHOR_EMAIL=op@example.com",
		"GIT_COMMITTER_NAME=Operator", "GIT_COMMITTER_EMAIL=op@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Write writes a file in the working clone.
func (r *Repo) Write(name, content string) {
	r.t.Helper()
	p := filepath.Join(r.Work, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// Remove removes a file from the working clone and the index.
func (r *Repo) Remove(name string) { r.Git(r.Work, "rm", "--quiet", name) }

// Commit commits everything, pushes to origin's main and returns the commit SHA.
func (r *Repo) Commit(msg string) string {
	r.Git(r.Work, "add", "-A")
	r.Git(r.Work, "commit", "--quiet", "-m", msg)
	r.Git(r.Work, "push", "--quiet", "origin", "main")
	return r.Git(r.Work, "rev-parse", "HEAD")
}
