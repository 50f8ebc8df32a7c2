package remediations

// The steps that act on the node a playbook works on: cordon and uncordon, and how
// they find, read and patch that node.

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CordonedByAnnotation marks a node this controller cordoned, with the request that
// did it, so that only that request uncordons it, even after a restart.
const CordonedByAnnotation = "remediator.io/cordoned-by"

// workNode is the node a playbook works on: the target node of reregister-csi-driver,
// or the Lease holder of release-luks-lease, as recorded at decision time.
func workNode(r *Execution) (string, error) {
	// Before a destructive step the node comes from the facts just gathered from the
	// spec, never from status: status could name any node. The restore reads status,
	// but only undoes a cordon this request's own mark is on.
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

func getNode(ctx context.Context, r *Execution, name string) (*corev1.Node, error) {
	n := &corev1.Node{}
	if err := r.Reader.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	return n, nil
}

// readWorkNode reads the node the playbook works on; the node is nil when it is gone.
func readWorkNode(ctx context.Context, r *Execution) (string, *corev1.Node, error) {
	name, err := workNode(r)
	if err != nil {
		return "", nil, err
	}
	n, err := getNode(ctx, r, name)
	return name, n, err
}

func nodeOutcome(n *corev1.Node, msg string) StepResult {
	return StepResult{Done: true, Message: msg, Object: "Node " + n.Name, UID: string(n.UID), ResourceVersion: n.ResourceVersion}
}

// patchNode applies change to n under an optimistic lock, so a concurrent edit of
// the node (by an operator or another controller) is never overwritten.
func patchNode(ctx context.Context, r *Execution, n *corev1.Node, what string, change func(*corev1.Node)) error {
	before := n.DeepCopy()
	change(n)
	if err := r.Client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager)); err != nil {
		return writeFailed(err, "%s node %s", what, n.Name)
	}
	return nil
}

// cordon marks the holder unschedulable, recording on the node that this request did
// it. A node that was already cordoned is left as it is and will stay cordoned.
type cordon struct{}

func (cordon) Timeout(r *Execution) time.Duration { return r.Timeouts.step() }

// cordoned reports whether n is already cordoned, and by whom.
func cordoned(r *Execution, n *corev1.Node) (StepResult, bool) {
	switch {
	case n.Spec.Unschedulable && n.Annotations[CordonedByAnnotation] == r.owner():
		return nodeOutcome(n, fmt.Sprintf("Cordoned node %s", n.Name)), true
	case n.Spec.Unschedulable:
		return nodeOutcome(n, fmt.Sprintf("Node %s was already cordoned; it stays cordoned afterwards", n.Name)), true
	}
	return StepResult{}, false
}

func (cordon) Done(ctx context.Context, r *Execution) (StepResult, error) {
	_, n, err := readWorkNode(ctx, r)
	if err != nil || n == nil {
		return StepResult{}, err
	}
	out, _ := cordoned(r, n)
	return out, nil
}

func (cordon) Run(ctx context.Context, r *Execution) (StepResult, error) {
	name, n, err := readWorkNode(ctx, r)
	if err != nil {
		return StepResult{}, err
	}
	if n == nil {
		return StepResult{}, fail("node %s no longer exists; the playbook for a healthy holder cannot continue", name)
	}
	if out, ok := cordoned(r, n); ok {
		return out, nil
	}
	if err := patchNode(ctx, r, n, "cordoning", func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[CordonedByAnnotation] = r.owner()
	}); err != nil {
		return StepResult{}, err
	}
	return nodeOutcome(n, fmt.Sprintf("Cordoned node %s", name)), nil
}

// uncordon undoes cordon, only when this request cordoned the node and nobody else
// asserted the cordon since (CordonAssertedBy): such a cordon is left in place, and
// only this request's mark is removed.
type uncordon struct{}

func (uncordon) Timeout(r *Execution) time.Duration { return r.Timeouts.step() }

// leftAlone reports whether there is nothing for uncordon to undo on the node.
func leftAlone(r *Execution, name string, n *corev1.Node) (StepResult, bool) {
	switch {
	case n == nil:
		return StepResult{Done: true, Message: fmt.Sprintf("Node %s no longer exists", name)}, true
	case n.Annotations[CordonedByAnnotation] != r.owner():
		return nodeOutcome(n, fmt.Sprintf("Node %s left as found (not cordoned by this request)", name)), true
	}
	return StepResult{}, false
}

func (uncordon) Done(ctx context.Context, r *Execution) (StepResult, error) {
	name, n, err := readWorkNode(ctx, r)
	if err != nil {
		return StepResult{}, err
	}
	out, _ := leftAlone(r, name, n)
	return out, nil
}

func (uncordon) Run(ctx context.Context, r *Execution) (StepResult, error) {
	name, n, err := readWorkNode(ctx, r)
	if err != nil {
		return StepResult{}, err
	}
	if out, ok := leftAlone(r, name, n); ok {
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

// gone turns a NotFound from an uncordon's patch into success: a node deleted
// since it was read has no cordon left to undo. Any other error stands.
func gone(name string, err error) (StepResult, error) {
	if apierrors.IsNotFound(err) {
		return StepResult{Done: true, Message: fmt.Sprintf("Node %s no longer exists", name)}, nil
	}
	return StepResult{}, err
}
