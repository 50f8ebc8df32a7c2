package gitsync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// gitTimeout bounds one git invocation, so that a hanging remote fails the sync
// (retried at the next interval) instead of blocking the loop forever.
const gitTimeout = 2 * time.Minute

// mirror is a bare clone of the remediation repository. Reading manifests straight
// from the object database (ls-tree, cat-file) means there is no worktree that a
// crash could leave half checked out, and the synced content is exactly the commit.
type mirror struct {
	url string
	dir string
}

func newMirror(url, workDir string) *mirror {
	sum := sha256.Sum256([]byte(url))
	return &mirror{url: url, dir: filepath.Join(workDir, hex.EncodeToString(sum[:8])+".git")}
}

func (m *mirror) git(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = m.dir
	// Never prompt for credentials: the sync runs unattended and must fail instead.
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("git %s: %s", args[0], msg)
	}
	return stdout.Bytes(), nil
}

// fetch clones the repository on first use and fetches all branches and tags
// afterwards, pruning deleted ones so that a deleted branch is not synced from a
// stale ref.
func (m *mirror) fetch(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(m.dir, "HEAD")); err != nil {
		if err := os.MkdirAll(filepath.Dir(m.dir), 0o755); err != nil {
			return fmt.Errorf("creating work directory: %w", err)
		}
		// A clone interrupted before (restart mid-clone) leaves a partial directory.
		if err := os.RemoveAll(m.dir); err != nil {
			return fmt.Errorf("removing partial clone %s: %w", m.dir, err)
		}
		tmp := &mirror{url: m.url, dir: filepath.Dir(m.dir)}
		if _, err := tmp.git(ctx, "clone", "--bare", "--quiet", "--", m.url, m.dir); err != nil {
			_ = os.RemoveAll(m.dir)
			return fmt.Errorf("cloning %s: %w", m.url, err)
		}
	}
	if _, err := m.git(ctx, "fetch", "--prune", "--quiet", "--force", "--", m.url,
		"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"); err != nil {
		return fmt.Errorf("fetching %s: %w", m.url, err)
	}
	return nil
}

// resolve turns a branch, tag or commit into a full commit SHA.
func (m *mirror) resolve(ctx context.Context, revision string) (string, error) {
	if strings.HasPrefix(revision, "-") {
		return "", fmt.Errorf("invalid revision %q", revision)
	}
	out, err := m.git(ctx, "rev-parse", "--verify", "--quiet", "--end-of-options", revision+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("revision %q not found in %s", revision, m.url)
	}
	return strings.TrimSpace(string(out)), nil
}

// manifestFile is one YAML or JSON file under the synced path at a commit.
type manifestFile struct {
	Path string
	Data []byte
	// Commit is the last commit at or before the synced one that changed the file:
	// the commit of the pull request that introduced or last edited the request.
	Commit string
}

// isManifest reports whether a file holds manifests; README.md and the like are
// ignored, as Argo CD's directory source does.
func isManifest(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// files reads the manifest files under dir at commit. A dir that does not exist at
// the commit is an error, as in Argo CD: a mistyped --path must not read as "the
// repository is empty" and prune every request.
func (m *mirror) files(ctx context.Context, commit, dir string) ([]manifestFile, error) {
	dir = strings.Trim(path.Clean("/"+filepath.ToSlash(dir)), "/")
	spec := commit
	if dir != "" {
		spec = commit + ":" + dir
		if _, err := m.git(ctx, "cat-file", "-e", spec); err != nil {
			return nil, fmt.Errorf("path %q does not exist at commit %s: check --path; if the directory was "+
				"removed with its last request, keep a file that is not a manifest there (a README.md), since "+
				"Git does not keep empty directories", dir, ShortRevision(commit))
		}
	}
	args := []string{"ls-tree", "-r", "-z", "--name-only", commit}
	if dir != "" {
		args = append(args, "--", dir)
	}
	out, err := m.git(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("listing %q at %s: %w", dir, ShortRevision(commit), err)
	}
	var files []manifestFile
	for _, name := range strings.Split(string(out), "\x00") {
		if name == "" || !isManifest(name) {
			continue
		}
		data, err := m.git(ctx, "cat-file", "blob", commit+":"+name)
		if err != nil {
			return nil, fmt.Errorf("reading %s at %s: %w", name, ShortRevision(commit), err)
		}
		last, err := m.git(ctx, "log", "-1", "--format=%H", commit, "--", name)
		if err != nil {
			return nil, fmt.Errorf("finding the commit of %s: %w", name, err)
		}
		files = append(files, manifestFile{Path: name, Data: data, Commit: strings.TrimSpace(string(last))})
	}
	return files, nil
}

// ShortRevision is a commit as people quote it: its first 12 hex digits.
func ShortRevision(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// errNoRepo is returned for an empty repository URL.
var errNoRepo = errors.New("no repository given")
