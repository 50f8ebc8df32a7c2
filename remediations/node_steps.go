package remediations

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CordonedByAnnotation marks a node this controller cordoned with the request that
// did it, so that only that request uncordons it, even after a restart.
const CordonedByAnnotation = "remediator.io/cordoned-by"

// workNode is the node a playbook works on: the target node of reregister-csi-driver,
// or the Lease holder of release-luks-lease. Before a destructive step it comes from
// the fresh facts, never from status, which could name any node; the restore reads
// status, but only undoes a cordon carrying this request's mark.
func workNode(r *Execution) (string, error) {
	f := r.RR.Status.Facts
	if r.freshFacts != nil {
		f = r.freshFacts
	}
	switch {
	case f == nil:
	case f.Target.Node != "":
		return f.Target.Node, nil
	case f.Lease != nil && f.Lease.HolderIdentity != "":
		return f.Lease.HolderIdentity, nil
	}
	return "", fail("the decision's facts name no node to act on")
}

// readWorkNode reads the node the playbook works on; nil when it is gone.
func readWorkNode(ctx context.Context, r *Execution) (string, *corev1.Node, error) {
	name, err := workNode(r)
	if err != nil {
		return "", nil, err
	}
	n := &corev1.Node{}
	if err := r.Reader.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return name, nil, nil
		}
		return name, nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	return name, n, nil
}

func nodeOutcome(n *corev1.Node, msg string) StepResult {
	return StepResult{Done: true, Message: msg, Object: "Node " + n.Name, UID: string(n.UID), ResourceVersion: n.ResourceVersion}
}

// patchNode applies change to n under an optimistic lock, so that a concurrent edit
// of the node is never overwritten.
func patchNode(ctx context.Context, r *Execution, n *corev1.Node, what string, change func(*corev1.Node)) error {
	before := n.DeepCopy()
	change(n)
	if err := r.Client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager)); err != nil {
		return writeFailed(err, "%s node %s", what, n.Name)
	}
	return nil
}

// cordon marks the node unschedulable with this request's mark. A node already
// cordoned is left as it is, and stays cordoned.
type cordon struct{}

// cordoned is the outcome, done, when n is already cordoned, saying by whom.
func cordoned(r *Execution, n *corev1.Node) StepResult {
	switch {
	case n.Spec.Unschedulable && n.Annotations[CordonedByAnnotation] == r.owner():
		return nodeOutcome(n, fmt.Sprintf("Cordoned node %s", n.Name))
	case n.Spec.Unschedulable:
		return nodeOutcome(n, fmt.Sprintf("Node %s was already cordoned; it stays cordoned afterwards", n.Name))
	}
	return StepResult{}
}

func (cordon) Done(ctx context.Context, r *Execution) (StepResult, error) {
	_, n, err := readWorkNode(ctx, r)
	if err != nil || n == nil {
		return StepResult{}, err
	}
	return cordoned(r, n), nil
}

func (cordon) Run(ctx context.Context, r *Execution) (StepResult, error) {
	name, n, err := readWorkNode(ctx, r)
	if err != nil {
		return StepResult{}, err
	}
	if n == nil {
		return StepResult{}, fail("node %s no longer exists; the playbook for a healthy holder cannot continue", name)
	}
	if out := cordoned(r, n); out.Done {
		return out, nil
	}
	if err := patchNode(ctx, r, n, "cordoning", func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		metav1.SetMetaDataAnnotation(&n.ObjectMeta, CordonedByAnnotation, r.owner())
	}); err != nil {
		return StepResult{}, err
	}
	return nodeOutcome(n, fmt.Sprintf("Cordoned node %s", name)), nil
}

// uncordon undoes cordon, only when this request cordoned the node and nobody else
// asserted the cordon since (CordonAssertedBy); else only the mark is removed.
type uncordon struct{}

// leftAlone is the outcome, done, when there is nothing for uncordon to undo on the node.
func leftAlone(r *Execution, name string, n *corev1.Node) StepResult {
	switch {
	case n == nil:
		return StepResult{Done: true, Message: fmt.Sprintf("Node %s no longer exists", name)}
	case n.Annotations[CordonedByAnnotation] != r.owner():
		return nodeOutcome(n, fmt.Sprintf("Node %s left as found (not cordoned by this request)", name))
	}
	return StepResult{}
}

func (uncordon) Done(ctx context.Context, r *Execution) (StepResult, error) {
	name, n, err := readWorkNode(ctx, r)
	if err != nil {
		return StepResult{}, err
	}
	return leftAlone(r, name, n), nil
}

func (uncordon) Run(ctx context.Context, r *Execution) (StepResult, error) {
	name, n, err := readWorkNode(ctx, r)
	if err != nil {
		return StepResult{}, err
	}
	if out := leftAlone(r, name, n); out.Done {
		return out, nil
	}
	if others := CordonAssertedBy(n); n.Spec.Unschedulable && len(others) > 0 {
		err := patchNode(ctx, r, n, "removing the cordoned-by mark from", func(n *corev1.Node) {
			delete(n.Annotations, CordonedByAnnotation)
		})
		if err != nil {
			return gone(name, err)
		}
		return nodeOutcome(n, fmt.Sprintf("Node %s left cordoned: %s also set spec.unschedulable during the run, so the cordon is theirs now; only this request's %s mark was removed",
			name, strings.Join(others, ", "), CordonedByAnnotation)), nil
	}
	if err := patchNode(ctx, r, n, "uncordoning", func(n *corev1.Node) {
		n.Spec.Unschedulable = false
		delete(n.Annotations, CordonedByAnnotation)
	}); err != nil {
		return gone(name, err)
	}
	return nodeOutcome(n, fmt.Sprintf("Uncordoned node %s", name)), nil
}

// gone turns a NotFound from an uncordon's patch into success: a deleted node has
// no cordon left to undo.
func gone(name string, err error) (StepResult, error) {
	if apierrors.IsNotFound(err) {
		return StepResult{Done: true, Message: fmt.Sprintf("Node %s no longer exists", name)}, nil
	}
	return StepResult{}, err
}
