package facts

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// Symptom kinds: what an on-call engineer sees first, attached to the finding that
// explains it.
const (
	// SymptomFailedMount is kubelet's FailedMount Warning on a pod: on a pod that uses
	// a stuck Lease's volume, or, naming the driver as not registered, on a pod on a
	// node whose CSINode lacks it (seeds/000: "driver name csi.trident.netapp.io not
	// found in the list of registered CSI drivers").
	SymptomFailedMount = "FailedMount"
	// SymptomContainerCreating is a pod that uses a stuck Lease's volume and waits in
	// ContainerCreating (seeds/003).
	SymptomContainerCreating = "ContainerCreating"
	// SymptomTerminating is a pod that uses a stuck Lease's volume and is being deleted
	// but still exists (seeds/003: pods stuck in Terminating).
	SymptomTerminating = "Terminating"
)

// FailedMountReason is the reason of kubelet's Warning event for a volume it could not
// mount.
const FailedMountReason = "FailedMount"

// The reasons kubelet gives a container that waits for its pod's volumes:
// ContainerCreating, or PodInitializing for the containers after an init container
// that has not run yet.
const (
	waitingContainerCreating = "ContainerCreating"
	waitingPodInitializing   = "PodInitializing"
)

// DriverSymptomWindow is how recent a FailedMount saying the driver is not registered
// must be to count as a symptom of a node that lacks it now: kubelet retries a mount
// at most every 2m2s, so a node that still fails reports it well within the window,
// and the hour an event lives does not keep a node that recovered looking sick.
const DriverSymptomWindow = 10 * time.Minute

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
	// Symptoms are the workload's signs of this incident, sorted by kind, then object.
	Symptoms []Symptom `json:"symptoms,omitempty"`
}

// Symptom is one sign of an incident on a workload pod.
type Symptom struct {
	Kind string `json:"kind"`
	// Pod is namespace/name.
	Pod string `json:"pod"`
	// Count is how many times kubelet reported it (FailedMount), else 1.
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
	// LeaseAge is the age from which a PV-named Lease whose holder is Healthy (or
	// Unknown) counts as stuck even without LeaseRetained events: the safety floor's
	// HealthyStuckLeaseAge, so that a finding is what a request could act on.
	LeaseAge time.Duration
	// Warn receives what the scan could not read but did without (the FailedMount
	// events, when listing events is forbidden); nil drops it.
	Warn func(string)
}

// Scan looks for the two incidents across the cluster: PV-named Leases in the Trident
// namespace whose holder is not Healthy, that are old or that carry LeaseRetained
// events; nodes whose CSINode lacks the driver while a Ready node-plugin pod runs
// there; and nodes with overlapping node-plugin pods. Each finding carries the
// workload's symptoms: kubelet's FailedMount events and the pods of a stuck Lease's
// volume that wait in ContainerCreating or Terminating. It reads the Trident
// namespace's Leases and node-plugin pods, Nodes, node Leases, CSINodes, PVs,
// FailedMount events in every namespace, and the pods of each stuck Lease's claim.
// Findings are sorted by kind, then node, then Lease.
func (g *Gatherer) Scan(ctx context.Context, opts ScanOptions) ([]Finding, error) {
	now := g.now()
	mounts, err := g.failedMounts(ctx, opts)
	if err != nil {
		return nil, err
	}
	// A node is read once per scan, however many Leases it holds.
	nodes := map[string]*v1alpha1.NodeFacts{}
	nodeOf := func(ctx context.Context, name string) (*v1alpha1.NodeFacts, error) {
		if nf, ok := nodes[name]; ok {
			return nf, nil
		}
		nf, err := g.nodeFacts(ctx, name, now)
		if err == nil {
			nodes[name] = nf
		}
		return nf, err
	}
	var out []Finding
	leases, err := g.stuckLeases(ctx, opts, now, mounts, nodeOf)
	if err != nil {
		return nil, err
	}
	out = append(out, leases...)
	csi, err := g.pluginFindings(ctx, now, mounts, nodeOf)
	if err != nil {
		return nil, err
	}
	out = append(out, csi...)
	slices.SortFunc(out, func(a, b Finding) int {
		return strings.Compare(a.Kind+"\x00"+a.Node+"\x00"+a.Lease, b.Kind+"\x00"+b.Node+"\x00"+b.Lease)
	})
	return out, nil
}

// nodeReader reads a node's facts.
type nodeReader func(ctx context.Context, name string) (*v1alpha1.NodeFacts, error)

func (g *Gatherer) stuckLeases(ctx context.Context, opts ScanOptions, now time.Time, mounts []corev1.Event, nodeOf nodeReader) ([]Finding, error) {
	list := &coordinationv1.LeaseList{}
	if err := g.Reader.List(ctx, list, client.InNamespace(g.Config.TridentNamespace)); err != nil {
		return nil, fmt.Errorf("listing Leases in %s: %w", g.Config.TridentNamespace, err)
	}
	var out []Finding
	for i := range list.Items {
		l := &list.Items[i]
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			continue
		}
		// Trident names its cryptsetup Leases after PVs; other Leases in the namespace
		// (leader election, for instance) are not ours to judge.
		pv := &corev1.PersistentVolume{}
		found, err := g.get(ctx, types.NamespacedName{Name: l.Name}, pv)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		created := l.CreationTimestamp
		lf := &v1alpha1.LeaseFacts{CreationTimestamp: &created}
		if l.Spec.AcquireTime != nil {
			lf.AcquireTime = &metav1.Time{Time: l.Spec.AcquireTime.Time}
		}
		// The same age as the decision uses, on the API server's clock, so that a
		// holder with a slow clock does not make a fresh Lease look stuck here either.
		recordLeaseAge(lf, l, now)
		if err := g.retainedEvents(ctx, l, lf); err != nil {
			return nil, err
		}
		holder := *l.Spec.HolderIdentity
		// The holder is looked at before the age: a Lease held by a node that is shut
		// down, cut off or gone is stuck however young it is (Leases never expire), and
		// the runbook's wait before deleting it is the floor's business, not a reason to
		// stay silent. A Healthy holder's young Lease without a LeaseRetained Warning is
		// an operation still in flight; so may be an Unknown holder's, whose kubelet
		// still renews its heartbeat (Ready=False with a fresh node Lease).
		nf, err := nodeOf(ctx, holder)
		if err != nil {
			return nil, err
		}
		gone := nf.State == v1alpha1.NodeShutdown || nf.State == v1alpha1.NodeUnreachable || nf.State == v1alpha1.NodeNotFound
		if !gone && lf.RetainedEvents == 0 && time.Duration(lf.AgeSeconds)*time.Second < opts.LeaseAge {
			continue
		}
		evidence := fmt.Sprintf("Lease %s/%s held by %s for %s", l.Namespace, l.Name, holder, time.Duration(lf.AgeSeconds)*time.Second)
		if lf.RetainedEvents > 0 {
			evidence += fmt.Sprintf(", %d LeaseRetained event(s), last: %q", lf.RetainedEvents, lf.LastRetainedMessage)
		}
		evidence += fmt.Sprintf("; holder %s is %s (%s)", holder, nf.State, nf.StateReason)
		symptoms, err := g.volumeSymptoms(ctx, pv, holder, lf.HeldSince.Time, mounts)
		if err != nil {
			return nil, err
		}
		out = append(out, Finding{
			Kind: FindingStuckLease, Node: holder, NodeState: nf.State, Lease: l.Namespace + "/" + l.Name,
			AgeSeconds: lf.AgeSeconds, RetainedEvents: lf.RetainedEvents, Evidence: evidence, Symptoms: symptoms,
		})
	}
	return out, nil
}

// failedMounts lists kubelet's FailedMount Warning events in every namespace. An
// identity that may not list events cluster-wide still gets its findings, without
// the symptoms, and a warning.
func (g *Gatherer) failedMounts(ctx context.Context, opts ScanOptions) ([]corev1.Event, error) {
	events := &corev1.EventList{}
	err := g.Reader.List(ctx, events, client.MatchingFields{"reason": FailedMountReason})
	if apierrors.IsForbidden(err) {
		if opts.Warn != nil {
			opts.Warn(fmt.Sprintf("listing %s events in every namespace is forbidden, so the findings carry no symptoms: %v", FailedMountReason, err))
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s events: %w", FailedMountReason, err)
	}
	return events.Items, nil
}

// volumeSymptoms are the signs of a stuck Lease on the pods that use its volume (its
// PV's claim): the pods that wait in ContainerCreating or are stuck Terminating, and
// kubelet's FailedMount events on them from since the Lease was taken. The pods looked
// at are those on the holder node (listed by node, as the decision lists them) and
// those a FailedMount event names with this volume, read one by one: a RWX volume's
// pods elsewhere wait for the same lock, and kubelet says so on each; listing the
// claim's whole namespace every scan would cost the API server what a big namespace
// costs.
func (g *Gatherer) volumeSymptoms(ctx context.Context, pv *corev1.PersistentVolume, holder string, heldSince time.Time, mounts []corev1.Event) ([]Symptom, error) {
	// Only the volume's own claim (bound from both sides) has pods to look at.
	claim, _, err := g.volumeClaim(ctx, pv)
	if err != nil || claim == nil {
		return nil, err
	}
	quoted := fmt.Sprintf("%q", pv.Name)
	pods := map[types.UID]*corev1.Pod{}
	onHolder, err := g.podsOnNode(ctx, holder, client.InNamespace(claim.Namespace))
	if err != nil {
		return nil, err
	}
	for i := range onHolder {
		pods[onHolder[i].UID] = &onHolder[i]
	}
	for i := range mounts {
		ev := &mounts[i]
		if ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Namespace != claim.Namespace || ev.InvolvedObject.UID == "" ||
			!strings.Contains(ev.Message, quoted) {
			continue
		}
		if _, seen := pods[ev.InvolvedObject.UID]; seen {
			continue
		}
		p := &corev1.Pod{}
		found, err := g.get(ctx, types.NamespacedName{Namespace: claim.Namespace, Name: ev.InvolvedObject.Name}, p)
		if err != nil {
			return nil, err
		}
		if found {
			pods[p.UID] = p
		}
	}
	now := g.now()
	var out []Symptom
	for _, p := range pods {
		volumes := VolumesUsing(p, claim)
		if len(volumes) == 0 {
			continue
		}
		key := p.Namespace + "/" + p.Name
		switch {
		case p.DeletionTimestamp != nil && now.After(p.DeletionTimestamp.Time):
			// deletionTimestamp is when the grace period ends: before it, the pod is
			// shutting down as it should.
			out = append(out, Symptom{Kind: SymptomTerminating, Pod: key, Count: 1,
				Message: fmt.Sprintf("on %s, past its deletion at %s", p.Spec.NodeName, stamp(p.DeletionTimestamp.Time))})
		case waitsForVolumes(p):
			out = append(out, Symptom{Kind: SymptomContainerCreating, Pod: key, Count: 1, Message: "on " + p.Spec.NodeName})
		}
		for i := range mounts {
			ev := &mounts[i]
			// This incarnation of the pod, about this volume (kubelet names the PV, or
			// the pod's volume in "unmounted volumes=[...]"), since the Lease was taken.
			about := strings.Contains(ev.Message, quoted) || namesVolume(ev.Message, volumes)
			if !about || ev.InvolvedObject.UID != p.UID || eventLastSeen(ev).Before(heldSince.Truncate(time.Second)) {
				continue
			}
			out = append(out, Symptom{Kind: SymptomFailedMount, Pod: key, Count: eventCount(ev), Message: ev.Message})
		}
	}
	sortSymptoms(out)
	return out, nil
}

// namesVolume: kubelet's "Unable to attach or mount volumes: unmounted volumes=[data
// config], ..." names one of volumes.
func namesVolume(message string, volumes []string) bool {
	_, rest, ok := strings.Cut(message, "unmounted volumes=[")
	if !ok {
		return false
	}
	list, _, _ := strings.Cut(rest, "]")
	return slices.ContainsFunc(strings.Fields(list), func(v string) bool { return slices.Contains(volumes, v) })
}

// waitsForVolumes: the pod is Pending and a container of it waits to be created,
// which is where kubelet holds a pod whose volume it cannot stage.
func waitsForVolumes(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodPending {
		return false
	}
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if w := cs.State.Waiting; w != nil && (w.Reason == waitingContainerCreating || w.Reason == waitingPodInitializing) {
			return true
		}
	}
	return false
}

// driverSymptoms are kubelet's recent FailedMount events on node that say the driver
// is not registered.
func (g *Gatherer) driverSymptoms(node string, now time.Time, mounts []corev1.Event) []Symptom {
	notRegistered := fmt.Sprintf("driver name %s not found in the list of registered CSI drivers", g.Config.DriverName)
	var out []Symptom
	for i := range mounts {
		ev := &mounts[i]
		// kubelet reports as the node: source.host (core/v1 events) or
		// reportingInstance (events.k8s.io).
		if (ev.Source.Host != node && ev.ReportingInstance != node) || !strings.Contains(ev.Message, notRegistered) ||
			now.Sub(eventLastSeen(ev)) > DriverSymptomWindow {
			continue
		}
		out = append(out, Symptom{Kind: SymptomFailedMount, Pod: ev.InvolvedObject.Namespace + "/" + ev.InvolvedObject.Name,
			Count: eventCount(ev), Message: ev.Message})
	}
	sortSymptoms(out)
	return out
}

func sortSymptoms(s []Symptom) {
	slices.SortFunc(s, func(a, b Symptom) int {
		return strings.Compare(a.Kind+"\x00"+a.Pod+"\x00"+a.Message, b.Kind+"\x00"+b.Pod+"\x00"+b.Message)
	})
}

func (g *Gatherer) pluginFindings(ctx context.Context, now time.Time, mounts []corev1.Event, nodeOf nodeReader) ([]Finding, error) {
	pods := &corev1.PodList{}
	if err := g.Reader.List(ctx, pods, client.InNamespace(g.Config.TridentNamespace),
		client.MatchingLabelsSelector{Selector: g.Config.NodePluginSelector}); err != nil {
		return nil, fmt.Errorf("listing node-plugin pods: %w", err)
	}
	byNode := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		// The pods NodePluginPods counts: those a DaemonSet controls.
		if p.Spec.NodeName != "" && isDaemonSetPod(&p) {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
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
			Symptoms: g.driverSymptoms(node, now, mounts),
		})
	}
	return out, nil
}
