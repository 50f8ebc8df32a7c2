package policies

// Compiling a policy source: what one compiled policy holds, and the copies of it
// each evaluation takes for itself, so that evaluations share no CUE value.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing/fstest"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/load"
	"cuelang.org/go/cue/parser"
)

// compiledPolicy is one policy source, compiled. Its source and digest never change
// after compile: Reload replaces the whole value, so a decision that
// started on one policy finishes on it and reports its digest.
type compiledPolicy struct {
	files []sourceFile
	// digest identifies files.
	digest string
	// runaway counts this policy's abandoned evaluations that have not ended yet. It
	// belongs to the policy, not to the Engine: a reload starts from zero, so the
	// runaways of a replaced policy no longer suspend decisions. They still run until
	// they end (CUE cannot cancel them); since Reload swaps only a changed source,
	// each new source can add at most its own cap of them.
	runaway atomic.Int32

	// poolMu guards idle, and only idle: it is held to take or give back a copy,
	// never while one is evaluated.
	poolMu sync.Mutex
	// idle are compiled copies of files that no evaluation uses. CUE values are not
	// safe for concurrent use: evaluating a value writes to the vertices it shares
	// with every value derived from the same compile (cue-lang/cue#2733; races in
	// Value.FillPath were still reported against v0.17, cue-lang/cue#4351), whatever
	// the Value documentation says. So each evaluation takes a copy of its own,
	// compiled anew in a fresh cue.Context when none is idle, and gives it back when
	// it is done. An abandoned evaluation keeps its copy for good: no later decision
	// touches values a runaway may still write to.
	idle []*instance
}

// instance is one compiled copy of a policy source, in a cue.Context of its own.
type instance struct {
	ctx *cue.Context
	// root is the policy package; policy is its #Policy, which decide fills the input
	// into.
	root   cue.Value
	policy cue.Value
}

// maxIdleInstances bounds the copies a policy keeps for later evaluations: about as
// many as evaluate at once (the controller's workers), so that a burst does not keep
// its copies, each a full compile, for the life of the process.
const maxIdleInstances = 8

// sourceFile is one policy file, by base name.
type sourceFile struct {
	name string
	data []byte
}

// compile loads the rules of one policy source, every non-test .cue file of fsys,
// together with the binary's own schema, and compiles them.
func compile(fsys fs.FS) (*compiledPolicy, error) {
	files, err := withSchema(fsys)
	if err != nil {
		return nil, err
	}
	return compileFiles(files)
}

// schemaFile is the contract between the binary and its policies: #Input, which the
// Go code fills in, #Decision, which it decodes, and the definitions they use. It is
// always the embedded one: a policy source (the embedded rules, or a --policies-dir
// from Git) supplies rules only, so no policy can change what the Go code relies on.
const schemaFile = "schema.cue"

// contract is what a decision evaluates: the rules' #Policy held to the schema's
// #Input and #Decision (schema.cue defines it).
const contract = "#Contract"

// schemaSource is the embedded schema file, parsed once (parsedSchema).
type schemaSource struct {
	file sourceFile
	// labels are the top-level names it defines, sorted: what a rule file may not.
	labels []string
	// playbooks are #Playbook's names, sorted.
	playbooks []string
}

var parsedSchema = sync.OnceValue(func() schemaSource {
	data, err := embedded.ReadFile(schemaFile)
	if err != nil {
		panic(fmt.Sprintf("the embedded %s: %v", schemaFile, err))
	}
	f, err := parser.ParseFile(schemaFile, data)
	if err != nil {
		panic(fmt.Sprintf("parsing the embedded %s: %v", schemaFile, err))
	}
	s := schemaSource{file: sourceFile{name: schemaFile, data: data}, labels: topLevelLabels(f)}
	for _, d := range f.Decls {
		if field, ok := d.(*ast.Field); ok {
			if name, _, err := ast.LabelName(field.Label); err == nil && name == "#Playbook" {
				for _, lit := range stringLiterals(field.Value) {
					s.playbooks = append(s.playbooks, lit.value)
				}
			}
		}
	}
	if len(s.playbooks) == 0 {
		panic(fmt.Sprintf("the embedded %s defines no #Playbook names", schemaFile))
	}
	slices.Sort(s.playbooks)
	return s
})

// topLevelLabels are the names a CUE file declares at its top level, sorted.
func topLevelLabels(f *ast.File) []string {
	var labels []string
	for _, d := range f.Decls {
		if field, ok := d.(*ast.Field); ok {
			if name, _, err := ast.LabelName(field.Label); err == nil {
				labels = append(labels, name)
			}
		}
	}
	slices.Sort(labels)
	return labels
}

// withSchema reads the rules of fsys (its non-test .cue files) and returns them after
// the binary's schema. The embedded source holds the schema itself, which is taken
// from there once; any other source must not: a file named schema.cue, or one that
// declares a definition of the schema (#Input, #Decision, ...), is refused, so that a
// policy directory cannot redefine the contract, even to the same text.
func withSchema(fsys fs.FS) ([]sourceFile, error) {
	names, err := fs.Glob(fsys, "*.cue")
	if err != nil {
		return nil, loadError(LoadReasonRead, "listing policies: %w", err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return strings.HasSuffix(n, "_test.cue") })
	isEmbedded := fsys == fs.FS(embedded)
	sch := parsedSchema()
	files := []sourceFile{sch.file}
	hasPolicy := false
	for _, n := range names {
		if n == schemaFile && isEmbedded {
			continue
		}
		if n == schemaFile {
			return nil, loadError(LoadReasonSchema, "%s: the schema (#Input, #Decision) is the controller's own and cannot be replaced: a policy directory holds rules only; remove %s", n, n)
		}
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, loadError(LoadReasonRead, "reading policy %s: %w", n, err)
		}
		f, err := parser.ParseFile(n, data)
		if err != nil {
			return nil, loadError(LoadReasonSyntax, "parsing policy %s: %w", n, positioned{err})
		}
		labels := topLevelLabels(f)
		if _, found := slices.BinarySearch(labels, "#Policy"); found {
			hasPolicy = true
		}
		if clash := intersect(labels, sch.labels); len(clash) > 0 {
			return nil, loadError(LoadReasonSchema, "%s defines %s, which the controller's schema owns: a policy directory holds rules only; rename or remove %s",
				n, strings.Join(clash, ", "), strings.Join(clash, ", "))
		}
		files = append(files, sourceFile{name: n, data: data})
	}
	if len(files) == 1 {
		return nil, loadError(LoadReasonRead, "no .cue policy files found")
	}
	if !hasPolicy && !isEmbedded {
		return nil, loadError(LoadReasonNoPolicy, "policies define no #Policy")
	}
	// A playbook a rule spells out must be one of the schema's #Playbook, which the
	// decision is held to anyway: said here with the file and line, at load, rather
	// than as a conflict when the rule first matches an incident.
	rules := slices.DeleteFunc(slices.Clone(files), func(f sourceFile) bool { return f.name == schemaFile })
	if err := checkPlaybooks(rules, parsedSchema().playbooks); err != nil {
		return nil, err
	}
	slices.SortFunc(files, func(a, b sourceFile) int { return strings.Compare(a.name, b.name) })
	return files, nil
}

// intersect are the elements of sorted a that are in sorted b.
func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if _, found := slices.BinarySearch(b, x); found {
			out = append(out, x)
		}
	}
	return out
}

// policyRoot is where the policy files sit in the in-memory filesystem they are loaded
// from; errors name files relative to it. A variable only so that a test can place it
// where the host has a file.
var policyRoot = "/remediator/policies"

// compileFiles compiles policy files, keeping the copy it compiled them into for the
// first evaluation.
func compileFiles(files []sourceFile) (*compiledPolicy, error) {
	inst, err := compileInstance(files)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%d\x00", f.name, len(f.data))
		h.Write(f.data)
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	return &compiledPolicy{files: files, digest: digest, idle: []*instance{inst}}, nil
}

// compileInstance compiles policy files into a new CUE context. Each call gives
// values that share nothing with earlier ones, so they may be evaluated while other
// copies are.
func compileInstance(files []sourceFile) (*instance, error) {
	// An in-memory filesystem, not an overlay: with Overlay the loader still lists and
	// stats the host's directories along Dir, and in the chart's image /remediator is the
	// controller's binary, so every start failed with "readDir: open
	// /remediator/policies: not a directory". With FS the host is never read.
	root := strings.TrimPrefix(policyRoot, "/")
	fsys := fstest.MapFS{}
	for _, f := range files {
		fsys[path.Join(root, f.name)] = &fstest.MapFile{Data: f.data, Mode: 0o444}
	}
	insts := load.Instances([]string{"."}, &load.Config{Dir: policyRoot, FS: fsys})
	if len(insts) != 1 {
		return nil, loadError(LoadReasonSyntax, "want one policy package, got %d", len(insts))
	}
	if err := insts[0].Err; err != nil {
		return nil, loadError(LoadReasonSyntax, "loading policies: %w", positioned{err})
	}
	ctx := cuecontext.New()
	v := ctx.BuildInstance(insts[0])
	if err := v.Err(); err != nil {
		return nil, loadError(LoadReasonCompile, "compiling policies: %w", positioned{err})
	}
	if !v.LookupPath(cue.ParsePath("#Policy")).Exists() {
		return nil, loadError(LoadReasonNoPolicy, "policies define no #Policy")
	}
	// The schema's #Contract: #Policy with its input an #Input and its decision a
	// #Decision, whatever the rules say.
	// Where the rules contradict it outside any input, BuildInstance failed above.
	policy := v.LookupPath(cue.ParsePath(contract))
	return &instance{ctx: ctx, root: v, policy: policy}, nil
}

// take returns a copy of the policy for one evaluation alone.
func (c *compiledPolicy) take() (*instance, error) {
	c.poolMu.Lock()
	if n := len(c.idle); n > 0 {
		inst := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.poolMu.Unlock()
		return inst, nil
	}
	c.poolMu.Unlock()
	// The same files compiled before, so only a resource failure can fail this.
	inst, err := compileInstance(c.files)
	if err != nil {
		return nil, fmt.Errorf("compiling another copy of policy %s: %w", c.digest, err)
	}
	return inst, nil
}

// give returns a copy after an evaluation that ended, for the next one.
func (c *compiledPolicy) give(inst *instance) {
	c.poolMu.Lock()
	defer c.poolMu.Unlock()
	if len(c.idle) < maxIdleInstances {
		c.idle = append(c.idle, inst)
	}
}

// VetCase is `cue vet -c` of one case file (a *_test.cue of a policy directory)
// against the rules in dir and the controller's schema, the package the controller
// would load: the case's fields unified with it, validated concrete with hidden fields
// and definitions, as the cue command does. The rules are checked as the controller
// checks them (no schema.cue, no redefinition of what the schema owns).
func VetCase(dir, caseName string, caseSrc []byte) error {
	files, err := withSchema(os.DirFS(dir))
	if err != nil {
		return err
	}
	// Not named *_test.cue in the loader's filesystem, which would leave it out.
	files = append(files, sourceFile{name: "zz_case_" + strings.TrimSuffix(path.Base(caseName), ".cue") + "_vet.cue", data: caseSrc})
	inst, err := compileInstance(files)
	if err != nil {
		return err
	}
	if err := inst.root.Validate(cue.Attributes(true), cue.Definitions(true), cue.Hidden(true), cue.Concrete(true)); err != nil {
		return positioned{err}
	}
	return nil
}
