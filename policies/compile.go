package policies

// Compiling a policy source, and the copies each evaluation takes for itself, so
// that evaluations share no CUE value.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing/fstest"
	"time"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/load"
	"cuelang.org/go/cue/parser"
)

// compiledPolicy is one policy source, compiled; Reload replaces it whole, so a
// decision finishes on the policy it started on and reports its digest.
type compiledPolicy struct {
	files  []sourceFile
	digest string
	// runaway counts this policy's abandoned evaluations still running: per policy,
	// so a replaced policy's runaways no longer suspend decisions.
	runaway atomic.Int32

	// poolMu guards idle only, never held while a copy is evaluated.
	poolMu sync.Mutex
	// idle are compiled copies that no evaluation uses. CUE values are not safe for
	// concurrent use (evaluating writes to vertices shared with every value of the
	// same compile: cue-lang/cue#2733, #4351), so each evaluation takes a copy of its
	// own and gives it back; a runaway keeps its copy for good.
	idle []*instance
	// evaluating holds a token per evaluation running within its timeout (a
	// runaway gives its token back when it is abandoned; MaxRunawayEvaluations caps
	// those). An evaluation is CPU-bound: more at once than the process has CPUs
	// adds copies, each a full compile of several MiB, not decisions per second; a
	// storm's ten workers once held ten copies, a third of the controller's heap.
	evaluating chan struct{}
	// copies counts the compiled copies made, the first included.
	copies atomic.Int32

	// onCompile (tests only) is called before take compiles another copy.
	onCompile func()
}

// maxEvaluating is how many evaluations of one policy run at once: one per CPU the
// Go scheduler uses, at least two so that one slow decision does not stall the rest.
func maxEvaluating() int { return max(2, runtime.GOMAXPROCS(0)) }

// instance is one compiled copy of a policy source, in a cue.Context of its own:
// root is the package, policy its #Contract that the input is filled into.
type instance struct {
	ctx    *cue.Context
	root   cue.Value
	policy cue.Value
}

// sourceFile is one policy file, by base name.
type sourceFile struct {
	name string
	data []byte
}

// compile compiles the non-test .cue files of fsys with the binary's own schema,
// keeping the copy for the first evaluation.
func compile(fsys fs.FS) (*compiledPolicy, error) {
	files, digest, err := readSource(fsys)
	if err != nil {
		return nil, err
	}
	return compileSource(files, digest)
}

// readSource reads and checks the non-test .cue files of fsys, with the binary's own
// schema, and digests them: what a reload compares before it compiles anything.
func readSource(fsys fs.FS) ([]sourceFile, string, error) {
	files, err := withSchema(fsys)
	if err != nil {
		return nil, "", err
	}
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%d\x00", f.name, len(f.data))
		h.Write(f.data)
	}
	return files, "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// compileSource compiles files read by readSource.
func compileSource(files []sourceFile, digest string) (*compiledPolicy, error) {
	inst, err := compileBounded(files, digest)
	if err != nil {
		return nil, err
	}
	c := &compiledPolicy{files: files, digest: digest, idle: []*instance{inst}, evaluating: make(chan struct{}, maxEvaluating())}
	c.copies.Store(1)
	return c, nil
}

// compileTimeout bounds a build of a policy (a variable for tests): at load, and of
// each copy a decision takes. Building evaluates every part of a policy that reads no
// input, so a comprehension there that runs away runs away in the build: in the
// controller's reload and start, and in the sync's check of a revision, which would
// otherwise sync nothing more, not even the revert. The embedded policies build in
// tens of milliseconds; a decision's bound (its build and its evaluation) stays well
// inside the manager's 30 s grace at shutdown.
var compileTimeout = 10 * time.Second

// maxTimedOut bounds how many sources timedOutBuilds remembers.
const maxTimedOut = 64

// rebuildAfter is how long a source whose build was abandoned is refused at once,
// counted from then, and at least until that build ended (a variable for tests).
var rebuildAfter = 10 * time.Minute

// timedOutBuilds are the sources whose build took longer than compileTimeout, across
// every Engine of the process (the sync checks each revision on a new one). CUE
// cannot cancel a build, so each keeps a CPU busy until it ends; such a source is
// refused at once for a while rather than built again at every reload or sync
// interval, and then tried again, in case only the machine was stalled. Bad sources
// come through reviewed commits, one at a time, so any other source gets its build:
// a fix is never refused because earlier ones ran away.
var timedOutBuilds = &timedOut{}

type timedOut struct {
	mu     sync.Mutex
	builds []*abandonedBuild // oldest first
}

type abandonedBuild struct {
	digest  string
	at      time.Time // when the last build of it was abandoned
	running int       // its abandoned builds not ended yet
}

func (t *timedOut) find(digest string) *abandonedBuild {
	for _, b := range t.builds {
		if b.digest == digest {
			return b
		}
	}
	return nil
}

// refused says why digest is not built now, or "".
func (t *timedOut) refused(digest string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.find(digest)
	switch {
	case b == nil:
		return ""
	case b.running > 0:
		return fmt.Sprintf("a build of it took longer than %s %s ago and still runs", compileTimeout, time.Since(b.at).Round(time.Second))
	case time.Since(b.at) < rebuildAfter:
		return fmt.Sprintf("a build of it took longer than %s %s ago; it is built again %s after that", compileTimeout, time.Since(b.at).Round(time.Second), rebuildAfter)
	}
	return ""
}

// abandon records a build of digest abandoned now; the returned func records its end.
func (t *timedOut) abandon(digest string) (ended func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.find(digest)
	if b == nil {
		b = &abandonedBuild{digest: digest}
		t.builds = append(t.builds, b)
		if len(t.builds) > maxTimedOut {
			t.builds = t.builds[1:]
		}
	}
	b.at = time.Now()
	b.running++
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		b.running--
	}
}

// compileBounded is compileInstance for at most compileTimeout. A longer build is
// abandoned, running on in the background, and the source is refused.
func compileBounded(files []sourceFile, digest string) (*instance, error) {
	if why := timedOutBuilds.refused(digest); why != "" {
		return nil, loadError(LoadReasonTimeout, "policy %s is not built again yet: %s; %s", digest, why, timeoutHint)
	}
	type result struct {
		inst *instance
		err  error
	}
	done := make(chan result, 1) // an abandoned build still delivers and ends
	go func() {
		inst, err := compileInstance(files)
		done <- result{inst, err}
	}()
	timer := time.NewTimer(compileTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.inst, r.err
	case <-timer.C:
		ended := timedOutBuilds.abandon(digest)
		go func() {
			<-done
			ended()
		}()
		return nil, loadError(LoadReasonTimeout, "building policy %s took longer than %s and was abandoned; %s", digest, compileTimeout, timeoutHint)
	}
}

// timeoutHint says what makes a build slow.
const timeoutHint = "a part of the policy that reads no input (a comprehension over a large list, a deep recursion) " +
	"is evaluated when it is built: bound it, or make it depend on the input"

// schemaFile is the contract between the binary and its policies (#Input, which Go
// fills in, #Decision, which it decodes): always the embedded one, so that a policy
// source supplies rules only and cannot change what the Go code relies on.
const schemaFile = "schema.cue"

// contract is what a decision evaluates: #Policy held to #Input and #Decision.
const contract = "#Contract"

// schemaSource is the embedded schema, parsed once: its top-level fields, which a
// rule file may not define, and #Playbook's names, sorted.
type schemaSource struct {
	file      sourceFile
	fields    map[string]*ast.Field
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
	s := schemaSource{file: sourceFile{name: schemaFile, data: data}, fields: topLevel(f)}
	if pb := s.fields["#Playbook"]; pb != nil {
		for _, lit := range stringLiterals(pb.Value) {
			s.playbooks = append(s.playbooks, lit.value)
		}
	}
	if len(s.playbooks) == 0 {
		panic(fmt.Sprintf("the embedded %s defines no #Playbook names", schemaFile))
	}
	slices.Sort(s.playbooks)
	return s
})

// topLevel are the fields a CUE file declares at its top level, by name.
func topLevel(f *ast.File) map[string]*ast.Field {
	fields := map[string]*ast.Field{}
	for _, d := range f.Decls {
		if field, ok := d.(*ast.Field); ok {
			if name, _, err := ast.LabelName(field.Label); err == nil {
				fields[name] = field
			}
		}
	}
	return fields
}

// withSchema returns the rules of fsys (its non-test .cue files) with the binary's
// schema, sorted by name. Any source but the embedded one that brings a schema.cue,
// or defines what the schema does, is refused, even with the same text.
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
		fields := topLevel(f)
		hasPolicy = hasPolicy || fields["#Policy"] != nil
		var clash []string
		for name := range fields {
			if _, found := sch.fields[name]; found {
				clash = append(clash, name)
			}
		}
		slices.Sort(clash)
		if len(clash) > 0 {
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
	// A rule's playbook outside #Playbook is refused at load with its file and line,
	// not when the rule first matches an incident.
	if err := checkPlaybooks(files[1:], sch.playbooks); err != nil { // all but the schema
		return nil, err
	}
	slices.SortFunc(files, func(a, b sourceFile) int { return strings.Compare(a.name, b.name) })
	return files, nil
}

// policyRoot is where the policy files sit in the in-memory filesystem they are
// loaded from (a variable for a test).
var policyRoot = "/remediator/policies"

// compileInstance compiles policy files into a new CUE context, sharing nothing with
// other copies.
func compileInstance(files []sourceFile) (*instance, error) {
	// An in-memory FS, not an Overlay, which still reads the host along Dir (in the
	// image /remediator is the binary: "not a directory").
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
	policy := v.LookupPath(cue.ParsePath(contract))
	return &instance{ctx: ctx, root: v, policy: policy}, nil
}

// take returns a copy of the policy for one evaluation alone.
//
// The caller holds one of c.evaluating's tokens (acquire).
func (c *compiledPolicy) take() (*instance, error) {
	c.poolMu.Lock()
	if n := len(c.idle); n > 0 {
		inst := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.poolMu.Unlock()
		return inst, nil
	}
	c.poolMu.Unlock()
	if c.onCompile != nil {
		c.onCompile()
	}
	inst, err := compileInstance(c.files)
	if err != nil {
		return nil, fmt.Errorf("compiling another copy of policy %s: %w", c.digest, err)
	}
	c.copies.Add(1)
	return inst, nil
}

// give returns a copy after an evaluation that ended, for the next one.
func (c *compiledPolicy) give(inst *instance) {
	c.poolMu.Lock()
	defer c.poolMu.Unlock()
	if len(c.idle) < cap(c.evaluating) {
		c.idle = append(c.idle, inst)
	}
}

// acquire waits for a token to evaluate c; release gives it back.
func (c *compiledPolicy) acquire() { c.evaluating <- struct{}{} }
func (c *compiledPolicy) release() { <-c.evaluating }

// VetCase is `cue vet -c` of one case file (a *_test.cue) against the rules in dir
// and the controller's schema, loaded as the controller loads them.
func VetCase(dir, caseName string, caseSrc []byte) error {
	files, err := withSchema(os.DirFS(dir))
	if err != nil {
		return err
	}
	// Not named *_test.cue, which the loader would leave out.
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
