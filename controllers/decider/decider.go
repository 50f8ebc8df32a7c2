// Package decider is the one way a request is decided: gather its facts, list the
// other requests that weigh on it, and take the state machine's decision
// (lifecycle.Decide). The reconciler and `remediator plan` both decide through it,
// so that the pull-request check cannot drift from what the controller does; they
// differ only in what they inject: where the facts and the others are read from, and
// how a slot of the cap is known.
package decider

import (
	"context"
	"fmt"
	"time"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
)

// Decider decides requests.
type Decider struct {
	Policy        *policies.Engine
	Playbooks     remediations.Playbooks
	Floor         remediations.Floor
	MaxConcurrent int
	// Gather reads the facts of a request.
	Gather func(context.Context, *v1alpha1.RemediationRequest) (*v1alpha1.Facts, error)
	// Others lists the other requests that can hold back a request with these facts:
	// those running on its Lease or node, those holding a slot and those in line.
	Others func(context.Context, *v1alpha1.Facts) ([]v1alpha1.RemediationRequest, error)
	// Admitted reports whether the request holds a slot of the cap: the grant in its
	// status for the controller, admission's choice on the others for plan.
	Admitted func(rr *v1alpha1.RemediationRequest, others []v1alpha1.RemediationRequest) bool
}

// Decision is a decision and the facts it was made on.
type Decision struct {
	lifecycle.Transition
	Facts *v1alpha1.Facts
}

// Decide decides rr at now, with the pause's message paused (empty: not paused).
// An error means nothing was decided: the facts or the others could not be read.
func (d *Decider) Decide(ctx context.Context, rr *v1alpha1.RemediationRequest, now time.Time, paused string) (Decision, error) {
	f, err := d.Gather(ctx, rr)
	if err != nil {
		return Decision{}, fmt.Errorf("gathering facts: %w", err)
	}
	others, err := d.Others(ctx, f)
	if err != nil {
		return Decision{}, err
	}
	in := lifecycle.DecisionInput{Request: rr, Facts: f, Others: others, MaxConcurrent: d.MaxConcurrent, Floor: d.Floor, Now: now,
		Paused: paused, Admitted: d.Admitted(rr, others)}
	return Decision{Transition: lifecycle.Decide(d.Policy, d.Playbooks, in), Facts: f}, nil
}
