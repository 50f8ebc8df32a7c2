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

// Execution is one request's playbook being carried out: what a step sees of the
// request and the cluster.
type Execution struct {
	RR *v1alpha1.RemediationRequest
	// Client writes; Reader reads live (uncached) state.
	Client client.Client
	Reader client.Reader
	// Live reads what the steps need of the cluster the way the controller
	// gathers facts; the controller wires its gatherer in.
	Live     LiveView
	Now      time.Time
	Timeouts Timeouts
	// Playbooks are the playbooks the journal must match: status.steps is checked
	// against the decided playbook's steps before every destructive step.
	Playbooks Playbooks
	// Gates are the safety floor's minimums, checked again before every destructive
	// step; zero fields mean the runbook's values.
	Gates Gates
	// Paused is the pause's message while Remediator is paused: every step boundary
	// holds (Gate). Empty when not paused.
	Paused string

	// freshFacts and freshConflicts cache one FreshFacts reading per Advance: the
	// Done check, the gate and the step act on the same reading.
	freshFacts     *v1alpha1.Facts
	freshConflicts []string
}

// LiveView is what the steps read of the cluster through the controller's facts
// gatherer. It is an interface so that the steps need not know how facts are
// gathered (controllers/facts), only what they say: remediations sits below
// controllers, and the controller wires its gatherer in.
type LiveView interface {
	// FreshFacts gathers the request's facts afresh, from its spec and the live
	// cluster (never from status), with the other running requests on the same
	// Lease or node. It runs right before every destructive call.
	FreshFacts(ctx context.Context) (*v1alpha1.Facts, []string, error)
	// NodePluginPods lists, live and sorted by name, the CSI node-plugin pods in
	// namespace on node: the plugin waits watch the replacement come up.
	NodePluginPods(ctx context.Context, namespace, node string) ([]corev1.Pod, error)
}

// fresh returns the facts read for this Advance, gathering them once.
func (r *Execution) fresh(ctx context.Context) (*v1alpha1.Facts, []string, error) {
	if r.freshFacts != nil {
		return r.freshFacts, r.freshConflicts, nil
	}
	if r.Live == nil {
		return nil, nil, fmt.Errorf("no way to observe fresh facts was wired in")
	}
	f, conflicts, err := r.Live.FreshFacts(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("re-reading facts: %w", err)
	}
	r.freshFacts, r.freshConflicts = f, conflicts
	return f, conflicts, nil
}

// gate asks Gate about step, on the facts read for this Advance when it acts.
func (r *Execution) gate(step string, starting bool) (*Stop, string) {
	in := GateInput{RR: r.RR, Step: step, Starting: starting, Playbooks: r.Playbooks, Gates: r.Gates, Now: r.Now, Paused: r.Paused}
	if !starting {
		in.Fresh, in.Conflicts = r.freshFacts, r.freshConflicts
	}
	return Gate(in)
}

// Timeouts bound every step from its StartedAt, and the restore from its first
// attempt. A zero field means its default, never "no bound": a step that can retry
// for ever keeps its request Running and its disruptive slot for ever.
type Timeouts struct {
	// Step bounds the steps that write once (cordon, deleteLease, uncordon) and the
	// restore: how long their errors are retried before the playbook fails.
	Step time.Duration
	// Eviction is how long deleteAffectedPods keeps retrying evictions a
	// PodDisruptionBudget refuses.
	Eviction time.Duration
	// PodTermination is how long waitPodsGone waits for evicted pods to go.
	PodTermination time.Duration
	// PluginRestart bounds each wait for the replacement node-plugin pod and for
	// the driver's registration on the CSINode.
	PluginRestart time.Duration
}

// DefaultTimeouts are generous: a wait that times out restores and fails the request.
// A write step is one call that succeeds in moments; five minutes rides out an API
// server restart or a leader change of etcd, not a refusal (refusedForGood).
var DefaultTimeouts = Timeouts{Step: 5 * time.Minute, Eviction: 10 * time.Minute, PodTermination: 10 * time.Minute, PluginRestart: 5 * time.Minute}

// step, eviction, podTermination and pluginRestart are the bounds in force: the
// configured ones, or the defaults for those left zero.
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
	// cause is the error the failure was made from, if any, for errors.Is and As.
	cause error
}

func (f *Failure) Error() string { return f.Message }

func (f *Failure) Unwrap() error { return f.cause }

func fail(format string, args ...any) error {
	return &Failure{Reason: v1alpha1.ReasonStepFailed, Message: fmt.Sprintf(format, args...)}
}

// Step is one entry of the step library.
type Step interface {
	// Done reads live state and reports whether the step's effect is in place.
	Done(ctx context.Context, r *Execution) (StepResult, error)
	// Run acts, idempotently; an already-done effect is a success.
	Run(ctx context.Context, r *Execution) (StepResult, error)
	// Timeout bounds the step from its StartedAt, errors included; it is never zero.
	Timeout(r *Execution) time.Duration
}

var library = map[string]Step{
	v1alpha1.StepCordon:               cordon{},
	v1alpha1.StepDeleteAffectedPods:   deleteAffectedPods{},
	v1alpha1.StepWaitPodsGone:         waitPodsGone{},
	v1alpha1.StepDeleteLease:          deleteLease{},
	v1alpha1.StepUncordon:             uncordon{},
	v1alpha1.StepDeletePluginPod:      deletePluginPod{},
	v1alpha1.StepWaitPluginPodReady:   waitPluginPodReady{},
	v1alpha1.StepWaitDriverRegistered: waitDriverRegistered{},
}

// destructive steps change the cluster in a way a maintenance window guards: they
// may only start inside the window. Waits and uncordon (a restore) may always run.
var destructive = map[string]bool{
	v1alpha1.StepCordon: true, v1alpha1.StepDeleteAffectedPods: true, v1alpha1.StepDeleteLease: true, v1alpha1.StepDeletePluginPod: true,
}

// Destructive reports whether the named step may only start inside a maintenance
// window.
func Destructive(step string) bool { return destructive[step] }

// NextPending returns the step Advance would start next, if the running steps are
// all done.
func NextPending(steps []v1alpha1.StepStatus) (string, bool) {
	for _, st := range steps {
		switch st.State {
		case v1alpha1.StepSucceeded, v1alpha1.StepSkipped:
			continue
		case v1alpha1.StepPending, "":
			return st.Name, true
		}
		return "", false
	}
	return "", false
}

// podState reads one recorded pod: gone (deleted or replaced by a pod with another
// UID), terminating, or live.
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

// deleteAffectedPods evicts the affected pods through the Eviction API, so that
// PodDisruptionBudgets are honoured and each pod keeps its own grace period. It never
// sets a grace period and never forces.
type deleteAffectedPods struct{}

func (deleteAffectedPods) Timeout(r *Execution) time.Duration { return r.Timeouts.eviction() }

func (deleteAffectedPods) Done(ctx context.Context, r *Execution) (StepResult, error) {
	f, _, err := r.fresh(ctx)
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

// Run evicts the pods that use the volume on the holder node as listed right now
// (the floor's fresh facts), never the ones recorded in status: status is not proof
// of which pods may be evicted.
func (s deleteAffectedPods) Run(ctx context.Context, r *Execution) (StepResult, error) {
	f, _, err := r.fresh(ctx)
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
		return StepResult{
			Message:      "Eviction refused, retrying: " + strings.Join(blocked, "; "),
			RequeueAfter: 5 * time.Second,
		}, nil
	}
	out, err := s.Done(ctx, r)
	if err == nil && !out.Done {
		out.RequeueAfter = time.Second
	}
	return out, err
}

// evict asks the Eviction API to delete pod gracefully. The UID precondition keeps a
// replacement pod of the same name safe; no GracePeriodSeconds is set, so the pod's
// own terminationGracePeriodSeconds applies. A refusal (a PodDisruptionBudget) is
// returned as a description to retry later, not as an error.
func evict(ctx context.Context, r *Execution, pod *corev1.Pod) (refused string, err error) {
	uid := pod.UID
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	// The Eviction API answers a budget it has not processed yet with Retry-After,
	// which client-go honours by itself, up to ten times: bound the call so that one
	// such budget cannot hold the worker for minutes. The step retries later.
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

// waitPodsGone waits until the evicted pods have terminated.
type waitPodsGone struct{}

func (waitPodsGone) Timeout(r *Execution) time.Duration { return r.Timeouts.podTermination() }

// Done lists the pods that use the volume on the holder again: it waits for every
// such pod, not only the ones recorded at decision time.
func (waitPodsGone) Done(ctx context.Context, r *Execution) (StepResult, error) {
	f, _, err := r.fresh(ctx)
	if err != nil {
		return StepResult{}, err
	}
	if len(f.AffectedPods) > 0 {
		return StepResult{Message: "Waiting for pods to terminate: " + PodList(f.AffectedPods), RequeueAfter: 2 * time.Second}, nil
	}
	return StepResult{Done: true, Message: "No pod that uses the volume is left on the holder node"}, nil
}

func (s waitPodsGone) Run(ctx context.Context, r *Execution) (StepResult, error) {
	return s.Done(ctx, r)
}

// IsFailure reports whether err ends the playbook.
func IsFailure(err error) (*Failure, bool) {
	var f *Failure
	ok := errors.As(err, &f)
	return f, ok
}
