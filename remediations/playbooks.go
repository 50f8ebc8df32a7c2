package remediations

import (
	_ "embed"
	"fmt"
	"maps"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
)

//go:embed playbooks.yaml
var playbooksYAML []byte

// Playbook is one playbook: its steps, in order, and whether it disturbs workloads
// that may still run (cordon, eviction, node-plugin restart), which counts against
// the cluster-wide cap (playbooks.yaml).
type Playbook struct {
	Steps      []string `json:"steps"`
	Disruptive bool     `json:"disruptive"`
}

// Playbooks maps a playbook name to its playbook.
type Playbooks map[string]Playbook

// DefaultPlaybooks parses the embedded playbooks and checks every step exists.
func DefaultPlaybooks() (Playbooks, error) {
	var p Playbooks
	if err := yaml.UnmarshalStrict(playbooksYAML, &p); err != nil {
		return nil, fmt.Errorf("parsing playbooks.yaml: %w", err)
	}
	for name, pb := range p {
		if len(pb.Steps) == 0 {
			return nil, fmt.Errorf("playbook %s has no steps", name)
		}
		for _, s := range pb.Steps {
			if _, ok := library[s]; !ok {
				return nil, fmt.Errorf("playbook %s names unknown step %q", name, s)
			}
		}
	}
	return p, nil
}

// Plan returns the journal entries, all Pending, for a playbook.
func (p Playbooks) Plan(playbook string) ([]v1alpha1.StepStatus, error) {
	pb, ok := p[playbook]
	if !ok {
		return nil, fmt.Errorf("unknown playbook %q (known: %v)", playbook, slices.Sorted(maps.Keys(p)))
	}
	plan := make([]v1alpha1.StepStatus, 0, len(pb.Steps))
	for _, s := range pb.Steps {
		plan = append(plan, v1alpha1.StepStatus{Name: s, State: v1alpha1.StepPending})
	}
	return plan, nil
}

// Disruptive reports whether the named playbook counts against the cluster-wide cap.
// An unknown playbook counts: what is not known to be harmless is capped.
func (p Playbooks) Disruptive(playbook string) bool {
	pb, ok := p[playbook]
	return !ok || pb.Disruptive
}
