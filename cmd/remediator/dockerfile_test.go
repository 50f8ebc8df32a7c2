package main

import (
	"context"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDockerfile checks the image's build the way it runs in `docker build`,
// without a container engine: the build stage's single `go build` line is run as it
// is (only its output directory moved into a temporary directory), from the
// repository root, and the two binaries it makes are inspected.
func TestDockerfile(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	require.Len(t, stages, 2, "want a build stage and a final stage")
	build, final := stages[0], stages[1]

	// The build stage.
	assert.True(t, strings.HasPrefix(build.From, "golang:"), "build stage: FROM %s, want golang:<version>", build.From)
	assert.Equal(t, "build", build.Name, "build stage: FROM %s AS %s, want AS build", build.From, build.Name)
	var goBuilds []dockerInstruction
	for _, in := range build.all("RUN") {
		if strings.Contains(in.Args, "go build") {
			goBuilds = append(goBuilds, in)
		}
	}
	require.Len(t, goBuilds, 1, "want exactly one RUN ... go build in the build stage")
	line := goBuilds[0]
	assert.True(t, strings.HasPrefix(line.Args, "CGO_ENABLED=0 go build "), "Dockerfile:%d: want `RUN CGO_ENABLED=0 go build ...`, got %q", line.Line, line.Args)
	for _, want := range []string{" -trimpath ", "-X main.version=${VERSION}", " -o /out/ ", "-s -w"} {
		assert.Contains(t, line.Args, want, "Dockerfile:%d: the build line lacks %q", line.Line, want)
	}
	assert.True(t, strings.HasSuffix(line.Args, " ./cmd/remediator ./cmd/remediator-controller"),
		"Dockerfile:%d: want the build of ./cmd/remediator and ./cmd/remediator-controller, got %s", line.Line, line.Args)
	assert.True(t, slices.ContainsFunc(build.Instructions, func(in dockerInstruction) bool {
		return in.Cmd == "ARG" && strings.HasPrefix(in.Args, "VERSION") && in.Line < line.Line
	}), "the build stage declares no ARG VERSION before its build line, so --build-arg VERSION would not reach it")
	checkBuildContext(t, root, build)

	// The final stage: the two binaries alone, as a non-root user.
	assert.Contains(t, final.From, "distroless", "final stage FROM %s: want a distroless :nonroot base", final.From)
	assert.True(t, strings.HasSuffix(final.From, ":nonroot"), "final stage FROM %s: want a distroless :nonroot base", final.From)
	if users := final.all("USER"); assert.Len(t, users, 1, "final stage USER") {
		assert.Equal(t, "65532:65532", users[0].Args, "final stage USER")
	}
	var copies []string
	for _, in := range final.all("COPY") {
		copies = append(copies, in.Args)
	}
	assert.ElementsMatch(t, []string{"--from=build /out/remediator-controller /remediator-controller", "--from=build /out/remediator /remediator"},
		copies, "final stage COPY: want the two binaries only")
	for _, in := range final.Instructions {
		assert.Contains(t, []string{"COPY", "USER", "ENTRYPOINT", "CMD", "LABEL"}, in.Cmd, "Dockerfile:%d: unexpected %s in the final stage", in.Line, in.Cmd)
	}
	if entrypoints := final.all("ENTRYPOINT"); assert.Len(t, entrypoints, 1, "final stage: want one ENTRYPOINT") {
		var v []string
		assert.NoError(t, json.Unmarshal([]byte(entrypoints[0].Args), &v), "Dockerfile:%d: ENTRYPOINT is not in exec form", entrypoints[0].Line)
		assert.Equal(t, []string{"/remediator-controller"}, v, "ENTRYPOINT")
	}
	// The controller takes no arguments but its flags: a CMD would be one.
	assert.Empty(t, final.all("CMD"), "final stage: CMD")

	// Run the build line.
	outDir := t.TempDir()
	script := strings.Replace(line.Args, " -o /out/ ", " -o "+outDir+"/ ", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION=dockerfile-test")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "running the Dockerfile's build line %q:\n%s", script, b)

	for _, program := range []string{"remediator", "remediator-controller"} {
		checkDockerfileBinary(t, ctx, root, program, filepath.Join(outDir, program))
	}
}

// checkDockerfileBinary inspects the binary program that the Dockerfile's build line
// wrote at out.
func checkDockerfileBinary(t *testing.T, ctx context.Context, root, program, out string) {
	t.Helper()
	b, err := exec.CommandContext(ctx, "go", "version", "-m", out).CombinedOutput()
	require.NoError(t, err, "go version -m %s:\n%s", program, b)
	info := string(b)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\s*build\s+CGO_ENABLED=0$`),
		regexp.MustCompile(`(?m)^\s*build\s+-trimpath=true$`),
		regexp.MustCompile(`(?m)^\s*path\s+github\.com/remediator/remediator/cmd/` + regexp.QuoteMeta(program) + `$`),
	} {
		assert.Regexp(t, want, info, "go version -m %s: no line matching %s", program, want)
	}
	assert.NotContains(t, info, root, "%s: the build info mentions the source path despite -trimpath", program)

	// Go leaves -ldflags out of the build info when -trimpath is set (go.dev/issue/52372),
	// so their effects are checked instead: -X by `version` below, -s -w here (no
	// symbol table, no DWARF). And static: no ELF interpreter, so it runs on
	// distroless/static.
	if f, err := elf.Open(out); assert.NoError(t, err, "reading %s as ELF", program) {
		for _, p := range f.Progs {
			assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s is dynamically linked (it has a PT_INTERP segment)", program)
		}
		for _, s := range f.Sections {
			assert.False(t, s.Name == ".symtab" || strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_"),
				"%s has section %s despite -ldflags \"-s -w\"", program, s.Name)
		}
		_ = f.Close()
	}

	b, err = exec.CommandContext(ctx, out, "version").CombinedOutput()
	require.NoError(t, err, "%s version:\n%s", out, b)
	assert.Equal(t, program+" dockerfile-test\n", string(b), "%s version output", program)
}

// checkBuildContext: the build stage copies go.mod and go.sum and every directory
// holding a package of this module that the binary is built from (with its embedded
// files), so that `docker build` compiles what this test compiled from the full
// checkout.
func checkBuildContext(t *testing.T, root string, build dockerStage) {
	t.Helper()
	var copied []string
	for _, in := range build.all("COPY") {
		fields := strings.Fields(in.Args)
		if !assert.True(t, len(fields) >= 2 && !strings.HasPrefix(fields[0], "--"), "Dockerfile:%d: unexpected COPY %s in the build stage", in.Line, in.Args) {
			continue
		}
		for _, src := range fields[:len(fields)-1] {
			assert.NotContains(t, []string{".", "./"}, src, "Dockerfile:%d: COPY . copies the whole checkout (bin/ holds the Kubernetes binaries); copy the source directories", in.Line)
			copied = append(copied, strings.TrimSuffix(strings.TrimPrefix(src, "./"), "/"))
		}
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		assert.Contains(t, copied, f, "the build stage does not copy %s", f)
	}
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}`, "./cmd/remediator", "./cmd/remediator-controller")
	cmd.Dir = root
	b, err := cmd.Output()
	require.NoError(t, err, "go list -deps ./cmd/remediator ./cmd/remediator-controller")
	for dir := range strings.FieldsSeq(string(b)) {
		rel, err := filepath.Rel(root, dir)
		require.NoError(t, err)
		rel = filepath.ToSlash(rel)
		assert.True(t, slices.ContainsFunc(copied, func(c string) bool { return rel == c || strings.HasPrefix(rel, c+"/") }),
			"package directory %s, which the binaries import, is not copied into the build stage (COPY %s/ %s/)", rel, strings.Split(rel, "/")[0], strings.Split(rel, "/")[0])
	}
}
