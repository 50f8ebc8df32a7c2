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
		// The schema is the controller's own: a policies/ directory holds the rules.
		if filepath.Base(f) == "schema.cue" {
			continue
		}
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
	cm, err := kustomized.Check(overridden(t), "/repo/policies", "remediator-system/remediator-policies")
	require.NoError(t, err)
	require.NotNil(t, cm)
	assert.Equal(t, kustomized.ConfigMap{Namespace: "remediator-system", Name: "remediator-policies",
		Files: []string{"release_luks_lease.cue", "reregister_csi_driver.cue"}}, *cm)
	assert.Equal(t, "remediator-system/remediator-policies", cm.String())
}

func TestNoKustomization(t *testing.T) {
	fsys := overridden(t)
	require.NoError(t, fsys.RemoveAll("/repo/policies/kustomization.yaml"))
	cm, err := kustomized.Check(fsys, "/repo/policies", "remediator-policies")
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
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue]\n",
			want:          "/repo/policies/reregister_csi_driver.cue is missing: plan evaluates it",
		},
		{
			name:  "a new policy file not listed",
			extra: map[string]string{"extra.cue": "package policies\n"},
			want:  "/repo/policies/extra.cue is missing",
		},
		{
			name:          "a test case file listed",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue, release_luks_lease_test.cue]\n",
			want:          "release_luks_lease_test.cue is a test case file",
		},
		{
			name:          "a file under another key",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue=reregister_csi_driver.cue, reregister_csi_driver.cue=release_luks_lease.cue]\n",
			want:          `files entry "release_luks_lease.cue=reregister_csi_driver.cue"`,
		},
		{
			name:          "the hash suffix",
			kustomization: head + "configMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "set generatorOptions.disableNameSuffixHash: true",
		},
		{
			name:          "a name prefix",
			kustomization: head + noHash + "namePrefix: x-\nconfigMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "name prefixes",
		},
		{
			name:          "another object",
			kustomization: head + noHash + "resources: [role.yaml]\nconfigMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "resources, patches",
		},
		{
			name:          "a remote base",
			kustomization: head + noHash + "resources: [https://github.com/example/base]\nconfigMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "resources, patches",
		},
		{
			name:          "two generators",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\n- name: other\n  literals: [a=b]\n",
			want:          "exactly one configMapGenerator",
		},
		{
			name:          "literals",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\n  literals: [extra.cue=package policies]\n",
			want:          "from files only",
		},
		{
			name:          "a secret generator",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\nsecretGenerator:\n- name: s\n  literals: [a=b]\n",
			want:          "it may hold only",
		},
		{
			name:          "an unknown field",
			kustomization: head + noHash + "configMapGenerators: []\n",
			want:          "unknown field",
		},
		{
			name:          "a file outside the directory",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue=../elsewhere.cue]\n",
			extra:         map[string]string{"../elsewhere.cue": "package policies\n"},
			want:          `files entry "reregister_csi_driver.cue=../elsewhere.cue"`,
		},
		{
			name:          "a policy fetched over HTTP",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue=http://127.0.0.1:1/release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          `files entry "release_luks_lease.cue=http://127.0.0.1:1/release_luks_lease.cue"`,
		},
		{
			name:          "a URL without a key",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [https://example.com/release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          `files entry "https://example.com/release_luks_lease.cue"`,
		},
		{
			name:          "Argo CD's hook annotation",
			kustomization: head + noHash + "commonAnnotations:\n  argocd.argoproj.io/hook: Skip\nconfigMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "it may hold only namespace, generatorOptions and the configMapGenerator",
		},
		{
			name:          "labels",
			kustomization: head + noHash + "labels:\n- pairs: {a: b}\nconfigMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "it may hold only namespace",
		},
		{
			name:          "an immutable ConfigMap",
			kustomization: head + "generatorOptions:\n  disableNameSuffixHash: true\n  immutable: true\nconfigMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "generatorOptions may only set disableNameSuffixHash: true",
		},
		{
			name:          "annotations in the generator's options",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-policies\n  options:\n    annotations: {argocd.argoproj.io/sync-options: Prune=false}\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "generatorOptions may only set disableNameSuffixHash: true",
		},
		{
			name:          "another ConfigMap's name",
			kustomization: head + noHash + "configMapGenerator:\n- name: remediator-dashboard\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "generates ConfigMap remediator-system/remediator-dashboard, not remediator-system/remediator-policies",
		},
		{
			name:          "another namespace",
			kustomization: "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: kube-system\n" + noHash + "configMapGenerator:\n- name: remediator-policies\n  files: [release_luks_lease.cue, reregister_csi_driver.cue]\n",
			want:          "generates ConfigMap kube-system/remediator-policies",
		},
		{
			name:  "a manifest beside the policies",
			extra: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: remediator-policies}\n"},
			want:  "cm.yaml (Argo CD could apply it)",
		},
		{
			name:  "Argo CD's source override",
			extra: map[string]string{".argocd-source-remediation-policies.yaml": "kustomize:\n  namePrefix: x-\n"},
			want:  ".argocd-source-remediation-policies.yaml (hidden",
		},
		{
			name:  "a hidden policy file",
			extra: map[string]string{".evil.cue": "package policies\n"},
			want:  ".evil.cue (hidden",
		},
		{
			name:  "a subdirectory",
			extra: map[string]string{"sub/x.cue": "package policies\n"},
			want:  "sub/ (a directory)",
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
			cm, err := kustomized.Check(fsys, "/repo/policies", "remediator-system/remediator-policies")
			require.Error(t, err, "generated %v", cm)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
