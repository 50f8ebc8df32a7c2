package verification

// The verdict on a fix, from the facts alone.

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/lifecycle"
)

// verdict is ConditionFixHeld at one check, and when to check again.
type verdict struct {
	status          metav1.ConditionStatus
	reason, message string
	// until is when the verdict becomes final: the window's end, or later while a
	// Lease re-taken within it is not yet proven stuck.
	until time.Time
}

// verifyTarget is the request whose facts are gathered: the released Lease by name
// (a pod or claim may be gone after the playbook moved it), or the target node; nil
// when the decision recorded neither.
func verifyTarget(rr *v1alpha1.RemediationRequest) *v1alpha1.RemediationRequest {
	o := rr.DeepCopy()
	switch rr.Spec.Remediation {
	case v1alpha1.RemediationReleaseLUKSLease:
		f := rr.Status.Facts
		if f == nil || f.Lease == nil || f.Lease.Name == "" {
			return nil
		}
		o.Spec.Target = v1alpha1.Target{PersistentVolume: f.Lease.Name}
		o.Spec.TridentNamespace = f.Lease.Namespace
		return o
	case v1alpha1.RemediationReregisterCSIDriver:
		return o
	}
	return nil
}

// releasedLeaseUID is the deleted Lease's UID: the deleteLease step's, else the decision's.
func releasedLeaseUID(rr *v1alpha1.RemediationRequest) string {
	for _, st := range rr.Status.Steps {
		if st.Name == v1alpha1.StepDeleteLease && st.ObjectUID != "" {
			return st.ObjectUID
		}
	}
	if f := rr.Status.Facts; f != nil && f.Lease != nil {
		return f.Lease.UID
	}
	return ""
}

// judgeFix is the verdict on facts f and the released volume's workload w (nil: the
// decision resolved no claim), read at now, for a window [start, end); stuck is the
// safety floor's healthy stuck age. The Lease retained again comes first: it is the
// cause, and pods that cannot mount then are its symptom.
func judgeFix(rr *v1alpha1.RemediationRequest, f *v1alpha1.Facts, w *workload, start, end, now time.Time, stuck time.Duration) verdict {
	until := end
	switch {
	case f == nil:
		// Nothing read yet.
	case rr.Spec.Remediation == v1alpha1.RemediationReleaseLUKSLease:
		if v, ok := leaseAgain(rr, f, end, stuck, &until); ok {
			return v
		}
		if v, ok := mountFailed(w, start); ok {
			return v
		}
	case rr.Spec.Remediation == v1alpha1.RemediationReregisterCSIDriver:
		if v, ok := driverAgain(f); ok {
			return v
		}
	}
	notBack := w.notBack()
	if !now.Before(until) {
		if len(notBack) > 0 {
			return verdict{status: metav1.ConditionFalse, reason: v1alpha1.ReasonPodsNotReady, until: until, message: fmt.Sprintf(
				"Pod(s) using PersistentVolumeClaim %s were not Running and Ready when the window ended at %s: %s. The Lease was released but the workload did not come back: "+
					"read the pods' events and the mount on their node (kubelet, trident-main logs) instead of repeating the playbook",
				w.Claim, lifecycle.Stamp(until), strings.Join(notBack, ", "))}
		}
		return verdict{status: metav1.ConditionTrue, reason: v1alpha1.ReasonNoRecurrence, until: until,
			message: fmt.Sprintf("No %s from %s to %s%s", lifecycle.Watched(rr), lifecycle.Stamp(start), lifecycle.Stamp(until), w.back())}
	}
	msg := lifecycle.WatchingMessage(rr, start, until)
	if len(notBack) > 0 {
		msg += fmt.Sprintf("; waiting for the pod(s) using PersistentVolumeClaim %s to be Running and Ready: %s", w.Claim, strings.Join(notBack, ", "))
	}
	return verdict{status: metav1.ConditionUnknown, reason: v1alpha1.ReasonVerifying, until: until, message: msg}
}

// leaseAgain: the released name is held again, as a new Lease, by the same holder,
// since before the window ended, and is retained: a LeaseRetained Warning names its
// UID, or it is stuck-old. One not yet proven stuck extends *until to when it would
// be, so that a late re-take is judged too. A Lease taken by another node is that
// node's operation, not this incident.
func leaseAgain(rr *v1alpha1.RemediationRequest, f *v1alpha1.Facts, end time.Time, stuck time.Duration, until *time.Time) (verdict, bool) {
	was := rr.Status.Facts.Lease
	l := f.Lease
	if l == nil || !l.Exists || l.UID == releasedLeaseUID(rr) || l.HolderIdentity == "" || l.HolderIdentity != was.HolderIdentity ||
		l.HeldSince == nil || !l.HeldSince.Time.Before(end) {
		return verdict{}, false
	}
	held := l.HeldSince.Time
	age := time.Duration(l.AgeSeconds) * time.Second
	var evidence string
	switch {
	case l.RetainedEvents > 0:
		evidence = fmt.Sprintf("%d LeaseRetained Warning event(s) name it, the last: %q", l.RetainedEvents, l.LastRetainedMessage)
	case age >= stuck:
		evidence = fmt.Sprintf("it is %s old, past the safety floor's %s for a Lease without LeaseRetained events", age, stuck)
	default:
		if t := held.Add(stuck); t.After(*until) {
			*until = t
		}
		return verdict{}, false
	}
	return verdict{status: metav1.ConditionFalse, reason: v1alpha1.ReasonLeaseRetainedAgain, message: fmt.Sprintf(
		"Lease %s/%s was taken again by node %s (UID %s, held since %s) and is retained: %s. Releasing it did not fix the cause: "+
			"investigate the root cause on node %s (the cryptsetup error in the Lease's events, the trident-main logs) instead of repeating the playbook",
		l.Namespace, l.Name, l.HolderIdentity, l.UID, lifecycle.Stamp(held), evidence, l.HolderIdentity)}, true
}

// driverAgain: the CSINode lacks the driver again while a Ready, not terminating
// node-plugin pod runs there (scan's DeregisteredDriver); none Ready is a rollout.
func driverAgain(f *v1alpha1.Facts) (verdict, bool) {
	cf := f.CSI
	if f.Node == nil || !f.Node.Exists || cf == nil || cf.DriverRegistered {
		return verdict{}, false
	}
	var ready []string
	for _, p := range cf.PluginPods {
		if p.Ready && p.DeletionTimestamp == nil {
			ready = append(ready, p.String())
		}
	}
	if len(ready) == 0 {
		return verdict{}, false
	}
	return verdict{status: metav1.ConditionFalse, reason: v1alpha1.ReasonDriverDeregisteredAgain, message: fmt.Sprintf(
		"CSINode %s does not list %s again while node-plugin pod(s) run there: %s. Restarting the plugin did not fix the cause: "+
			"investigate why the registration is dropped (overlapping node-plugin pods, the trident-operator recreating its DaemonSet, the driver-registrar's logs) instead of repeating the playbook",
		f.Node.Name, f.DriverName, strings.Join(ready, ", "))}, true
}

// workload is what verification reads of a released volume's claim, as the decision
// resolved it: the pods that now use it, and kubelet's FailedMount Warnings on pods
// of its namespace.
type workload struct {
	// Claim is the claim as namespace/name, PV its volume.
	Claim, PV string
	// Pods use the claim and have not terminated (phase Succeeded or Failed: an
	// evicted pod left behind uses nothing), sorted by namespace/name.
	Pods   []claimPod
	Mounts []failedMount
}

// claimPod is one pod that uses the claim.
type claimPod struct {
	// Key is namespace/name.
	Key   string
	Phase corev1.PodPhase
	Ready bool
	// Waiting is the reason a container waits for, e.g. ContainerCreating.
	Waiting string
	// Volumes are the pod's volumes that use the claim.
	Volumes []string
}

// failedMount is one FailedMount Warning on a pod.
type failedMount struct {
	// Pod is the involved pod as namespace/name.
	Pod      string
	Message  string
	LastSeen time.Time
}

// String is "namespace/name (phase, waiting reason, not ready)".
func (p claimPod) String() string {
	state := []string{cmp.Or(string(p.Phase), "-")}
	if p.Waiting != "" {
		state = append(state, p.Waiting)
	}
	if !p.Ready {
		state = append(state, "not ready")
	}
	return fmt.Sprintf("%s (%s)", p.Key, strings.Join(state, ", "))
}

// notBack lists the pods that are not Running and Ready; none without a workload.
func (w *workload) notBack() []string {
	if w == nil {
		return nil
	}
	var out []string
	for _, p := range w.Pods {
		if p.Phase != corev1.PodRunning || !p.Ready {
			out = append(out, p.String())
		}
	}
	return out
}

// back is the NoRecurrence message's word on the pods, "" without a workload. No pod
// using the claim (a bare pod the playbook deleted, a workload scaled down) is no
// sign of the incident.
func (w *workload) back() string {
	if w == nil {
		return ""
	}
	if len(w.Pods) == 0 {
		return fmt.Sprintf("; no pod uses PersistentVolumeClaim %s", w.Claim)
	}
	keys := make([]string, len(w.Pods))
	for i, p := range w.Pods {
		keys[i] = p.Key
	}
	return fmt.Sprintf("; the pod(s) using PersistentVolumeClaim %s are Running and Ready: %s", w.Claim, strings.Join(keys, ", "))
}

// mountFailed: kubelet reported, after the fix at start, a FailedMount on a pod that
// uses the claim, naming the volume: the PV or the claim quoted (as kubelet quotes
// them), the claim as namespace/name ("error processing PVC ..."), or the pod's
// volume of the claim in "unmounted volumes=[...]". One seen within
// mountAttemptGrace of the fix, or before, belongs to the incident the fix ended.
func mountFailed(w *workload, start time.Time) (verdict, bool) {
	if w == nil {
		return verdict{}, false
	}
	var pods []string
	var newest *failedMount
	for i := range w.Mounts {
		m := &w.Mounts[i]
		if !m.LastSeen.After(start.Add(mountAttemptGrace)) || !w.about(m) {
			continue
		}
		if !slices.Contains(pods, m.Pod) {
			pods = append(pods, m.Pod)
		}
		if newest == nil || m.LastSeen.After(newest.LastSeen) ||
			(m.LastSeen.Equal(newest.LastSeen) && m.Pod+"\x00"+m.Message < newest.Pod+"\x00"+newest.Message) {
			newest = m
		}
	}
	if newest == nil {
		return verdict{}, false
	}
	slices.Sort(pods)
	return verdict{status: metav1.ConditionFalse, reason: v1alpha1.ReasonFailedMountAfterFix, message: fmt.Sprintf(
		"FailedMount Warning(s) for PersistentVolume %s (claim %s) after the fix at %s on pod(s) %s; the newest, on %s at %s: %q. "+
			"The Lease was released but the volume still does not mount: read the pods' events and the trident-main logs on their node instead of repeating the playbook",
		w.PV, w.Claim, lifecycle.Stamp(start), strings.Join(pods, ", "), newest.Pod, lifecycle.Stamp(newest.LastSeen), newest.Message)}, true
}

// mountAttemptGrace: a mount attempt the kubelet started before the fix fails, and
// reports its FailedMount, after it: the node plugin answers "held by" the old holder
// until the Lease is gone, and the event's lastTimestamp is the attempt's end, in whole
// seconds. The kubelet's next attempt, after its backoff, is the one that tells.
const mountAttemptGrace = 10 * time.Second

// about: m is on a pod that uses the claim and names its volume.
func (w *workload) about(m *failedMount) bool {
	i := slices.IndexFunc(w.Pods, func(p claimPod) bool { return p.Key == m.Pod })
	if i < 0 {
		return false
	}
	_, claim, _ := strings.Cut(w.Claim, "/")
	return strings.Contains(m.Message, strconv.Quote(w.PV)) || strings.Contains(m.Message, strconv.Quote(claim)) ||
		strings.Contains(m.Message, w.Claim) || facts.NamesVolume(m.Message, w.Pods[i].Volumes)
}
