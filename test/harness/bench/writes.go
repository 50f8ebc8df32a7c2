package main

// What one status write costs the API server, by what the request carries. Each
// release writes its request's status twice, and the API server decodes, merges,
// validates and tracks the managed fields of the whole object at every write, not
// only of what changed: so the storm's gap to its floor follows the size of the
// status the controller records, which this scenario measures part by part.

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/stage"
)

// Writes is the cost of a status write with each status a request may carry.
type Writes struct {
	// Writes is how many requests carry each status; each gets writesPerRound
	// writes measured per round.
	Writes int `json:"writes"`
	// Rounds is how many times each status's writes were measured; Costs are the
	// medians.
	Rounds int         `json:"rounds"`
	Costs  []WriteCost `json:"costs"`
}

// WriteCost is a status write of a request carrying Status.
type WriteCost struct {
	Status string `json:"status"`
	// Bytes is the request's size as the API server returns it, JSON, managed fields
	// included.
	Bytes int `json:"bytes"`
	// APIServerMs and EtcdMs are their CPU time per write, the cluster's own work
	// over the same time included.
	APIServerMs float64 `json:"apiServerMs"`
	EtcdMs      float64 `json:"etcdMs"`
}

// keepReleased keeps, for the writes scenario, the first request of names a
// controller released in this run (a storm's, or the memory scenario's), as it left
// it.
func (b *bench) keepReleased(ctx context.Context, names []string) {
	if b.released != nil {
		return
	}
	for _, nm := range names {
		rr := &v1alpha1.RemediationRequest{}
		if err := b.k8s.Get(ctx, client.ObjectKey{Namespace: requestNamespace, Name: nm}, rr); err == nil && rr.Status.Phase == v1alpha1.PhaseSucceeded {
			b.released = rr
			return
		}
	}
}

// writes measures what a status write of a request costs the API server and etcd,
// with no controller running, by the status the request carries (writeCosts): as a
// controller left a request it released in this run, the same without its facts,
// conditions or decision, and as the floor writes it. It measures nothing, and says
// why, when no request was released (the storm and memory scenarios did not run) or
// the control plane's CPU cannot be read: a missing measure does not fail the run.
func (b *bench) writes(ctx context.Context, n int) (*Writes, error) {
	rel := b.released
	if rel == nil {
		logf("Writes: not measured: no request was released in this run to take the status of (run the storm scenario too)")
		return nil, nil
	}
	if b.controlPlane() == nil {
		logf("Writes: not measured: the control plane's CPU cannot be read")
		return nil, nil
	}
	logf("Writes: %d requests for each status, %d status writes each, in %d rounds", n, writesPerRound, writeRounds)
	// Copies of the status, each less one part (the parts are pointers and slices:
	// setting the copy's leaves the request's as it is).
	noFacts, noConditions, noDecision := rel.Status, rel.Status, rel.Status
	noFacts.Facts, noConditions.Conditions, noDecision.Decision = nil, nil, nil
	names := []string{"as the controller leaves a release", "the same without its facts",
		"the same without its conditions", "the same without its decision", "as the floor writes it"}
	var patches [][]byte
	for _, s := range []v1alpha1.RemediationRequestStatus{rel.Status, noFacts, noConditions, noDecision} {
		patch, err := json.Marshal(map[string]any{"status": s})
		if err != nil {
			return nil, err
		}
		patches = append(patches, patch)
	}
	floor, err := floorStatus(rel, "00000000-0000-0000-0000-000000000000", "1")
	if err != nil {
		return nil, err
	}
	costs, err := b.writeCosts(ctx, n, rel.Spec, append(patches, floor))
	if err != nil {
		return nil, err
	}
	for k := range costs {
		costs[k].Status = names[k]
	}
	return &Writes{Writes: n, Rounds: writeRounds, Costs: costs}, nil
}

// writeRounds is how many times each status's writes are measured; the median is
// kept. Rounds go through every status in turn, so that the cluster's own work
// drifting over the scenario does not favour one.
const writeRounds = 3

// writesPerRound is how many status writes each request gets in a round, one after
// the other: enough that the writes, not the cluster's own work over the same time
// (a thousand simulated kubelets' heartbeats in the full preset), are most of what
// is measured.
const writesPerRound = 5

// writeCosts creates n requests with spec for each patch, gives each request its
// patch's status, then measures writesPerRound more status writes of each request
// (stage.Parallel's workers at a time), writeRounds times, and deletes them. What
// the control plane does on its own meanwhile is counted in.
func (b *bench) writeCosts(ctx context.Context, n int, spec v1alpha1.RemediationRequestSpec, patches [][]byte) ([]WriteCost, error) {
	rrs := make([][]*v1alpha1.RemediationRequest, len(patches))
	defer func() {
		for _, set := range rrs {
			_ = stage.Parallel(len(set), func(i int) error {
				if set[i] != nil {
					return client.IgnoreNotFound(b.fast.Delete(ctx, set[i]))
				}
				return nil
			})
		}
	}()
	for k, patch := range patches {
		rrs[k] = make([]*v1alpha1.RemediationRequest, n)
		if err := stage.Parallel(n, func(i int) error {
			rr := &v1alpha1.RemediationRequest{}
			rr.Name, rr.Namespace, rr.Labels, rr.Spec = b.name(fmt.Sprintf("wr%d", k), i), requestNamespace, map[string]string{stage.Label: b.s.RunID}, spec
			if err := b.fast.Create(ctx, rr); err != nil {
				return err
			}
			rrs[k][i] = rr
			return b.fast.Status().Patch(ctx, rr, client.RawPatch(types.MergePatchType, patch))
		}); err != nil {
			return nil, err
		}
	}
	samples := make([][]ControlPlaneCPU, len(patches))
	for round := range writeRounds {
		for k := range patches {
			start := b.controlPlane()
			if err := stage.Parallel(n, func(i int) error {
				for w := range writesPerRound {
					step := fmt.Appendf(nil, `{"status":{"currentStep":"measured %d.%d"}}`, round, w)
					if err := b.fast.Status().Patch(ctx, rrs[k][i], client.RawPatch(types.MergePatchType, step)); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return nil, err
			}
			if d := b.cpuSince(start); d != nil {
				samples[k] = append(samples[k], *d.perRequest(n * writesPerRound))
			}
		}
	}
	costs := make([]WriteCost, len(patches))
	for k := range patches {
		full, err := json.Marshal(rrs[k][0])
		if err != nil {
			return nil, err
		}
		costs[k].Bytes = len(full)
		costs[k].APIServerMs = median(samples[k], func(c ControlPlaneCPU) float64 { return c.APIServer })
		costs[k].EtcdMs = median(samples[k], func(c ControlPlaneCPU) float64 { return c.Etcd })
	}
	return costs, nil
}

// median is the median of f over samples (percentile's 50th); 0 for none.
func median(samples []ControlPlaneCPU, f func(ControlPlaneCPU) float64) float64 {
	v := make([]float64, len(samples))
	for i, s := range samples {
		v[i] = f(s)
	}
	return percentile(v, 50)
}
