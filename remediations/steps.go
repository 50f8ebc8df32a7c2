package remediations

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Execution is one request's playbook being carried out, as a step sees it.
type Execution struct {
	RR *v1alpha1.RemediationRequest
	// Client writes; Reader reads live (uncached) state.
	Client client.Client
	Reader client.Reader
	// Fresh reads the fresh facts; the controller wires its gatherer in.
	Fresh    FreshReader
	Now      time.Time
	Timeouts Timeouts
	// Playbooks are what the journal is checked against before every destructive step.
	Playbooks Playbooks
	Floor     Floor
	// Paused is the pause's message while Remediator is paused; empty otherwise.
	Paused string

	// freshFacts and freshConflicts cache one reading per Advance, so that the Done
	// check, the gate and the step act on the same one.
	freshFacts     *v1alpha1.Facts
	freshConflicts []string
}

// FreshReader reads the cluster for the steps the way the controller gathers facts
// (remediations does not import controllers).
type FreshReader interface {
	// FreshFacts gathers the fresh facts: the request's facts afresh from its spec
	// and the live cluster (never from status), with the other running requests on
	// the same Lease or node. It runs right before every destructive call.
	FreshFacts(ctx context.Context) (*v1alpha1.Facts, []string, error)
	// NodePluginPods lists live, sorted by name, the node-plugin pods in namespace on node.
	NodePluginPods(ctx context.Context, namespace, node string) ([]corev1.Pod, error)
}

// readFresh returns the fresh facts of this Advance, reading them once.
func (r *Execution) readFresh(ctx context.Context) (*v1alpha1.Facts, []string, error) {
	if r.freshFacts != nil {
		return r.freshFacts, r.freshConflicts, nil
	}
	if r.Fresh == nil {
		return nil, nil, fmt.Errorf("no way to observe fresh facts was wired in")
	}
	f, conflicts, err := r.Fresh.FreshFacts(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("re-reading facts: %w", err)
	}
	r.freshFacts, r.freshConflicts = f, conflicts
	return f, conflicts, nil
}

// Timeouts bound every step from its StartedAt, and the restore from its first
// attempt. A zero field means its default, never "no bound": a step that retries for
// ever keeps its request Running and its disruptive slot for ever.
type Timeouts struct {
	// Step bounds the write steps (cordon, deleteLease, uncordon) and the restore.
	Step time.Duration
	// Eviction bounds evictions a PodDisruptionBudget refuses.
	Eviction time.Duration
	// PodTermination bounds waitPodsGone.
	PodTermination time.Duration
	// PluginRestart bounds each wait for the replacement plugin pod and the driver.
	PluginRestart time.Duration
}

// DefaultTimeouts are generous: a timeout restores and fails the request. Five
// minutes for a write rides out an API server restart or an etcd leader change.
var DefaultTimeouts = Timeouts{Step: 5 * time.Minute, Eviction: 10 * time.Minute, PodTermination: 10 * time.Minute, PluginRestart: 5 * time.Minute}

// The bounds in force: the configured ones, or the defaults for those left zero.
func (t Timeouts) step() time.Duration     { return cmp.Or(t.Step, DefaultTimeouts.Step) }
func (t Timeouts) eviction() time.Duration { return cmp.Or(t.Eviction, DefaultTimeouts.Eviction) }
func (t Timeouts) podTermination() time.Duration {
	return cmp.Or(t.PodTermination, DefaultTimeouts.PodTermination)
}
func (t Timeouts) pluginRestart() time.Duration {
	return cmp.Or(t.PluginRestart, DefaultTimeouts.PluginRestart)
}

func (r *Execution) owner() string { return r.RR.Namespace + "/" + r.RR.Name }

// StepResult is what a step reports.
type StepResult struct {
	Done    bool
	Message string
	// Object, UID and ResourceVersion identify what the step acted on.
	Object, UID, ResourceVersion string
	// RequeueAfter asks to check again later when not done.
	RequeueAfter time.Duration
}

// Failure ends a playbook: the runner restores and marks the request Failed.
type Failure struct {
	Reason  string
	Message string
	cause   error // for errors.Is and As
}

func (f *Failure) Error() string { return f.Message }

func (f *Failure) Unwrap() error { return f.cause }

func fail(format string, args ...any) error {
	return &Failure{Reason: v1alpha1.ReasonStepFailed, Message: fmt.Sprintf(format, args...)}
}

// Step is one entry of the step library.
type Step struct {
	// Done reads live state and reports whether the step's effect is in place.
	Done func(ctx context.Context, r *Execution) (StepResult, error)
	// Run acts, idempotently; an already-done effect is a success. A wait only
	// watches: its Run checks again.
	Run func(ctx context.Context, r *Execution) (StepResult, error)
	// timeout is the Timeouts bound in force for the step.
	timeout func(Timeouts) time.Duration
}

// Timeout bounds the step from its StartedAt, errors included; it is never zero.
func (s Step) Timeout(r *Execution) time.Duration { return s.timeout(r.Timeouts) }

var library = map[string]Step{
	v1alpha1.StepCordon:               {cordon{}.Done, cordon{}.Run, Timeouts.step},
	v1alpha1.StepDeleteAffectedPods:   {deleteAffectedPods{}.Done, deleteAffectedPods{}.Run, Timeouts.eviction},
	v1alpha1.StepWaitPodsGone:         {podsGone, podsGone, Timeouts.podTermination},
	v1alpha1.StepDeleteLease:          {deleteLease{}.Done, deleteLease{}.Run, Timeouts.step},
	v1alpha1.StepUncordon:             {uncordon{}.Done, uncordon{}.Run, Timeouts.step},
	v1alpha1.StepDeletePluginPod:      {deletePluginPod{}.Done, deletePluginPod{}.Run, Timeouts.eviction},
	v1alpha1.StepWaitPluginPodReady:   {pluginPodReady, pluginPodReady, Timeouts.pluginRestart},
	v1alpha1.StepWaitDriverRegistered: {driverRegistered, driverRegistered, Timeouts.pluginRestart},
}

// destructive steps may only start inside the maintenance window and act only on
// fresh facts; waits and uncordon (a restore) may always run.
var destructive = map[string]bool{
	v1alpha1.StepCordon: true, v1alpha1.StepDeleteAffectedPods: true, v1alpha1.StepDeleteLease: true, v1alpha1.StepDeletePluginPod: true,
}

// Destructive reports whether the named step may only start inside a maintenance window.
func Destructive(step string) bool { return destructive[step] }

// podState reads one recorded pod: gone (deleted, or replaced: another UID) or not.
func podState(ctx context.Context, r *Execution, p v1alpha1.PodFacts) (*corev1.Pod, bool, error) {
	pod := &corev1.Pod{}
	err := r.Reader.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, pod)
	if apierrors.IsNotFound(err) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	if string(pod.UID) != p.UID {
		return nil, true, nil
	}
	return pod, false, nil
}

// deleteAffectedPods evicts the affected pods through the Eviction API (evict).
type deleteAffectedPods struct{}

func (deleteAffectedPods) Done(ctx context.Context, r *Execution) (StepResult, error) {
	f, _, err := r.readFresh(ctx)
	if err != nil {
		return StepResult{}, err
	}
	var pending []string
	for _, p := range f.AffectedPods {
		pod, gone, err := podState(ctx, r, p)
		if err != nil {
			return StepResult{}, err
		}
		if !gone && pod.DeletionTimestamp == nil {
			pending = append(pending, p.Namespace+"/"+p.Name)
		}
	}
	if len(pending) > 0 {
		return StepResult{Message: "Pods not yet evicted: " + strings.Join(pending, ", ")}, nil
	}
	return StepResult{Done: true, Message: fmt.Sprintf("Evicted the affected pod(s) gracefully: %s", PodList(f.AffectedPods))}, nil
}

// Run evicts the pods of the fresh facts, never those in status: status is no proof
// of which pods may be evicted.
func (s deleteAffectedPods) Run(ctx context.Context, r *Execution) (StepResult, error) {
	f, _, err := r.readFresh(ctx)
	if err != nil {
		return StepResult{}, err
	}
	var blocked []string
	for _, p := range f.AffectedPods {
		pod, gone, err := podState(ctx, r, p)
		if err != nil {
			return StepResult{}, err
		}
		if gone || pod.DeletionTimestamp != nil {
			continue
		}
		refused, err := evict(ctx, r, pod)
		if err != nil {
			return StepResult{}, err
		}
		if refused != "" {
			blocked = append(blocked, refused)
		}
	}
	if len(blocked) > 0 {
		slices.Sort(blocked)
		return StepResult{Message: "Eviction refused, retrying: " + strings.Join(blocked, "; "), RequeueAfter: 5 * time.Second}, nil
	}
	out, err := s.Done(ctx, r)
	if err == nil && !out.Done {
		out.RequeueAfter = time.Second
	}
	return out, err
}

// evict asks the Eviction API to delete pod gracefully, so PodDisruptionBudgets are
// honoured; the UID precondition keeps a replacement of the same name safe, and no
// grace period is set or forced. A refusal is returned as a description to retry later.
func evict(ctx context.Context, r *Execution, pod *corev1.Pod) (refused string, err error) {
	uid := pod.UID
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	// client-go honours the Retry-After of a budget not processed yet up to ten
	// times: bound the call so that it cannot hold the worker for minutes.
	callCtx, cancel := context.WithTimeout(ctx, evictionCallTimeout)
	defer cancel()
	err = r.Client.SubResource("eviction").Create(callCtx, pod, ev)
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return "", nil
	case apierrors.IsTooManyRequests(err):
		return fmt.Sprintf("%s/%s (%s)", pod.Namespace, pod.Name, err.Error()), nil
	case ctx.Err() == nil && errors.Is(callCtx.Err(), context.DeadlineExceeded):
		return fmt.Sprintf("%s/%s (the Eviction API asked to retry later for %s)", pod.Namespace, pod.Name, evictionCallTimeout), nil
	}
	return "", writeFailed(err, "evicting pod %s/%s", pod.Namespace, pod.Name)
}

// evictionCallTimeout bounds one eviction call, client-go's own retries included.
const evictionCallTimeout = 5 * time.Second

// podsGone waits until every pod of the fresh facts, not only those decided on, is gone.
func podsGone(ctx context.Context, r *Execution) (StepResult, error) {
	f, _, err := r.readFresh(ctx)
	if err != nil {
		return StepResult{}, err
	}
	if len(f.AffectedPods) > 0 {
		return StepResult{Message: "Waiting for pods to terminate: " + PodList(f.AffectedPods), RequeueAfter: 2 * time.Second}, nil
	}
	// The kubelet posts a changed volumesInUse within its status update period (10 s
	// by default) after it unmounted the volume.
	if why := VolumeOnHolder(f); why != "" {
		return StepResult{Message: "No pod that uses the volume is left on the holder node, but " + why, RequeueAfter: 2 * time.Second}, nil
	}
	return StepResult{Done: true, Message: "No pod that uses the volume is left on the holder node, and its kubelet no longer lists the volume in use"}, nil
}
