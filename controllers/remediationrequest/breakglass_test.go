package remediationrequest_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestOversizedBreakGlassReasonDoesNotWedge: a break-glass reason longer than a
// condition message may be (a controller installed without the chart's admission
// policy, which bounds the annotation) used to be copied whole into the BreakGlass
// condition, so every status write was refused with 422: the request was never
// decided and its journal never advanced. Now the reason is cut, with a marker, and
// the request is carried out; the Event is within the API's limit on a note.
func TestOversizedBreakGlassReasonDoesNotWedge(t *testing.T) {
	env.EnsureNamespaces(t, "remediator", "trident", corev1.NamespaceNodeLease)
	startManager(t)

	const down = "envtest-wedge-down"
	shutdownNode(t, down)
	const pv = "pvc-envtest-wedge-breakglass"
	leaseHeldBy(t, pv, down)
	// Over the API's 32768 characters for a condition message, in a two-byte
	// character: a cut inside one would be invalid UTF-8.
	reason := "INC-9 " + strings.Repeat("é", 40<<10)
	rr := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "wedge-break-glass", Annotations: map[string]string{v1alpha1.AnnotationBreakGlass: reason}},
		Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{PersistentVolume: pv},
			Reason: "LeaseRetained: cryptsetup luksOpen failed (INC-9)"},
	}
	create(t, rr)
	key := client.ObjectKeyFromObject(rr)

	rr = waitFor(t, key, 30*time.Second, "Succeeded", terminal)
	require.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "%+v", rr.Status.Decision)
	assert.False(t, leaseExists(t, pv), "the Lease is released")
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionBreakGlass)
	require.NotNil(t, c, "BreakGlass condition")
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Contains(t, c.Message, "Reason: INC-9 éé")
	assert.Regexp(t, `é… \(\d+ bytes cut\)$`, c.Message, "the cut is marked")
	assert.Less(t, len(c.Message), 2048, "the reason is bounded in the condition")
	assert.True(t, utf8.ValidString(c.Message), "cut inside a character")

	msg := warningEvent(t, key.Name, v1alpha1.ReasonBreakGlass, "Written outside Git review", "INC-9")
	assert.LessOrEqual(t, len(msg), 1024, "an Event note is at most 1024 bytes (events.k8s.io)")
	assert.True(t, utf8.ValidString(msg), "cut inside a character")
}
