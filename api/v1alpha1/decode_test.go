package v1alpha1_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/remediator/remediator/api/v1alpha1"
)

// A list decodes each request apart: one the Go type cannot hold keeps its name and
// what of its status decodes (else its phase), marked, and the others are whole.
func TestListDecodesEachRequestApart(t *testing.T) {
	const good = `{"apiVersion":"remediator.io/v1alpha1","kind":"RemediationRequest","metadata":{"name":"good","namespace":"ops","resourceVersion":"5"},` +
		`"spec":{"remediation":"release-luks-lease","target":{"persistentVolume":"pvc-1"},"reason":"r"},"status":{"phase":"Running"}}`
	for _, tc := range []struct {
		name, item string
		phase      v1alpha1.Phase
		steps      int
		why        string
	}{
		{
			name:  "an overflowing duration: the status is kept",
			item:  `{"metadata":{"name":"bad","namespace":"ops"},"spec":{"maintenanceWindow":{"schedule":"@daily","duration":"9999999999h"}},"status":{"phase":"Running","steps":[{"name":"cordon","state":"Succeeded"}]}}`,
			phase: v1alpha1.PhaseRunning, steps: 1, why: `time: invalid duration "9999999999h"`,
		},
		{
			name:  "a status of the wrong shape: the phase is kept",
			item:  `{"metadata":{"name":"bad","namespace":"ops"},"spec":{"reason":7},"status":{"phase":"Running","steps":"cordon"}}`,
			phase: v1alpha1.PhaseRunning, why: "cannot unmarshal",
		},
		{
			name:  "metadata the API server would not write: its identity is kept",
			item:  `{"metadata":{"name":"bad","namespace":"ops","creationTimestamp":"not a time"},"spec":{},"status":{"phase":"Running"}}`,
			phase: v1alpha1.PhaseRunning, why: "not a time",
		},
		{
			name: "not even the phase",
			item: `{"metadata":{"name":"bad","namespace":"ops"},"status":{"phase":5}}`,
			why:  "cannot unmarshal number",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := &v1alpha1.RemediationRequestList{}
			require.NoError(t, json.Unmarshal([]byte(`{"metadata":{"resourceVersion":"9"},"items":[`+good+`,`+tc.item+`]}`), list))
			assert.Equal(t, "9", list.ResourceVersion)
			require.Len(t, list.Items, 2)
			whole := list.Items[0]
			assert.NoError(t, whole.DecodeError())
			assert.Equal(t, "pvc-1", whole.Spec.Target.PersistentVolume)
			assert.Equal(t, "5", whole.ResourceVersion)

			bad := list.Items[1]
			assert.Equal(t, "ops", bad.Namespace)
			assert.Equal(t, "bad", bad.Name)
			assert.Equal(t, tc.phase, bad.Status.Phase)
			assert.Len(t, bad.Status.Steps, tc.steps)
			assert.Empty(t, bad.Spec, "nothing of an undecodable spec is kept")
			if err := bad.DecodeError(); assert.Error(t, err) {
				assert.Contains(t, err.Error(), "decoding RemediationRequest ops/bad: ")
				assert.Contains(t, err.Error(), tc.why)
			}
		})
	}
}

// The mark cannot come from the API server: its key is not a valid annotation key.
func TestUndecodableMarkIsNoValidAnnotationKey(t *testing.T) {
	rr := &v1alpha1.RemediationRequest{}
	rr.Name, rr.Namespace = "r", "ops"
	rr.Annotations = map[string]string{v1alpha1.AnnotationUndecodable: "why"}
	assert.NotEmpty(t, validation.ValidateAnnotations(rr.Annotations, field.NewPath("metadata", "annotations")))
}
