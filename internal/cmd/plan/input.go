package plan

// Reading plan's input: -f files, their YAML documents, and each document's
// decoding into a request, refused where admission would refuse it, naming the field
// (the check itself is validate.go's, from the CRD), and where Git must not carry
// it although admission accepts it (gitsync.Refusals, as remediator sync refuses it).

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/internal/gitsync"
)

// onceReader lets several flags name "-" while stdin is read only once.
type onceReader struct {
	r    io.Reader
	used bool
}

func (o *onceReader) open(what string) (io.Reader, error) {
	if o.used {
		return nil, fmt.Errorf("%s: stdin (-) can be read only once", what)
	}
	o.used = true
	return o.r, nil
}

func readSource(name string, stdin *onceReader, what string) ([]byte, error) {
	if name == "-" {
		r, err := stdin.open(what)
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return nil, fmt.Errorf("reading %s from stdin: %w", what, err)
		}
		return data, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	return data, nil
}

// yamlDoc is one YAML document of a file, converted to JSON; json is nil for a
// document that holds only comments.
type yamlDoc struct {
	json []byte
	err  error
}

// yamlDocuments splits a file into its YAML documents, keeping empty ones so that
// positions match the file, with gitsync.Documents: remediator sync reads Git with
// the same reader, so that what plan refuses (a duplicate key, a stream of JSON
// objects) the sync never applies.
func yamlDocuments(data []byte) ([]yamlDoc, error) {
	docs, err := gitsync.Documents(data)
	out := make([]yamlDoc, 0, len(docs))
	for _, d := range docs {
		out = append(out, yamlDoc{json: d.JSON, err: d.Err})
	}
	return out, err
}

// manifestExts are the files a directory given to -f contributes, as kubectl's -f.
var manifestExts = []string{".json", ".yaml", ".yml"}

type sourceError struct {
	source string
	err    error
}

// expandDirs replaces each directory among names by its manifest files, sorted (not
// recursively, like kubectl apply -f without -R). A directory without one is an
// error: a PR that emptied it is told so rather than planned as nothing.
func expandDirs(names []string) ([]string, []sourceError) {
	var out []string
	var errs []sourceError
	for _, name := range names {
		fi, err := os.Stat(name)
		if name == "-" || err != nil || !fi.IsDir() {
			out = append(out, name) // readSource reports a missing file
			continue
		}
		entries, err := os.ReadDir(name)
		if err != nil {
			errs = append(errs, sourceError{name, fmt.Errorf("reading directory -f %s: %w", name, err)})
			continue
		}
		n := len(out)
		for _, e := range entries {
			if !e.IsDir() && slices.Contains(manifestExts, filepath.Ext(e.Name())) {
				out = append(out, filepath.Join(name, e.Name()))
			}
		}
		if len(out) == n {
			errs = append(errs, sourceError{name, fmt.Errorf("directory -f %s holds no %s file", name, strings.Join(manifestExts, ", "))})
		}
	}
	return out, errs
}

// readPlanRequests reads every -f file or directory. A file or document that cannot be used
// becomes an input with errors, so that the other requests are still planned.
func readPlanRequests(files []string, stdin *onceReader) []planInput {
	v, err := embeddedRequestValidator()
	if err != nil {
		return []planInput{{source: "the chart's CRD", errs: []string{err.Error()}}}
	}
	var out []planInput
	files, errs := expandDirs(files)
	for _, e := range errs {
		out = append(out, planInput{source: e.source, errs: []string{e.err.Error()}})
	}
	for _, name := range files {
		data, err := readSource(name, stdin, "-f "+name)
		if err != nil {
			out = append(out, planInput{source: name, errs: []string{err.Error()}})
			continue
		}
		docs, err := yamlDocuments(data)
		if err != nil {
			out = append(out, planInput{source: name, errs: []string{fmt.Sprintf("%s: reading YAML: %v", name, err)}})
			continue
		}
		found := false
		for i, doc := range docs {
			switch {
			case doc.err != nil:
				found = true
				out = append(out, planInput{source: name, doc: i + 1, errs: []string{fmt.Sprintf("%s (document %d): malformed YAML: %v", name, i+1, doc.err)}})
			case doc.json != nil:
				found = true
				out = append(out, decodePlanRequest(v, name, i+1, doc.json))
			}
		}
		if !found {
			out = append(out, planInput{source: name, errs: []string{fmt.Sprintf("%s holds no YAML document", name)}})
		}
	}
	return out
}

// decodePlanRequest checks one document the way the API server would at admission
// (see requestValidator): the type, unknown fields, the metadata, and the CRD's
// schema and CEL rules. An accepted request is decoded from what the server would
// store, with the CRD's defaults applied; a refused one carries what could be read
// of it, for the report.
func decodePlanRequest(v *requestValidator, source string, doc int, data []byte) planInput {
	in := planInput{source: source, doc: doc}
	where := fmt.Sprintf("%s (document %d)", source, doc)
	// As the API server's strict decoder reads an object, and as remediator sync
	// reads it.
	obj, strict, err := gitsync.DecodeObject(data)
	if err != nil {
		in.errs = []string{fmt.Sprintf("%s: not a Kubernetes object: %v", where, err)}
		return in
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if apiVersion != v.gvk.GroupVersion().String() || kind != v.gvk.Kind {
		in.errs = []string{fmt.Sprintf("%s: %s is not a %s %s; plan (and remediator sync) accept nothing else",
			where, describeObject(obj), v.gvk.GroupVersion(), v.gvk.Kind)}
		return in
	}

	var msgs []string
	for _, e := range strict {
		msgs = append(msgs, e.Error()) // duplicate field ...
	}
	// The CEL rules have no context to be cancelled with here; the CRD's cost budget
	// bounds them, as it does on the API server.
	a, err := v.admit(context.Background(), obj)
	if err != nil {
		msgs = append(msgs, err.Error())
	}
	for _, p := range a.unknownFields {
		msgs = append(msgs, fmt.Sprintf("unknown field %q", p))
	}
	if err == nil {
		// plan's own rule, stricter than a create: a request in Git needs a stable
		// name, to be synced, pruned and traced back to its pull request, so
		// generateName alone does not do (remediator sync and kubectl apply refuse it
		// too). It stands in for the server's "name or generateName is required".
		if a.meta.Name == "" {
			a.errs = slices.DeleteFunc(a.errs, func(e *field.Error) bool {
				return e.Field == "metadata.name" && e.Type == field.ErrorTypeRequired
			})
			a.errs = append(field.ErrorList{field.Required(field.NewPath("metadata", "name"), "a request needs a name")}, a.errs...)
		}
		for _, e := range a.errs {
			msgs = append(msgs, e.Error())
		}
	}

	rr := &v1alpha1.RemediationRequest{}
	if cerr := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, rr); cerr != nil && len(msgs) == 0 {
		// Valid to the CRD, but not to the controller's types.
		msgs = append(msgs, fmt.Sprintf("decoding the request: %v", cerr))
	}
	if a.meta != nil {
		// Whatever else failed to decode, the metadata did, as coerced.
		rr.ObjectMeta = *a.meta
	}
	in.rr = rr
	name := rr.Name
	if rr.Namespace != "" {
		name = rr.Namespace + "/" + name
	}
	if len(msgs) > 0 {
		in.errs = append([]string{fmt.Sprintf("%s: RemediationRequest %s is invalid (the API server would refuse it):", where, cmp.Or(name, "-"))}, msgs...)
	}
	// What admission accepts but Git must not carry: Argo CD would apply it as it is
	// (a hook, a recreation, a finalizer or owner), and remediator sync refuses it.
	if r := gitsync.Refusals(obj); len(r) > 0 {
		in.refused = append([]string{fmt.Sprintf("%s: RemediationRequest %s must not come from Git as it is (remediator sync refuses it; Argo CD would apply it):",
			where, cmp.Or(name, "-"))}, r...)
	}
	return in
}

func describeObject(obj map[string]any) string {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	s := apiVersion + " " + kind
	if apiVersion == "" || kind == "" {
		s = fmt.Sprintf("an object with apiVersion %q and kind %q", apiVersion, kind)
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		if n, ok := md["name"].(string); ok && n != "" {
			s += fmt.Sprintf(" named %q", n)
		}
	}
	return s
}
