package remediationrequest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestRegatherFollowsTheDecidedClaim: the healthy playbook evicts the pod a request
// targets, so the fresh facts before deleteLease follow the claim the pod resolved
// to; a claim in another namespace (forged status) is not followed.
func TestRegatherFollowsTheDecidedClaim(t *testing.T) {
	rr := &v1alpha1.RemediationRequest{Spec: v1alpha1.RemediationRequestSpec{Target: v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: "app", Name: "web-0"}}}}
	assert.Same(t, rr, freshTarget(rr), "no facts yet: the spec's target")
	rr.Status.Facts = &v1alpha1.Facts{Target: v1alpha1.TargetFacts{PersistentVolumeClaim: "app/data"}}
	o := freshTarget(rr)
	require.NotNil(t, o.Spec.Target.PersistentVolumeClaim)
	assert.Equal(t, v1alpha1.ObjectReference{Namespace: "app", Name: "data"}, *o.Spec.Target.PersistentVolumeClaim)
	assert.Nil(t, o.Spec.Target.Pod)
	assert.NotNil(t, rr.Spec.Target.Pod, "the request itself is not changed")
	rr.Status.Facts.Target.PersistentVolumeClaim = "other/data"
	assert.Same(t, rr, freshTarget(rr), "a claim outside the pod's namespace is not followed")
	pvc := &v1alpha1.RemediationRequest{Spec: v1alpha1.RemediationRequestSpec{Target: v1alpha1.Target{PersistentVolume: "pvc-1"}}}
	assert.Same(t, pvc, freshTarget(pvc))
}
