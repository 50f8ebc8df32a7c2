package requests

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/api/v1alpha1"
)

// stored is rr as an informer delivers it: unstructured, with its UID and
// resourceVersion.
func stored(t *testing.T, rr *v1alpha1.RemediationRequest) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rr)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(GVK)
	return u
}

// freshViews empties the remembered views for the test, and after it: each test
// and each run of it (-count) starts with none.
func freshViews(t *testing.T) {
	t.Helper()
	views.Clear()
	t.Cleanup(views.Clear)
}

// countDecodes counts the decodes made while the test runs.
func countDecodes(t *testing.T) *int {
	t.Helper()
	freshViews(t)
	n := 0
	orig := decodeView
	decodeView = func(u *unstructured.Unstructured) v1alpha1.RemediationRequest { n++; return orig(u) }
	t.Cleanup(func() { decodeView = orig })
	return &n
}

func viewTestRequest(uid types.UID, rv string, phase v1alpha1.Phase) *v1alpha1.RemediationRequest {
	return &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "release", UID: uid, ResourceVersion: rv},
		Spec:       v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease},
		Status: v1alpha1.RemediationRequestStatus{Phase: phase,
			Facts: &v1alpha1.Facts{Target: v1alpha1.TargetFacts{Ref: "PersistentVolume pv-1", PersistentVolume: "pv-1"}}},
	}
}

// Each watch event of a request goes through several predicates, index functions
// and handlers, each of which takes its guards' view: one version is decoded once.
func TestViewOfDecodesEachVersionOnce(t *testing.T) {
	decodes := countDecodes(t)
	u := stored(t, viewTestRequest("uid-once", "41", v1alpha1.PhaseRunning))
	for range 5 {
		rr := ViewOf(u)
		assert.Equal(t, v1alpha1.PhaseRunning, rr.Status.Phase)
	}
	assert.Equal(t, 1, *decodes, "decodes of one version")

	next := stored(t, viewTestRequest("uid-once", "42", v1alpha1.PhaseSucceeded))
	assert.Equal(t, v1alpha1.PhaseSucceeded, ViewOf(next).Status.Phase, "a new version is decoded afresh")
	assert.Equal(t, 2, *decodes)
}

// A view is the caller's own: what one caller changes in it, the next does not see.
func TestViewsDoNotAlias(t *testing.T) {
	freshViews(t)
	u := stored(t, viewTestRequest("uid-alias", "7", v1alpha1.PhaseRunning))
	first := ViewOf(u)
	first.Status.Facts.Target.PersistentVolume = "changed"
	first.Status.Phase = v1alpha1.PhaseFailed
	second := ViewOf(u)
	assert.Equal(t, "pv-1", second.Status.Facts.Target.PersistentVolume)
	assert.Equal(t, v1alpha1.PhaseRunning, second.Status.Phase)
}

// An object without a UID or a resourceVersion (built in memory, not read from the
// API server) is not identified by them: it is decoded every time.
func TestViewOfAnUnstoredObjectIsNotRemembered(t *testing.T) {
	decodes := countDecodes(t)
	for _, rr := range []*v1alpha1.RemediationRequest{
		viewTestRequest("", "9", v1alpha1.PhaseRunning),
		viewTestRequest("uid-unstored", "", v1alpha1.PhaseRunning),
	} {
		u := stored(t, rr)
		ViewOf(u)
		u.Object["status"].(map[string]any)["phase"] = string(v1alpha1.PhaseFailed)
		assert.Equal(t, v1alpha1.PhaseFailed, ViewOf(u).Status.Phase)
	}
	assert.Equal(t, 4, *decodes)
}
