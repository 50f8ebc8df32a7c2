package verification

// The reading of a released volume's workload, which judgeFix weighs.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

// releasedClaim is the claim of a release-luks-lease request's volume, as the decision
// resolved it; empty when it resolved none (a PV without a bound claim).
func releasedClaim(rr *v1alpha1.RemediationRequest) types.NamespacedName {
	f := rr.Status.Facts
	if rr.Spec.Remediation != v1alpha1.RemediationReleaseLUKSLease || f == nil || f.Lease == nil {
		return types.NamespacedName{}
	}
	ns, name, ok := strings.Cut(f.Target.PersistentVolumeClaim, "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}
	}
	return types.NamespacedName{Namespace: ns, Name: name}
}

// readWorkload reads kubelet's FailedMount Warnings in the namespace of rr's released
// claim and, when they can tell (final, or a Warning after the fix at start that may
// be about the claim's pods), the pods that now use it; nil when there is no claim.
// Through the gatherer's reader, which knows what the cache holds: pods are never
// cached, so they are read live, one list of the claim's namespace, only for the
// check that ends the window and for a FailedMount to attribute (a storm's checks in
// the window read nothing live); the claim is cached, and FailedMount events of
// workload namespaces are while the detector runs.
func readWorkload(ctx context.Context, reader client.Reader, rr *v1alpha1.RemediationRequest, start time.Time, final bool) (*workload, error) {
	key := releasedClaim(rr)
	if key.Name == "" {
		return nil, nil
	}
	w := &workload{Claim: key.String(), PV: rr.Status.Facts.Lease.Name}
	claim := &corev1.PersistentVolumeClaim{}
	if err := reader.Get(ctx, key, claim); err != nil {
		// A claim deleted since the release leaves no pod to wait for.
		return w, client.IgnoreNotFound(err)
	}
	events := &corev1.EventList{}
	if err := reader.List(ctx, events, client.InNamespace(key.Namespace), client.MatchingFields{"reason": facts.FailedMountReason}); err != nil {
		return nil, fmt.Errorf("listing the %s events of PersistentVolumeClaim %s's namespace: %w", facts.FailedMountReason, key, err)
	}
	afterFix := false
	for i := range events.Items {
		ev := &events.Items[i]
		if ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.Kind == "Pod" {
			m := failedMount{Pod: ev.InvolvedObject.Namespace + "/" + ev.InvolvedObject.Name, Message: ev.Message, LastSeen: facts.EventLastSeen(ev)}
			w.Mounts = append(w.Mounts, m)
			afterFix = afterFix || m.LastSeen.After(start.Add(mountAttemptGrace))
		}
	}
	if !final && !afterFix {
		return w, nil
	}
	pods := &corev1.PodList{}
	if err := reader.List(ctx, pods, client.InNamespace(key.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the pods of PersistentVolumeClaim %s: %w", key, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		volumes := facts.VolumesUsing(p, claim)
		if len(volumes) == 0 || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		w.Pods = append(w.Pods, claimPod{Key: key.Namespace + "/" + p.Name, Phase: p.Status.Phase, Ready: podReady(p),
			Waiting: waitingFor(p), Volumes: volumes})
	}
	slices.SortFunc(w.Pods, func(a, b claimPod) int { return strings.Compare(a.Key, b.Key) })
	return w, nil
}

// podReady is the pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	i := slices.IndexFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
	return i >= 0 && p.Status.Conditions[i].Status == corev1.ConditionTrue
}

// waitingFor is the reason the first waiting container (init containers first) waits
// for, e.g. ContainerCreating; "" when none waits.
func waitingFor(p *corev1.Pod) string {
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return w.Reason
		}
	}
	return ""
}
