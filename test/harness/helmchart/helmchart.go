package helmchart

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Dir returns the chart's directory, charts/remediator, found from this file's
// location (test/harness/helmchart) so that tests in any package can use it.
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("helmchart: cannot locate source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "charts", "remediator")
}

// Load loads the chart from the repository, honouring its .helmignore as
// `helm install ./charts/remediator` does.
func Load() (*chart.Chart, error) {
	c, err := loader.Load(Dir())
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", Dir(), err)
	}
	return c, nil
}

// Render renders the chart for a release with the given values (merged over
// values.yaml, as `--values` would be) and returns every object: the CRDs of crds/
// first, then the templates' objects in Helm's install order (namespaces,
// ServiceAccounts, ConfigMaps, RBAC, Services, Deployments, then kinds Helm does not
// know such as ServiceMonitor), ties broken by kind, namespace and name. NOTES.txt
// is rendered too (so that it must not fail) but not returned.
func Render(release, namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	c, err := Load()
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{
		Name: release, Namespace: namespace, Revision: 1, IsInstall: true,
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("preparing values: %w", err)
	}
	rendered, err := engine.Engine{Strict: true}.Render(c, vals)
	if err != nil {
		return nil, fmt.Errorf("rendering chart: %w", err)
	}

	var crds []*unstructured.Unstructured
	for _, f := range c.CRDObjects() {
		objs, err := decode(f.Filename, string(f.File.Data))
		if err != nil {
			return nil, err
		}
		crds = append(crds, objs...)
	}
	sortObjects(crds)

	var objs []*unstructured.Unstructured
	for name, content := range rendered {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		o, err := decode(name, content)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o...)
	}
	sortObjects(objs)
	return append(crds, objs...), nil
}

// decode splits a rendered file into its YAML documents and decodes each
// non-empty one.
func decode(name, content string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	docs := releaseutil.SplitManifests(content)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	// SplitManifests keys are "manifest-N"; keep the file's order for error messages.
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	for _, k := range keys {
		doc := strings.TrimSpace(docs[k])
		if doc == "" {
			continue
		}
		data, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", name, k, err)
		}
		if string(data) == "null" {
			continue // only comments
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("%s (%s): %w\n%s", name, k, err, doc)
		}
		out = append(out, u)
	}
	return out, nil
}

// sortObjects orders objects as Helm installs them, deterministically.
func sortObjects(objs []*unstructured.Unstructured) {
	rank := func(kind string) int {
		if i := slices.Index(releaseutil.InstallOrder, kind); i >= 0 {
			return i
		}
		return len(releaseutil.InstallOrder)
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return cmp.Or(
			cmp.Compare(rank(a.GetKind()), rank(b.GetKind())),
			cmp.Compare(a.GetKind(), b.GetKind()),
			cmp.Compare(a.GetNamespace(), b.GetNamespace()),
			cmp.Compare(a.GetName(), b.GetName()),
		)
	})
}

// Lint runs Helm's chart linter on the chart with its default values, as
// `helm lint --strict charts/remediator` does: every message of severity warning or
// error fails, and the error lists them all.
func Lint() error {
	return LintValues(nil)
}

// LintValues is Lint with values merged over values.yaml.
func LintValues(values map[string]any) error {
	linter := lint.All(Dir(), values, "remediator", true)
	var errs []error
	for _, m := range linter.Messages {
		if m.Severity >= support.WarningSev {
			errs = append(errs, m)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("helm lint --strict %s: %w", Dir(), errors.Join(errs...))
	}
	return nil
}
