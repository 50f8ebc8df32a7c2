// Package policies owns the decision: CUE policies (embedded from this directory, or
// loaded from --policies-dir) that turn a request's facts into either an allowed
// playbook or a rejection telling the operator what to do next. Evaluation is pure: it
// needs no client, and the same facts always give the same decision.
//
// The *_test.cue files next to the policies hold the cases `make policy-test` runs with
// `cue vet`.
package policies

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/load"

	"github.com/remediator/remediator/api/v1alpha1"
)

//go:embed *.cue
var embedded embed.FS

// Playbook names the policies may choose.
const (
	PlaybookNodeShutdown        = "node-shutdown"
	PlaybookFencedUnreachable   = "fenced-unreachable"
	PlaybookHealthyMoveWorkload = "healthy-move-workload"
	PlaybookRestartNodePlugin   = "restart-node-plugin"
)

// Input is what a policy decides on: the facts, the spec fields a policy may weigh,
// and the other active requests on the same node or Lease.
type Input struct {
	Remediation v1alpha1.Remediation `json:"remediation"`
	Mode        v1alpha1.Mode        `json:"mode,omitempty"`
	Fencing     *v1alpha1.Fencing    `json:"fencing,omitempty"`
	Facts       *v1alpha1.Facts      `json:"facts"`
	// Conflicts describe other active requests on the same node or Lease, sorted.
	Conflicts []string `json:"conflicts"`
}

// Decision is a policy's answer.
type Decision struct {
	Allowed             bool     `json:"allowed"`
	Wait                bool     `json:"wait"`
	Playbook            string   `json:"playbook,omitempty"`
	Rule                string   `json:"rule"`
	Reasons             []string `json:"reasons"`
	Message             string   `json:"message"`
	RecheckAfterSeconds int64    `json:"recheckAfterSeconds,omitempty"`
	// Digest identifies the policy source that produced the decision.
	Digest string `json:"-"`
}

// Engine holds compiled policies. CUE values are not safe for concurrent use (see
// cue-lang/cue#2733), so decisions on one Engine are serialised.
type Engine struct {
	mu     sync.Mutex
	ctx    *cue.Context
	policy cue.Value
	digest string
	// dir is where the policies were loaded from; empty means embedded.
	dir string
}

// Embedded compiles the policies built into the binary.
func Embedded() (*Engine, error) { return compile(embedded, ".") }

// FromDir compiles the policies in dir (for example a ConfigMap synced from Git).
// *_test.cue files are ignored, as by cue itself.
func FromDir(dir string) (*Engine, error) {
	e, err := compile(os.DirFS(dir), ".")
	if err != nil {
		return nil, err
	}
	e.dir = dir
	return e, nil
}

// Load returns the policies from dir, or the embedded ones when dir is empty.
func Load(dir string) (*Engine, error) {
	if dir == "" {
		return Embedded()
	}
	return FromDir(dir)
}

// compile loads every non-test .cue file of one package. Files are read into an
// overlay so that embedded and on-disk policies load the same way.
func compile(fsys fs.FS, dir string) (*Engine, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.cue"))
	if err != nil {
		return nil, fmt.Errorf("listing policies: %w", err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return strings.HasSuffix(n, "_test.cue") })
	if len(names) == 0 {
		return nil, fmt.Errorf("no .cue policy files found")
	}
	slices.Sort(names)

	const root = "/remediator/policies"
	h := sha256.New()
	overlay := map[string]load.Source{}
	for _, n := range names {
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, fmt.Errorf("reading policy %s: %w", n, err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path.Base(n), len(data))
		h.Write(data)
		overlay[filepath.Join(root, path.Base(n))] = load.FromBytes(data)
	}
	insts := load.Instances([]string{"."}, &load.Config{Dir: root, Overlay: overlay})
	if len(insts) != 1 {
		return nil, fmt.Errorf("want one policy package, got %d", len(insts))
	}
	if err := insts[0].Err; err != nil {
		return nil, fmt.Errorf("loading policies: %w", err)
	}
	ctx := cuecontext.New()
	v := ctx.BuildInstance(insts[0])
	if err := v.Err(); err != nil {
		return nil, fmt.Errorf("compiling policies: %w", err)
	}
	policy := v.LookupPath(cue.ParsePath("#Policy"))
	if !policy.Exists() {
		return nil, fmt.Errorf("policies define no #Policy")
	}
	return &Engine{ctx: ctx, policy: policy, digest: "sha256:" + hex.EncodeToString(h.Sum(nil))}, nil
}

// Digest identifies the compiled policy source.
func (e *Engine) Digest() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.digest
}

// Source is the policy directory, or "embedded".
func (e *Engine) Source() string {
	if e.dir == "" {
		return "embedded"
	}
	return e.dir
}

// Reload recompiles on-disk policies (a ConfigMap volume changes under a running
// process) and swaps them in when their digest changed. A policy that no longer
// compiles is an error and the previous one stays in use: a bad edit must not stop
// the controller from deciding. Embedded policies never change.
func (e *Engine) Reload() (changed bool, err error) {
	if e.dir == "" {
		return false, nil
	}
	n, err := compile(os.DirFS(e.dir), ".")
	if err != nil {
		return false, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if n.digest == e.digest {
		return false, nil
	}
	e.ctx, e.policy, e.digest = n.ctx, n.policy, n.digest
	return true, nil
}

// Decide evaluates the policy for one input.
func (e *Engine) Decide(in Input) (Decision, error) {
	if in.Conflicts == nil {
		in.Conflicts = []string{}
	}
	data, err := json.Marshal(in)
	if err != nil {
		return Decision{}, fmt.Errorf("encoding policy input: %w", err)
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	iv := e.ctx.CompileBytes(data)
	if err := iv.Err(); err != nil {
		return Decision{}, fmt.Errorf("compiling policy input: %w", err)
	}
	d := e.policy.FillPath(cue.ParsePath("input"), iv).LookupPath(cue.ParsePath("decision"))
	// Decode fails on an incomplete or conflicting decision, so a policy that cannot
	// decide is an error, never a default.
	var out Decision
	if err := d.Decode(&out); err != nil {
		return Decision{}, fmt.Errorf("evaluating policy: %w", err)
	}
	out.Digest = e.digest
	return out, nil
}
