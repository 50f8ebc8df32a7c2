// Command ociimage builds container images from scratch, out of files on the host, without
// a container engine or a registry. It writes either
//
//   - one linux/amd64 image as a docker-archive tarball (what `docker save` writes, which
//     `ctr -n k8s.io images import` and `docker load` read): the local cluster's real nodes
//     (test/realnode) import these, and `make image` builds the controller's image so; or
//   - a multi-platform image (an image index, one image per -platform) as an OCI image
//     layout directory and/or that layout as a tarball, which `ctr images import` reads
//     (importing the host's platform unless told otherwise): `make release` builds the
//     released image so.
//
// Usage:
//
//	ociimage -o OUT.tar -t NAME:TAG [-file HOSTPATH:IMAGEPATH[:MODE]]... [-symlink IMAGEPATH:TARGET]...
//	         [-entrypoint JSONARRAY] [-cmd JSONARRAY] [-user UID:GID] [-workdir DIR] [-env K=V]...
//	ociimage -oci-layout DIR [-oci-tar OUT.tar] -t NAME:TAG -platform OS/ARCH [-platform OS/ARCH]...
//	         [-file ...]... (the same image flags)
//
// MODE is octal (e.g. 0755) and defaults to the host file's permission bits. In a HOSTPATH,
// {os} and {arch} stand for each -platform's, so that one -file flag names each platform's
// binary. Parent directories are created in the image with mode 0755; every entry is owned
// by root and dated at the Unix epoch, so the same inputs give the same image digests.
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
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/remediator/remediator/release/internal/reprotar"
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

// imageFlags are what every platform's image is made of.
type imageFlags struct {
	entrypoint, cmd, user, workdir string
	files, symlinks, envs          list
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

const usage = "usage: ociimage {-o OUT.tar | -oci-layout DIR [-oci-tar OUT.tar] -platform OS/ARCH} -t NAME:TAG " +
	"[-file HOSTPATH:IMAGEPATH[:MODE]] [-symlink IMAGEPATH:TARGET] [-entrypoint JSON] [-cmd JSON] [-user UID:GID] [-workdir DIR] [-env K=V] (-file, -symlink, -env and -platform repeat)"

func run(args []string) error {
	flags := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	var (
		out, layoutDir, ociTar, tag string
		platforms                   list
		f                           imageFlags
	)
	flags.StringVar(&out, "o", "", "output docker-archive tarball (one linux/amd64 image)")
	flags.StringVar(&layoutDir, "oci-layout", "", "output OCI image layout directory (an index of the -platform images)")
	flags.StringVar(&ociTar, "oci-tar", "", "output tarball of the OCI image layout (with -oci-layout)")
	flags.Var(&platforms, "platform", "OS/ARCH of an image in the index (repeatable; with -oci-layout)")
	flags.StringVar(&tag, "t", "", "image reference NAME:TAG written into the archive")
	flags.Var(&f.files, "file", "HOSTPATH:IMAGEPATH[:MODE] (repeatable; {os} and {arch} in HOSTPATH are each platform's)")
	flags.Var(&f.symlinks, "symlink", "IMAGEPATH:TARGET (repeatable)")
	flags.StringVar(&f.entrypoint, "entrypoint", "", `entrypoint as a JSON array, e.g. ["/pause"]`)
	flags.StringVar(&f.cmd, "cmd", "", "cmd as a JSON array")
	flags.StringVar(&f.user, "user", "", "UID:GID the container runs as")
	flags.StringVar(&f.workdir, "workdir", "", "working directory")
	flags.Var(&f.envs, "env", "K=V (repeatable)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if tag == "" || flags.NArg() > 0 || (out == "") == (layoutDir == "") || (layoutDir != "") != (len(platforms) > 0) || (ociTar != "" && layoutDir == "") {
		return errors.New(usage)
	}
	ref, err := name.NewTag(tag, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("-t %s: %w", tag, err)
	}
	if out != "" {
		img, err := platformImage(f, v1.Platform{OS: "linux", Architecture: "amd64"}, false)
		if err != nil {
			return err
		}
		tmp := out + ".tmp"
		if err := tarball.WriteToFile(tmp, ref, img); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("write %s: %w", out, err)
		}
		return os.Rename(tmp, out)
	}
	idx, err := platformIndex(f, platforms)
	if err != nil {
		return err
	}
	if err := writeLayout(layoutDir, ref, idx); err != nil {
		return err
	}
	if ociTar != "" {
		return tarDir(layoutDir, ociTar)
	}
	return nil
}

// platformIndex is the image index of one image per platform.
func platformIndex(f imageFlags, platforms list) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		osName, arch, ok := strings.Cut(p, "/")
		if !ok || osName == "" || arch == "" || strings.Contains(arch, "/") {
			return nil, fmt.Errorf("-platform %q: want OS/ARCH, e.g. linux/arm64", p)
		}
		plat := v1.Platform{OS: osName, Architecture: arch}
		img, err := platformImage(f, plat, true)
		if err != nil {
			return nil, fmt.Errorf("-platform %s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	return idx, nil
}

// writeLayout writes idx as DIR's one image, named ref: containerd takes the name from
// io.containerd.image.name, OCI tools the tag from org.opencontainers.image.ref.name.
func writeLayout(dir string, ref name.Tag, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("oci layout %s: %w", dir, err)
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref.Name(),
		"org.opencontainers.image.ref.name": ref.TagStr(),
	}))
}

// tarDir writes the files under dir into the tarball out, sorted by path, owned by root and
// dated at the Unix epoch.
func tarDir(dir, out string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	return reprotar.WriteFile(out, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		for _, p := range paths {
			if err := tarFile(tw, dir, p); err != nil {
				return err
			}
		}
		return tw.Close()
	})
}

func tarFile(tw *tar.Writer, dir, p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return err
	}
	name := filepath.ToSlash(rel)
	if st.IsDir() {
		return tw.WriteHeader(reprotar.Header(name+"/", tar.TypeDir, 0o755, 0))
	}
	return reprotar.AddFile(tw, name, p, 0o644)
}

// platformImage is the image of the flags for platform p, of OCI media types if oci.
func platformImage(f imageFlags, p v1.Platform, oci bool) (v1.Image, error) {
	files := make(list, len(f.files))
	for i, file := range f.files {
		files[i] = strings.NewReplacer("{os}", p.OS, "{arch}", p.Architecture).Replace(file)
	}
	entries, err := imageEntries(files, f.symlinks)
	if err != nil {
		return nil, err
	}
	img, err := layerImage(entries, oci)
	if err != nil {
		return nil, err
	}
	return configure(img, v1.Config{User: f.user, WorkingDir: f.workdir, Env: f.envs}, f.entrypoint, f.cmd, p)
}

// configure sets img's config to cfg with the entrypoint and cmd (JSON arrays, if set),
// for platform p and dated at the Unix epoch.
func configure(img v1.Image, cfg v1.Config, entrypoint, cmd string, p v1.Platform) (v1.Image, error) {
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
	cf.Architecture, cf.OS, cf.Variant = p.Architecture, p.OS, p.Variant
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	return img, nil
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

// layerImage is an image of one layer holding the entries, of OCI media types if oci,
// else of Docker's (for a docker-archive).
func layerImage(entries map[string]entry, oci bool) (v1.Image, error) {
	base, layerType := empty.Image, types.DockerLayer
	if oci {
		base = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
		layerType = types.OCILayer
	}
	layerTar, err := buildLayer(entries)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithMediaType(layerType))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
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
