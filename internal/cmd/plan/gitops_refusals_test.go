package plan

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// gitopsRefusals are requests admission accepts but that Git must not carry: on the
// Argo CD path nothing but plan stands between them and the cluster (remediator sync
// refuses them itself, see gitsync.Refusals). Each names the field and says why.
var gitopsRefusals = []struct {
	name string
	meta map[string]any // added to metadata
	want []string       // nil: planned as usual
}{
	{"argo cd hook", map[string]any{"annotations": map[string]any{"argocd.argoproj.io/hook": "PreSync"}},
		[]string{"annotation argocd.argoproj.io/hook is not allowed", "applied outside the normal sync", "out of review"}},
	{"argo cd hook delete policy", map[string]any{"annotations": map[string]any{"argocd.argoproj.io/hook-delete-policy": "BeforeHookCreation"}},
		[]string{"annotation argocd.argoproj.io/hook-delete-policy is not allowed"}},
	{"helm hook", map[string]any{"annotations": map[string]any{"helm.sh/hook": "pre-upgrade"}},
		[]string{"annotation helm.sh/hook is not allowed", "deleted or replaced by its delete policy"}},
	{"replace", map[string]any{"annotations": map[string]any{"argocd.argoproj.io/sync-options": "Replace=true"}},
		[]string{`annotation argocd.argoproj.io/sync-options "Replace=true" is not allowed`, "Replace=true would have Argo CD replace the live request wholesale"}},
	{"force among other options", map[string]any{"annotations": map[string]any{"argocd.argoproj.io/sync-options": "ServerSideApply=true, Force=true"}},
		[]string{"Force=true would have Argo CD delete and recreate the request"}},
	{"replace and force", map[string]any{"annotations": map[string]any{"argocd.argoproj.io/sync-options": "Force=true,Replace=true"}},
		[]string{"Force=true would have Argo CD delete", "; Replace=true would have Argo CD replace", "remove Force=true and Replace=true"}},
	{"finalizer", map[string]any{"finalizers": []any{"example.com/keep"}},
		[]string{"metadata.finalizers is not allowed", "Terminating"}},
	{"owner reference", map[string]any{"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "6f1c1d1e-0000-4000-8000-000000000001"}}},
		[]string{"metadata.ownerReferences is not allowed", "garbage collector"}},
	// What Argo CD does not treat as a hook or a recreation passes.
	{"harmless sync options", map[string]any{"annotations": map[string]any{"argocd.argoproj.io/sync-options": "ServerSideApply=true,Validate=false"}}, nil},
	{"sync wave and a ticket", map[string]any{"annotations": map[string]any{"argocd.argoproj.io/sync-wave": "1", "ticket": "INC-4711"}}, nil},
}

// TestPlanRefusesWhatGitMustNotCarry: plan fails (exit 1) on a request that Argo CD
// would apply as a hook or delete and recreate, or that sets finalizers or owners,
// and says which field and why, although admission accepts it.
func TestPlanRefusesWhatGitMustNotCarry(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range gitopsRefusals {
		t.Run(tc.name, func(t *testing.T) {
			obj, _ := validRequest(fmt.Sprintf("gitops-%d", i))
			md := obj["metadata"].(map[string]any)
			for k, v := range tc.meta {
				md[k] = v
			}
			file := fmt.Sprintf("gitops-%d.yaml", i)
			out, code, _ := runPlanCommand(t, "", "-f", writeYAML(t, dir, file, obj), "--facts", planTestdata+"facts/shutdown.yaml")
			if tc.want == nil {
				assert.Equal(t, 0, code, "exit code; output:\n%s", out)
				return
			}
			assert.Equal(t, 1, code, "exit code; output:\n%s", out)
			assert.Contains(t, out, file+" (document 1): RemediationRequest remediator/"+fmt.Sprintf("gitops-%d", i)+" must not come from Git as it is")
			assert.NotContains(t, out, "the API server would refuse it", "admission accepts it; the output says otherwise")
			for _, w := range tc.want {
				assert.Contains(t, out, w)
			}
		})
	}
}
