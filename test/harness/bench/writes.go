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
	// Writes is how many requests carry each status; each gets one write measured.
	Writes int         `json:"writes"`
	Costs  []WriteCost `json:"costs"`
}

// WriteCost is a status write of a request carrying Status.
type WriteCost struct {
	Status string `json:"status"`
	// Bytes is the request's size as the API server returns it, JSON, managed fields
	// included.
	Bytes int `json:"bytes"`
	// APIServerMs and EtcdMs are their CPU time per write.
	APIServerMs float64 `json:"apiServerMs"`
	EtcdMs      float64 `json:"etcdMs"`
}

// released keeps the status of a request the storm's controller released, the
// first seen, for the writes scenario.
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

// writes measures, for n requests at a time carrying each status, one merge patch
// of their status (the step's position, as the controller writes it) with no
// controller running: the API server's and etcd's CPU per write. The statuses: as
// the controller left a request it released in the storm, the same without its
// facts, conditions or decision, and as the floor writes it.
func (b *bench) writes(ctx context.Context, n int) (*Writes, error) {
	rel := b.released
	if rel == nil {
		return nil, fmt.Errorf("no request released by a storm to take the status of: run the storm scenario too")
	}
	logf("Writes: one status write of %d requests at a time, by the status they carry", n)
	floor, err := floorStatus(rel, "00000000-0000-0000-0000-000000000000", "1")
	if err != nil {
		return nil, err
	}
	variants := []struct {
		name  string
		patch func() ([]byte, error)
	}{
		{"as the controller leaves a release", func() ([]byte, error) { return statusPatch(rel.Status) }},
		{"the same without its facts", func() ([]byte, error) { s := rel.Status; s.Facts = nil; return statusPatch(s) }},
		{"the same without its conditions", func() ([]byte, error) { s := rel.Status; s.Conditions = nil; return statusPatch(s) }},
		{"the same without its decision", func() ([]byte, error) { s := rel.Status; s.Decision = nil; return statusPatch(s) }},
		{"as the floor writes it", func() ([]byte, error) { return floor, nil }},
	}
	res := &Writes{Writes: n}
	for k, v := range variants {
		patch, err := v.patch()
		if err != nil {
			return nil, err
		}
		cost, err := b.writeCost(ctx, fmt.Sprintf("wr%d", k), n, rel.Spec, patch)
		if err != nil {
			return nil, fmt.Errorf("writes %q: %w", v.name, err)
		}
		cost.Status = v.name
		res.Costs = append(res.Costs, cost)
	}
	return res, nil
}

// statusPatch is a merge patch that sets status s.
func statusPatch(s v1alpha1.RemediationRequestStatus) ([]byte, error) {
	return json.Marshal(map[string]any{"status": s})
}

// writeCost creates n requests with spec, gives each the status of patch, then
// measures one more status write of each, and deletes them.
func (b *bench) writeCost(ctx context.Context, kind string, n int, spec v1alpha1.RemediationRequestSpec, patch []byte) (WriteCost, error) {
	rrs := make([]*v1alpha1.RemediationRequest, n)
	defer func() {
		_ = stage.Parallel(n, func(i int) error {
			if rrs[i] != nil {
				return client.IgnoreNotFound(b.fast.Delete(ctx, rrs[i]))
			}
			return nil
		})
	}()
	if err := stage.Parallel(n, func(i int) error {
		rr := &v1alpha1.RemediationRequest{}
		rr.Name, rr.Namespace, rr.Labels, rr.Spec = b.name(kind, i), requestNamespace, map[string]string{stage.Label: b.s.RunID}, spec
		if err := b.fast.Create(ctx, rr); err != nil {
			return err
		}
		rrs[i] = rr
		return b.fast.Status().Patch(ctx, rr, client.RawPatch(types.MergePatchType, patch))
	}); err != nil {
		return WriteCost{}, err
	}
	step := []byte(`{"status":{"currentStep":"measured"}}`)
	start := b.controlPlane()
	if err := stage.Parallel(n, func(i int) error {
		return b.fast.Status().Patch(ctx, rrs[i], client.RawPatch(types.MergePatchType, step))
	}); err != nil {
		return WriteCost{}, err
	}
	cost := WriteCost{}
	if d := b.cpuSince(start); d != nil {
		per := d.perRequest(n)
		cost.APIServerMs, cost.EtcdMs = per.APIServer, per.Etcd
	}
	full, err := json.Marshal(rrs[0])
	if err != nil {
		return WriteCost{}, err
	}
	cost.Bytes = len(full)
	return cost, nil
}
