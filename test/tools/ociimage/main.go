// Command ociimage builds a single-layer linux/amd64 container image from scratch, out of
// files on the host, and writes it as a docker-archive tarball (what `docker save` writes,
// which `ctr -n k8s.io images import` and `docker load` read). It needs no container engine
// and no registry: the local cluster's real nodes (test/realnode) import its images into their
// containerd, and `make image` builds the controller's image with it.
//
// Usage:
//
//	ociimage -o OUT.tar -t NAME:TAG [-file HOSTPATH:IMAGEPATH[:MODE]]... [-symlink IMAGEPATH:TARGET]...
//	         [-entrypoint JSONARRAY] [-cmd JSONARRAY] [-user UID:GID] [-workdir DIR] [-env K=V]...
//
// MODE is octal (e.g. 0755) and defaults to the host file's permission bits. Parent
// directories are created in the image with mode 0755; every entry is owned by root and dated
// at the Unix epoch, so the same inputs give the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

type entry struct {
	hostPath string // regular file to copy; empty for directories and symlinks
	target   string // symlink target
	mode     int64
	typ      byte
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	var (
		out, tag, entrypoint, cmd, user, workdir string
		files, symlinks, envs                    list
	)
	fs.StringVar(&out, "o", "", "output docker-archive tarball")
	fs.StringVar(&tag, "t", "", "image reference NAME:TAG written into the archive")
	fs.Var(&files, "file", "HOSTPATH:IMAGEPATH[:MODE] (repeatable)")
	fs.Var(&symlinks, "symlink", "IMAGEPATH:TARGET (repeatable)")
	fs.StringVar(&entrypoint, "entrypoint", "", `entrypoint as a JSON array, e.g. ["/pause"]`)
	fs.StringVar(&cmd, "cmd", "", "cmd as a JSON array")
	fs.StringVar(&user, "user", "", "UID:GID the container runs as")
	fs.StringVar(&workdir, "workdir", "", "working directory")
	fs.Var(&envs, "env", "K=V (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if out == "" || tag == "" || fs.NArg() > 0 {
		return errors.New("usage: ociimage -o OUT.tar -t NAME:TAG [-file HOSTPATH:IMAGEPATH[:MODE]]... [-symlink IMAGEPATH:TARGET]... [-entrypoint JSON] [-cmd JSON] [-user UID:GID] [-workdir DIR] [-env K=V]...")
	}
	ref, err := name.NewTag(tag, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("-t %s: %w", tag, err)
	}

	entries, err := imageEntries(files, symlinks)
	if err != nil {
		return err
	}
	img, err := layerImage(entries)
	if err != nil {
		return err
	}
	if img, err = configure(img, v1.Config{User: user, WorkingDir: workdir, Env: envs}, entrypoint, cmd); err != nil {
		return err
	}

	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", out, err)
	}
	return os.Rename(tmp, out)
}

// imageEntries are the image's files and symlinks from the -file and -symlink
// flags, with the directories above them.
func imageEntries(files, symlinks list) (map[string]entry, error) {
	entries := map[string]entry{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = entry{mode: 0o755, typ: tar.TypeDir}
			}
		}
	}
	for _, f := range files {
		parts := strings.Split(f, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !path.IsAbs(parts[1]) {
			return nil, fmt.Errorf("-file %q: want HOSTPATH:IMAGEPATH[:MODE] with an absolute IMAGEPATH", f)
		}
		st, err := os.Stat(parts[0])
		if err != nil {
			return nil, fmt.Errorf("-file %q: %w", f, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("-file %q: %s is not a regular file", f, parts[0])
		}
		mode := int64(st.Mode().Perm())
		if len(parts) == 3 {
			if mode, err = strconv.ParseInt(parts[2], 8, 32); err != nil {
				return nil, fmt.Errorf("-file %q: mode: %w", f, err)
			}
		}
		p := path.Clean(parts[1])
		entries[p] = entry{hostPath: parts[0], mode: mode, typ: tar.TypeReg}
		addParents(p)
	}
	for _, s := range symlinks {
		imagePath, target, ok := strings.Cut(s, ":")
		if !ok || !path.IsAbs(imagePath) || target == "" {
			return nil, fmt.Errorf("-symlink %q: want IMAGEPATH:TARGET with an absolute IMAGEPATH", s)
		}
		p := path.Clean(imagePath)
		entries[p] = entry{target: target, mode: 0o777, typ: tar.TypeSymlink}
		addParents(p)
	}
	return entries, nil
}

// layerImage is an image of one layer holding the entries.
func layerImage(entries map[string]entry) (v1.Image, error) {
	layerTar, err := buildLayer(entries)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	return img, nil
}

// configure sets img's config to cfg with the entrypoint and cmd (JSON arrays,
// if set), for linux/amd64 and dated at the Unix epoch.
func configure(img v1.Image, cfg v1.Config, entrypoint, cmd string) (v1.Image, error) {
	if entrypoint != "" {
		if err := json.Unmarshal([]byte(entrypoint), &cfg.Entrypoint); err != nil {
			return nil, fmt.Errorf("-entrypoint %s: want a JSON array of strings: %w", entrypoint, err)
		}
	}
	if cmd != "" {
		if err := json.Unmarshal([]byte(cmd), &cfg.Cmd); err != nil {
			return nil, fmt.Errorf("-cmd %s: want a JSON array of strings: %w", cmd, err)
		}
	}
	img, err := mutate.Config(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	return img, nil
}

// buildLayer writes the entries, sorted by path (so parents come first), as an uncompressed tar.
func buildLayer(entries map[string]entry) ([]byte, error) {
	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	for _, p := range paths {
		e := entries[p]
		hdr := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: e.mode, Typeflag: e.typ, ModTime: epoch, Format: tar.FormatPAX}
		switch e.typ {
		case tar.TypeDir:
			hdr.Name += "/"
		case tar.TypeSymlink:
			hdr.Linkname = e.target
		case tar.TypeReg:
			data, err := os.ReadFile(e.hostPath)
			if err != nil {
				return nil, err
			}
			hdr.Size = int64(len(data))
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
