package policies

import (
	"maps"
	"slices"
	"testing"

	"cuelang.org/go/cue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
)

// TestPlaybookEnumMatchesPlaybooks: the schema's #Playbook, the playbooks the
// controller ships (remediations/playbooks.yaml) and the names in api/v1alpha1 are
// one list. A playbook added to one and not the others fails here, not in a request.
func TestPlaybookEnumMatchesPlaybooks(t *testing.T) {
	e, err := Embedded()
	require.NoError(t, err)
	inst, err := e.current().take()
	require.NoError(t, err)
	root := inst.root
	enum := root.LookupPath(cue.ParsePath("#Playbook"))
	require.True(t, enum.Exists(), "schema.cue defines #Playbook")
	op, args := enum.Expr()
	require.Equal(t, cue.OrOp, op, "#Playbook is a disjunction of names")
	var inSchema []string
	for _, a := range args {
		s, err := a.String()
		require.NoError(t, err, "every #Playbook alternative is a concrete name")
		inSchema = append(inSchema, s)
	}
	slices.Sort(inSchema)

	pb, err := remediations.DefaultPlaybooks()
	require.NoError(t, err)
	shipped := slices.Sorted(maps.Keys(pb))
	assert.Equal(t, shipped, inSchema, "#Playbook in schema.cue against remediations/playbooks.yaml")

	api := []string{v1alpha1.PlaybookFencedUnreachable, v1alpha1.PlaybookHealthyMoveWorkload,
		v1alpha1.PlaybookNodeShutdown, v1alpha1.PlaybookRestartNodePlugin}
	slices.Sort(api)
	assert.Equal(t, shipped, api, "the playbook names in api/v1alpha1 against remediations/playbooks.yaml")
}

// TestPlaybookEnumRefusesUnknownPlaybook: a rule that names a playbook outside the
// enum makes the decision fail (fail closed).
func TestPlaybookEnumRefusesUnknownPlaybook(t *testing.T) {
	e, err := Embedded()
	require.NoError(t, err)
	inst, err := e.current().take()
	require.NoError(t, err)
	root := inst.root
	d := root.LookupPath(cue.ParsePath("#Decision")).FillPath(cue.ParsePath("playbook"), "node-shutdwn")
	assert.Error(t, d.Validate(), "an unknown playbook is not a #Playbook")
	d = root.LookupPath(cue.ParsePath("#Decision")).FillPath(cue.ParsePath("playbook"), v1alpha1.PlaybookNodeShutdown)
	assert.NoError(t, d.LookupPath(cue.ParsePath("playbook")).Err())
}
