package remediationrequest

// The run a step sees, and what its re-read before a destructive step reads: the
// request (a pod target followed through its decided claim), through the Fresh
// gatherer, with the other requests that could conflict.

import (
	"cmp"
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/remediations"
)

// freshTarget is the request whose facts are gathered afresh before a destructive
// step. A pod target is followed through the claim it resolved to at decision
// time: the playbook evicts that very pod, and the volume, its Lease and the
// holder's other pods must still be re-read after it is gone. Only a claim in the
// pod's own namespace is followed.
func freshTarget(rr *v1alpha1.RemediationRequest) *v1alpha1.RemediationRequest {
	p, f := rr.Spec.Target.Pod, rr.Status.Facts
	if p == nil || f == nil {
		return rr
	}
	ns, name, ok := strings.Cut(f.Target.PersistentVolumeClaim, "/")
	if !ok || ns != p.Namespace || name == "" {
		return rr
	}
	o := rr.DeepCopy()
	o.Spec.Target = v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: ns, Name: name}}
	return o
}

func (r *Reconciler) execution(s *scope) *remediations.Execution {
	return &remediations.Execution{
		RR: s.rr, Client: r.Client, Reader: r.Reader, Fresh: freshReader{r: r, s: s},
		Now: s.now, Timeouts: r.Timeouts, Playbooks: r.Playbooks, Floor: r.floor(),
	}
}

// freshReader is the reconciler's facts gatherer as the steps read through it.
type freshReader struct {
	r *Reconciler
	s *scope
}

var _ remediations.FreshReader = freshReader{}

func (o freshReader) FreshFacts(ctx context.Context) (*v1alpha1.Facts, []string, error) {
	r, s := o.r, o.s
	// Both readings on the decision's clock.
	g := r.gatherer(cmp.Or(r.Fresh, r.Gatherer))
	if r.FreshRelease != nil && !r.Playbooks.Disruptive(lifecycle.DecidedPlaybook(s.rr)) {
		g = r.gatherer(r.FreshRelease)
	}
	// The affected pods are read only where the playbook or the floor looks at
	// them: a playbook that moves them, or a holder decided Healthy.
	g.SkipAffectedPods = !movesPods(s.rr, r.Playbooks)
	// The holder's log is read once, by the decision; the floor weighs that reading.
	g.Logs = nil
	target := freshTarget(s.rr)
	if s.decidedAt != "" {
		// Decided in this reconcile, journaled since: the cache need only be as new
		// as the request the decision read (the journal write is this reconcile's
		// own), so the step does not wait for the next heartbeat after it.
		if target == s.rr {
			target = s.rr.DeepCopy()
		}
		target.ResourceVersion = s.decidedAt
	}
	f, err := g.Gather(ctx, target)
	if err != nil {
		return nil, nil, err
	}
	others, err := r.guardOthers(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	return f, lifecycle.ConflictsIn(others, s.rr.UID, f), nil
}

// NodePluginPods lists live, with the gatherer's node-plugin selector.
func (o freshReader) NodePluginPods(ctx context.Context, namespace, node string) ([]corev1.Pod, error) {
	return o.r.Gatherer.Config.NodePluginPods(ctx, o.r.Reader, namespace, node)
}

// movesPods: the request's decided playbook evicts or waits for the affected pods, or
// its holder was Healthy when decided (the floor then checks they are gone).
func movesPods(rr *v1alpha1.RemediationRequest, playbooks remediations.Playbooks) bool {
	if f := rr.Status.Facts; f == nil || f.Node == nil || f.Node.State == v1alpha1.NodeHealthy {
		return true
	}
	pb, ok := playbooks[lifecycle.DecidedPlaybook(rr)]
	return !ok || slices.Contains(pb.Steps, v1alpha1.StepDeleteAffectedPods) || slices.Contains(pb.Steps, v1alpha1.StepWaitPodsGone)
}
