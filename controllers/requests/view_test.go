package requests

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/remediator/remediator/api/v1alpha1"
)

func viewTestRequest(phase v1alpha1.Phase) *v1alpha1.RemediationRequest {
	return &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "release", UID: "uid-1", ResourceVersion: "7"},
		Spec:       v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease},
		Status: v1alpha1.RemediationRequestStatus{Phase: phase,
			Facts: &v1alpha1.Facts{Target: v1alpha1.TargetFacts{Ref: "PersistentVolume pv-1", PersistentVolume: "pv-1"}}},
	}
}

// A view is the caller's own: what one caller changes in it, neither the cached
// object nor the next caller sees.
func TestViewsDoNotAlias(t *testing.T) {
	cached := viewTestRequest(v1alpha1.PhaseRunning)
	first := ViewOf(cached)
	first.Status.Facts.Target.PersistentVolume = "changed"
	first.Status.Phase = v1alpha1.PhaseFailed
	second := ViewOf(cached)
	assert.Equal(t, "pv-1", second.Status.Facts.Target.PersistentVolume)
	assert.Equal(t, v1alpha1.PhaseRunning, second.Status.Phase)
	assert.Equal(t, "pv-1", cached.Status.Facts.Target.PersistentVolume)
	assert.Equal(t, v1alpha1.PhaseRunning, PhaseOf(cached))
}

// Any object but a typed request is a wiring error (an unstructured watch, another
// kind): the guards would count nothing, so it fails loudly instead.
func TestViewOfRefusesAnythingButARequest(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(GVK)
	_ = unstructured.SetNestedField(u.Object, string(v1alpha1.PhaseRunning), "status", "phase")
	assert.PanicsWithValue(t, "requests: a *unstructured.Unstructured where a *v1alpha1.RemediationRequest was expected", func() { ViewOf(u) })
	assert.Panics(t, func() { PhaseOf(u) })
	require.NotPanics(t, func() { ViewOf(viewTestRequest("")) })
}
