package gitsync

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// admitRequest is a valid request manifest with meta added under metadata.
func admitRequest(meta string) []byte {
	return []byte("apiVersion: remediator.io/v1alpha1\nkind: RemediationRequest\nmetadata:\n  name: release-a\n" + meta +
		"spec:\n  remediation: release-luks-lease\n  target:\n    persistentVolume: pvc-1\n  reason: Lease held by a dead node for 40 minutes\n")
}

// TestAdmitRefusesWhatGitMustNotSet: a revision whose request sets a field or
// annotation that would decide how or when the request is applied or deleted is
// refused as a whole, and the error names the file and the field.
func TestAdmitRefusesWhatGitMustNotSet(t *testing.T) {
	cases := []struct {
		name string
		meta string
		want []string // nil: admitted
	}{
		{name: "plain", meta: ""},
		{name: "labels and a harmless annotation", meta: "  labels: {team: storage}\n  annotations: {ticket: INC-4711, argocd.argoproj.io/sync-wave: \"1\"}\n"},
		{name: "empty finalizers", meta: "  finalizers: []\n"},
		{name: "null ownerReferences", meta: "  ownerReferences: null\n"},
		{name: "harmless sync options", meta: "  annotations: {argocd.argoproj.io/sync-options: \"ServerSideApply=true,Validate=false\"}\n"},
		{name: "finalizer", meta: "  finalizers: [example.com/keep]\n",
			want: []string{"requests/a.yaml (document 1): metadata.finalizers is not allowed", "Terminating"}},
		{name: "the controller's own finalizer", meta: "  finalizers: [remediator.io/restore]\n",
			want: []string{"requests/a.yaml (document 1): metadata.finalizers is not allowed"}},
		{name: "owner reference", meta: "  ownerReferences:\n  - {apiVersion: v1, kind: ConfigMap, name: owner, uid: 6f1c1d1e-0000-4000-8000-000000000001}\n",
			want: []string{"requests/a.yaml (document 1): metadata.ownerReferences is not allowed", "garbage collector"}},
		{name: "finalizer and owner reference", meta: "  finalizers: [a.example.com/x]\n  ownerReferences: [{apiVersion: v1, kind: Node, name: n, uid: u}]\n",
			want: []string{"2 problem(s)", "metadata.finalizers", "metadata.ownerReferences"}},
		{name: "argo cd hook", meta: "  annotations: {argocd.argoproj.io/hook: PreSync}\n",
			want: []string{"annotation argocd.argoproj.io/hook is not allowed", "outside the normal sync"}},
		{name: "helm hook", meta: "  annotations: {helm.sh/hook: pre-install}\n",
			want: []string{"annotation helm.sh/hook is not allowed"}},
		{name: "replace", meta: "  annotations: {argocd.argoproj.io/sync-options: \"Validate=false, Replace=true\"}\n",
			want: []string{`annotation argocd.argoproj.io/sync-options "Validate=false, Replace=true" is not allowed`, "Replace=true would have Argo CD replace the live request wholesale"}},
		{name: "force", meta: "  annotations: {argocd.argoproj.io/sync-options: Force=true}\n",
			want: []string{"Force=true would have Argo CD delete and recreate the request"}},
	}
	s := &Syncer{opts: Options{Namespaces: []string{"remediator"}}, source: "test-source"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := []manifestFile{
				{Path: "requests/a.yaml", Data: admitRequest(tc.meta), Commit: "c1"},
				{Path: "requests/b.yaml", Data: []byte(strings.Replace(string(admitRequest("")), "release-a", "release-b", 1)), Commit: "c1"},
			}
			targets, err := s.admit(files, "c1")
			if tc.want == nil {
				require.NoError(t, err)
				assert.Len(t, targets, 2)
				return
			}
			require.Error(t, err, "admitted: %v", targets)
			assert.Nil(t, targets, "a refused revision returned objects to apply")
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w)
			}
			assert.NotContains(t, err.Error(), "requests/b.yaml", "the good file is blamed")
		})
	}
}
