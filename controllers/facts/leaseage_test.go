package facts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/remediator/remediator/api/v1alpha1"
)

// write is a managedFields entry: manager's last write, at (the API server's time),
// owning fields.
func write(manager string, at time.Time, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{
		Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1",
		Time: ptr.To(metav1.NewTime(at)), FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)},
	}
}

const (
	holderFields   = `{"f:spec":{"f:acquireTime":{},"f:holderIdentity":{}}}`
	acquireOnly    = `{"f:spec":{"f:acquireTime":{}}}`
	holderOnly     = `{"f:spec":{"f:holderIdentity":{}}}`
	labelFields    = `{"f:metadata":{"f:labels":{".":{},"f:team":{}}}}`
	durationFields = `{"f:spec":{"f:leaseDurationSeconds":{}}}`
)

// TestHoldBeganCountsOnlyTheAPIServersTimes: a Lease's hold begins at its creation, or
// at the API server's time of the holder's last write of acquireTime/holderIdentity
// (managedFields), never at the acquireTime the holder writes from its own clock.
// Before, a holder retrying with a clock ten minutes slow wrote an acquireTime later
// than the creation, and its fresh hold counted as ten minutes old.
func TestHoldBeganCountsOnlyTheAPIServersTimes(t *testing.T) {
	created := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	now := created.Add(time.Hour)
	at := func(d time.Duration) time.Time { return created.Add(d) }
	for _, tc := range []struct {
		name     string
		noCreate bool
		acquired *time.Time
		writes   []metav1.ManagedFieldsEntry
		began    time.Time
		from     []string
	}{{
		name: "created and never written again", acquired: ptr.To(created),
		writes: []metav1.ManagedFieldsEntry{write("trident-node", created, holderFields)},
		began:  created, from: []string{"creationTimestamp 2030-01-02T03:00:00Z, set by the API server, equal to acquireTime"},
	}, {
		name: "the same holder retrying with a clock ten minutes slow", acquired: ptr.To(at(40 * time.Minute)),
		writes: []metav1.ManagedFieldsEntry{write("trident-node", at(50*time.Minute), holderFields)},
		began:  at(50 * time.Minute), from: []string{`the holder's last write of acquireTime or holderIdentity, at 2030-01-02T03:50:00Z by the API server's clock (field manager "trident-node")`, "does not count"},
	}, {
		name: "a retry whose slow clock wrote an acquireTime before the creation", acquired: ptr.To(at(-5 * time.Minute)),
		writes: []metav1.ManagedFieldsEntry{write("trident-node", at(55*time.Minute), holderFields)},
		began:  at(55 * time.Minute), from: []string{"at 2030-01-02T03:55:00Z", "a re-acquisition after its creationTimestamp 2030-01-02T03:00:00Z"},
	}, {
		name: "another node took it over by an update", acquired: ptr.To(at(-time.Hour)),
		writes: []metav1.ManagedFieldsEntry{write("trident-node-a", created, durationFields), write("trident-node-b", at(58*time.Minute), holderOnly)},
		began:  at(58 * time.Minute), from: []string{`field manager "trident-node-b"`},
	}, {
		name: "a holder clock running fast at the creation", acquired: ptr.To(at(30 * time.Second)),
		writes: []metav1.ManagedFieldsEntry{write("trident-node", created, holderFields)},
		began:  created, from: []string{"creationTimestamp 2030-01-02T03:00:00Z, set by the API server, with no later write by the holder; acquireTime 2030-01-02T03:00:30Z, set by the holder's clock, does not count"},
	}, {
		name: "a slow holder clock at the creation", acquired: ptr.To(at(-10 * time.Minute)),
		writes: []metav1.ManagedFieldsEntry{write("trident-node", created, holderFields)},
		began:  created, from: []string{"creationTimestamp 2030-01-02T03:00:00Z, set by the API server; acquireTime 2030-01-02T02:50:00Z, set by the holder's clock, is earlier and does not count"},
	}, {
		name:   "no acquireTime",
		writes: []metav1.ManagedFieldsEntry{write("trident-node", created, holderOnly)},
		began:  created, from: []string{"the Lease has no acquireTime"},
	}, {
		name: "a later write of someone else's fields is no re-acquisition", acquired: ptr.To(created),
		writes: []metav1.ManagedFieldsEntry{write("trident-node", created, holderFields), write("kubectl-label", at(59*time.Minute), labelFields)},
		began:  created, from: []string{"creationTimestamp 2030-01-02T03:00:00Z"},
	}, {
		name: "shared by apply: the newest write counts", acquired: ptr.To(created),
		writes: []metav1.ManagedFieldsEntry{write("ops", at(20*time.Minute), acquireOnly), write("trident-node", at(30*time.Minute), holderFields), write("old", at(10*time.Minute), holderOnly)},
		began:  at(30 * time.Minute), from: []string{`field manager "trident-node"`},
	}, {
		name: "equal times name the first manager by name", acquired: ptr.To(created),
		writes: []metav1.ManagedFieldsEntry{write("zeta", at(30*time.Minute), acquireOnly), write("alpha", at(30*time.Minute), holderOnly)},
		began:  at(30 * time.Minute), from: []string{`field manager "alpha"`},
	}, {
		name: "without managedFields a later acquireTime does not count", acquired: ptr.To(at(50 * time.Minute)),
		began: now, from: []string{"now: the Lease was read without managedFields", "the holder's acquireTime does not count"},
	}, {
		name: "without managedFields a re-acquisition cannot be ruled out", acquired: ptr.To(at(-10 * time.Minute)),
		began: now, from: []string{"now: the Lease was read without managedFields", "cannot be ruled out"},
	}, {
		name: "entries without a time or with a field set that does not parse own nothing", acquired: ptr.To(created),
		writes: []metav1.ManagedFieldsEntry{{Manager: "no-time", FieldsV1: &metav1.FieldsV1{Raw: []byte(holderFields)}}, write("garbled", at(10*time.Minute), `{`)},
		began:  now, from: []string{"now: the Lease was read without managedFields"},
	}, {
		name: "no creationTimestamp", noCreate: true, acquired: ptr.To(at(-time.Hour)),
		began: now, from: []string{"now: the Lease has no creationTimestamp"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-1", ManagedFields: tc.writes},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a")}}
			if !tc.noCreate {
				l.CreationTimestamp = metav1.NewTime(created)
			}
			if tc.acquired != nil {
				l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(*tc.acquired))
			}
			lf := &v1alpha1.LeaseFacts{}
			recordLeaseAge(lf, l, now)
			if assert.NotNil(t, lf.HeldSince) {
				assert.Equal(t, tc.began, lf.HeldSince.Time, "held since")
			}
			assert.Equal(t, int64(now.Sub(tc.began)/time.Second), lf.AgeSeconds, "age")
			for _, want := range tc.from {
				assert.Contains(t, lf.AgeFrom, want)
			}
		})
	}
}
