package admission

// The slots Lease: the one object that guards the cap's grants (admission.go, in package admission).

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/pause"
)

// slotLedger is the slots Lease as admission read it. Why one object is enough for
// two admitters: a pass reads the Lease, lists the requests, writes the Lease
// (guarded by the resourceVersion it read) with every holder, pending grant and new
// grant, at most the cap; only then does it write each new grant to its request,
// guarded by the listed resourceVersion. Writes of the Lease form one chain. A grant
// still pending when a later pass lists has its request unchanged (its write is
// guarded by that), so the later pass counts it by resourceVersion; a grant written
// by then shows in the request's status. So no pass grants beyond the cap. An entry
// whose request changed and that holds no slot by its status is dead.
type slotLedger struct {
	lease   *coordinationv1.Lease // nil: not created yet
	entries []slotEntry
}

// slotEntry is one slot in the Lease: the request, the resourceVersion its grant is
// written against, and the line's it was chosen from.
type slotEntry struct {
	UID             types.UID `json:"uid"`
	Request         string    `json:"request"`
	ResourceVersion string    `json:"resourceVersion"`
	Line            string    `json:"line,omitempty"`
}

func (a *Reconciler) slotsKey() types.NamespacedName {
	if a.Slots.Name != "" {
		return a.Slots
	}
	return types.NamespacedName{Namespace: cmp.Or(a.Pause.Namespace, pause.DefaultConfigMap.Namespace), Name: SlotsLeaseName}
}

// readLedger reads the slots Lease live; one that does not exist yet is empty.
func (a *Reconciler) readLedger(ctx context.Context) (*slotLedger, error) {
	key := a.slotsKey()
	lease := &coordinationv1.Lease{}
	if err := a.Reader.Get(ctx, key, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return &slotLedger{}, nil
		}
		return nil, fmt.Errorf("reading the slots Lease %s: %w", key, err)
	}
	l := &slotLedger{lease: lease}
	if raw := lease.Annotations[SlotsAnnotation]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &l.entries); err != nil {
			return nil, fmt.Errorf("the slots Lease %s has an annotation %s that is not a list of slots (%w): no slot is granted until it is fixed; delete the Lease and admission writes it again from the requests' status",
				key, SlotsAnnotation, err)
		}
	}
	return l, nil
}

// pending are the ledger's grants not yet written (the request is listed at the
// entry's resourceVersion), by UID, with their line; nil without a ledger (no cap).
func (l *slotLedger) pending(all []v1alpha1.RemediationRequest) map[types.UID]string {
	if l == nil {
		return nil
	}
	rv := make(map[types.UID]string, len(all))
	for _, rr := range all {
		rv[rr.UID] = rr.ResourceVersion
	}
	out := map[types.UID]string{}
	for _, e := range l.entries {
		if got, ok := rv[e.UID]; ok && got == e.ResourceVersion {
			out[e.UID] = e.Line
		}
	}
	return out
}

// writeLedger writes the holders into the Lease, guarded by the resourceVersion it
// was read at (or creates it). A grant keeps its line: listedAt for this pass's own.
func (a *Reconciler) writeLedger(ctx context.Context, l *slotLedger, holders []v1alpha1.RemediationRequest, grants []Grant, listedAt string) error {
	line := map[types.UID]string{}
	for _, g := range grants {
		line[g.Request.UID] = cmp.Or(g.line, listedAt)
	}
	entries := make([]slotEntry, 0, len(holders))
	for _, h := range holders {
		entries = append(entries, slotEntry{UID: h.UID, Request: h.Namespace + "/" + h.Name, ResourceVersion: h.ResourceVersion, Line: line[h.UID]})
	}
	slices.SortFunc(entries, func(x, y slotEntry) int { return cmp.Compare(x.Request, y.Request) })
	raw, err := json.Marshal(entries)
	if err != nil {
		return fmt.Errorf("encoding the slots: %w", err)
	}
	key := a.slotsKey()
	if l.lease == nil {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Annotations: map[string]string{SlotsAnnotation: string(raw)}}}
		err = a.Client.Create(ctx, lease)
	} else {
		lease := l.lease.DeepCopy()
		metav1.SetMetaDataAnnotation(&lease.ObjectMeta, SlotsAnnotation, string(raw))
		err = a.Client.Update(ctx, lease)
	}
	if err != nil {
		return fmt.Errorf("writing the slots Lease %s: %w", key, err)
	}
	return nil
}
