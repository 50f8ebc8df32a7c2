package main

// Reading plan's input: -f files, their YAML documents, and validation that
// refuses what admission would refuse, naming the field.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"time"
	"unicode/utf8"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers"
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
// positions match the file.
func yamlDocuments(data []byte) ([]yamlDoc, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []yamlDoc
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, err
		}
		// YAMLToJSONStrict refuses duplicate keys, which a lenient decoder would
		// silently resolve to the last one.
		j, err := yaml.YAMLToJSONStrict(doc)
		if t := bytes.TrimSpace(j); err == nil && (len(t) == 0 || string(t) == "null") {
			j = nil
		}
		docs = append(docs, yamlDoc{json: j, err: err})
	}
}

// readPlanRequests reads every -f file. A file or document that cannot be used
// becomes an input with errors, so that the other requests are still planned.
func readPlanRequests(files []string, stdin *onceReader) []planInput {
	var out []planInput
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
				out = append(out, decodePlanRequest(name, i+1, doc.json))
			}
		}
		if !found {
			out = append(out, planInput{source: name, errs: []string{fmt.Sprintf("%s holds no YAML document", name)}})
		}
	}
	return out
}

// decodePlanRequest checks one document the way the API server would at admission:
// the type, unknown fields, and the schema's and CEL rules' constraints.
func decodePlanRequest(source string, doc int, data []byte) planInput {
	in := planInput{source: source, doc: doc}
	where := fmt.Sprintf("%s (document %d)", source, doc)
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		in.errs = []string{fmt.Sprintf("%s: not a Kubernetes object: %v", where, err)}
		return in
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if apiVersion != v1alpha1.GroupVersion.String() || kind != "RemediationRequest" {
		in.errs = []string{fmt.Sprintf("%s: %s is not a %s RemediationRequest; plan (and remediator sync) accept nothing else",
			where, describeObject(obj), v1alpha1.GroupVersion)}
		return in
	}

	rr := &v1alpha1.RemediationRequest{}
	var msgs []string
	for _, e := range validatePlanRequest(obj) {
		msgs = append(msgs, e.Error())
	}
	strict, err := kjson.UnmarshalStrict(data, rr)
	for _, e := range strict {
		msgs = append(msgs, e.Error()) // unknown field "spec.targt", duplicate field ...
	}
	if err != nil && len(msgs) == 0 {
		// A type mismatch the field checks do not cover.
		msgs = append(msgs, err.Error())
	}
	if err == nil {
		for _, e := range validatePlanMetadata(&rr.ObjectMeta) {
			msgs = append(msgs, e.Error())
		}
	}
	in.rr = rr
	if len(msgs) > 0 {
		name := rr.Name
		if rr.Namespace != "" {
			name = rr.Namespace + "/" + name
		}
		in.errs = append([]string{fmt.Sprintf("%s: RemediationRequest %s is invalid (the API server would refuse it):", where, orDash(name))}, msgs...)
		return in
	}
	// The CRD's default.
	if rr.Spec.Mode == "" {
		rr.Spec.Mode = v1alpha1.ModeApply
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

// The CRD's patterns (api/v1alpha1 markers).
var (
	schedulePattern  = regexp.MustCompile(`^((CRON_TZ|TZ)=[A-Za-z0-9_+/-]+ +)?(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every +[0-9.]+(ns|us|µs|ms|s|m|h)([0-9.]+(ns|us|µs|ms|s|m|h))*|[A-Za-z0-9*/,?-]+( +[A-Za-z0-9*/,?-]+){4})$`)
	durationPattern  = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`)
	namespacePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	driverPattern    = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?$`)
)

// validatePlanRequest mirrors the CRD's OpenAPI schema and CEL rules on the raw
// object: presence matters there (an empty persistentVolume is set, and refused),
// which a typed decode cannot tell. Messages follow the API server's, naming the field.
func validatePlanRequest(obj map[string]any) field.ErrorList {
	var errs field.ErrorList
	md, _ := obj["metadata"].(map[string]any)
	mp := field.NewPath("metadata")
	if name, ok := stringField(md, "name", mp, &errs); !ok || name == "" {
		if ok || md["name"] == nil {
			errs = append(errs, field.Required(mp.Child("name"), "a request needs a name"))
		}
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			errs = append(errs, field.Invalid(mp.Child("name"), name, msg))
		}
	}
	if ns, ok := stringField(md, "namespace", mp, &errs); ok && ns != "" {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(mp.Child("namespace"), ns, msg))
		}
	}

	sp := field.NewPath("spec")
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		return append(errs, field.Required(sp, ""))
	}
	remediation, ok := stringField(spec, "remediation", sp, &errs)
	switch {
	case !ok && spec["remediation"] == nil:
		errs = append(errs, field.Required(sp.Child("remediation"), ""))
	case ok && remediation != string(v1alpha1.RemediationReleaseLUKSLease) && remediation != string(v1alpha1.RemediationReregisterCSIDriver):
		errs = append(errs, field.NotSupported(sp.Child("remediation"), remediation,
			[]string{string(v1alpha1.RemediationReleaseLUKSLease), string(v1alpha1.RemediationReregisterCSIDriver)}))
	}

	tp := sp.Child("target")
	switch target, ok := spec["target"].(map[string]any); {
	case spec["target"] == nil:
		errs = append(errs, field.Required(tp, ""))
	case !ok:
		errs = append(errs, field.Invalid(tp, spec["target"], "must be of type object"))
	default:
		set := 0
		for _, k := range []string{"persistentVolume", "node"} {
			if target[k] == nil {
				continue
			}
			set++
			if s, ok := stringField(target, k, tp, &errs); ok {
				lengthBetween(tp.Child(k), s, 1, 253, &errs)
			}
		}
		for _, k := range []string{"persistentVolumeClaim", "pod"} {
			if target[k] == nil {
				continue
			}
			set++
			ref, ok := target[k].(map[string]any)
			if !ok {
				errs = append(errs, field.Invalid(tp.Child(k), target[k], "must be of type object"))
				continue
			}
			for _, f := range []struct {
				name string
				max  int
			}{{"namespace", 63}, {"name", 253}} {
				if ref[f.name] == nil {
					errs = append(errs, field.Required(tp.Child(k, f.name), ""))
				} else if s, ok := stringField(ref, f.name, tp.Child(k), &errs); ok {
					lengthBetween(tp.Child(k, f.name), s, 1, f.max, &errs)
				}
			}
		}
		if set != 1 {
			errs = append(errs, field.Invalid(tp, "object", "exactly one of spec.target.persistentVolume, spec.target.persistentVolumeClaim, spec.target.pod or spec.target.node must be set"))
		}
		hasNode := target["node"] != nil
		if remediation == string(v1alpha1.RemediationReregisterCSIDriver) && !hasNode {
			errs = append(errs, field.Invalid(tp, "object", "remediation reregister-csi-driver needs spec.target.node"))
		}
		if remediation == string(v1alpha1.RemediationReleaseLUKSLease) && hasNode {
			errs = append(errs, field.Invalid(tp, "object", "remediation release-luks-lease needs spec.target.persistentVolume, spec.target.persistentVolumeClaim or spec.target.pod, not spec.target.node"))
		}
	}

	if spec["reason"] == nil {
		errs = append(errs, field.Required(sp.Child("reason"), "say why, for the audit trail"))
	} else if reason, ok := stringField(spec, "reason", sp, &errs); ok {
		lengthBetween(sp.Child("reason"), reason, 10, 4096, &errs)
	}
	if mode, ok := stringField(spec, "mode", sp, &errs); ok && mode != string(v1alpha1.ModeApply) && mode != string(v1alpha1.ModeDryRun) {
		errs = append(errs, field.NotSupported(sp.Child("mode"), mode, []string{string(v1alpha1.ModeApply), string(v1alpha1.ModeDryRun)}))
	}

	if spec["fencing"] != nil {
		fp := sp.Child("fencing")
		fencing, ok := spec["fencing"].(map[string]any)
		if !ok {
			errs = append(errs, field.Invalid(fp, spec["fencing"], "must be of type object"))
		} else {
			confirmed, isBool := fencing["confirmed"].(bool)
			switch {
			case fencing["confirmed"] == nil:
				errs = append(errs, field.Required(fp.Child("confirmed"), ""))
			case !isBool:
				errs = append(errs, field.Invalid(fp.Child("confirmed"), fencing["confirmed"], "must be of type boolean"))
			}
			methods := []string{string(v1alpha1.FencingNodeShutdown), string(v1alpha1.FencingTridentNodeContainerStopped), string(v1alpha1.FencingLogsVerified)}
			if m, ok := stringField(fencing, "method", fp, &errs); ok && !slices.Contains(methods, m) {
				errs = append(errs, field.NotSupported(fp.Child("method"), m, methods))
			}
			if confirmed && fencing["method"] == nil {
				errs = append(errs, field.Invalid(fp, "object", "spec.fencing.method is required when spec.fencing.confirmed is true"))
			}
			if n, ok := stringField(fencing, "node", fp, &errs); ok {
				lengthBetween(fp.Child("node"), n, 1, 253, &errs)
			}
			if confirmed && fencing["node"] == nil {
				errs = append(errs, field.Invalid(fp, "object", "spec.fencing.node is required when spec.fencing.confirmed is true: name the holder node that was fenced, as the Lease's holderIdentity spells it"))
			}
		}
	}

	if spec["maintenanceWindow"] != nil {
		wp := sp.Child("maintenanceWindow")
		mw, ok := spec["maintenanceWindow"].(map[string]any)
		if !ok {
			errs = append(errs, field.Invalid(wp, spec["maintenanceWindow"], "must be of type object"))
		} else {
			if mw["schedule"] == nil {
				errs = append(errs, field.Required(wp.Child("schedule"), ""))
			} else if s, ok := stringField(mw, "schedule", wp, &errs); ok {
				lengthBetween(wp.Child("schedule"), s, 1, 256, &errs)
				if !schedulePattern.MatchString(s) {
					errs = append(errs, field.Invalid(wp.Child("schedule"), s, "should match '"+schedulePattern.String()+"'"))
				}
			}
			if mw["duration"] == nil {
				errs = append(errs, field.Required(wp.Child("duration"), ""))
			} else if d, ok := stringField(mw, "duration", wp, &errs); ok {
				lengthBetween(wp.Child("duration"), d, 0, 64, &errs)
				if !durationPattern.MatchString(d) {
					errs = append(errs, field.Invalid(wp.Child("duration"), d, "should be a Go duration such as 2h or 90m (should match '"+durationPattern.String()+"')"))
				} else if v, err := time.ParseDuration(d); err != nil || v <= 0 || v > controllers.MaxWindowDuration {
					errs = append(errs, field.Invalid(wp.Child("duration"), d, "spec.maintenanceWindow.duration must be a positive duration of at most 168h (7 days)"))
				}
			}
		}
	}

	for _, f := range []struct {
		name    string
		pattern *regexp.Regexp
	}{{"tridentNamespace", namespacePattern}, {"driverName", driverPattern}} {
		if s, ok := stringField(spec, f.name, sp, &errs); ok {
			lengthBetween(sp.Child(f.name), s, 0, 63, &errs)
			if !f.pattern.MatchString(s) {
				errs = append(errs, field.Invalid(sp.Child(f.name), s, "should match '"+f.pattern.String()+"'"))
			}
		}
	}
	return errs
}

// validatePlanMetadata checks the rest of metadata as the API server does for every
// object (apimachinery's ValidateObjectMetaAccessor, whose name and namespace checks
// validatePlanRequest makes itself): labels, annotations, owner references,
// finalizers, generateName and generation. A request in Git carries labels and
// annotations for the audit trail, and one that admission refuses must fail the PR.
func validatePlanMetadata(md *metav1.ObjectMeta) field.ErrorList {
	mp := field.NewPath("metadata")
	var errs field.ErrorList
	if md.GenerateName != "" {
		for _, msg := range apivalidation.NameIsDNSSubdomain(md.GenerateName, true) {
			errs = append(errs, field.Invalid(mp.Child("generateName"), md.GenerateName, msg))
		}
	}
	errs = append(errs, apivalidation.ValidateNonnegativeField(md.Generation, mp.Child("generation"))...)
	errs = append(errs, metav1validation.ValidateLabels(md.Labels, mp.Child("labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(md.Annotations, mp.Child("annotations"))...)
	errs = append(errs, apivalidation.ValidateOwnerReferences(md.OwnerReferences, mp.Child("ownerReferences"))...)
	errs = append(errs, apivalidation.ValidateFinalizers(md.Finalizers, mp.Child("finalizers"))...)
	return errs
}

// stringField returns m[key] when it is a string. A present value of another type
// is recorded as an error; ok is false for it and for an absent key.
func stringField(m map[string]any, key string, parent *field.Path, errs *field.ErrorList) (string, bool) {
	v, present := m[key]
	if !present || v == nil {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		*errs = append(*errs, field.Invalid(parent.Child(key), v, "must be of type string"))
	}
	return s, ok
}

// lengthBetween checks a string's length in characters, as OpenAPI's minLength and
// maxLength do.
func lengthBetween(p *field.Path, s string, minLen, maxLen int, errs *field.ErrorList) {
	switch n := utf8.RuneCountInString(s); {
	case n < minLen:
		*errs = append(*errs, field.Invalid(p, s, fmt.Sprintf("should be at least %d chars long", minLen)))
	case n > maxLen:
		*errs = append(*errs, field.TooLong(p, "", maxLen))
	}
}
