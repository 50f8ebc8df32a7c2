package main

import (
	"bufio"
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

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/remediator/remediator/test/helmchart"
)

// dockerInstruction is one instruction of a Dockerfile, continuation lines joined.
type dockerInstruction struct {
	Line int    // where it starts
	Cmd  string // upper case: FROM, RUN, COPY, ...
	Args string
}

// dockerStage is one FROM ... section.
type dockerStage struct {
	From         string // the image
	Name         string // AS name
	Instructions []dockerInstruction
}

func (s dockerStage) all(cmd string) []dockerInstruction {
	var out []dockerInstruction
	for _, in := range s.Instructions {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// parseDockerfile reads the subset of the Dockerfile syntax this repository uses:
// comments, blank lines, backslash continuations, one instruction per line.
func parseDockerfile(t *testing.T, path string) []dockerStage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []dockerStage
	var cur strings.Builder
	start, n := 0, 0
	flush := func() {
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			return
		}
		cmd, args, _ := strings.Cut(text, " ")
		in := dockerInstruction{Line: start, Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args)}
		if in.Cmd == "FROM" {
			fields := strings.Fields(in.Args)
			st := dockerStage{From: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.Name = fields[2]
			}
			stages = append(stages, st)
			return
		}
		if len(stages) == 0 {
			if in.Cmd != "ARG" {
				t.Fatalf("Dockerfile:%d: %s before the first FROM", in.Line, in.Cmd)
			}
			return
		}
		stages[len(stages)-1].Instructions = append(stages[len(stages)-1].Instructions, in)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	flush()
	return stages
}

// TestDockerfile checks the image's build the way it runs in `docker build`,
// without a container engine: the build stage's single `go build` line is run as it
// is (only its output path moved into a temporary directory), from the repository
// root, and the binary it makes is inspected.
func TestDockerfile(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	if len(stages) != 2 {
		t.Fatalf("want a build stage and a final stage, got %d stages", len(stages))
	}
	build, final := stages[0], stages[1]

	// The build stage.
	if !strings.HasPrefix(build.From, "golang:") || build.Name != "build" {
		t.Errorf("build stage: FROM %s AS %s, want golang:<version> AS build", build.From, build.Name)
	}
	var goBuilds []dockerInstruction
	for _, in := range build.all("RUN") {
		if strings.Contains(in.Args, "go build") {
			goBuilds = append(goBuilds, in)
		}
	}
	if len(goBuilds) != 1 {
		t.Fatalf("want exactly one RUN ... go build in the build stage, got %d", len(goBuilds))
	}
	line := goBuilds[0]
	if !strings.HasPrefix(line.Args, "CGO_ENABLED=0 go build ") {
		t.Errorf("Dockerfile:%d: want `RUN CGO_ENABLED=0 go build ...`, got %q", line.Line, line.Args)
	}
	for _, want := range []string{" -trimpath ", "-X main.version=${VERSION}", " -o /out/remediator ", "-s -w"} {
		if !strings.Contains(line.Args, want) {
			t.Errorf("Dockerfile:%d: the build line lacks %q: %s", line.Line, want, line.Args)
		}
	}
	if !strings.HasSuffix(line.Args, " ./cmd/remediator") {
		t.Errorf("Dockerfile:%d: want the build of ./cmd/remediator, got %s", line.Line, line.Args)
	}
	if !slices.ContainsFunc(build.Instructions, func(in dockerInstruction) bool {
		return in.Cmd == "ARG" && strings.HasPrefix(in.Args, "VERSION") && in.Line < line.Line
	}) {
		t.Error("the build stage declares no ARG VERSION before its build line, so --build-arg VERSION would not reach it")
	}
	checkBuildContext(t, root, build)

	// The final stage: the binary alone, as a non-root user.
	if !strings.Contains(final.From, "distroless") || !strings.HasSuffix(final.From, ":nonroot") {
		t.Errorf("final stage FROM %s: want a distroless :nonroot base", final.From)
	}
	if users := final.all("USER"); len(users) != 1 || users[0].Args != "65532:65532" {
		t.Errorf("final stage USER %v, want 65532:65532", users)
	}
	copies := final.all("COPY")
	if len(copies) != 1 || copies[0].Args != "--from=build /out/remediator /remediator" {
		t.Errorf("final stage: want only `COPY --from=build /out/remediator /remediator`, got %v", copies)
	}
	for _, in := range final.Instructions {
		if !slices.Contains([]string{"COPY", "USER", "ENTRYPOINT", "CMD", "LABEL"}, in.Cmd) {
			t.Errorf("Dockerfile:%d: unexpected %s in the final stage", in.Line, in.Cmd)
		}
	}
	execForm := func(cmd string) []string {
		ins := final.all(cmd)
		if len(ins) != 1 {
			t.Errorf("final stage: want one %s, got %d", cmd, len(ins))
			return nil
		}
		var v []string
		if err := json.Unmarshal([]byte(ins[0].Args), &v); err != nil {
			t.Errorf("Dockerfile:%d: %s is not in exec form: %v", ins[0].Line, cmd, err)
		}
		return v
	}
	if ep := execForm("ENTRYPOINT"); !slices.Equal(ep, []string{"/remediator"}) {
		t.Errorf("ENTRYPOINT %q, want [/remediator]", ep)
	}
	if cmd := execForm("CMD"); !slices.Equal(cmd, []string{"controller"}) {
		t.Errorf("CMD %q, want [controller]", cmd)
	}

	// Run the build line.
	out := filepath.Join(t.TempDir(), "remediator")
	script := strings.Replace(line.Args, " -o /out/remediator ", " -o "+out+" ", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION=dockerfile-test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("running the Dockerfile's build line %q: %v\n%s", script, err, b)
	}

	b, err := exec.CommandContext(ctx, "go", "version", "-m", out).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, b)
	}
	info := string(b)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\s*build\s+CGO_ENABLED=0$`),
		regexp.MustCompile(`(?m)^\s*build\s+-trimpath=true$`),
		regexp.MustCompile(`(?m)^\s*path\s+github\.com/remediator/remediator/cmd/remediator$`),
	} {
		if !want.MatchString(info) {
			t.Errorf("go version -m: no line matching %s in\n%s", want, info)
		}
	}
	if strings.Contains(info, root) {
		t.Errorf("the binary's build info mentions the source path %s despite -trimpath", root)
	}

	// Go leaves -ldflags out of the build info when -trimpath is set (go.dev/issue/52372),
	// so their effects are checked instead: -X by `version` below, -s -w here (no
	// symbol table, no DWARF). And static: no ELF interpreter, so it runs on
	// distroless/static.
	if f, err := elf.Open(out); err == nil {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Error("the binary is dynamically linked (it has a PT_INTERP segment)")
			}
		}
		for _, s := range f.Sections {
			if s.Name == ".symtab" || strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
				t.Errorf("the binary has section %s despite -ldflags \"-s -w\"", s.Name)
			}
		}
		f.Close()
	} else {
		t.Errorf("reading the binary as ELF: %v", err)
	}

	b, err = exec.CommandContext(ctx, out, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", out, err, b)
	}
	if got := string(b); got != "remediator dockerfile-test\n" {
		t.Errorf("version prints %q, want %q", got, "remediator dockerfile-test\n")
	}
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
		if len(fields) < 2 || strings.HasPrefix(fields[0], "--") {
			t.Errorf("Dockerfile:%d: unexpected COPY %s in the build stage", in.Line, in.Args)
			continue
		}
		for _, src := range fields[:len(fields)-1] {
			if src == "." || src == "./" {
				t.Errorf("Dockerfile:%d: COPY . copies the whole checkout (bin/ holds the Kubernetes binaries); copy the source directories", in.Line)
			}
			copied = append(copied, strings.TrimSuffix(strings.TrimPrefix(src, "./"), "/"))
		}
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if !slices.Contains(copied, f) {
			t.Errorf("the build stage does not copy %s", f)
		}
	}
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}`, "./cmd/remediator")
	cmd.Dir = root
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/remediator: %v", err)
	}
	for dir := range strings.FieldsSeq(string(b)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		if !slices.ContainsFunc(copied, func(c string) bool { return rel == c || strings.HasPrefix(rel, c+"/") }) {
			t.Errorf("package directory %s, which ./cmd/remediator imports, is not copied into the build stage (COPY %s/ %s/)", rel, strings.Split(rel, "/")[0], strings.Split(rel, "/")[0])
		}
	}
}

// TestChartArgsAreControllerFlags: the chart's Deployment runs the image's
// entrypoint with its args, so every arg it renders must be a flag the controller
// command accepts, with a value it parses.
func TestChartArgsAreControllerFlags(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"defaults": nil,
		"everything set": {
			"requestNamespaces":         []any{"team-a", "team-b"},
			"maxConcurrentRemediations": 0,
			"logLevel":                  4,
			"nodeLeaseGracePeriod":      "50s",
			"policies":                  map[string]any{"schema.cue": "package policies\n"},
			"trident":                   map[string]any{"nodePluginSelector": "app in (a, b)"},
		},
		"metrics off": {"metrics": map[string]any{"enabled": false}},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := helmchart.Render("remediator", "remediator-system", values)
			if err != nil {
				t.Fatal(err)
			}
			var args []string
			for _, o := range objs {
				if o.GetKind() != "Deployment" {
					continue
				}
				d := &appsv1.Deployment{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
					t.Fatal(err)
				}
				args = d.Spec.Template.Spec.Containers[0].Args
			}
			if len(args) == 0 || args[0] != "controller" {
				t.Fatalf("args %q: want the controller subcommand first", args)
			}
			cmd := newControllerCommand()
			if err := cmd.ParseFlags(args[1:]); err != nil {
				t.Fatalf("the controller refuses the chart's args %q: %v", args, err)
			}
			if rest := cmd.Flags().Args(); len(rest) > 0 {
				t.Errorf("args %q leave positional arguments %q, which the controller refuses", args, rest)
			}
		})
	}
}
