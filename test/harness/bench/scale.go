package main

// The storm as a curve: at each of the preset's sizes, the API server's floor (the
// same releases done with the minimum calls, no controller) and then the storm, on
// fresh incidents and a fresh controller process, with the controller's API calls
// per request held to a budget.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/stage"
)

// callBudget is the most API calls (all methods, Events included) the controller
// may make per shut-down-holder request in a storm; more fails the run. Such a
// release costs at most a status write recording the decision and journaling the
// step, the preconditioned delete of the Lease, a status write recording the
// outcome, and one Event: everything it reads comes from its informers' caches.
// Unlike the timings, a count does not depend on how busy the machine is, so it is
// a check rather than a goal.
const callBudget = 4

// liveReadAllowance is how many live reads a storm may make above callBudget, as a
// share of its requests, and at least one: the controller reads the holder's node
// Lease live when its cache has not caught up with the request (facts.Watermarks,
// wiring.CatchUpWait), the safety it must not skip, and a quiet cluster whose simulated kubelets renew their
// node Leases in bursts, or a loaded one, makes a request or a few in a hundred pay
// that read. Only GETs count against it: a status write or an Event more per request
// still fails.
const liveReadAllowance = 0.05

// scale runs the floor and the storm at each of the preset's sizes into res.Scale,
// and keeps the largest storm as res.Storm. With -baseline it then runs the floor
// and the storm at the largest size once more with the baseline's binary, into
// res.Baseline.
func (b *bench) scale(ctx context.Context, res *Result) error {
	sizes := b.p.stormSizes
	for i, n := range sizes {
		largest := i == len(sizes)-1
		logf("Scale %d: the API server's floor, then a storm of %d requests at once for shut-down holders, %d pods on %d kwok nodes",
			n, n, b.pods, len(b.carrier))
		pt, st, err := b.point(ctx, "", n, b.cfg.controller, largest && b.cfg.profile, !largest || b.cfg.baseline != "")
		if err != nil {
			return err
		}
		logf("Scale %d: floor %.2f s, storm terminal %s (%.1fx the floor), %.1f API calls per request (%s)",
			n, pt.FloorSeconds, secs(pt.TerminalSeconds), pt.Ratio, pt.APICallsPerRequest, byMethod(pt.APICallsByKind, n))
		res.Scale = append(res.Scale, pt)
		if largest {
			res.Storm = st
		}
	}
	if b.cfg.baseline == "" || len(sizes) == 0 {
		return nil
	}
	n := sizes[len(sizes)-1]
	logf("Baseline %s (%s): the API server's floor, then a storm of %d requests at once for shut-down holders",
		b.cfg.baselineVersion, b.cfg.baseline, n)
	// The baseline is only recorded: neither the call budget nor a collapse fails
	// the run on it (verdict reads res.Scale alone). The run's cleanup removes its
	// incidents.
	pt, _, err := b.point(ctx, "base", n, b.cfg.baseline, false, false)
	if err != nil {
		return fmt.Errorf("baseline %s: %w", b.cfg.baseline, err)
	}
	logf("Baseline %d: floor %.2f s, storm terminal %s (%.1fx the floor), %.1f API calls per request (%s)",
		n, pt.FloorSeconds, secs(pt.TerminalSeconds), pt.Ratio, pt.APICallsPerRequest, byMethod(pt.APICallsByKind, n))
	res.Baseline = &Baseline{Version: b.cfg.baselineVersion, Binary: relToRoot(b.cfg.root, b.cfg.baseline), Storm: pt}
	return nil
}

// point measures one size: the API server's floor on fresh incidents, then a storm
// of n on fresh incidents with a fresh process of the controller binary. prefix
// sets the names apart ("" for the scale, "base" for the baseline). With drop the
// storm's requests and incidents are deleted afterwards, so that the next storm
// starts from a cluster without them; otherwise the run's cleanup removes them.
func (b *bench) point(ctx context.Context, prefix string, n int, binary string, profile, drop bool) (ScalePoint, *Storm, error) {
	floorKind := fmt.Sprintf("%sfloor%d", prefix, n)
	incidents, down, err := b.stormIncidents(ctx, floorKind, n)
	if err != nil {
		return ScalePoint{}, nil, err
	}
	if err := b.pauseAfterStaging(ctx); err != nil {
		return ScalePoint{}, nil, err
	}
	wait := b.apiServerProfile(ctx, profile, filepath.Join(b.cfg.workDir, floorKind+"-apiserver-cpu.pprof"))
	floor, floorCPU, err := b.floor(ctx, floorKind, incidents)
	wait()
	if profile && floor < apiServerProfileSeconds {
		logf("The floor of %d took %.2f s, less than the %d s its kube-apiserver profile covers: that profile includes what followed it",
			n, floor, apiServerProfileSeconds)
	}
	// Gone before any controller starts: the floor's requests, Succeeded without
	// one, and its incidents, which the storm's controller would otherwise cache
	// along with its own.
	b.drop(ctx, floorKind, incidents, down)
	if err != nil {
		return ScalePoint{}, nil, fmt.Errorf("floor of %d: %w", n, err)
	}

	kind := fmt.Sprintf("%sstorm%d", prefix, n)
	incidents, down, err = b.stormIncidents(ctx, kind, n)
	if err != nil {
		return ScalePoint{}, nil, fmt.Errorf("storm of %d: %w", n, err)
	}
	if err := b.pauseAfterStaging(ctx); err != nil {
		return ScalePoint{}, nil, err
	}
	st, err := b.stormOn(ctx, kind, binary, incidents, b.p.stormTimeout, profile, profile)
	if err != nil {
		return ScalePoint{}, nil, fmt.Errorf("storm of %d: %w", n, err)
	}
	if drop {
		b.drop(ctx, kind, incidents, down)
	}
	pt := ScalePoint{Requests: n, TerminalSeconds: st.TerminalSeconds, DecidedSeconds: st.DecidedSeconds,
		FloorSeconds: floor, APICallsPerRequest: st.APICallsPerRequest, APICallsByKind: st.APICallsByKind,
		PeakRSSMiB: st.PeakRSSMiB, Succeeded: st.Succeeded}
	if pt.TerminalSeconds > 0 && pt.FloorSeconds > 0 {
		pt.Ratio = pt.TerminalSeconds / pt.FloorSeconds
	}
	if floorCPU != nil && st.ControlPlane != nil {
		pt.FloorControlPlane, pt.StormControlPlane = floorCPU.perRequest(n), st.ControlPlane.perRequest(n)
	}
	return pt, st, nil
}

// pauseAfterStaging pauses for -staging-pause, so that the floor and the storm start
// alike: after the work their incidents' staging set off in the cluster, not during
// some of it.
func (b *bench) pauseAfterStaging(ctx context.Context) error {
	if b.cfg.stagingPause <= 0 {
		return nil
	}
	logf("Pausing %s after staging", b.cfg.stagingPause)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.cfg.stagingPause):
		return nil
	}
}

// floor releases the incidents with the minimum calls a release needs, 32 workers
// and no controller: create the request (as the storm does), read the Lease, one
// status write recording the decision, the step and the outcome, and the Lease's
// delete preconditioned on the UID and resourceVersion read. It returns the seconds
// from the first create to the last delete: the API server's floor under a storm.
// The requests end Succeeded, which no controller acts on, and the caller deletes
// them before any controller starts.
func (b *bench) floor(ctx context.Context, kind string, incidents []stage.Incident) (float64, *ControlPlaneCPU, error) {
	leases := b.fastCS.CoordinationV1().Leases(stage.TridentNamespace)
	cpu := b.controlPlane()
	start := time.Now()
	err := stage.Parallel(len(incidents), func(i int) error {
		in := incidents[i]
		rr := b.request(b.name(kind, i), in, false)
		if err := b.fast.Create(ctx, rr); err != nil {
			return fmt.Errorf("creating request %s: %w", rr.Name, err)
		}
		lease, err := leases.Get(ctx, in.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading Lease %s: %w", in.Name, err)
		}
		patch, err := floorStatus(rr, lease.UID, lease.ResourceVersion)
		if err != nil {
			return err
		}
		if err := b.fast.Status().Patch(ctx, rr, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("writing the status of %s: %w", rr.Name, err)
		}
		pre := &metav1.Preconditions{UID: &lease.UID, ResourceVersion: &lease.ResourceVersion}
		if err := leases.Delete(ctx, in.Name, metav1.DeleteOptions{Preconditions: pre}); err != nil {
			return fmt.Errorf("deleting Lease %s: %w", in.Name, err)
		}
		return nil
	})
	secs := time.Since(start).Seconds()
	return secs, b.cpuSince(cpu), err
}

// floorStatus is the floor's one status write on rr: a merge patch of what the
// controller records over a release (decision, journal, outcome) in a single write,
// ending the request Succeeded.
func floorStatus(rr *v1alpha1.RemediationRequest, uid types.UID, rv string) ([]byte, error) {
	now := metav1.Now()
	status := v1alpha1.RemediationRequestStatus{
		ObservedGeneration: rr.Generation,
		Phase:              v1alpha1.PhaseSucceeded,
		Decision: &v1alpha1.Decision{Allowed: true, Playbook: "node-shutdown", Rule: "bench-floor",
			PolicyDigest: "bench-floor", Generation: rr.Generation, DecidedAt: now},
		Steps: []v1alpha1.StepStatus{{Name: "deleteLease", State: v1alpha1.StepSucceeded, StartedAt: &now, CompletedAt: &now,
			Object: "Lease " + stage.TridentNamespace + "/" + rr.Spec.Target.PersistentVolume, ObjectUID: string(uid), ObjectResourceVersion: rv}},
		Outcome: &v1alpha1.Outcome{Result: v1alpha1.PhaseSucceeded, Reason: "PlaybookCompleted", FinishedAt: now, Generation: rr.Generation},
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return nil, fmt.Errorf("encoding the floor's status: %w", err)
	}
	return patch, nil
}

// drop deletes the requests of kind for incidents, the incidents' objects and the
// shut-down nodes down, without waiting for them to go; what it misses the run's
// cleanup removes.
func (b *bench) drop(ctx context.Context, kind string, incidents []stage.Incident, down []string) {
	cs, apps := b.fastCS, b.s.Apps
	now := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)} // the harness's stand-in pods, as Cleanup
	del := metav1.DeleteOptions{}
	start := time.Now()
	err := stage.Parallel(len(incidents), func(i int) error {
		in := incidents[i]
		rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Name: b.name(kind, i), Namespace: requestNamespace}}
		for _, err := range []error{
			client.IgnoreNotFound(b.fast.Delete(ctx, rr)),
			cs.CoordinationV1().Leases(stage.TridentNamespace).Delete(ctx, in.Name, del),
			cs.CoreV1().Pods(apps).Delete(ctx, in.Pod, now),
			cs.CoreV1().PersistentVolumeClaims(apps).Delete(ctx, in.Claim, del),
			cs.CoreV1().PersistentVolumes().Delete(ctx, in.Name, del),
			cs.CoreV1().Nodes().Delete(ctx, down[i], del),
		} {
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		logf("Deleting the %s incidents (the cleanup will): %v", kind, err)
		return
	}
	logf("Deleted the %d %s incidents in %s", len(incidents), kind, time.Since(start).Round(100*time.Millisecond))
}

// withinBudget reports whether storm p made at most callBudget API calls per request,
// besides its allowance of live reads (liveReadAllowance).
func withinBudget(p ScalePoint) bool {
	n := float64(max(p.Requests, 1))
	reads := float64(p.APICallsByKind["GET"])
	// Whole calls: 4001.0/1000*1000 is a hair above 4001 in floating point.
	total := math.Round(p.APICallsPerRequest * n)
	return total-min(reads, max(1, liveReadAllowance*n)) <= callBudget*n
}

// overBudget names each storm size whose API calls per request exceed callBudget,
// with its calls per request by method.
func overBudget(r *Result) []string {
	points := r.Scale
	if len(points) == 0 && r.Storm != nil {
		// A result from before the scale was measured.
		s := r.Storm
		points = []ScalePoint{{Requests: s.Requests, APICallsPerRequest: s.APICallsPerRequest, APICallsByKind: s.APICallsByKind}}
	}
	var over []string
	for _, p := range points {
		if !withinBudget(p) {
			// The total too: 401 calls for 100 requests read 4.0 per request.
			over = append(over, fmt.Sprintf("storm of %d: %.1f API calls per request (%.0f in all), budget %d (%s)",
				p.Requests, p.APICallsPerRequest, p.APICallsPerRequest*float64(p.Requests), callBudget, byMethod(p.APICallsByKind, p.Requests)))
		}
	}
	return over
}
