package facts

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Finding kinds reported by Scan.
const (
	FindingStuckLease            = "StuckLease"
	FindingDeregisteredDriver    = "DeregisteredDriver"
	FindingOverlappingPluginPods = "OverlappingPluginPods"
	// FindingOldPluginPodOverlap is the deregistration incident's cause, seen before
	// any mount fails: an old node-plugin pod (of a DaemonSet since recreated, or
	// terminating) next to a new one on a node. A node whose CSINode already lacks
	// the driver gets a DeregisteredDriver finding instead, with this as its Cause.
	FindingOldPluginPodOverlap = "OldPluginPodOverlap"
)

// Symptom kinds: what an on-call engineer sees first, attached to the finding that
// explains it.
const (
	// SymptomFailedMount is kubelet's FailedMount Warning on a pod that uses a stuck
	// Lease's volume, or on a node whose CSINode lacks the driver (docs/safety.md, the CSI node-plugin incident).
	SymptomFailedMount = "FailedMount"
	// SymptomContainerCreating is a pod of a stuck Lease's volume that waits in
	// ContainerCreating (docs/safety.md, the stuck-Lease incident).
	SymptomContainerCreating = "ContainerCreating"
	// SymptomTerminating is a pod of a stuck Lease's volume stuck Terminating (docs/safety.md, the stuck-Lease incident).
	SymptomTerminating = "Terminating"
)

// FailedMountReason is the reason of kubelet's Warning for a volume it cannot mount.
const FailedMountReason = "FailedMount"

// DriverSymptomWindow is how recent a FailedMount saying the driver is not registered
// must be to count: kubelet retries a mount at most every 2m2s, and the hour an event
// lives must not keep a node that recovered looking sick.
const DriverSymptomWindow = 10 * time.Minute

// Finding is one incident Scan detected, with the evidence for opening a request.
type Finding struct {
	Kind      string             `json:"kind"`
	Node      string             `json:"node"`
	NodeState v1alpha1.NodeState `json:"nodeState"`
	// Lease is namespace/name for stuck Leases; the PV has the Lease's name.
	Lease          string   `json:"lease,omitempty"`
	AgeSeconds     int64    `json:"ageSeconds,omitempty"`
	RetainedEvents int32    `json:"retainedEvents,omitempty"`
	PluginPods     []string `json:"pluginPods,omitempty"`
	Evidence       string   `json:"evidence"`
	// Cause is, on a DeregisteredDriver finding, FindingOldPluginPodOverlap when old
	// and new node-plugin pods still overlap on the node: the finding stands for both.
	Cause string `json:"cause,omitempty"`
	// Symptoms are the workload's signs of this incident, sorted by kind, then object.
	Symptoms []Symptom `json:"symptoms,omitempty"`
}

// Symptom is one sign of an incident on a workload pod.
type Symptom struct {
	Kind string `json:"kind"`
	// Pod is namespace/name.
	Pod string `json:"pod"`
	// Count is how many times kubelet reported it, else 1.
	Count   int32  `json:"count"`
	Message string `json:"message,omitempty"`
}

// String renders a symptom for the scan table and logs.
func (s Symptom) String() string {
	out := s.Kind + " " + s.Pod
	if s.Count > 1 {
		out += fmt.Sprintf(" (%dx)", s.Count)
	}
	if s.Message != "" {
		out += ": " + s.Message
	}
	return out
}

// ScanOptions tunes Scan.
type ScanOptions struct {
	// LeaseAge is the age from which a Healthy (or Unknown) holder's PV-named Lease
	// counts as stuck without LeaseRetained events: the floor's HealthyStuckLeaseAge.
	LeaseAge time.Duration
	// Warn receives what the scan could not read but did without; nil drops it.
	Warn func(string)
	// HeldBy names a node whose PV-named Leases ScanWithHeld lists whether they are
	// stuck or not: the runbook's shutdown branch starts from the Leases the node
	// holds, and one that scan does not find stuck must be seen to be ruled out, not
	// silently dropped. Matched exactly against the Lease's holderIdentity.
	HeldBy string
	// DaemonSets, when set, has the scan read the node-plugin DaemonSets and judge
	// their pods against what it remembers of them, as continuous detection does; nil
	// judges from the pods alone, as `remediator scan` does (one look, no memory).
	DaemonSets *DaemonSetsSeen
	// RecreatedWithin: on the first scan (DaemonSets.Scanned false), a node-plugin
	// DaemonSet younger than this counts as recreated, so that a detector that just
	// started does not miss a recreation it could not see happen.
	RecreatedWithin time.Duration
	// Symptoms, when set, remembers each stuck Lease's symptoms between scans, as
	// continuous detection does (SymptomsSeen); nil reads them for every Lease, as
	// `remediator scan` does.
	Symptoms *SymptomsSeen
}

// HeldLease is a PV-named Trident Lease that ScanOptions.HeldBy holds, stuck by
// Scan's test or not, and why.
type HeldLease struct {
	// Lease is namespace/name; the PV has the Lease's name.
	Lease          string             `json:"lease"`
	Node           string             `json:"node"`
	NodeState      v1alpha1.NodeState `json:"nodeState"`
	AgeSeconds     int64              `json:"ageSeconds"`
	RetainedEvents int32              `json:"retainedEvents"`
	// Stuck is Scan's test: the Lease is a StuckLease finding.
	Stuck bool `json:"stuck"`
	// Why says which part of the test made it stuck, or why none did.
	Why string `json:"why"`
	// Symptoms are the volume's pods' signs, as a finding's, also for a Lease that is
	// not stuck: pods waiting behind a young Lease are worth a look at the holder.
	Symptoms []Symptom `json:"symptoms,omitempty"`
}

// ScanResult is what ScanWithHeld found.
type ScanResult struct {
	// Findings are Scan's.
	Findings []Finding
	// Held are the Leases ScanOptions.HeldBy holds, sorted by Lease; nil without HeldBy.
	Held []HeldLease
	// DaemonSets is what to remember of the node-plugin DaemonSets for the next scan;
	// nil without ScanOptions.DaemonSets.
	DaemonSets *DaemonSetsSeen
	// Recreated are the node-plugin DaemonSets seen recreated since the last scan, as
	// "namespace/name: why", sorted.
	Recreated []string
}

// Scan looks for the two incidents across the cluster: stuck PV-named Leases in the
// Trident namespace, nodes whose CSINode lacks the driver while a Ready node-plugin
// pod runs there, and overlapping node-plugin pods (old and new ones: the
// deregistration's cause, before its symptoms), each with the workload's symptoms.
// Findings are sorted by kind, then node, then Lease.
func (g *Gatherer) Scan(ctx context.Context, opts ScanOptions) ([]Finding, error) {
	r, err := g.ScanWithHeld(ctx, opts)
	return r.Findings, err
}

// ScanWithHeld is Scan, and with opts.HeldBy the PV-named Leases that node holds,
// judged in the same pass, so that the listing and the findings agree.
func (g *Gatherer) ScanWithHeld(ctx context.Context, opts ScanOptions) (ScanResult, error) {
	now := g.now()
	mounts, err := g.failedMounts(ctx, opts)
	if err != nil {
		return ScanResult{}, err
	}
	// A node is read once per scan, however many Leases it holds.
	nodes := map[string]*v1alpha1.NodeFacts{}
	nodeOf := func(ctx context.Context, name string) (*v1alpha1.NodeFacts, error) {
		if nf, ok := nodes[name]; ok {
			return nf, nil
		}
		nf, _, err := g.nodeFacts(ctx, name, now)
		if err == nil {
			nodes[name] = nf
		}
		return nf, err
	}
	leases, held, err := g.pvLeases(ctx, opts, now, mounts, nodeOf)
	if err != nil {
		return ScanResult{}, err
	}
	csi, judged, err := g.pluginFindings(ctx, opts, now, mounts, nodeOf)
	if err != nil {
		return ScanResult{}, err
	}
	out := slices.Concat(leases, csi)
	slices.SortFunc(out, func(a, b Finding) int {
		return strings.Compare(a.Kind+"\x00"+a.Node+"\x00"+a.Lease, b.Kind+"\x00"+b.Node+"\x00"+b.Lease)
	})
	slices.SortFunc(held, func(a, b HeldLease) int { return strings.Compare(a.Lease, b.Lease) })
	if opts.HeldBy != "" && held == nil {
		held = []HeldLease{}
	}
	opts.Symptoms.Sweep(now)
	res := ScanResult{Findings: out, Held: held, Recreated: judged.recreated}
	if opts.DaemonSets != nil {
		res.DaemonSets = &judged.next
	}
	return res, nil
}

// nodeReader reads a node's facts.
type nodeReader func(ctx context.Context, name string) (*v1alpha1.NodeFacts, error)

// symptomReaders bounds how many stuck Leases' pods a scan reads at once. A power
// loss leaves hundreds of Leases stuck at once, and the first scan after it reads
// every one's pods live: one after the other, a thousand of them outlasted a scan's
// bound on a loaded API server, and the Leases not reached waited for the next scan.
const symptomReaders = 8

// judgedLease is a PV-named Lease as pvLeases judged it, before its symptoms are read.
type judgedLease struct {
	l      *coordinationv1.Lease
	pv     *corev1.PersistentVolume
	lf     *v1alpha1.LeaseFacts
	nf     *v1alpha1.NodeFacts
	holder string
	age    time.Duration
	stuck  bool
	listed bool
}

// pvLeases judges the PV-named Leases in the Trident namespace: the stuck ones are
// findings, and those opts.HeldBy holds are listed too, stuck or not. The judging
// reads the cache; the symptoms, read live, are read symptomReaders at a time.
func (g *Gatherer) pvLeases(ctx context.Context, opts ScanOptions, now time.Time, mounts []corev1.Event, nodeOf nodeReader) ([]Finding, []HeldLease, error) {
	list := &coordinationv1.LeaseList{}
	if err := g.Reader.List(ctx, list, client.InNamespace(g.Config.TridentNamespace)); err != nil {
		return nil, nil, fmt.Errorf("listing Leases in %s: %w", g.Config.TridentNamespace, err)
	}
	var judged []judgedLease
	for i := range list.Items {
		l := &list.Items[i]
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		if holder == "" {
			continue
		}
		// Trident names its cryptsetup Leases after PVs; others are not ours to judge.
		pv := &corev1.PersistentVolume{}
		found, err := g.get(ctx, types.NamespacedName{Name: l.Name}, pv)
		if err != nil {
			return nil, nil, err
		}
		if !found {
			continue
		}
		lf := &v1alpha1.LeaseFacts{}
		if err := g.retainedEvents(ctx, l, lf, now); err != nil {
			return nil, nil, err
		}
		nf, err := nodeOf(ctx, holder)
		if err != nil {
			return nil, nil, err
		}
		age := time.Duration(lf.AgeSeconds) * time.Second
		j := judgedLease{l: l, pv: pv, lf: lf, nf: nf, holder: holder, age: age,
			stuck:  leaseStuck(nf.State, lf.RetainedEvents, age, opts.LeaseAge),
			listed: opts.HeldBy != "" && holder == opts.HeldBy}
		if j.stuck || j.listed {
			judged = append(judged, j)
		}
	}

	symptoms := make([][]Symptom, len(judged))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(symptomReaders)
	for i, j := range judged {
		eg.Go(func() error {
			s, err := opts.Symptoms.of(j.l, j.nf.State, j.pv, now, mounts, func() ([]Symptom, error) {
				return g.volumeSymptoms(ectx, j.pv, j.holder, j.lf.HeldSince.Time, mounts)
			})
			symptoms[i] = s
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, nil, err
	}

	var out []Finding
	var held []HeldLease
	for i, j := range judged {
		l, lf, nf, holder, age := j.l, j.lf, j.nf, j.holder, j.age
		key := l.Namespace + "/" + l.Name
		if j.listed {
			_, why := judgeLease(nf.State, lf.RetainedEvents, age, opts.LeaseAge, len(symptoms[i]))
			held = append(held, HeldLease{
				Lease: key, Node: holder, NodeState: nf.State, AgeSeconds: lf.AgeSeconds, RetainedEvents: lf.RetainedEvents,
				Stuck: j.stuck, Why: why, Symptoms: symptoms[i],
			})
		}
		if !j.stuck {
			continue
		}
		evidence := fmt.Sprintf("Lease %s held by %s for %s", key, holder, age)
		if lf.RetainedEvents > 0 {
			evidence += fmt.Sprintf(", %d LeaseRetained event(s), last: %q", lf.RetainedEvents, lf.LastRetainedMessage)
		}
		evidence += fmt.Sprintf("; holder %s is %s (%s)", holder, nf.State, nf.StateReason)
		out = append(out, Finding{
			Kind: FindingStuckLease, Node: holder, NodeState: nf.State, Lease: key,
			AgeSeconds: lf.AgeSeconds, RetainedEvents: lf.RetainedEvents, Evidence: evidence, Symptoms: symptoms[i],
		})
	}
	return out, held, nil
}

// holderGone: a node shut down, cut off or gone runs no cryptsetup the API can see
// finish, and Leases never expire, so a Lease it holds is stuck however young (the
// runbook's wait before deleting is the safety floor's).
func holderGone(state v1alpha1.NodeState) bool {
	return state == v1alpha1.NodeShutdown || state == v1alpha1.NodeUnreachable || state == v1alpha1.NodeNotFound
}

// leaseStuck is Scan's test on a PV-named Lease: its holder is gone, or Trident
// retained it after a failed operation (LeaseRetained), or it is at least stuckAge
// old. A Healthy or Unknown holder's young Lease without LeaseRetained may be an
// operation in flight.
func leaseStuck(state v1alpha1.NodeState, retained int32, age, stuckAge time.Duration) bool {
	return holderGone(state) || retained > 0 || age >= stuckAge
}

// judgeLease is leaseStuck with its reasons in words, for the people who decide on
// the runbook's next step: every part of the test that holds when the Lease is
// stuck, else why none does. symptoms counts the volume's pods' signs, which do not
// decide but tell whether anything waits behind a Lease that is not stuck. It is
// pure, to be table-tested.
func judgeLease(state v1alpha1.NodeState, retained int32, age, stuckAge time.Duration, symptoms int) (bool, string) {
	if !leaseStuck(state, retained, age, stuckAge) {
		holder := fmt.Sprintf("holder %s: the evidence conflicts, and it may still run cryptsetup", state)
		if state == v1alpha1.NodeHealthy {
			holder = "holder Healthy, renewing its node Lease: cryptsetup may still run"
		}
		waiting := "no symptom on the volume's pods"
		if symptoms > 0 {
			waiting = fmt.Sprintf("%d symptom(s) on the volume's pods: read the holder's trident-main log", symptoms)
		}
		return false, fmt.Sprintf("young: held %s, under %s; no LeaseRetained event since the hold began; %s; %s", age, stuckAge, holder, waiting)
	}
	var why []string
	if holderGone(state) {
		why = append(why, fmt.Sprintf("holder %s: a Lease never expires, so it is stuck at any age", state))
	}
	if retained > 0 {
		why = append(why, fmt.Sprintf("%d LeaseRetained event(s) since the hold began: Trident kept it after a failed operation", retained))
	}
	if age >= stuckAge {
		why = append(why, fmt.Sprintf("held %s, at least the %s after which a live holder's Lease counts as stuck", age, stuckAge))
	}
	return true, strings.Join(why, "; ")
}
