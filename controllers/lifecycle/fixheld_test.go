package lifecycle_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
)

// TestFinishOpensTheFixWindow: the write that makes a request Succeeded opens its fix
// window (FixHeld Unknown, Verifying, from the second status.outcome records), so
// that verification needs no write of its own to start; not when fixes are not
// verified, nor when the decision named nothing to watch.
func TestFinishOpensTheFixWindow(t *testing.T) {
	now := time.Date(2026, 11, 19, 5, 47, 54, 600_000_000, time.UTC)
	lease := &v1alpha1.Facts{Lease: &v1alpha1.LeaseFacts{Namespace: "trident", Name: "pvc-0c3c2c41", HolderIdentity: "worker-2"}}
	csi := &v1alpha1.Facts{DriverName: "csi.trident.netapp.io"}
	for _, tc := range []struct {
		name        string
		remediation v1alpha1.Remediation
		facts       *v1alpha1.Facts
		window      time.Duration
		want        string // FixHeld's message; "": no FixHeld
	}{
		{"release, verified", v1alpha1.RemediationReleaseLUKSLease, lease, 15 * time.Minute,
			"Watching for Lease trident/pvc-0c3c2c41 retained again by node worker-2 from 2026-11-19T05:47:54Z until 2026-11-19T06:02:54Z"},
		{"reregister, verified", v1alpha1.RemediationReregisterCSIDriver, csi, time.Minute,
			"Watching for deregistration of csi.trident.netapp.io from CSINode worker-2 from 2026-11-19T05:47:54Z until 2026-11-19T05:48:54Z"},
		{"fixes not verified", v1alpha1.RemediationReleaseLUKSLease, lease, 0, ""},
		{"no Lease named", v1alpha1.RemediationReleaseLUKSLease, &v1alpha1.Facts{}, 15 * time.Minute, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := &v1alpha1.RemediationRequest{Spec: v1alpha1.RemediationRequestSpec{
				Remediation: tc.remediation, Target: v1alpha1.Target{Node: "worker-2"}}}
			rr.Status.Phase = v1alpha1.PhaseRunning
			rr.Status.Facts = tc.facts
			lifecycle.Finish(rr, now, tc.window)
			require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase)
			c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionFixHeld)
			if tc.want == "" {
				assert.Nil(t, c)
				return
			}
			require.NotNil(t, c)
			assert.Equal(t, metav1.ConditionUnknown, c.Status)
			assert.Equal(t, v1alpha1.ReasonVerifying, c.Reason)
			assert.Equal(t, tc.want, c.Message)
		})
	}
}
