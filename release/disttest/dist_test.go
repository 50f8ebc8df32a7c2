package disttest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/images/archive"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/platforms"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"sigs.k8s.io/yaml"
)

// release is what `make release` was asked for.
type release struct {
	dist, version, image string
	platforms            []string // os/arch
}

func fromEnv(t *testing.T) release {
	t.Helper()
	dist := os.Getenv("RELEASE_DIST")
	if dist == "" {
		t.Skip("RELEASE_DIST is not set: run by make release")
	}
	r := release{dist: dist, version: os.Getenv("RELEASE_VERSION"), image: os.Getenv("RELEASE_IMAGE"), platforms: strings.Fields(os.Getenv("RELEASE_PLATFORMS"))}
	if r.version == "" || r.image == "" || len(r.platforms) == 0 {
		t.Fatal("RELEASE_VERSION, RELEASE_IMAGE and RELEASE_PLATFORMS must be set with RELEASE_DIST")
	}
	return r
}

func (r release) archive(platform string) string {
	return filepath.Join(r.dist, "remediator_"+r.version+"_"+strings.ReplaceAll(platform, "/", "_")+".tar.gz")
}

func (r release) linux() []string {
	var l []string
	for _, p := range r.platforms {
		if strings.HasPrefix(p, "linux/") {
			l = append(l, p)
		}
	}
	slices.Sort(l)
	return l
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// untar is the regular files of a (gzipped if gz) tarball by name, with their modes.
func untar(t *testing.T, path string, gz bool) (map[string][]byte, map[string]int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var r io.Reader = f
	if gz {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		r = zr
	}
	files, modes := map[string][]byte{}, map[string]int64{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files, modes
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		files[hdr.Name], modes[hdr.Name] = b, hdr.Mode
	}
}

// binaries are the remediator binaries of the archives by platform.
func binaries(t *testing.T, r release) map[string][]byte {
	t.Helper()
	bins := map[string][]byte{}
	for _, p := range r.platforms {
		files, modes := untar(t, r.archive(p), true)
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"LICENSE", "remediator"}) {
			t.Errorf("%s holds %v, want [LICENSE remediator]", r.archive(p), names)
		}
		if modes["remediator"] != 0o755 {
			t.Errorf("%s: remediator has mode %o, want 0755", r.archive(p), modes["remediator"])
		}
		if !bytes.Contains(files["LICENSE"], []byte("Apache License")) {
			t.Errorf("%s: LICENSE is not the Apache License", r.archive(p))
		}
		bins[p] = files["remediator"]
	}
	return bins
}

// TestArchives: one archive per platform and no other, each binary built for its platform,
// static, from ./cmd/remediator and stamped with the version; the host's says so when run.
func TestArchives(t *testing.T) {
	r := fromEnv(t)
	got, err := filepath.Glob(filepath.Join(r.dist, "remediator_*.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range r.platforms {
		want = append(want, r.archive(p))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("archives %v, want %v", got, want)
	}
	for p, bin := range binaries(t, r) {
		checkBinary(t, r, p, "remediator", bin)
	}
}

// checkBinary: bin is program (remediator, remediator-controller), built from
// ./cmd/<program> for platform, static, trimmed and stamped with the version; the
// host's says so when run.
func checkBinary(t *testing.T, r release, platform, program string, bin []byte) {
	t.Helper()
	info, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		t.Errorf("%s: build info: %v", platform, err)
		return
	}
	if info.Path != "github.com/remediator/remediator/cmd/"+program {
		t.Errorf("%s: %s built from %s, want ./cmd/%s", platform, program, info.Path, program)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for k, v := range map[string]string{"GOOS": strings.Split(platform, "/")[0], "GOARCH": strings.Split(platform, "/")[1], "CGO_ENABLED": "0", "-trimpath": "true"} {
		if settings[k] != v {
			t.Errorf("%s: build setting %s=%q, want %q", platform, k, settings[k], v)
		}
	}
	// -trimpath leaves -ldflags out of the build info: the -X stamp is the string itself.
	if !bytes.Contains(bin, []byte(r.version)) {
		t.Errorf("%s: the binary does not hold the version %s", platform, r.version)
	}
	if platform != runtime.GOOS+"/"+runtime.GOARCH {
		return
	}
	path := filepath.Join(t.TempDir(), program)
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "version").CombinedOutput()
	if want := program + " " + r.version + "\n"; err != nil || string(out) != want {
		t.Errorf("%s %s version: %q (%v), want %q", platform, program, out, err, want)
	}
}

// TestImage: the OCI layout holds one image index named RELEASE_IMAGE:version with one
// image per linux platform, each of the archive's binary; the tarball is the same layout.
func TestImage(t *testing.T) {
	r := fromEnv(t)
	dir := filepath.Join(r.dist, "remediator-image")
	idx := checkLayout(t, r, dir)
	bins := binaries(t, r)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range m.Manifests {
		if d.Platform == nil {
			t.Errorf("manifest %s has no platform", d.Digest)
			continue
		}
		p := d.Platform.OS + "/" + d.Platform.Architecture
		platforms = append(platforms, p)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, r, p, img, bins[p])
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, r.linux()) {
		t.Errorf("the image index's platforms are %v, want %v", platforms, r.linux())
	}

	// The tarball: the same layout, which `ctr images import` reads.
	tarDir := t.TempDir()
	files, _ := untar(t, filepath.Join(r.dist, "remediator-image_"+r.version+".tar"), false)
	for name, b := range files {
		if want, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(b, want) {
			t.Errorf("the image tarball's %s differs from the layout's (%v)", name, err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tarDir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tarDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkLayout(t, r, tarDir)
	checkContainerdImport(t, r, idx)
}

// checkContainerdImport imports the image tarball with containerd's importer, the one
// `ctr images import` runs, into a content store, and checks that containerd names the
// image RELEASE_IMAGE:version and picks from it each platform's image of want (the
// layout's index).
func checkContainerdImport(t *testing.T, r release, want v1.ImageIndex) {
	t.Helper()
	ctx := context.Background()
	store, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(r.dist, "remediator-image_"+r.version+".tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	desc, err := archive.ImportIndex(ctx, store, f)
	if err != nil {
		t.Fatalf("containerd's import: %v", err)
	}
	b, err := content.ReadBlob(ctx, store, desc)
	if err != nil {
		t.Fatal(err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("containerd's import: %d images (%v), want 1", len(idx.Manifests), err)
	}
	img := idx.Manifests[0]
	if got := img.Annotations[images.AnnotationImageName]; got != r.image+":"+r.version {
		t.Errorf("containerd's import names the image %q, want %s:%s", got, r.image, r.version)
	}
	wm, err := want.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range wm.Manifests {
		p := d.Platform.OS + "/" + d.Platform.Architecture
		wantImg, err := want.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		wantConfig, err := wantImg.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		m, err := images.Manifest(ctx, store, img, platforms.Only(platforms.MustParse(p)))
		if err != nil {
			t.Errorf("containerd's import, %s: %v", p, err)
			continue
		}
		if m.Config.Digest.String() != wantConfig.String() || len(m.Layers) != 1 {
			t.Errorf("containerd's import, %s: config %s with %d layers, want %s with one", p, m.Config.Digest, len(m.Layers), wantConfig)
		}
	}
}

// checkLayout returns the one image index of the OCI layout dir, checked for its name
// and its blobs' digests.
func checkLayout(t *testing.T, r release, dir string) v1.ImageIndex {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		t.Fatalf("%s: index.json has %d manifests, want one image index", dir, len(m.Manifests))
	}
	d := m.Manifests[0]
	if got, want := d.Annotations["io.containerd.image.name"], r.image+":"+r.version; got != want {
		t.Errorf("%s: image name %q, want %q", dir, got, want)
	}
	if got := d.Annotations["org.opencontainers.image.ref.name"]; got != r.version {
		t.Errorf("%s: ref name %q, want %q", dir, got, r.version)
	}
	idx, err := top.ImageIndex(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Errorf("%s: %v", dir, err)
	}
	return idx
}

// checkImage: the image runs /remediator-controller as 65532, with no default
// arguments; /remediator is bin, the archive's CLI (the chart's sync agent runs it),
// and /remediator-controller the controller built for platform.
func checkImage(t *testing.T, r release, platform string, img v1.Image, bin []byte) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS+"/"+cf.Architecture != platform {
		t.Errorf("%s: the image's config says %s/%s", platform, cf.OS, cf.Architecture)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/remediator-controller"}) || len(cf.Config.Cmd) != 0 || cf.Config.User != "65532:65532" {
		t.Errorf("%s: entrypoint %v cmd %v user %q, want [/remediator-controller] [] 65532:65532", platform, cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: %d layers (%v), want 1", platform, len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: reading the image's layer: %v", platform, err)
		}
		if hdr.Name == "remediator" || hdr.Name == "remediator-controller" {
			if files[hdr.Name], err = io.ReadAll(tr); err != nil {
				t.Fatalf("%s: reading /%s: %v", platform, hdr.Name, err)
			}
		}
	}
	if cli, ok := files["remediator"]; !ok || sha(cli) != sha(bin) {
		t.Errorf("%s: the image's /remediator is not the archive's binary (present: %t)", platform, ok)
	}
	if ctl, ok := files["remediator-controller"]; !ok {
		t.Errorf("%s: no /remediator-controller in the image", platform)
	} else {
		checkBinary(t, r, platform, "remediator-controller", ctl)
	}
}

// TestChart: the packaged chart carries the chart's own version and the release's as
// appVersion, which the image tag defaults to, and the released image's repository.
func TestChart(t *testing.T) {
	r := fromEnv(t)
	var src struct{ Version string }
	if err := yaml.Unmarshal(readFile(t, filepath.Join("..", "..", "charts", "remediator", "Chart.yaml")), &src); err != nil {
		t.Fatal(err)
	}
	files, _ := untar(t, filepath.Join(r.dist, "remediator-"+src.Version+".tgz"), true)
	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(files["remediator/Chart.yaml"], &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != src.Version || chart.AppVersion != r.version {
		t.Errorf("packaged Chart.yaml: version %q appVersion %q, want %q and %q", chart.Version, chart.AppVersion, src.Version, r.version)
	}
	var values struct {
		Image struct{ Repository, Tag string }
	}
	if err := yaml.Unmarshal(files["remediator/values.yaml"], &values); err != nil {
		t.Fatal(err)
	}
	if values.Image.Repository != r.image || values.Image.Tag != "" {
		t.Errorf("packaged values: image %s:%q, want %s with the tag empty (the appVersion)", values.Image.Repository, values.Image.Tag, r.image)
	}
}

// TestKrewManifest: one platform per archive, with the archive's sha256 and name.
func TestKrewManifest(t *testing.T) {
	r := fromEnv(t)
	var plugin struct {
		Metadata struct{ Name string }
		Spec     struct {
			Version   string
			Platforms []struct {
				Selector struct{ MatchLabels map[string]string } `json:"selector"`
				URI      string                                  `json:"uri"`
				SHA256   string                                  `json:"sha256"`
				Bin      string                                  `json:"bin"`
			}
		}
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(r.dist, "remediator.yaml")), &plugin); err != nil {
		t.Fatal(err)
	}
	if plugin.Metadata.Name != "remediator" || plugin.Spec.Version != r.version {
		t.Errorf("krew manifest: plugin %q version %q, want remediator %s", plugin.Metadata.Name, plugin.Spec.Version, r.version)
	}
	var platforms []string
	for _, p := range plugin.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		platforms = append(platforms, platform)
		archive := r.archive(platform)
		if !strings.HasSuffix(p.URI, "/"+filepath.Base(archive)) || p.SHA256 != sha(readFile(t, archive)) || p.Bin != "remediator" {
			t.Errorf("krew manifest, %s: uri %s sha256 %s bin %s; want .../%s, its sha256, remediator", platform, p.URI, p.SHA256, p.Bin, filepath.Base(archive))
		}
	}
	slices.Sort(platforms)
	if want := slices.Sorted(slices.Values(r.platforms)); !slices.Equal(platforms, want) {
		t.Errorf("krew manifest platforms %v, want %v", platforms, want)
	}
}

// TestCompletions: one script per shell, completing remediator's commands.
func TestCompletions(t *testing.T) {
	r := fromEnv(t)
	for _, sh := range []string{"bash", "zsh", "fish"} {
		b := readFile(t, filepath.Join(r.dist, "completions", "remediator."+sh))
		if !bytes.Contains(b, []byte("remediator")) || len(b) < 100 {
			t.Errorf("completions/remediator.%s is not a completion script for remediator (%d bytes)", sh, len(b))
		}
	}
}

// TestSBOM: a CycloneDX document of each binary's version and modules: the CLI's,
// and the controller's, which the image holds besides the CLI.
func TestSBOM(t *testing.T) {
	r := fromEnv(t)
	for _, tc := range []struct{ file, has, hasNot string }{
		// The CLI links the sync agent's gitops-engine; the controller does not.
		{file: "sbom.cdx.json", has: "github.com/argoproj/gitops-engine"},
		{file: "sbom-controller.cdx.json", has: "sigs.k8s.io/controller-runtime", hasNot: "github.com/argoproj/gitops-engine"},
	} {
		var bom struct {
			BOMFormat string `json:"bomFormat"`
			Metadata  struct {
				Component struct{ Name, Version string }
			}
			Components []struct{ Name, Version string }
		}
		if err := json.Unmarshal(readFile(t, filepath.Join(r.dist, tc.file)), &bom); err != nil {
			t.Fatal(err)
		}
		if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Version != r.version {
			t.Errorf("%s: format %q, component version %q; want CycloneDX, %s", tc.file, bom.BOMFormat, bom.Metadata.Component.Version, r.version)
		}
		has := func(name string) bool {
			return slices.ContainsFunc(bom.Components, func(c struct{ Name, Version string }) bool { return c.Name == name })
		}
		if !has("github.com/spf13/cobra") || !has(tc.has) {
			t.Errorf("%s: %d components, without github.com/spf13/cobra or %s", tc.file, len(bom.Components), tc.has)
		}
		if tc.hasNot != "" && has(tc.hasNot) {
			t.Errorf("%s: lists %s, which that binary does not link", tc.file, tc.hasNot)
		}
	}
}

// TestChecksums: checksums.txt lists every other file of DIST with its SHA-256.
func TestChecksums(t *testing.T) {
	r := fromEnv(t)
	listed := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, filepath.Join(r.dist, "checksums.txt"))))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Errorf("checksums.txt: %q is not in sha256sum's format", sc.Text())
		}
		listed[name] = sum
	}
	err := filepath.WalkDir(r.dist, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(r.dist, p)
		if err != nil || rel == "checksums.txt" {
			return err
		}
		rel = filepath.ToSlash(rel)
		if listed[rel] != sha(readFile(t, p)) {
			t.Errorf("checksums.txt: %s has %q, want its sha256", rel, listed[rel])
		}
		delete(listed, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range listed {
		t.Errorf("checksums.txt lists %s, which is not in %s", name, r.dist)
	}
}
