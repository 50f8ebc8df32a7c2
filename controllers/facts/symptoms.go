package facts

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
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

// SymptomsSeen remembers what continuous detection read of each stuck Lease's
// symptoms, so that a scan reads a Lease's pods again only when something it is
// watched for changed: the Lease (a new holder, a renewal), its holder's state, or
// the FailedMount events naming its volume; otherwise at most every Refresh. The
// pods are read live (symptomReaders Leases' at once): a power loss leaves hundreds
// of Leases stuck, and reading every one's pods on every scan while their requests
// run would cost the API server more than releasing them. A scan that fails keeps
// what it read, and the next one reads the rest.
type SymptomsSeen struct {
	// Refresh bounds how long a Lease's symptoms are kept without a change (a pod
	// that turned Terminating or Ready is not watched); zero: DefaultSymptomsRefresh.
	Refresh time.Duration

	mu   sync.Mutex
	seen map[types.UID]symptomsRead
}

// DefaultSymptomsRefresh is SymptomsSeen's default Refresh.
const DefaultSymptomsRefresh = 5 * time.Minute

// symptomsRead is one reading of a Lease's symptoms: when, on what, and what.
type symptomsRead struct {
	at       time.Time
	on       string
	symptoms []Symptom
}

// of returns the symptoms of Lease l, held by a node in state, of volume pv, read
// by read unless the last reading, from the same state of things, is younger than
// Refresh. A nil s reads every time. Leases not asked for since are forgotten.
func (s *SymptomsSeen) of(l *coordinationv1.Lease, state v1alpha1.NodeState, pv *corev1.PersistentVolume, now time.Time,
	mounts []corev1.Event, read func() ([]Symptom, error),
) ([]Symptom, error) {
	if s == nil {
		return read()
	}
	on := symptomsBasis(l, state, pv, mounts)
	s.mu.Lock()
	last, ok := s.seen[l.UID]
	s.mu.Unlock()
	if ok && last.on == on && now.Sub(last.at) < cmp.Or(s.Refresh, DefaultSymptomsRefresh) {
		return last.symptoms, nil
	}
	symptoms, err := read()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[types.UID]symptomsRead{}
	}
	s.seen[l.UID] = symptomsRead{at: now, on: on, symptoms: symptoms}
	return symptoms, nil
}

// Sweep forgets the readings that a scan at now would not use any more, so that s
// holds only the current incidents'.
func (s *SymptomsSeen) Sweep(now time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.DeleteFunc(s.seen, func(_ types.UID, r symptomsRead) bool {
		return now.Sub(r.at) >= cmp.Or(s.Refresh, DefaultSymptomsRefresh)
	})
}

// symptomsBasis is what a reading of the symptoms depends on, but for the pods: the
// Lease's version, its holder's state, and the FailedMount events that may be about
// the volume (each event's UID, count and when it was last seen): those naming the
// PV, and those in its claim's namespace naming a pod's unmounted volumes.
func symptomsBasis(l *coordinationv1.Lease, state v1alpha1.NodeState, pv *corev1.PersistentVolume, mounts []corev1.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s", l.ResourceVersion, state)
	quoted := fmt.Sprintf("%q", pv.Name)
	claimNS := ""
	if ref := pv.Spec.ClaimRef; ref != nil {
		claimNS = ref.Namespace
	}
	for i := range mounts {
		ev := &mounts[i]
		if strings.Contains(ev.Message, quoted) || (ev.InvolvedObject.Namespace == claimNS && strings.Contains(ev.Message, "unmounted volumes=[")) {
			fmt.Fprintf(&b, "|%s/%d/%d", ev.UID, eventCount(ev), EventLastSeen(ev).Unix())
		}
	}
	return b.String()
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
