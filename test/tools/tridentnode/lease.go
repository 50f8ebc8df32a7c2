package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// LeaseGate serialises LUKS operations across nodes the way Trident does (seed 003): before
// it runs cryptsetup on a LUKS volume, a node takes the coordination.k8s.io/v1 Lease named
// after the PV in the Trident namespace, with spec.holderIdentity its node name; after a
// successful operation it deletes the Lease; after a failed one it keeps it (only the same
// node may retry) and emits a Warning event LeaseRetained on it. The Lease is never renewed
// and, with no leaseDurationSeconds, never expires: a holder that dies mid-operation blocks
// every other node until someone deletes it.
type LeaseGate struct {
	Client    kubernetes.Interface
	Namespace string
	// Node is this node's name, the holderIdentity it writes.
	Node string
	Log  *slog.Logger
	// Now is the clock for acquireTime and expiry; time.Now if nil.
	Now func() time.Time
}

// HeldError is returned by Acquire when another node holds the Lease.
type HeldError struct {
	Namespace, Lease, Holder string
	// Since is the Lease's acquireTime, or its creationTimestamp without one.
	Since time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("Lease %s/%s is held by %s since %s: only one node at a time may run cryptsetup on LUKS volume %s; retrying once %s releases it",
		e.Namespace, e.Lease, e.Holder, e.Since.UTC().Format(time.RFC3339), e.Lease, e.Holder)
}

func (g *LeaseGate) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// PVName finds the name of the PV whose CSI volume handle is handle. Trident's volume handle
// is the PV name, so that is tried first; a PV named otherwise is looked up in the list.
func (g *LeaseGate) PVName(ctx context.Context, handle string) (string, error) {
	pv, err := g.Client.CoreV1().PersistentVolumes().Get(ctx, handle, metav1.GetOptions{})
	switch {
	case err == nil && pv.Spec.CSI != nil && pv.Spec.CSI.VolumeHandle == handle:
		return pv.Name, nil
	case err != nil && !apierrors.IsNotFound(err):
		return "", fmt.Errorf("get PV %s: %w", handle, err)
	}
	list, err := g.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list PVs for volume handle %s: %w", handle, err)
	}
	for _, pv := range list.Items {
		if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == DriverName && pv.Spec.CSI.VolumeHandle == handle {
			return pv.Name, nil
		}
	}
	return handle, nil
}

// Acquire takes the Lease name for this node: it creates it, or takes it over when it is
// held by this node already (a retry after a failed operation), has no holder, or has
// expired (only a Lease with leaseDurationSeconds can). Held by another node, it returns a
// *HeldError.
func (g *LeaseGate) Acquire(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	leases := g.Client.CoordinationV1().Leases(g.Namespace)
	for attempt := 0; attempt < 5; attempt++ {
		now := metav1.NewMicroTime(g.now())
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.Namespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(g.Node), AcquireTime: &now},
		}
		created, err := leases.Create(ctx, l, metav1.CreateOptions{})
		if err == nil {
			g.Log.Info("Acquired LUKS lease", "lease", g.Namespace+"/"+name, "holder", g.Node)
			return created, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create Lease %s/%s: %w", g.Namespace, name, err)
		}
		cur, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // deleted meanwhile: create it again
		}
		if err != nil {
			return nil, fmt.Errorf("get Lease %s/%s: %w", g.Namespace, name, err)
		}
		holder := ptr.Deref(cur.Spec.HolderIdentity, "")
		if holder != "" && holder != g.Node && !g.expired(cur) {
			since := cur.CreationTimestamp.Time
			if cur.Spec.AcquireTime != nil {
				since = cur.Spec.AcquireTime.Time
			}
			return nil, &HeldError{Namespace: g.Namespace, Lease: name, Holder: holder, Since: since}
		}
		cur.Spec.HolderIdentity = ptr.To(g.Node)
		cur.Spec.AcquireTime = &now
		cur.Spec.RenewTime = nil
		updated, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("update Lease %s/%s: %w", g.Namespace, name, err)
		}
		g.Log.Info("Acquired LUKS lease", "lease", g.Namespace+"/"+name, "holder", g.Node, "previousHolder", holder)
		return updated, nil
	}
	return nil, fmt.Errorf("the Lease %s/%s kept changing while acquiring it", g.Namespace, name)
}

func (g *LeaseGate) expired(l *coordinationv1.Lease) bool {
	if l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	last := l.CreationTimestamp.Time
	for _, t := range []*metav1.MicroTime{l.Spec.AcquireTime, l.Spec.RenewTime} {
		if t != nil && t.After(last) {
			last = t.Time
		}
	}
	return g.now().After(last.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// Release deletes the Lease after a successful operation, only the incarnation Acquire
// returned (a UID precondition): a Lease someone deleted and another node re-created since
// stays.
func (g *LeaseGate) Release(ctx context.Context, l *coordinationv1.Lease) error {
	err := g.Client.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		g.Log.Warn("LUKS lease was already gone or replaced", "lease", l.Namespace+"/"+l.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete Lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	g.Log.Info("Released LUKS lease", "lease", l.Namespace+"/"+l.Name, "holder", g.Node)
	return nil
}

// Retain keeps the Lease after a failed operation and reports why with a Warning event
// LeaseRetained on it.
func (g *LeaseGate) Retain(ctx context.Context, l *coordinationv1.Lease, cause error) error {
	msg := fmt.Sprintf("Retaining lease after failed LUKS operation on node %s: %v", g.Node, cause)
	g.Log.Warn(msg, "lease", l.Namespace+"/"+l.Name)
	now := metav1.NewTime(g.now())
	ev := &corev1.Event{
		// Named as client-go's event recorder names events: <object>.<unix nanoseconds, hex>.
		ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: fmt.Sprintf("%s.%x", l.Name, now.UnixNano())},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
			Namespace: l.Namespace, Name: l.Name, UID: l.UID, ResourceVersion: l.ResourceVersion,
		},
		Reason: "LeaseRetained", Message: msg, Type: corev1.EventTypeWarning, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "trident-node", Host: g.Node},
	}
	if _, err := g.Client.CoreV1().Events(l.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create LeaseRetained event for Lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	return nil
}
