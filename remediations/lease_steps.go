package remediations

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// deleteLease deletes the Trident Lease (incident A) with the decided UID and
// resourceVersion as preconditions; a Lease that changed is left alone and the
// request fails.
type deleteLease struct{}

// decidedLease is the Lease recorded at decision time.
func decidedLease(r *Execution) (*v1alpha1.LeaseFacts, error) {
	f := r.RR.Status.Facts
	if f == nil || f.Lease == nil || f.Lease.UID == "" {
		return nil, fail("the decision's facts hold no Lease to delete")
	}
	return f.Lease, nil
}

// readLease reads the decided Lease live; nil means it is gone.
func readLease(ctx context.Context, r *Execution, want *v1alpha1.LeaseFacts) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	err := r.Reader.Get(ctx, types.NamespacedName{Namespace: want.Namespace, Name: want.Name}, l)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Lease %s/%s: %w", want.Namespace, want.Name, err)
	}
	return l, nil
}

func leaseGoneResult(want *v1alpha1.LeaseFacts) StepResult {
	return StepResult{Done: true, Message: fmt.Sprintf("Lease %s/%s is gone", want.Namespace, want.Name),
		Object: "Lease " + want.Namespace + "/" + want.Name, UID: want.UID, ResourceVersion: want.ResourceVersion}
}

// Done reads the Lease from the fresh facts when there are some, rather than read it
// again. One they still show but that is gone is found by the delete (NotFound is
// done); one re-created since is refused by the UID precondition.
func (deleteLease) Done(ctx context.Context, r *Execution) (StepResult, error) {
	want, err := decidedLease(r)
	if err != nil {
		return StepResult{}, err
	}
	if f := r.freshFacts; f != nil {
		if f.Lease == nil || f.Lease.Namespace != want.Namespace || f.Lease.Name != want.Name || f.Lease.Exists {
			return StepResult{}, nil
		}
		return leaseGoneResult(want), nil
	}
	l, err := readLease(ctx, r, want)
	if err != nil || l != nil {
		return StepResult{}, err
	}
	return leaseGoneResult(want), nil
}

// Run deletes the Lease the floor has just compared with the decision's; the
// preconditions make the API server refuse a change in between.
func (deleteLease) Run(ctx context.Context, r *Execution) (StepResult, error) {
	want, err := decidedLease(r)
	if err != nil {
		return StepResult{}, err
	}
	// A shut-down holder's volume is awaited here rather than in a step of its own:
	// where nothing is attached, the release stays one journal write and one delete.
	if f := r.freshFacts; f != nil && f.Node != nil && f.Node.State == v1alpha1.NodeShutdown {
		if why := VolumeOnHolder(f); why != "" {
			return StepResult{Message: fmt.Sprintf("Waiting before deleting Lease %s/%s: holder node %s is shut down, but %s", want.Namespace, want.Name, f.Node.Name, why),
				RequeueAfter: 2 * time.Second}, nil
		}
	}
	key := types.NamespacedName{Namespace: want.Namespace, Name: want.Name}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: want.Namespace, Name: want.Name}}
	uid, rv := types.UID(want.UID), want.ResourceVersion
	err = r.Client.Delete(ctx, l, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case err == nil, apierrors.IsNotFound(err):
	case apierrors.IsConflict(err):
		return conflictResult(ctx, r, want, key, err)
	default:
		return StepResult{}, writeFailed(err, "deleting Lease %s", key)
	}
	return StepResult{Done: true, Message: fmt.Sprintf("Deleted Lease %s held by %s", key, want.HolderIdentity),
		Object: "Lease " + key.String(), UID: want.UID, ResourceVersion: want.ResourceVersion}, nil
}

// conflictResult judges a 409 on the Lease delete. A failed precondition answers
// 409, but so can a proxy, a webhook or an API server shedding load to a delete it
// never processed (make chaos, R2). So the Lease is read live: gone is done (a lost
// reply), the decided UID and resourceVersion mean nothing changed and the delete is
// retried, anything else is the change the preconditions exist to catch.
func conflictResult(ctx context.Context, r *Execution, want *v1alpha1.LeaseFacts, key types.NamespacedName, conflict error) (StepResult, error) {
	cur, err := readLease(ctx, r, want)
	switch {
	case err != nil:
		return StepResult{}, fmt.Errorf("deleting Lease %s: %v; re-reading it to tell whether it changed: %w", key, conflict, err)
	case cur == nil:
		return leaseGoneResult(want), nil
	case string(cur.UID) == want.UID && cur.ResourceVersion == want.ResourceVersion:
		return StepResult{}, fmt.Errorf("deleting Lease %s: %w; the Lease is unchanged since the decision (uid %s, resourceVersion %s), so the delete is retried with the same preconditions",
			key, conflict, want.UID, want.ResourceVersion)
	}
	return StepResult{}, &Failure{Reason: InvariantLeaseChanged.Reason(),
		Message: fmt.Sprintf("safety floor %s: Lease %s changed at the moment of deletion (%v); it was left alone", InvariantLeaseChanged, key, conflict)}
}
