package facts

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// DaemonSetsSeen is what continuous detection remembers of the node-plugin
// DaemonSets from one scan to the next, so that it sees one recreated: the
// trident-operator deletes and creates it again, and the old pods' registrars
// remove the registration socket the new pods made (the deregistration incident's
// cause).
type DaemonSetsSeen struct {
	// Scanned is false before the first scan since the detector started: that scan
	// cannot tell a DaemonSet recreated just before it from one it never saw.
	Scanned bool
	// ByName is keyed by namespace/name. A DaemonSet no longer there is kept, so that
	// one deleted in a scan and created again in the next is seen recreated.
	ByName map[string]SeenDaemonSet
}

// SeenDaemonSet is one node-plugin DaemonSet as a scan last saw it.
type SeenDaemonSet struct {
	UID types.UID
	// Recreated stays true from the scan that saw the UID change while the
	// DaemonSet's pods still overlap on a node: a replaced pod that the DaemonSet
	// adopted carries the new UID, and only this memory tells it from the new one.
	Recreated bool
	// Previous is the UID it replaced, when a scan saw it.
	Previous types.UID
}

// pluginOverlapInput is what judgePluginOverlap weighs, read from the informers.
type pluginOverlapInput struct {
	// daemonSets are the node-plugin DaemonSets; known is false when they were not
	// read (remediator scan), and only the pods then say what is old.
	daemonSets []appsv1.DaemonSet
	known      bool
	seen       DaemonSetsSeen
	// pods are the node-plugin pods a DaemonSet controls, on a node.
	pods []corev1.Pod
	now  time.Time
	// window: on the first scan, a DaemonSet younger than this counts as recreated.
	window time.Duration
}

// pluginOverlap is judgePluginOverlap's answer.
type pluginOverlap struct {
	// nodes are the nodes where old and new node-plugin pods overlap, with why,
	// each list sorted.
	nodes map[string][]string
	// recreated are the DaemonSets this scan saw recreated, as "namespace/name: why", sorted.
	recreated []string
	next      DaemonSetsSeen
}

// judgePluginOverlap finds the deregistration incident's cause before its symptoms:
// on a node, two or more node-plugin pods of which one is old (its DaemonSet's UID
// is no longer the current one, or two UIDs of one DaemonSet meet there), one
// terminates while another runs, two DaemonSets own them, or their DaemonSet was
// recreated. When the old one ends, its registrar removes the registration socket,
// and kubelet forgets the driver. It is pure, to be table-tested.
func judgePluginOverlap(in pluginOverlapInput) pluginOverlap {
	current := map[string]*appsv1.DaemonSet{}
	for i := range in.daemonSets {
		ds := &in.daemonSets[i]
		current[ds.Namespace+"/"+ds.Name] = ds
	}
	byNode := map[string][]corev1.Pod{}
	for _, p := range in.pods {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	recreated, fresh := recreatedDaemonSets(in, current)
	out := pluginOverlap{nodes: map[string][]string{}, next: DaemonSetsSeen{Scanned: in.known, ByName: map[string]SeenDaemonSet{}}}
	overlapping := map[string]bool{}
	for node, pods := range byNode {
		if len(pods) < 2 {
			continue
		}
		slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		why := nodeOverlap(pods, current, in.known, recreated)
		if len(why) == 0 {
			continue
		}
		out.nodes[node] = why
		for _, p := range pods {
			overlapping[ownerKey(&p)] = true
		}
	}
	if !in.known {
		return out
	}
	out.next.ByName = maps.Clone(in.seen.ByName)
	if out.next.ByName == nil {
		out.next.ByName = map[string]SeenDaemonSet{}
	}
	for key, ds := range current {
		prev := in.seen.ByName[key]
		s := SeenDaemonSet{UID: ds.UID}
		if _, ok := recreated[key]; ok && overlapping[key] {
			s.Recreated, s.Previous = true, prev.Previous
			if prev.UID != "" && prev.UID != ds.UID {
				s.Previous = prev.UID
			}
		}
		out.next.ByName[key] = s
	}
	for _, key := range slices.Sorted(maps.Keys(fresh)) {
		out.recreated = append(out.recreated, key+": "+fresh[key])
	}
	return out
}

// recreatedDaemonSets says which current DaemonSets count as recreated, and why:
// their UID changed since the last scan (fresh, also returned apart for the log) or
// before, while their pods still overlap; or, on the first scan, they are younger
// than the window; or pods of an earlier UID of theirs remain.
func recreatedDaemonSets(in pluginOverlapInput, current map[string]*appsv1.DaemonSet) (all, fresh map[string]string) {
	all, fresh = map[string]string{}, map[string]string{}
	if !in.known {
		return all, fresh
	}
	for key, ds := range current {
		prev, seen := in.seen.ByName[key]
		switch {
		case seen && prev.UID != ds.UID:
			fresh[key] = fmt.Sprintf("recreated since the last scan (UID %s, now %s)", prev.UID, ds.UID)
			all[key] = fresh[key]
		case seen && prev.Recreated:
			all[key] = "recreated earlier, its pods still overlap"
			if prev.Previous != "" {
				all[key] = fmt.Sprintf("recreated earlier (UID %s, now %s), its pods still overlap", prev.Previous, ds.UID)
			}
		case !in.seen.Scanned && in.now.Sub(ds.CreationTimestamp.Time) < in.window:
			all[key] = fmt.Sprintf("created %s ago, before the detector's first scan", in.now.Sub(ds.CreationTimestamp.Time).Round(time.Second))
		}
	}
	for i := range in.pods {
		p := &in.pods[i]
		key := ownerKey(p)
		if ds, ok := current[key]; ok && metav1.GetControllerOf(p).UID != ds.UID {
			if _, done := all[key]; !done {
				all[key] = fmt.Sprintf("recreated: pods of its earlier UID %s remain", metav1.GetControllerOf(p).UID)
			}
		}
	}
	return all, fresh
}

// nodeOverlap says why the node-plugin pods on one node (two or more, sorted by
// name) are old and new ones overlapping, or nothing when they are not.
func nodeOverlap(pods []corev1.Pod, current map[string]*appsv1.DaemonSet, known bool, recreated map[string]string) []string {
	var why []string
	uids := map[string]map[types.UID]bool{}
	var running []string
	for i := range pods {
		p := &pods[i]
		key, uid := ownerKey(p), metav1.GetControllerOf(p).UID
		if uids[key] == nil {
			uids[key] = map[types.UID]bool{}
		}
		uids[key][uid] = true
		if p.DeletionTimestamp == nil {
			running = append(running, p.Name)
		}
		if !known {
			continue
		}
		if ds, ok := current[key]; !ok {
			why = append(why, fmt.Sprintf("%s belongs to DaemonSet %s (UID %s), which no longer exists", p.Name, key, uid))
		} else if ds.UID != uid {
			why = append(why, fmt.Sprintf("%s belongs to an earlier DaemonSet %s (UID %s, now %s)", p.Name, key, uid, ds.UID))
		}
	}
	for i := range pods {
		p := &pods[i]
		others := slices.DeleteFunc(slices.Clone(running), func(n string) bool { return n == p.Name })
		if p.DeletionTimestamp != nil && len(others) > 0 {
			why = append(why, fmt.Sprintf("%s terminates while %s runs", p.Name, strings.Join(others, ", ")))
		}
	}
	if len(uids) > 1 {
		// Two DaemonSets' registrars for one driver (the incident's reproduction copies
		// the DaemonSet): whichever ends first removes the other's socket.
		why = append(why, "pods of "+strings.Join(slices.Sorted(maps.Keys(uids)), " and ")+" on one node")
	}
	for _, key := range slices.Sorted(maps.Keys(uids)) {
		if len(uids[key]) > 1 && !known {
			why = append(why, fmt.Sprintf("pods of DaemonSet %s from %d UIDs", key, len(uids[key])))
		}
		if r, ok := recreated[key]; ok {
			why = append(why, fmt.Sprintf("DaemonSet %s %s", key, r))
		}
	}
	slices.Sort(why)
	return slices.Compact(why)
}

// ownerKey is namespace/name of the DaemonSet that controls a node-plugin pod.
func ownerKey(p *corev1.Pod) string { return p.Namespace + "/" + metav1.GetControllerOf(p).Name }

// pluginDaemonSets keeps the DaemonSets whose pod template the node-plugin selector
// matches, and those a node-plugin pod names as its controller: Trident names its
// node DaemonSet differently across versions (trident-csi, trident-node-linux), and
// a pod's owner is known by namespace/name, whichever UID it had.
func pluginDaemonSets(list []appsv1.DaemonSet, selector labels.Selector, pods []corev1.Pod) []appsv1.DaemonSet {
	owners := map[string]bool{}
	for i := range pods {
		owners[ownerKey(&pods[i])] = true
	}
	return slices.DeleteFunc(slices.Clone(list), func(ds appsv1.DaemonSet) bool {
		return !selector.Matches(labels.Set(ds.Spec.Template.Labels)) && !owners[ds.Namespace+"/"+ds.Name]
	})
}
