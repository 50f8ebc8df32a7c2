package plan

// Saved facts (--facts) for offline planning, and matching them to requests.

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	kjson "sigs.k8s.io/json"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

// readSavedFacts reads every --facts file. Any problem fails the whole plan: facts
// that cannot be read would silently leave requests without evidence.
func readSavedFacts(files []string, stdin *onceReader) ([]savedFacts, error) {
	var out []savedFacts
	for _, name := range files {
		data, err := readSource(name, stdin, "--facts "+name)
		if err != nil {
			return nil, err
		}
		docs, err := yamlDocuments(data)
		if err != nil {
			return nil, fmt.Errorf("--facts %s: reading YAML: %w", name, err)
		}
		n := len(out)
		for i, doc := range docs {
			if doc.err != nil {
				return nil, fmt.Errorf("--facts %s (document %d): malformed YAML: %w", name, i+1, doc.err)
			}
			if doc.json == nil {
				continue
			}
			sf, err := decodeSavedFacts(fmt.Sprintf("%s (document %d)", name, i+1), doc.json)
			if err != nil {
				return nil, fmt.Errorf("--facts %s: %w", name, err)
			}
			out = append(out, sf...)
		}
		if len(out) == n {
			return nil, fmt.Errorf("--facts %s holds no facts", name)
		}
	}
	return out, nil
}

// decodeSavedFacts accepts a bare Facts document, a RemediationRequest with
// status.facts, or a List of them (kubectl get rr -o yaml).
func decodeSavedFacts(where string, data []byte) ([]savedFacts, error) {
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("%s: not a facts document: %w", where, err)
	}
	kind, _ := obj["kind"].(string)
	switch kind {
	case "":
		f, err := strictFacts(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		return []savedFacts{{from: where, facts: f}}, nil
	case "RemediationRequest":
		md, _ := obj["metadata"].(map[string]any)
		ns, _ := md["namespace"].(string)
		name, _ := md["name"].(string)
		status, _ := obj["status"].(map[string]any)
		if status["facts"] == nil {
			return nil, fmt.Errorf("%s: RemediationRequest %s/%s has no status.facts (has the controller decided it yet?)", where, ns, name)
		}
		// Only status.facts is decoded strictly: the rest of a request read back from
		// a newer cluster may hold fields this version does not know.
		raw, err := json.Marshal(status["facts"])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		f, err := strictFacts(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: status.facts of RemediationRequest %s/%s: %w", where, ns, name, err)
		}
		return []savedFacts{{from: fmt.Sprintf("%s, RemediationRequest %s/%s", where, ns, name), request: ns + "/" + name, facts: f}}, nil
	case "List", "RemediationRequestList":
		items, _ := obj["items"].([]any)
		var out []savedFacts
		for i, item := range items {
			raw, err := json.Marshal(item)
			if err != nil {
				return nil, fmt.Errorf("%s: item %d: %w", where, i, err)
			}
			sf, err := decodeSavedFacts(fmt.Sprintf("%s item %d", where, i), raw)
			if err != nil {
				return nil, err
			}
			out = append(out, sf...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: %s is neither a Facts document nor a RemediationRequest with status.facts", where, describeObject(obj))
}

func strictFacts(data []byte) (*v1alpha1.Facts, error) {
	f := &v1alpha1.Facts{}
	strict, err := kjson.UnmarshalStrict(data, f)
	if err != nil {
		return nil, fmt.Errorf("decoding facts: %w", err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("decoding facts: %w", errors.Join(strict...))
	}
	return f, nil
}

// matchSavedFacts picks the facts for a request: those copied from the request of the
// same name, else those whose target.ref is the request's target, else the only facts
// given when they do not name a target.
func matchSavedFacts(saved []savedFacts, rr *v1alpha1.RemediationRequest) (savedFacts, error) {
	ref := facts.TargetRef(rr.Spec.Target)
	var byRef []savedFacts
	for _, s := range saved {
		if s.facts.Target.Ref != ref {
			continue
		}
		if s.request != "" && s.request == rr.Namespace+"/"+rr.Name {
			return s, nil
		}
		byRef = append(byRef, s)
	}
	switch {
	case len(byRef) == 1:
		return byRef[0], nil
	case len(byRef) > 1:
		var from []string
		for _, s := range byRef {
			from = append(from, s.from)
		}
		return savedFacts{}, fmt.Errorf("several saved facts are for %s (%s); pass only one", ref, strings.Join(from, "; "))
	case len(saved) == 1 && saved[0].facts.Target.Ref == "":
		return saved[0], nil
	}
	var covered []string
	for _, s := range saved {
		covered = append(covered, fmt.Sprintf("%s (%s)", cmp.Or(s.facts.Target.Ref, "-"), s.from))
	}
	return savedFacts{}, fmt.Errorf("no saved facts for %s: the --facts given are for %s", ref, strings.Join(covered, ", "))
}
