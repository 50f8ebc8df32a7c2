package requests

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/remediator/remediator/api/v1alpha1"
)

func TestBound(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		limit int
		want  string
	}{
		{"within the limit", "abc", 3, "abc"},
		{"empty", "", 0, ""},
		// The marker is sized for the most that could be cut, "… (100 bytes cut)",
		// 19 bytes: 21 are kept, and the count shown has fewer digits.
		{"cut, with the count", strings.Repeat("a", 100), 40, strings.Repeat("a", 21) + "… (79 bytes cut)"},
		// 21 bytes would end inside the eleventh "é" (two bytes each).
		{"cut at a character boundary", strings.Repeat("é", 50), 40, strings.Repeat("é", 10) + "… (80 bytes cut)"},
		// Not a limit the controller uses: the marker alone is longer.
		{"limit smaller than the marker", strings.Repeat("a", 100), 5, "… (100 bytes cut)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Bound(tc.in, tc.limit)
			assert.Equal(t, tc.want, got)
			assert.True(t, utf8.ValidString(got))
			if len(tc.in) > tc.limit && tc.limit >= len(cutMarker(len(tc.in))) {
				assert.LessOrEqual(t, len(got), tc.limit)
			}
			assert.Equal(t, got, Bound(got, max(tc.limit, len(got))), "bounding again changes nothing")
		})
	}
}

// TestBoundStatus: every string of the status is bounded, wherever it is (a
// condition, the decision's reasons, the journal, the facts), and only those that
// are too long; a status bounded twice is the same.
func TestBoundStatus(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	holder := huge
	st := v1alpha1.RemediationRequestStatus{
		Phase:      v1alpha1.PhaseRejected,
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionFalse, Reason: "Rule", Message: huge}},
		Decision:   &v1alpha1.Decision{Rule: "rule", Message: huge, Reasons: []string{"short", huge}},
		Steps:      []v1alpha1.StepStatus{{Name: v1alpha1.StepDeleteLease, Message: huge}},
		Facts: &v1alpha1.Facts{
			Target: v1alpha1.TargetFacts{Ref: "PersistentVolume pv", Message: huge},
			Lease:  &v1alpha1.LeaseFacts{Name: "pv", HolderIdentity: holder, LastRetainedMessage: huge},
		},
	}
	BoundStatus(&st)
	for what, s := range map[string]string{
		"condition": st.Conditions[0].Message, "decision": st.Decision.Message, "reason": st.Decision.Reasons[1],
		"step": st.Steps[0].Message, "target": st.Facts.Target.Message, "holder": st.Facts.Lease.HolderIdentity,
		"retained": st.Facts.Lease.LastRetainedMessage,
	} {
		assert.LessOrEqual(t, len(s), MaxStatusString, what)
		assert.Less(t, MaxStatusString, MaxConditionMessage, "well under a condition's limit")
		assert.Regexp(t, `x… \(\d+ bytes cut\)$`, s, what)
	}
	assert.Equal(t, "short", st.Decision.Reasons[0])
	assert.Equal(t, "pv", st.Facts.Lease.Name)
	assert.Equal(t, v1alpha1.PhaseRejected, st.Phase)
	again := *st.DeepCopy()
	BoundStatus(&again)
	assert.Equal(t, st, again)
}

func TestBoundedRecorder(t *testing.T) {
	fake := record.NewFakeRecorder(3)
	rec := BoundEvents(fake)
	assert.Equal(t, rec, BoundEvents(rec), "bounded once")
	huge := strings.Repeat("é", 4096)
	rec.Event(&v1alpha1.RemediationRequest{}, "Warning", "R", huge)
	rec.Eventf(&v1alpha1.RemediationRequest{}, "Warning", "R", "reason: %s", huge)
	rec.AnnotatedEventf(&v1alpha1.RemediationRequest{}, nil, "Warning", "R", "%d%%", 100)
	for range 2 {
		got := strings.TrimPrefix(<-fake.Events, "Warning R ")
		assert.LessOrEqual(t, len(eventAggregatedPrefix+got), 1024, "an events.k8s.io note, even folded")
		assert.True(t, utf8.ValidString(got))
		assert.Regexp(t, `é… \(\d+ bytes cut\)$`, got)
	}
	assert.Equal(t, "Warning R 100%", <-fake.Events, "a short message is left as it is, formatted once")
}
