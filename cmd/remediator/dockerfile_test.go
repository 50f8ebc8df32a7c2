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
// is (only its output path moved into a temporary directory), from the repository
// root, and the binary it makes is inspected.
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
	for _, want := range []string{" -trimpath ", "-X main.version=${VERSION}", " -o /out/remediator ", "-s -w"} {
		assert.Contains(t, line.Args, want, "Dockerfile:%d: the build line lacks %q", line.Line, want)
	}
	assert.True(t, strings.HasSuffix(line.Args, " ./cmd/remediator"), "Dockerfile:%d: want the build of ./cmd/remediator, got %s", line.Line, line.Args)
	assert.True(t, slices.ContainsFunc(build.Instructions, func(in dockerInstruction) bool {
		return in.Cmd == "ARG" && strings.HasPrefix(in.Args, "VERSION") && in.Line < line.Line
	}), "the build stage declares no ARG VERSION before its build line, so --build-arg VERSION would not reach it")
	checkBuildContext(t, root, build)

	// The final stage: the binary alone, as a non-root user.
	assert.Contains(t, final.From, "distroless", "final stage FROM %s: want a distroless :nonroot base", final.From)
	assert.True(t, strings.HasSuffix(final.From, ":nonroot"), "final stage FROM %s: want a distroless :nonroot base", final.From)
	if users := final.all("USER"); assert.Len(t, users, 1, "final stage USER") {
		assert.Equal(t, "65532:65532", users[0].Args, "final stage USER")
	}
	copies := final.all("COPY")
	if assert.Len(t, copies, 1, "final stage: want only `COPY --from=build /out/remediator /remediator`") {
		assert.Equal(t, "--from=build /out/remediator /remediator", copies[0].Args, "final stage COPY")
	}
	for _, in := range final.Instructions {
		assert.Contains(t, []string{"COPY", "USER", "ENTRYPOINT", "CMD", "LABEL"}, in.Cmd, "Dockerfile:%d: unexpected %s in the final stage", in.Line, in.Cmd)
	}
	execForm := func(cmd string) []string {
		ins := final.all(cmd)
		if !assert.Len(t, ins, 1, "final stage: want one %s", cmd) {
			return nil
		}
		var v []string
		assert.NoError(t, json.Unmarshal([]byte(ins[0].Args), &v), "Dockerfile:%d: %s is not in exec form", ins[0].Line, cmd)
		return v
	}
	assert.Equal(t, []string{"/remediator"}, execForm("ENTRYPOINT"), "ENTRYPOINT")
	assert.Equal(t, []string{"controller"}, execForm("CMD"), "CMD")

	// Run the build line.
	out := filepath.Join(t.TempDir(), "remediator")
	script := strings.Replace(line.Args, " -o /out/remediator ", " -o "+out+" ", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION=dockerfile-test")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "running the Dockerfile's build line %q:\n%s", script, b)

	b, err = exec.CommandContext(ctx, "go", "version", "-m", out).CombinedOutput()
	require.NoError(t, err, "go version -m:\n%s", b)
	info := string(b)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\s*build\s+CGO_ENABLED=0$`),
		regexp.MustCompile(`(?m)^\s*build\s+-trimpath=true$`),
		regexp.MustCompile(`(?m)^\s*path\s+github\.com/remediator/remediator/cmd/remediator$`),
	} {
		assert.Regexp(t, want, info, "go version -m: no line matching %s", want)
	}
	assert.NotContains(t, info, root, "the binary's build info mentions the source path despite -trimpath")

	// Go leaves -ldflags out of the build info when -trimpath is set (go.dev/issue/52372),
	// so their effects are checked instead: -X by `version` below, -s -w here (no
	// symbol table, no DWARF). And static: no ELF interpreter, so it runs on
	// distroless/static.
	if f, err := elf.Open(out); assert.NoError(t, err, "reading the binary as ELF") {
		for _, p := range f.Progs {
			assert.NotEqual(t, elf.PT_INTERP, p.Type, "the binary is dynamically linked (it has a PT_INTERP segment)")
		}
		for _, s := range f.Sections {
			assert.False(t, s.Name == ".symtab" || strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_"),
				"the binary has section %s despite -ldflags \"-s -w\"", s.Name)
		}
		_ = f.Close()
	}

	b, err = exec.CommandContext(ctx, out, "version").CombinedOutput()
	require.NoError(t, err, "%s version:\n%s", out, b)
	assert.Equal(t, "remediator dockerfile-test\n", string(b), "version output")
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
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}`, "./cmd/remediator")
	cmd.Dir = root
	b, err := cmd.Output()
	require.NoError(t, err, "go list -deps ./cmd/remediator")
	for dir := range strings.FieldsSeq(string(b)) {
		rel, err := filepath.Rel(root, dir)
		require.NoError(t, err)
		rel = filepath.ToSlash(rel)
		assert.True(t, slices.ContainsFunc(copied, func(c string) bool { return rel == c || strings.HasPrefix(rel, c+"/") }),
			"package directory %s, which ./cmd/remediator imports, is not copied into the build stage (COPY %s/ %s/)", rel, strings.Split(rel, "/")[0], strings.Split(rel, "/")[0])
	}
}
