package facts

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// failedMounts lists kubelet's FailedMount events in every namespace; where that is
// forbidden, the findings come without symptoms, and a warning.
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

// volumeSymptoms are the signs of a stuck Lease on the pods of its PV's claim: pods
// waiting in ContainerCreating or stuck Terminating, and FailedMount events on them
// since the Lease was taken. The pods are those on the holder node and those a
// FailedMount names with this volume, read one by one (a RWX volume's pods elsewhere
// wait for the same lock), rather than the claim's whole namespace.
func (g *Gatherer) volumeSymptoms(ctx context.Context, pv *corev1.PersistentVolume, holder string, heldSince time.Time, mounts []corev1.Event) ([]Symptom, error) {
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
			// deletionTimestamp is when the grace period ends.
			out = append(out, Symptom{Kind: SymptomTerminating, Pod: key, Count: 1,
				Message: fmt.Sprintf("on %s, past its deletion at %s", p.Spec.NodeName, stamp(p.DeletionTimestamp.Time))})
		case waitsForVolumes(p):
			out = append(out, Symptom{Kind: SymptomContainerCreating, Pod: key, Count: 1, Message: "on " + p.Spec.NodeName})
		}
		for i := range mounts {
			ev := &mounts[i]
			// This pod, about this volume (the PV, or the pod's volume), since the Lease was taken.
			about := strings.Contains(ev.Message, quoted) || NamesVolume(ev.Message, volumes)
			if !about || ev.InvolvedObject.UID != p.UID || EventLastSeen(ev).Before(heldSince.Truncate(time.Second)) {
				continue
			}
			out = append(out, Symptom{Kind: SymptomFailedMount, Pod: key, Count: eventCount(ev), Message: ev.Message})
		}
	}
	sortSymptoms(out)
	return out, nil
}

// NamesVolume reports whether kubelet's "... unmounted volumes=[data config], ..." names one
// of volumes.
func NamesVolume(message string, volumes []string) bool {
	_, rest, ok := strings.Cut(message, "unmounted volumes=[")
	if !ok {
		return false
	}
	list, _, _ := strings.Cut(rest, "]")
	return slices.ContainsFunc(strings.Fields(list), func(v string) bool { return slices.Contains(volumes, v) })
}

// waitsForVolumes: the pod is Pending and a container waits to be created
// (kubelet's reasons ContainerCreating, PodInitializing), where kubelet holds a pod
// whose volume it cannot stage.
func waitsForVolumes(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodPending &&
		slices.ContainsFunc(slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses), func(cs corev1.ContainerStatus) bool {
			w := cs.State.Waiting
			return w != nil && (w.Reason == "ContainerCreating" || w.Reason == "PodInitializing")
		})
}

// driverSymptoms are kubelet's recent FailedMount events on node that say the driver
// is not registered.
func (g *Gatherer) driverSymptoms(node string, now time.Time, mounts []corev1.Event) []Symptom {
	notRegistered := fmt.Sprintf("driver name %s not found in the list of registered CSI drivers", g.Config.DriverName)
	var out []Symptom
	for i := range mounts {
		ev := &mounts[i]
		// kubelet reports as the node: source.host, or reportingInstance (events.k8s.io).
		if (ev.Source.Host != node && ev.ReportingInstance != node) || !strings.Contains(ev.Message, notRegistered) ||
			now.Sub(EventLastSeen(ev)) > DriverSymptomWindow {
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
