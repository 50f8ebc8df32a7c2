// Package kustomized owns what Argo CD applies from a remediation repository's
// policies/ directory: the one ConfigMap its kustomization.yaml generates, which the
// chart mounts as the controller's --policies-dir.
//
// Argo CD builds a kustomization with `kustomize build`; plan and the controller load
// every non-test .cue file of the directory. The two agree only if the kustomization
// lists exactly those files, unchanged. Check builds the kustomization with the same
// library and default options as `kustomize build` (files only from inside the
// directory, no plugins) and refuses any difference, so that the digest plan prints in a
// pull request is the digest of the policies Argo CD puts in the cluster.
package kustomized

import (
	"bytes"
	"fmt"
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

// ConfigMap is the ConfigMap a policies kustomization generates.
type ConfigMap struct {
	// Namespace is empty when the kustomization sets none: Argo CD then uses the
	// Application's destination namespace.
	Namespace string
	Name      string
	// Files are the data keys, sorted: the policy files.
	Files []string
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

// Check builds the kustomization in dir and checks that it generates one ConfigMap
// holding exactly dir's non-test .cue files. It returns nil, nil when dir has no
// kustomization.
func Check(fsys filesys.FileSystem, dir string) (*ConfigMap, error) {
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
	if len(r.GetBinaryDataMap()) > 0 {
		return nil, fmt.Errorf("%s generates binaryData; policies are UTF-8 .cue files", name)
	}
	data := r.GetDataMap()
	want, err := policyFiles(fsys, dir)
	if err != nil {
		return nil, err
	}
	var problems []string
	for key, content := range data {
		file, ok := want[key]
		switch {
		case strings.HasSuffix(key, "_test.cue"):
			problems = append(problems, fmt.Sprintf("%s is a test case file, which the controller ignores: leave it out", key))
		case !ok:
			problems = append(problems, fmt.Sprintf("%s is not a policy file of %s (the controller loads only its *.cue files, by name)", key, dir))
		case !bytes.Equal(file, []byte(content)):
			problems = append(problems, fmt.Sprintf("%s differs from %s/%s, which plan evaluates", key, dir, key))
		}
	}
	for key := range want {
		if _, ok := data[key]; !ok {
			problems = append(problems, fmt.Sprintf("%s/%s is missing: plan evaluates it, so list it under files", dir, key))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return nil, fmt.Errorf("the ConfigMap %s generates is not the policies plan evaluates: %s", name, strings.Join(problems, "; "))
	}
	for key := range data {
		cm.Files = append(cm.Files, key)
	}
	slices.Sort(cm.Files)
	return cm, nil
}

// onlyAGenerator refuses a kustomization that does more than generate one ConfigMap:
// resources, patches, helm charts or plugins would put other objects in the cluster,
// fetch from the network or run programs, none of which a policies directory needs.
func onlyAGenerator(k types.Kustomization) error {
	if len(k.ConfigMapGenerator) != 1 {
		return fmt.Errorf("it must have exactly one configMapGenerator, the policies ConfigMap; it has %d", len(k.ConfigMapGenerator))
	}
	if len(k.ConfigMapGenerator[0].EnvSources) > 0 || len(k.ConfigMapGenerator[0].LiteralSources) > 0 {
		return fmt.Errorf("the configMapGenerator must take its data from files only (the policy files), not envs or literals")
	}
	rest := k
	rest.TypeMeta, rest.MetaData = types.TypeMeta{}, nil
	rest.Namespace, rest.ConfigMapGenerator, rest.GeneratorOptions = "", nil, nil
	rest.Labels, rest.CommonAnnotations = nil, nil
	if !reflect.DeepEqual(rest, types.Kustomization{}) {
		return fmt.Errorf("it may hold only namespace, labels, commonAnnotations, generatorOptions and the configMapGenerator; " +
			"resources, patches, name prefixes, helm charts and plugins have no place in a policies directory")
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
