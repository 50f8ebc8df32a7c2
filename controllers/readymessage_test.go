package controllers

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
)

// TestReadinessMessageFitsACondition: a message at a condition's limit, with the
// Rejected prefix, is cut at a character boundary by the status write's bound, not
// refused by the API server.
func TestReadinessMessageFitsACondition(t *testing.T) {
	long := strings.Repeat("é", maxConditionMessage/2)
	rr := &v1alpha1.RemediationRequest{Status: v1alpha1.RemediationRequestStatus{Phase: v1alpha1.PhaseRejected, Conditions: []metav1.Condition{{
		Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionFalse, Reason: "Rule", Message: long, LastTransitionTime: metav1.NewTime(time.Now())}}}}
	lifecycle.SetReadiness(rr)
	boundStatus(&rr.Status)
	ready := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionReady)
	require.NotNil(t, ready)
	assert.LessOrEqual(t, len(ready.Message), maxConditionMessage)
	assert.True(t, strings.HasPrefix(ready.Message, "Rejected: é"))
	assert.True(t, utf8.ValidString(ready.Message), "cut inside a character")
	assert.Regexp(t, `é… \(\d+ bytes cut\)$`, ready.Message)
}
