// Package remediations owns acting: playbooks as data (playbooks.yaml), the step
// library they name (cordon, graceful pod eviction, waits, Lease deletion with
// preconditions, uncordon), and the runner that advances a request's playbook one
// journaled step per reconcile so that a restart resumes without repeating a
// destructive call.
package remediations

import (
	_ "embed"
	"fmt"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
)

//go:embed playbooks.yaml
var playbooksYAML []byte

// Playbooks maps a playbook name to its step names.
type Playbooks map[string][]string

// DefaultPlaybooks parses the embedded playbooks and checks every step exists.
func DefaultPlaybooks() (Playbooks, error) {
	var p Playbooks
	if err := yaml.UnmarshalStrict(playbooksYAML, &p); err != nil {
		return nil, fmt.Errorf("parsing playbooks.yaml: %w", err)
	}
	for name, steps := range p {
		if len(steps) == 0 {
			return nil, fmt.Errorf("playbook %s has no steps", name)
		}
		for _, s := range steps {
			if _, ok := library[s]; !ok {
				return nil, fmt.Errorf("playbook %s names unknown step %q", name, s)
			}
		}
	}
	return p, nil
}

// Plan returns the journal entries, all Pending, for a playbook.
func (p Playbooks) Plan(playbook string) ([]v1alpha1.StepStatus, error) {
	steps, ok := p[playbook]
	if !ok {
		names := make([]string, 0, len(p))
		for n := range p {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("unknown playbook %q (known: %v)", playbook, names)
	}
	plan := make([]v1alpha1.StepStatus, 0, len(steps))
	for _, s := range steps {
		plan = append(plan, v1alpha1.StepStatus{Name: s, State: v1alpha1.StepPending})
	}
	return plan, nil
}
