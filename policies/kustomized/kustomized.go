// Package kustomized owns what Argo CD applies from a remediation repository's
// policies/ directory: the one ConfigMap its kustomization.yaml generates, mounted as
// the controller's --policies-dir. Check builds it as `kustomize build` does and
// refuses any difference from the non-test .cue files plan and the controller load,
// so that the digest plan prints in a pull request is the one Argo CD deploys.
package kustomized

import (
	"bytes"
	"fmt"
	"maps"
	"path"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// ConfigMap is the ConfigMap a policies kustomization generates. Namespace is empty
// when the kustomization sets none (Argo CD's destination); Files are the data keys,
// sorted.
type ConfigMap struct {
	Namespace string
	Name      string
	Files     []string
}

// String is namespace/name, or name alone.
func (c ConfigMap) String() string {
	if c.Namespace == "" {
		return c.Name
	}
	return c.Namespace + "/" + c.Name
}

// Find returns the name of the kustomization file in dir, or "" when dir has none.
func Find(fsys filesys.FileSystem, dir string) string {
	for _, n := range konfig.RecognizedKustomizationFileNames() {
		if p := path.Join(dir, n); fsys.Exists(p) && !fsys.IsDir(p) {
			return p
		}
	}
	return ""
}

// Check builds the kustomization in dir and checks that it generates one ConfigMap,
// named want (NAME, or NAMESPACE/NAME), holding exactly dir's non-test .cue files. It
// refuses files in dir that Argo CD could apply (onlyPolicyFiles) even without a
// kustomization, and returns nil, nil then.
func Check(fsys filesys.FileSystem, dir, want string) (*ConfigMap, error) {
	if err := onlyPolicyFiles(fsys, dir); err != nil {
		return nil, err
	}
	file := Find(fsys, dir)
	if file == "" {
		return nil, nil
	}
	raw, err := fsys.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	name := path.Base(file)
	var k types.Kustomization
	if err := yaml.UnmarshalStrict(raw, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := onlyAGenerator(k); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build of %s: %w", dir, err)
	}
	if resources.Size() != 1 {
		return nil, fmt.Errorf("%s generates %d objects; it must generate the policies ConfigMap only", name, resources.Size())
	}
	r := resources.Resources()[0]
	cm := &ConfigMap{Namespace: r.GetNamespace(), Name: r.GetName()}
	if declared := k.ConfigMapGenerator[0].Name; cm.Name != declared {
		return nil, fmt.Errorf("%s generates ConfigMap %q, not %q: the chart mounts the policies by a fixed name, so set generatorOptions.disableNameSuffixHash: true", name, cm.Name, declared)
	}
	wantNS, wantName, pinned := strings.Cut(want, "/")
	if !pinned {
		wantNS, wantName = "", want
	}
	if cm.Name != wantName || (pinned && cm.Namespace != wantNS) {
		return nil, fmt.Errorf("%s generates ConfigMap %s, not %s, the one the controller mounts (the chart's policiesConfigMap): "+
			"another name would leave the controller's policies behind, or overwrite another ConfigMap", name, cm, want)
	}
	if len(r.GetBinaryDataMap()) > 0 {
		return nil, fmt.Errorf("%s generates binaryData; policies are UTF-8 .cue files", name)
	}
	data := r.GetDataMap()
	files, err := policyFiles(fsys, dir)
	if err != nil {
		return nil, err
	}
	var problems []string
	for key, content := range data {
		file, ok := files[key]
		switch {
		case strings.HasSuffix(key, "_test.cue"):
			problems = append(problems, fmt.Sprintf("%s is a test case file, which the controller ignores: leave it out", key))
		case !ok:
			problems = append(problems, fmt.Sprintf("%s is not a policy file of %s (the controller loads only its *.cue files, by name)", key, dir))
		case !bytes.Equal(file, []byte(content)):
			problems = append(problems, fmt.Sprintf("%s differs from %s/%s, which plan evaluates", key, dir, key))
		}
	}
	for key := range files {
		if _, ok := data[key]; !ok {
			problems = append(problems, fmt.Sprintf("%s/%s is missing: plan evaluates it, so list it under files", dir, key))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return nil, fmt.Errorf("the ConfigMap %s generates is not the policies plan evaluates: %s", name, strings.Join(problems, "; "))
	}
	cm.Files = slices.Sorted(maps.Keys(data))
	return cm, nil
}

// onlyAGenerator refuses a kustomization that does more than generate one ConfigMap
// from the policy files: other objects, network fetches or programs; Argo CD's own
// labels or annotations (hook: Skip, then prune deletes the live ConfigMap); an
// immutable ConfigMap that refuses every later change.
func onlyAGenerator(k types.Kustomization) error {
	if len(k.ConfigMapGenerator) != 1 {
		return fmt.Errorf("it must have exactly one configMapGenerator, the policies ConfigMap; it has %d", len(k.ConfigMapGenerator))
	}
	gen := k.ConfigMapGenerator[0]
	if len(gen.EnvSources) > 0 || len(gen.LiteralSources) > 0 {
		return fmt.Errorf("the configMapGenerator must take its data from files only (the policy files), not envs or literals")
	}
	for _, src := range gen.FileSources {
		key, file, renamed := strings.Cut(src, "=")
		if !renamed {
			key, file = src, src
		}
		if key != file || file != path.Base(file) || strings.Contains(file, ":") || !strings.HasSuffix(file, ".cue") {
			return fmt.Errorf("files entry %q: list each policy by its own file name in this directory (such as release_luks_lease.cue), "+
				"without a key, a path or a URL, so that the ConfigMap holds the very files plan evaluates", src)
		}
	}
	noHashOnly := func(o *types.GeneratorOptions) bool {
		return o == nil || reflect.DeepEqual(*o, types.GeneratorOptions{DisableNameSuffixHash: true})
	}
	if !noHashOnly(k.GeneratorOptions) || !noHashOnly(gen.Options) {
		return fmt.Errorf("generatorOptions may only set disableNameSuffixHash: true (no labels, annotations or immutable)")
	}
	rest := k
	rest.TypeMeta = types.TypeMeta{}
	rest.Namespace, rest.ConfigMapGenerator, rest.GeneratorOptions = "", nil, nil
	if !reflect.DeepEqual(rest, types.Kustomization{}) {
		return fmt.Errorf("it may hold only namespace, generatorOptions and the configMapGenerator; " +
			"resources, patches, labels, annotations, name prefixes, helm charts and plugins have no place in a policies directory")
	}
	if gen.Behavior != "" {
		return fmt.Errorf("the configMapGenerator's behavior applies to a base, and a policies kustomization has none: leave it out")
	}
	return nil
}

// onlyPolicyFiles refuses what in dir is neither a policy, Markdown nor a
// kustomization: a manifest Argo CD would apply, a hidden file (.argocd-source*.yaml
// overrides; hidden .cue files are listed differently) or a subdirectory.
func onlyPolicyFiles(fsys filesys.FileSystem, dir string) error {
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing %s: %w", dir, err)
	}
	kustomizations := konfig.RecognizedKustomizationFileNames()
	var refused []string
	for _, e := range entries {
		e = path.Base(e)
		switch {
		case strings.HasPrefix(e, "."):
			refused = append(refused, e+" (hidden: Argo CD reads .argocd-source*.yaml overrides, and a hidden .cue file is listed differently)")
		case fsys.IsDir(path.Join(dir, e)):
			refused = append(refused, e+"/ (a directory)")
		case strings.HasSuffix(e, ".cue"), strings.HasSuffix(e, ".md"), slices.Contains(kustomizations, e):
		default:
			refused = append(refused, e+" (Argo CD could apply it)")
		}
	}
	if len(refused) > 0 {
		slices.Sort(refused)
		return fmt.Errorf("%s may hold only .cue policies, Markdown and kustomization.yaml; refused: %s", dir, strings.Join(refused, "; "))
	}
	return nil
}

// policyFiles reads dir's non-test .cue files, the set plan and the controller load.
func policyFiles(fsys filesys.FileSystem, dir string) (map[string][]byte, error) {
	names, err := fsys.Glob(path.Join(dir, "*.cue"))
	if err != nil {
		return nil, fmt.Errorf("listing the policies of %s: %w", dir, err)
	}
	out := map[string][]byte{}
	for _, n := range names {
		if strings.HasSuffix(n, "_test.cue") || fsys.IsDir(n) {
			continue
		}
		data, err := fsys.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", n, err)
		}
		out[path.Base(n)] = data
	}
	return out, nil
}
