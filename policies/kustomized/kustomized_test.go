package kustomized_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/remediator/remediator/policies/kustomized"
)

// template is the kustomization the remediation repository template ships for
// policies/ (copied there when overriding).
const template = "../../examples/remediation-repo/argocd/policies-kustomization.yaml"

// overridden is a policies/ directory as policies/README.md sets it up: the shipped
// policies with their test cases, and the template's kustomization.
func overridden(t *testing.T) filesys.FileSystem {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	files, err := filepath.Glob("../*.cue")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range append(files, template) {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		name := filepath.Base(f)
		if f == template {
			name = "kustomization.yaml"
		}
		require.NoError(t, fsys.WriteFile("/repo/policies/"+name, data))
	}
	return fsys
}

func TestTheTemplateGeneratesThePolicies(t *testing.T) {
	cm, err := kustomized.Check(overridden(t), "/repo/policies")
	require.NoError(t, err)
	require.NotNil(t, cm)
	assert.Equal(t, kustomized.ConfigMap{Namespace: "remediator-system", Name: "remediator-policies",
		Files: []string{"release_luks_lease.cue", "reregister_csi_driver.cue", "schema.cue"}}, *cm)
	assert.Equal(t, "remediator-system/remediator-policies", cm.String())
}

func TestNoKustomization(t *testing.T) {
	fsys := overridden(t)
	require.NoError(t, fsys.RemoveAll("/repo/policies/kustomization.yaml"))
	cm, err := kustomized.Check(fsys, "/repo/policies")
	require.NoError(t, err)
	assert.Nil(t, cm, "without a kustomization nothing is generated, and nothing is checked")
}

// TestRefusesWhatWouldDiffer: every way the ConfigMap Argo CD applies could differ
// from the policies plan evaluates, or carry more than the policies, is refused.
func TestRefusesWhatWouldDiffer(t *testing.T) {
	const head = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: remediator-system\n"
	const noHash = "generatorOptions:\n  disableNameSuffixHash: true\n"
	for _, tc := range []struct {
		name          string
		kustomization string
		extra         map[string]string
		want          string
	}{
		{
			name:          "a policy file left out",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [schema.cue, release_luks_lease.cue]\n",
			want:          "/repo/policies/reregister_csi_driver.cue is missing: plan evaluates it",
		},
		{
			name:  "a new policy file not listed",
			extra: map[string]string{"extra.cue": "package policies\n"},
			want:  "/repo/policies/extra.cue is missing",
		},
		{
			name:          "a test case file listed",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [schema.cue, release_luks_lease.cue, reregister_csi_driver.cue, release_luks_lease_test.cue]\n",
			want:          "release_luks_lease_test.cue is a test case file",
		},
		{
			name:          "a file under another key",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [schema.cue, release_luks_lease.cue, reregister_csi_driver.cue=other/reregister_csi_driver.cue]\n",
			extra:         map[string]string{"other/reregister_csi_driver.cue": "package policies\n// not the reviewed one\n"},
			want:          "reregister_csi_driver.cue differs from /repo/policies/reregister_csi_driver.cue",
		},
		{
			name:          "the hash suffix",
			kustomization: head + "configMapGenerator:\n- name: remediator-policies\n  files: [schema.cue, release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "set generatorOptions.disableNameSuffixHash: true",
		},
		{
			name:          "a name prefix",
			kustomization: head + noHash + "namePrefix: x-\nconfigMapGenerator:\n- name: remediator-policies\n  files: [schema.cue, release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "it may hold only namespace, labels",
		},
		{
			name:          "another object",
			kustomization: head + noHash + "resources: [role.yaml]\nconfigMapGenerator:\n- name: remediator-policies\n  files: [schema.cue, release_luks_lease.cue, reregister_csi_driver.cue]\n",
			extra:         map[string]string{"role.yaml": "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\n"},
			want:          "resources, patches",
		},
		{
			name:          "a remote base",
			kustomization: head + noHash + "resources: [https://github.com/example/base]\nconfigMapGenerator:\n- name: remediator-policies\n  files: [schema.cue, release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "resources, patches",
		},
		{
			name:          "two generators",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [schema.cue, release_luks_lease.cue, reregister_csi_driver.cue]\n- name: other\n  literals: [a=b]\n",
			want:          "exactly one configMapGenerator",
		},
		{
			name:          "literals",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [schema.cue, release_luks_lease.cue, reregister_csi_driver.cue]\n  literals: [extra.cue=package policies]\n",
			want:          "from files only",
		},
		{
			name:          "a secret generator",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [schema.cue, release_luks_lease.cue, reregister_csi_driver.cue]\nsecretGenerator:\n- name: s\n  literals: [a=b]\n",
			want:          "it may hold only",
		},
		{
			name:          "an unknown field",
			kustomization: head + noHash + "configMapGenerators: []\n",
			want:          "unknown field",
		},
		{
			name:          "a file outside the directory",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [schema.cue, release_luks_lease.cue, reregister_csi_driver.cue=../elsewhere.cue]\n",
			extra:         map[string]string{"../elsewhere.cue": "package policies\n"},
			want:          "kustomize build of /repo/policies",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := overridden(t)
			if tc.kustomization != "" {
				require.NoError(t, fsys.WriteFile("/repo/policies/kustomization.yaml", []byte(tc.kustomization)))
			}
			for name, data := range tc.extra {
				require.NoError(t, fsys.MkdirAll(filepath.Dir(filepath.Join("/repo/policies", name))))
				require.NoError(t, fsys.WriteFile(filepath.Join("/repo/policies", name), []byte(data)))
			}
			cm, err := kustomized.Check(fsys, "/repo/policies")
			require.Error(t, err, "generated %v", cm)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
