package policies

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
)

// The fuzz target of the decision: facts in, exactly one verdict out. Run it with
// make fuzz (see the Makefile's FUZZ_TARGETS); go test runs its seeds as a test.

var (
	fuzzEngineOnce sync.Once
	fuzzEngine     *Engine
	fuzzEngineErr  error
)

// sharedEngine is one Engine for every fuzz input, as the controller keeps one for
// every request. Its timeout is generous: a fuzz worker shares two cores with the
// coordinator and other work, and a timeout would read as a difference between the
// two evaluation paths.
func sharedEngine(t *testing.T) *Engine {
	t.Helper()
	fuzzEngineOnce.Do(func() {
		fuzzEngine, fuzzEngineErr = Embedded()
		if fuzzEngine != nil {
			fuzzEngine.Timeout = time.Minute
		}
	})
	require.NoError(t, fuzzEngineErr)
	return fuzzEngine
}

// FuzzDecide decides inputs built from the golden fixtures and fuzz bytes, and checks
// what every decision must satisfy whatever the facts: it never panics; an input the
// schema (#Input) accepts is decided (no error); a decision is exactly one of allowed,
// rejected or waiting, with a rule, a message and reasons; an allowed decision names a
// playbook of its remediation and honours the runbook's safety floor.
//
// inputJSON is a policies.Input as JSON; when it does not decode, the input starts
// empty. edits then change one field at a time (see applyEdits), so that the fuzzer
// explores the facts the rules branch on instead of JSON syntax.
func FuzzDecide(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	require.NoError(f, err)
	require.NotEmpty(f, files)
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(f, err)
		var fx fixture
		require.NoError(f, yaml.UnmarshalStrict(data, &fx), file)
		in, err := json.Marshal(fx.Input)
		require.NoError(f, err)
		f.Add(in, []byte{})
		// The same facts with a few fields changed: the fencing, the state, the age.
		f.Add(in, []byte{7, 2, 2, 1, 4, 3})
	}
	f.Add([]byte("not json"), []byte{0, 0, 3, 1, 6, 1, 2, 0, 4, 5, 10, 1})

	f.Fuzz(func(t *testing.T, inputJSON, edits []byte) {
		var in Input
		if err := json.Unmarshal(inputJSON, &in); err != nil {
			in = Input{}
		}
		applyEdits(&in, edits)
		checkDecision(t, sharedEngine(t), in)
	})
}

// checkDecision asserts the properties of FuzzDecide for one input.
func checkDecision(t *testing.T, e *Engine, in Input) {
	t.Helper()
	got, err := e.Decide(in)
	if err != nil {
		require.False(t, schemaAccepts(t, e, withConflicts(in)), "the schema accepts the input but the policy did not decide: %v", err)
		return
	}

	d := got
	require.NotEmpty(t, d.Rule, "a decision without a rule: %+v", d)
	require.NotEmpty(t, d.Message, "a decision without a message: %+v", d)
	require.NotEmpty(t, d.Reasons, "a decision without reasons: %+v", d)
	require.Contains(t, []Verdict{VerdictAllow, VerdictWait, VerdictReject}, d.Verdict, "a decision with no verdict: %+v", d)
	if d.Verdict == VerdictWait {
		require.Positive(t, d.RecheckAfterSeconds, "a waiting decision that never rechecks: %+v", d)
	}
	if d.Verdict != VerdictAllow {
		require.Empty(t, d.Playbook, "a refused decision with a playbook: %+v", d)
		return
	}
	checkSafetyFloor(t, in, d)
}

// checkSafetyFloor is the runbook's floor under an allowed decision (docs/safety.md), stated
// on the facts rather than on the rules: no playbook while another remediation is
// active on the same node or Lease; a Trident Lease is released only when it exists,
// has a holder and the target resolved, and its holder is shut down, fenced (named by
// spec.fencing.node, or tainted out-of-service) with the Lease at least 5 minutes old,
// or healthy with evidence of a stuck operation; a CSI driver is re-registered only on
// a healthy node that lacks it, by restarting its one Running and Ready plugin pod.
func checkSafetyFloor(t *testing.T, in Input, d Decision) {
	t.Helper()
	require.Empty(t, in.Conflicts, "allowed despite conflicts: %+v", d)
	f := in.Facts
	require.NotNil(t, f, "allowed without facts: %+v", d)
	require.True(t, f.Target.Found, "allowed on an unresolved target: %+v", d)
	node := f.Node
	if node == nil {
		node = &v1alpha1.NodeFacts{}
	}
	switch in.Remediation {
	case v1alpha1.RemediationReleaseLUKSLease:
		l := f.Lease
		require.NotNil(t, l, "a Lease release without Lease facts: %+v", d)
		require.True(t, l.Exists, "releasing a Lease that does not exist: %+v", d)
		require.NotEmpty(t, l.HolderIdentity, "releasing a Lease without holder: %+v", d)
		fenced := in.Fencing != nil && in.Fencing.Confirmed && in.Fencing.Node == l.HolderIdentity
		require.False(t, in.Fencing != nil && in.Fencing.Confirmed && in.Fencing.Node != "" && !fenced,
			"allowed although spec.fencing names another node: %+v", d)
		switch d.Playbook {
		case v1alpha1.PlaybookNodeShutdown:
			require.Equal(t, v1alpha1.NodeShutdown, node.State, "%+v", d)
		case v1alpha1.PlaybookFencedUnreachable:
			require.Contains(t, []v1alpha1.NodeState{v1alpha1.NodeUnreachable, v1alpha1.NodeNotFound}, node.State, "%+v", d)
			require.True(t, fenced || (node.State == v1alpha1.NodeUnreachable && slices.Contains(node.Taints, v1alpha1.TaintOutOfService)),
				"an unreachable holder released without fencing: %+v", d)
			require.GreaterOrEqual(t, l.AgeSeconds, int64(300), "%+v", d)
		case v1alpha1.PlaybookHealthyMoveWorkload:
			require.Equal(t, v1alpha1.NodeHealthy, node.State, "%+v", d)
			require.True(t, l.RetainedEvents > 0 || l.AgeSeconds >= 600, "a young Lease of a healthy holder without LeaseRetained events: %+v", d)
		default:
			require.Failf(t, "release-luks-lease allowed with a playbook the floor does not cover", "playbook %q: %+v", d.Playbook, d)
		}
	case v1alpha1.RemediationReregisterCSIDriver:
		require.Equal(t, v1alpha1.PlaybookRestartNodePlugin, d.Playbook, "%+v", d)
		require.Equal(t, v1alpha1.NodeHealthy, node.State, "%+v", d)
		require.NotNil(t, f.CSI, "%+v", d)
		require.False(t, f.CSI.DriverRegistered, "restarting the plugin of a registered driver: %+v", d)
		require.Len(t, f.CSI.PluginPods, 1, "%+v", d)
		p := f.CSI.PluginPods[0]
		require.True(t, p.Phase == "Running" && p.Ready && p.DeletionTimestamp == nil, "restarting a plugin pod that is not Running and Ready: %+v", d)
	default:
		require.Failf(t, "a remediation the floor does not cover allowed", "remediation %q: %+v", in.Remediation, d)
	}
}

func withConflicts(in Input) Input {
	if in.Conflicts == nil {
		in.Conflicts = []string{}
	}
	return in
}

// Values the edits draw from: each side of every threshold, values outside the
// schema, and strings that would break a policy that built CUE from text.
var (
	editRemediations = []v1alpha1.Remediation{v1alpha1.RemediationReleaseLUKSLease, v1alpha1.RemediationReregisterCSIDriver, "", "defragment"}
	editModes        = []v1alpha1.Mode{"", v1alpha1.ModeApply, v1alpha1.ModeDryRun, "Force"}
	editStates       = []v1alpha1.NodeState{v1alpha1.NodeShutdown, v1alpha1.NodeUnreachable, v1alpha1.NodeNotFound, v1alpha1.NodeHealthy, v1alpha1.NodeUnknown, "", "Rebooting"}
	editAges         = []int64{0, 1, 299, 300, 301, 599, 600, 601, 86400, -1, math.MaxInt32, math.MaxInt64}
	editHolders      = []string{"kwok-node-3", "", "kwok-node-7", "KWOK-NODE-3", "kwok-node-3.example.com", `"\(x)`, "ノード"}
	editTaints       = []string{v1alpha1.TaintOutOfService, v1alpha1.TaintUnreachable, v1alpha1.TaintCloudShutdown, "example.com/other"}
	editPhases       = []string{"Running", "Pending", "", "Succeeded"}
	editMethods      = []v1alpha1.FencingMethod{v1alpha1.FencingNodeShutdown, v1alpha1.FencingTridentNodeContainerStopped, v1alpha1.FencingLogsVerified, "", "Hope"}
	editTime         = metav1.NewTime(time.Date(2026, 11, 19, 6, 30, 0, 0, time.UTC))
)

func pick[T any](vals []T, b byte) T { return vals[int(b)%len(vals)] }

// applyEdits changes in one field per pair of bytes: the first byte picks the field,
// the second its value.
func applyEdits(in *Input, edits []byte) {
	facts := func() *v1alpha1.Facts {
		if in.Facts == nil {
			in.Facts = &v1alpha1.Facts{}
		}
		return in.Facts
	}
	lease := func() *v1alpha1.LeaseFacts {
		f := facts()
		if f.Lease == nil {
			f.Lease = &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-1", HolderIdentity: "kwok-node-3"}
		}
		return f.Lease
	}
	node := func() *v1alpha1.NodeFacts {
		f := facts()
		if f.Node == nil {
			f.Node = &v1alpha1.NodeFacts{Name: "kwok-node-3", LeaseRenewAgeSeconds: -1}
		}
		return f.Node
	}
	csi := func() *v1alpha1.CSIFacts {
		f := facts()
		if f.CSI == nil {
			f.CSI = &v1alpha1.CSIFacts{}
		}
		return f.CSI
	}
	fencing := func() *v1alpha1.Fencing {
		if in.Fencing == nil {
			in.Fencing = &v1alpha1.Fencing{}
		}
		return in.Fencing
	}
	pod := func(v byte) v1alpha1.PodFacts {
		p := v1alpha1.PodFacts{Namespace: "trident", Name: "trident-node-" + string(rune('a'+v%26)), Phase: pick(editPhases, v), Ready: v&4 != 0}
		if v&8 != 0 {
			p.DeletionTimestamp = &editTime
		}
		if v&16 != 0 {
			p.DeletionTimestamp = &metav1.Time{} // set but zero: marshals as null
		}
		return p
	}
	for ; len(edits) >= 2; edits = edits[2:] {
		v := edits[1]
		switch edits[0] % 20 {
		case 0:
			in.Remediation = pick(editRemediations, v)
		case 1:
			in.Mode = pick(editModes, v)
		case 2:
			node().State = pick(editStates, v)
		case 3:
			lease().Exists = v&1 != 0
		case 4:
			lease().AgeSeconds = pick(editAges, v)
		case 5:
			lease().RetainedEvents = int32(v % 4)
		case 6:
			lease().HolderIdentity = pick(editHolders, v)
		case 7:
			switch v % 4 {
			case 0:
				in.Fencing = nil
			case 1:
				fencing().Confirmed = v&4 != 0
			case 2:
				fencing().Node = pick(editHolders, v/4)
			case 3:
				fencing().Method = pick(editMethods, v/4)
			}
		case 8:
			if v%5 == 4 {
				node().Taints = nil
			} else {
				node().Taints = append(node().Taints, pick(editTaints, v))
			}
		case 9:
			in.Conflicts = nil
			for i := range int(v % 3) {
				in.Conflicts = append(in.Conflicts, "remediator/other-"+string(rune('a'+i))+" (Running, on node kwok-node-3)")
			}
			if v%3 == 0 && v&4 != 0 {
				in.Conflicts = []string{}
			}
		case 10:
			facts().Target.Found = v&1 != 0
		case 11:
			facts().Target.Message = pick(editHolders, v)
		case 12:
			csi().DriverRegistered = v&1 != 0
		case 13:
			c := csi()
			if v%4 == 3 {
				c.PluginPods = nil
			} else {
				c.PluginPods = append(c.PluginPods, pod(v/4))
			}
		case 14:
			f := facts()
			f.AffectedPods = append(f.AffectedPods, pod(v))
		case 15:
			switch v % 3 {
			case 0:
				lease().AcquireTime = &editTime
			case 1:
				lease().AcquireTime = &metav1.Time{}
			case 2:
				node().ReadySince = &metav1.Time{}
			}
		case 16:
			node().StateReason = pick(editHolders, v)
		case 17:
			lease().AgeFrom = pick([]string{"", "acquireTime", "creationTimestamp (the holder's clock is ahead)"}, v)
		case 18:
			switch v % 3 {
			case 0:
				in.Facts = nil
			case 1:
				facts().Lease = nil
			case 2:
				facts().Node = nil
			}
		case 19:
			node().Ready = pick([]string{"True", "False", "Unknown", ""}, v)
		}
	}
}
