package facts

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// pluginFindings judges the node-plugin pods node by node: overlapping pods, old and
// new ones overlapping (the deregistration incident's cause, before any mount
// fails), and a CSINode that lacks the driver while a Ready one runs (its symptom).
// A node with both the cause and the symptom gets one finding, DeregisteredDriver
// with its Cause, so that one incident is counted once.
func (g *Gatherer) pluginFindings(ctx context.Context, opts ScanOptions, now time.Time, mounts []corev1.Event, nodeOf nodeReader) ([]Finding, pluginOverlap, error) {
	in, err := g.pluginOverlapInput(ctx, opts, now)
	if err != nil {
		return nil, pluginOverlap{}, err
	}
	judged := judgePluginOverlap(in)
	byNode := map[string][]corev1.Pod{}
	for _, p := range in.pods {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	var out []Finding
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
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
		nf, err := nodeOf(ctx, node)
		if err != nil {
			return nil, pluginOverlap{}, err
		}
		if len(ps) > 1 {
			out = append(out, Finding{
				Kind: FindingOverlappingPluginPods, Node: node, NodeState: nf.State, PluginPods: descr,
				Evidence: fmt.Sprintf("%d node-plugin pods on %s: %s; when the old one terminates its registrar removes the registration socket", len(ps), node, strings.Join(descr, ", ")),
			})
		}
		deregistered, err := g.driverMissing(ctx, node, ready)
		if err != nil {
			return nil, pluginOverlap{}, err
		}
		cause, overlapping := judged.nodes[node]
		switch {
		case deregistered:
			f := Finding{
				Kind: FindingDeregisteredDriver, Node: node, NodeState: nf.State, PluginPods: descr,
				Evidence: fmt.Sprintf("CSINode %s does not list %s while node-plugin pod(s) run there: %s", node, g.Config.DriverName, strings.Join(descr, ", ")),
				Symptoms: g.driverSymptoms(node, now, mounts),
			}
			if overlapping {
				f.Cause = FindingOldPluginPodOverlap
				f.Evidence += "; cause: old and new node-plugin pods overlap: " + strings.Join(cause, "; ")
			}
			out = append(out, f)
		case overlapping:
			out = append(out, Finding{
				Kind: FindingOldPluginPodOverlap, Node: node, NodeState: nf.State, PluginPods: descr,
				Evidence: fmt.Sprintf("old and new node-plugin pods overlap on %s: %s; when the old one ends, its registrar removes the registration socket and kubelet forgets %s (pods: %s)",
					node, strings.Join(cause, "; "), g.Config.DriverName, strings.Join(descr, ", ")),
			})
		}
	}
	return out, judged, nil
}

// driverMissing: a Ready node-plugin pod runs on node and its CSINode does not list
// the driver.
func (g *Gatherer) driverMissing(ctx context.Context, node string, ready bool) (bool, error) {
	if !ready {
		return false, nil
	}
	cn := &storagev1.CSINode{}
	found, err := g.get(ctx, types.NamespacedName{Name: node}, cn)
	if err != nil {
		return false, err
	}
	return !found || !slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == g.Config.DriverName }), nil
}

// pluginOverlapInput reads the node-plugin pods (those NodePluginPods counts: a
// DaemonSet controls them) and, with opts.DaemonSets, the node-plugin DaemonSets.
func (g *Gatherer) pluginOverlapInput(ctx context.Context, opts ScanOptions, now time.Time) (pluginOverlapInput, error) {
	in := pluginOverlapInput{now: now, window: opts.RecreatedWithin}
	pods := &corev1.PodList{}
	if err := g.Reader.List(ctx, pods, client.InNamespace(g.Config.TridentNamespace),
		client.MatchingLabelsSelector{Selector: g.Config.NodePluginSelector}); err != nil {
		return in, fmt.Errorf("listing node-plugin pods: %w", err)
	}
	in.pods = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.Spec.NodeName == "" || !isDaemonSetPod(&p) })
	if opts.DaemonSets == nil {
		return in, nil
	}
	list := &appsv1.DaemonSetList{}
	if err := g.Reader.List(ctx, list, client.InNamespace(g.Config.TridentNamespace)); err != nil {
		return in, fmt.Errorf("listing DaemonSets in %s: %w", g.Config.TridentNamespace, err)
	}
	in.daemonSets, in.known, in.seen = pluginDaemonSets(list.Items, g.Config.NodePluginSelector, in.pods), true, *opts.DaemonSets
	return in, nil
}
