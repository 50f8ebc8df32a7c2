package gitsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	"github.com/go-git/go-git/v5/plumbing/transport/server"
)

// gitTimeout bounds one fetch, so that a hanging remote fails the sync (retried at
// the next interval) instead of blocking the loop forever.
const gitTimeout = 2 * time.Minute

func init() {
	// go-git's file transport runs the git-upload-pack binary, which the distroless
	// image does not have; a local repository (a path or file:// URL) is served
	// in-process instead, by go-git's own upload-pack server.
	client.InstallProtocol("file", server.NewClient(localLoader{}))
}

// localLoader opens a local repository, bare or with a worktree, for the in-process
// upload-pack server.
type localLoader struct{}

func (localLoader) Load(ep *transport.Endpoint) (storer.Storer, error) {
	r, err := git.PlainOpen(ep.Path)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		return nil, transport.ErrRepositoryNotFound
	}
	if err != nil {
		return nil, err
	}
	return r.Storer, nil
}

// mirror is a bare clone of the remediation repository. Reading manifests straight
// from the object database means there is no worktree that a crash could leave half
// checked out, and the synced content is exactly the commit.
type mirror struct {
	url  string
	dir  string
	auth *credentials
}

func newMirror(url, workDir string, auth *credentials) *mirror {
	sum := sha256.Sum256([]byte(url))
	return &mirror{url: url, dir: filepath.Join(workDir, hex.EncodeToString(sum[:8])+".git"), auth: auth}
}

// fetchSpecs mirror the remote's branches and tags under the same names, forced, so
// that a force-pushed branch or a moved tag is synced as the remote has it.
var fetchSpecs = []config.RefSpec{"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"}

// fetch creates the mirror on first use and fetches all branches and tags, pruning
// deleted ones so that a deleted branch is not synced from a stale ref. HEAD follows
// the remote's default branch.
func (m *mirror) fetch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	verb := "fetching"
	repo, err := git.PlainOpen(m.dir)
	if err != nil {
		verb = "cloning"
		if err := os.MkdirAll(filepath.Dir(m.dir), 0o755); err != nil {
			return fmt.Errorf("creating work directory: %w", err)
		}
		// A clone interrupted before (restart mid-clone) leaves a partial directory.
		if err := os.RemoveAll(m.dir); err != nil {
			return fmt.Errorf("removing partial clone %s: %w", m.dir, err)
		}
		if repo, err = git.PlainInit(m.dir, true); err != nil {
			return fmt.Errorf("creating the mirror %s: %w", m.dir, err)
		}
	}
	if err := m.sync(ctx, repo); err != nil {
		if verb == "cloning" {
			_ = os.RemoveAll(m.dir)
		}
		return m.redact(fmt.Errorf("%s %s: %w", verb, m.url, err))
	}
	return nil
}

func (m *mirror) sync(ctx context.Context, repo *git.Repository) error {
	auth, err := m.auth.method(m.url)
	if err != nil {
		return err
	}
	// An anonymous remote: the URL is not stored in the mirror's config, so that
	// credentials in it never reach the disk.
	remote := git.NewRemote(repo.Storer, &config.RemoteConfig{Name: "origin", URLs: []string{m.url}, Fetch: fetchSpecs})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth})
	if err != nil {
		return err
	}
	err = remote.FetchContext(ctx, &git.FetchOptions{
		RefSpecs: fetchSpecs, Auth: auth, Tags: git.NoTags, Force: true, Prune: true,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return err
	}
	for _, ref := range refs {
		if ref.Name() != plumbing.HEAD {
			continue
		}
		head := ref
		if ref.Type() == plumbing.SymbolicReference {
			head = plumbing.NewSymbolicReference(plumbing.HEAD, ref.Target())
		}
		if err := repo.Storer.SetReference(head); err != nil {
			return fmt.Errorf("setting HEAD: %w", err)
		}
	}
	return nil
}

// resolve turns a branch, tag or commit into a full commit SHA.
func (m *mirror) resolve(_ context.Context, revision string) (string, error) {
	if strings.HasPrefix(revision, "-") {
		return "", fmt.Errorf("invalid revision %q", revision)
	}
	repo, err := git.PlainOpen(m.dir)
	if err != nil {
		return "", fmt.Errorf("opening the mirror %s: %w", m.dir, err)
	}
	h, err := repo.ResolveRevision(plumbing.Revision(revision))
	if err != nil || h == nil || h.IsZero() {
		return "", m.redact(fmt.Errorf("revision %q not found in %s", revision, m.url))
	}
	return h.String(), nil
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
	return m.filesMatching(ctx, commit, dir, isManifest)
}

// isPolicy reports whether a file is a policy the controller loads from its
// --policies-dir: a .cue file directly in the directory, not a *_test.cue case.
func isPolicy(dir string) func(string) bool {
	return func(name string) bool {
		return path.Dir(name) == dir && strings.HasSuffix(name, ".cue") && !strings.HasSuffix(name, "_test.cue")
	}
}

// filesMatching reads the files under dir at commit that keep accepts.
func (m *mirror) filesMatching(_ context.Context, commit, dir string, keep func(string) bool) ([]manifestFile, error) {
	dir = strings.Trim(path.Clean("/"+filepath.ToSlash(dir)), "/")
	repo, err := git.PlainOpen(m.dir)
	if err != nil {
		return nil, fmt.Errorf("opening the mirror %s: %w", m.dir, err)
	}
	c, err := repo.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return nil, fmt.Errorf("reading commit %s: %w", ShortRevision(commit), err)
	}
	root, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("reading the tree of %s: %w", ShortRevision(commit), err)
	}
	type blob struct {
		name string
		file *object.File
	}
	var blobs []blob
	if dir == "" {
		err = root.Files().ForEach(func(f *object.File) error { blobs = append(blobs, blob{f.Name, f}); return nil })
	} else {
		entry, ferr := root.FindEntry(dir)
		switch {
		case ferr != nil:
			return nil, fmt.Errorf("path %q does not exist at commit %s: check --path; if the directory was "+
				"removed with its last request, keep a file that is not a manifest there (a README.md), since "+
				"Git does not keep empty directories", dir, ShortRevision(commit))
		case entry.Mode == filemode.Dir:
			sub, terr := root.Tree(dir)
			if terr != nil {
				return nil, fmt.Errorf("listing %q at %s: %w", dir, ShortRevision(commit), terr)
			}
			err = sub.Files().ForEach(func(f *object.File) error { blobs = append(blobs, blob{dir + "/" + f.Name, f}); return nil })
		case entry.Mode.IsFile():
			// --path names one file, as `git ls-tree -- file` lists it.
			f, terr := root.File(dir)
			if terr != nil {
				return nil, fmt.Errorf("reading %s at %s: %w", dir, ShortRevision(commit), terr)
			}
			blobs = append(blobs, blob{dir, f})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing %q at %s: %w", dir, ShortRevision(commit), err)
	}
	var files []manifestFile
	for _, b := range blobs {
		if !keep(b.name) {
			continue
		}
		data, err := readBlob(b.file)
		if err != nil {
			return nil, fmt.Errorf("reading %s at %s: %w", b.name, ShortRevision(commit), err)
		}
		last, err := lastChange(c, b.name)
		if err != nil {
			return nil, fmt.Errorf("finding the commit of %s: %w", b.name, err)
		}
		files = append(files, manifestFile{Path: b.name, Data: data, Commit: last})
	}
	return files, nil
}

func readBlob(f *object.File) ([]byte, error) {
	r, err := f.Reader()
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	return io.ReadAll(r)
}

// lastChange is the commit `git log -1 <c> -- name` prints: history is followed
// through the first parent that has the file as c has it (git's default history
// simplification, so a merge that took the file from one side is skipped), and the
// first commit found that differs from all its parents (or a root commit) changed it.
func lastChange(c *object.Commit, name string) (string, error) {
	cur, err := entryAt(c, name)
	if err != nil {
		return "", err
	}
	for {
		var next *object.Commit
		err := c.Parents().ForEach(func(p *object.Commit) error {
			if next != nil {
				return nil
			}
			e, err := entryAt(p, name)
			if err != nil {
				return err
			}
			if e == cur {
				next = p
			}
			return nil
		})
		if err != nil {
			return "", err
		}
		if next == nil {
			return c.Hash.String(), nil
		}
		c = next
	}
}

// treeEntry is a path's object and mode in one commit; the zero value is "absent".
type treeEntry struct {
	hash plumbing.Hash
	mode filemode.FileMode
}

func entryAt(c *object.Commit, name string) (treeEntry, error) {
	t, err := c.Tree()
	if err != nil {
		return treeEntry{}, fmt.Errorf("reading the tree of %s: %w", ShortRevision(c.Hash.String()), err)
	}
	e, err := t.FindEntry(name)
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) || errors.Is(err, object.ErrFileNotFound) {
		return treeEntry{}, nil
	}
	if err != nil {
		return treeEntry{}, err
	}
	return treeEntry{hash: e.Hash, mode: e.Mode}, nil
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
