package admissionwatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestCheckerCatches: the checker flags a cap exceeded and a grant past an older
// request in line, and lets through what admission may do: pass over a request a
// holder blocks, and grant one while an older request joined the line only after
// admission read it.
func TestCheckerCatches(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	obj := func(name string, age int, phase v1alpha1.Phase, reason, msg, node string) *unstructured.Unstructured {
		rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "r", Name: name, UID: types.UID(name), Generation: 1,
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Duration(age) * time.Minute))}}
		rr.Status.Phase, rr.Status.ObservedGeneration = phase, 1
		rr.Status.Decision = &v1alpha1.Decision{Playbook: "healthy-move-workload"}
		rr.Status.Facts = &v1alpha1.Facts{Node: &v1alpha1.NodeFacts{Name: node}}
		rr.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: reason, Message: msg}}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rr)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: m}
	}
	line := func(name string, age int, node string) *unstructured.Unstructured {
		return obj(name, age, v1alpha1.PhaseWaiting, v1alpha1.ReasonWaitingForSlot, "", node)
	}
	grant := func(name string, age int, node string, listed string) *unstructured.Unstructured {
		return obj(name, age, v1alpha1.PhaseWaiting, v1alpha1.ReasonAdmitted, "Granted. (The line as read at resourceVersion "+listed+".)", node)
	}
	running := func(name string, age int, node string) *unstructured.Unstructured {
		return obj(name, age, v1alpha1.PhaseRunning, v1alpha1.ReasonPlaybookRunning, "", node)
	}
	type ev struct {
		u  *unstructured.Unstructured
		rv int64
	}
	cases := []struct {
		name   string
		cap    int
		events []ev
		want   string // a violation containing this; "" for none
	}{
		{"oldest first within the cap", 1, []ev{{line("old", 9, "n1"), 10}, {line("young", 1, "n2"), 11}, {grant("old", 9, "n1", "11"), 12}, {running("old", 9, "n1"), 13}}, ""},
		{"a younger request granted past an older one", 2, []ev{{line("old", 9, "n1"), 10}, {line("young", 1, "n2"), 11}, {grant("young", 1, "n2", "11"), 12}},
			"r/young was granted a slot while r/old, older and in line since resourceVersion 10"},
		{"the older one joined after the line was read", 2, []ev{{line("young", 1, "n2"), 10}, {line("old", 9, "n1"), 12}, {grant("young", 1, "n2", "11"), 13}}, ""},
		{"the older one is blocked by a holder on its node", 2, []ev{{running("holder", 20, "n1"), 9}, {line("old", 9, "n1"), 10}, {line("young", 1, "n2"), 11}, {grant("young", 1, "n2", "11"), 12}}, ""},
		{"cap exceeded", 1, []ev{{running("a", 20, "n1"), 9}, {line("b", 9, "n2"), 10}, {grant("b", 9, "n2", "10"), 12}}, "2 slots held, cap 1"},
		{"a grant that names no line", 2, []ev{{line("a", 9, "n2"), 10}, {obj("a", 9, v1alpha1.PhaseWaiting, v1alpha1.ReasonAdmitted, "Granted.", "n2"), 12}}, "without naming the line"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Checker{cap: tc.cap, disruptive: func(string) bool { return true }, reqs: map[types.UID]*state{}}
			for _, e := range tc.events {
				c.apply(watch.Modified, e.u, e.rv)
			}
			if tc.want == "" {
				assert.Empty(t, c.report.Violations)
				return
			}
			if assert.Len(t, c.report.Violations, 1) {
				assert.Contains(t, c.report.Violations[0], tc.want)
			}
		})
	}
}
