package facts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestJudgeLease: scan's test on a PV-named Lease, with the words scan --node prints
// for every Lease a node holds. A holder that is down, cut off or gone makes a Lease
// stuck at any age; a live (Healthy) or doubtful (Unknown) holder's only with
// LeaseRetained events or from the age gate; every reason that holds is said, and a
// Lease that is not stuck says why not, with or without pods waiting behind it.
func TestJudgeLease(t *testing.T) {
	const gate = 10 * time.Minute
	for _, tc := range []struct {
		name      string
		state     v1alpha1.NodeState
		retained  int32
		age       time.Duration
		symptoms  int
		wantStuck bool
		wantWhy   string
	}{
		{name: "shutdown holder, young", state: v1alpha1.NodeShutdown, age: time.Minute, wantStuck: true,
			wantWhy: "holder Shutdown: a Lease never expires, so it is stuck at any age"},
		{name: "unreachable holder, brand new", state: v1alpha1.NodeUnreachable, wantStuck: true,
			wantWhy: "holder Unreachable: a Lease never expires, so it is stuck at any age"},
		{name: "holder not found, old and retained", state: v1alpha1.NodeNotFound, retained: 2, age: 40 * time.Minute, wantStuck: true,
			wantWhy: "holder NotFound: a Lease never expires, so it is stuck at any age; " +
				"2 LeaseRetained event(s) since the hold began: Trident kept it after a failed operation; held 40m0s, at least the 10m0s after which a live holder's Lease counts as stuck"},
		{name: "healthy holder, retained", state: v1alpha1.NodeHealthy, retained: 1, age: time.Minute, wantStuck: true,
			wantWhy: "1 LeaseRetained event(s) since the hold began: Trident kept it after a failed operation"},
		{name: "healthy holder, exactly the gate", state: v1alpha1.NodeHealthy, age: gate, wantStuck: true,
			wantWhy: "held 10m0s, at least the 10m0s after which a live holder's Lease counts as stuck"},
		{name: "unknown holder, old", state: v1alpha1.NodeUnknown, age: time.Hour, wantStuck: true,
			wantWhy: "held 1h0m0s, at least the 10m0s after which a live holder's Lease counts as stuck"},
		{name: "healthy holder, young, nothing waits", state: v1alpha1.NodeHealthy, age: gate - time.Second,
			wantWhy: "young: held 9m59s, under 10m0s; no LeaseRetained event since the hold began; " +
				"holder Healthy, renewing its node Lease: cryptsetup may still run; no symptom on the volume's pods"},
		{name: "healthy holder, young, pods wait", state: v1alpha1.NodeHealthy, age: time.Minute, symptoms: 3,
			wantWhy: "young: held 1m0s, under 10m0s; no LeaseRetained event since the hold began; " +
				"holder Healthy, renewing its node Lease: cryptsetup may still run; 3 symptom(s) on the volume's pods: read the holder's trident-main log"},
		{name: "unknown holder, young", state: v1alpha1.NodeUnknown, age: time.Minute,
			wantWhy: "young: held 1m0s, under 10m0s; no LeaseRetained event since the hold began; " +
				"holder Unknown: the evidence conflicts, and it may still run cryptsetup; no symptom on the volume's pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stuck, why := judgeLease(tc.state, tc.retained, tc.age, gate, tc.symptoms)
			assert.Equal(t, tc.wantStuck, stuck)
			assert.Equal(t, tc.wantWhy, why)
			assert.Equal(t, tc.wantStuck, leaseStuck(tc.state, tc.retained, tc.age, gate), "the words and Scan's test agree")
		})
	}
}
