package facts

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Finding kinds reported by Scan.
const (
	FindingStuckLease            = "StuckLease"
	FindingDeregisteredDriver    = "DeregisteredDriver"
	FindingOverlappingPluginPods = "OverlappingPluginPods"
)

// Finding is one incident Scan detected, with the evidence an operator needs to
// decide whether to open a request.
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
}

// ScanOptions tunes Scan.
type ScanOptions struct {
	// LeaseAge is the age from which a PV-named Lease counts as stuck even without
	// LeaseRetained events.
	LeaseAge time.Duration
}

// Scan looks for the two incidents across the cluster: PV-named Leases in the Trident
// namespace that are old or carry LeaseRetained events, nodes whose CSINode lacks the
// driver while a Ready node-plugin pod runs there, and nodes with overlapping
// node-plugin pods. It reads only the Trident namespace's Leases and pods, Nodes and
// CSINodes. Findings are sorted by kind, then node, then Lease.
func (g *Gatherer) Scan(ctx context.Context, opts ScanOptions) ([]Finding, error) {
	now := g.now()
	var out []Finding
	leases, err := g.stuckLeases(ctx, opts, now)
	if err != nil {
		return nil, err
	}
	out = append(out, leases...)
	csi, err := g.pluginFindings(ctx, now)
	if err != nil {
		return nil, err
	}
	out = append(out, csi...)
	slices.SortFunc(out, func(a, b Finding) int {
		return strings.Compare(a.Kind+"\x00"+a.Node+"\x00"+a.Lease, b.Kind+"\x00"+b.Node+"\x00"+b.Lease)
	})
	return out, nil
}

func (g *Gatherer) stuckLeases(ctx context.Context, opts ScanOptions, now time.Time) ([]Finding, error) {
	list := &coordinationv1.LeaseList{}
	if err := g.Reader.List(ctx, list, client.InNamespace(g.Config.TridentNamespace)); err != nil {
		return nil, fmt.Errorf("listing Leases in %s: %w", g.Config.TridentNamespace, err)
	}
	var out []Finding
	for i := range list.Items {
		l := &list.Items[i]
		// Trident names its cryptsetup Leases after PVs; other Leases in the namespace
		// (leader election, for instance) are not ours to judge.
		found, err := g.get(ctx, types.NamespacedName{Name: l.Name}, &corev1.PersistentVolume{})
		if err != nil {
			return nil, err
		}
		if !found || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			continue
		}
		lf := &v1alpha1.LeaseFacts{}
		// The same age as the decision uses, so that a holder with a slow clock does
		// not make a fresh Lease look stuck here either.
		lf.AgeSeconds, lf.AgeFrom = leaseAge(l, now)
		if err := g.retainedEvents(ctx, l, lf); err != nil {
			return nil, err
		}
		if lf.RetainedEvents == 0 && time.Duration(lf.AgeSeconds)*time.Second < opts.LeaseAge {
			continue
		}
		holder := *l.Spec.HolderIdentity
		nf, err := g.nodeFacts(ctx, holder, now)
		if err != nil {
			return nil, err
		}
		evidence := fmt.Sprintf("Lease %s/%s held by %s for %s", l.Namespace, l.Name, holder, time.Duration(lf.AgeSeconds)*time.Second)
		if lf.RetainedEvents > 0 {
			evidence += fmt.Sprintf(", %d LeaseRetained event(s), last: %q", lf.RetainedEvents, lf.LastRetainedMessage)
		}
		evidence += fmt.Sprintf("; holder %s is %s (%s)", holder, nf.State, nf.StateReason)
		out = append(out, Finding{
			Kind: FindingStuckLease, Node: holder, NodeState: nf.State, Lease: l.Namespace + "/" + l.Name,
			AgeSeconds: lf.AgeSeconds, RetainedEvents: lf.RetainedEvents, Evidence: evidence,
		})
	}
	return out, nil
}

func (g *Gatherer) pluginFindings(ctx context.Context, now time.Time) ([]Finding, error) {
	pods := &corev1.PodList{}
	if err := g.Reader.List(ctx, pods, client.InNamespace(g.Config.TridentNamespace),
		client.MatchingLabelsSelector{Selector: g.Config.NodePluginSelector}); err != nil {
		return nil, fmt.Errorf("listing node-plugin pods: %w", err)
	}
	byNode := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)

	var out []Finding
	for _, node := range nodes {
		ps := byNode[node]
		slices.SortFunc(ps, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		var descr []string
		ready := false
		for i := range ps {
			pf := podFacts(&ps[i])
			if pf.DeletionTimestamp == nil && pf.Ready {
				ready = true
			}
			descr = append(descr, pf.String())
		}
		nf, err := g.nodeFacts(ctx, node, now)
		if err != nil {
			return nil, err
		}
		if len(ps) > 1 {
			out = append(out, Finding{
				Kind: FindingOverlappingPluginPods, Node: node, NodeState: nf.State, PluginPods: descr,
				Evidence: fmt.Sprintf("%d node-plugin pods on %s: %s; when the old one terminates its registrar removes the registration socket", len(ps), node, strings.Join(descr, ", ")),
			})
		}
		if !ready {
			continue
		}
		cn := &storagev1.CSINode{}
		found, err := g.get(ctx, types.NamespacedName{Name: node}, cn)
		if err != nil {
			return nil, err
		}
		if found && slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == g.Config.DriverName }) {
			continue
		}
		out = append(out, Finding{
			Kind: FindingDeregisteredDriver, Node: node, NodeState: nf.State, PluginPods: descr,
			Evidence: fmt.Sprintf("CSINode %s does not list %s while node-plugin pod(s) run there: %s", node, g.Config.DriverName, strings.Join(descr, ", ")),
		})
	}
	return out, nil
}
