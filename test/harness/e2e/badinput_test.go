//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/test/badinput"
)

// TestTargetNamesTheAPIRefusesAreRefusedAtApply: on the local cluster, with the CRD
// the chart installed, a request whose target is spelled as no PV, Node, pod, claim
// or namespace can be ("a/b", capitals, a colon) is refused when it is applied,
// naming the field, instead of being stored and then never decided.
func TestTargetNamesTheAPIRefusesAreRefusedAtApply(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "e2e-bad-target")
	tried := 0
	for i, tc := range badinput.Admission() {
		if !strings.HasPrefix(tc.Field, "spec.target.") || tc.Strict {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			err := k8s.Create(ctx, tc.Malformed(ns, fmt.Sprintf("bad-target-%d", i)), client.FieldValidation("Strict"))
			require.Error(t, err, "the cluster stored %s", tc.Name)
			assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
			for _, w := range append([]string{tc.Field}, tc.Want...) {
				assert.Contains(t, err.Error(), w, "the refusal names what is wrong")
			}
		})
		tried++
	}
	require.GreaterOrEqual(t, tried, 7, "the table's target-name cases")
}
