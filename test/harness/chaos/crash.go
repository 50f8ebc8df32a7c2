package main

// R1: crash. The controller is killed with SIGKILL at each boundary of each step
// of each playbook (a failpoint of the test build), and at random moments, then
// started again; every request must still end as the runbook says, with every
// destructive call made at most once.

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations/failpoint"
	"github.com/remediator/remediator/test/stage"
)

// smokePoints is one kill per playbook for make test: the boundaries where a lost
// journal write is most dangerous (the call ran, its outcome was not recorded).
var smokePoints = map[*branch]string{
	brShutdown: failpoint.Name("deleteLease", failpoint.AfterCall),
	brFenced:   failpoint.Name("deleteLease", failpoint.BeforeCall),
	brMove:     failpoint.Name("cordon", failpoint.AfterCall),
	brPlugin:   failpoint.Name("deletePluginPod", failpoint.AfterCall),
}

func (h *harness) crash(ctx context.Context) error {
	res := &Crash{ByPoint: map[string]int{}, MinKills: len(playbookBranches)}
	if h.p.everyBoundary {
		res.MinKills = 50
	}
	h.result.Crash = res
	c := &crashRun{h: h, res: res}
	for _, b := range playbookBranches {
		if err := c.boundaryKills(ctx, b); err != nil {
			return err
		}
	}
	if err := c.holderBackKills(ctx); err != nil {
		return err
	}
	if h.p.everyBoundary {
		if err := c.restoreKills(ctx); err != nil {
			return err
		}
	}
	return c.timed(ctx)
}

// crashRun is the state the parts of R1 share.
type crashRun struct {
	h      *harness
	res    *Crash
	plugin int // the plugin nodes handed out so far
}

func (c *crashRun) nextPluginNode() string {
	n := pluginNodes[c.plugin%len(pluginNodes)]
	c.plugin++
	return n
}

// boundaryKills kills the controller at each of b's crash points: every boundary
// of every step in the full preset, its smoke point otherwise.
func (c *crashRun) boundaryKills(ctx context.Context, b *branch) error {
	h, res := c.h, c.res
	var points []string
	if h.p.everyBoundary {
		for _, st := range b.Steps {
			for _, bd := range failpoint.Boundaries {
				points = append(points, failpoint.Name(st, bd))
			}
		}
	} else {
		points = []string{smokePoints[b]}
	}
	for _, fp := range points {
		pn := ""
		if b == brPlugin {
			pn = c.nextPluginNode()
		}
		killed, v, err := h.crashCycle(ctx, b, fp, pn, cycleOpts{})
		if err != nil {
			return fmt.Errorf("%s at %s: %w", b.Name, fp, err)
		}
		res.Verdict.add(v)
		if killed {
			res.FailpointKills++
			res.ByPoint[b.Playbook+" "+fp]++
		} else if mustReach(fp) {
			// A destructive step always calls the API server once (its Done is
			// false until it acted), and every step's start is journaled: a
			// point of theirs not reached means the crash was never tested
			// (a build without the failpoints tag, a moved call).
			res.Unreached = append(res.Unreached, b.Playbook+" "+fp)
		} else {
			res.NotReached = append(res.NotReached, b.Playbook+" "+fp)
		}
		logf("R1 %s %s: killed %v, %d/%d correct, %d violations", b.Playbook, fp, killed, v.Correct, v.Requests, v.Violations())
	}
	return nil
}

func (c *crashRun) holderBackKills(ctx context.Context) error {
	h, res := c.h, c.res
	// The holder comes back while the controller is down, after the release was
	// journaled or right before its delete: the restarted controller's re-check
	// must refuse. A shut-down holder's out-of-service taint is removed; a fenced
	// unreachable holder's kubelet gives a heartbeat again, after its fencing
	// statement.
	for _, back := range h.holderBackCycles() {
		killed, v, err := h.crashCycle(ctx, back.b, back.fp, "", cycleOpts{whileDown: back.whileDown})
		if err != nil {
			return fmt.Errorf("%s at %s: %w", back.label, back.fp, err)
		}
		res.Verdict.add(v)
		if killed {
			res.FailpointKills++
			res.ByPoint[back.label+" "+back.fp]++
		} else {
			res.Unreached = append(res.Unreached, back.label+" "+back.fp)
		}
		logf("R1 %s while down, %s: killed %v, %d/%d correct, %d violations", back.label, back.fp, killed, v.Correct, v.Requests, v.Violations())
	}
	return nil
}

// restoreKills kills the controller at each point of the restore of a request
// deleted mid-run.
func (c *crashRun) restoreKills(ctx context.Context) error {
	h, res := c.h, c.res
	for _, b := range []*branch{brMove, brPlugin} {
		for _, fp := range restorePoints {
			pn := ""
			if b == brPlugin {
				pn = c.nextPluginNode()
			}
			killed, v, err := h.restoreCycle(ctx, b, fp, pn)
			if err != nil {
				return fmt.Errorf("%s deleted mid-run, at %s: %w", b.Name, fp, err)
			}
			res.Verdict.add(v)
			if killed {
				res.FailpointKills++
				res.ByPoint[b.Playbook+" (deleted) "+fp]++
			} else {
				res.Unreached = append(res.Unreached, b.Playbook+" (deleted) "+fp)
			}
			logf("R1 %s deleted mid-run, %s: killed %v, %d/%d correct, %d violations", b.Playbook, fp, killed, v.Correct, v.Requests, v.Violations())
		}
	}
	return nil
}

// timed kills the controller at random moments until the preset's number of
// timed kills is reached.
func (c *crashRun) timed(ctx context.Context) error {
	h, res := c.h, c.res
	rng := rand.New(rand.NewPCG(uint64(h.cfg.seed), 1))
	for res.TimedKills < h.p.timedKills {
		n, v, err := h.timedKills(ctx, rng, c.nextPluginNode())
		if err != nil {
			return fmt.Errorf("timed kills: %w", err)
		}
		res.TimedKills += n.kills
		res.MidStepKills += n.midStep
		res.Verdict.add(v)
		logf("R1 timed: %d kills (%d with a step running), %d/%d correct, %d violations", n.kills, n.midStep, v.Correct, v.Requests, v.Violations())
	}
	return nil
}

// holderBack is one cycle in which the holder comes back mid-playbook: the
// controller is killed at fp of the release, and whileDown brings the holder back
// before a clean controller continues.
type holderBack struct {
	b         *branch
	label     string
	fp        string
	whileDown func(context.Context, *subject) error
}

// holderBackCycles: after the release was journaled (smoke too) and, in the full
// preset, right before its delete. A shut-down holder is powered on (its
// out-of-service taint removed); a fenced unreachable holder's kubelet renews its
// node Lease after the journal write, and also posts Ready right before the delete.
func (h *harness) holderBackCycles() []holderBack {
	points := []string{failpoint.Name("deleteLease", failpoint.AfterJournal)}
	if h.p.everyBoundary {
		points = append(points, failpoint.Name("deleteLease", failpoint.BeforeCall))
	}
	var out []holderBack
	for _, fp := range points {
		out = append(out, holderBack{b: brReturns, label: "node-shutdown (holder back)", fp: fp,
			whileDown: func(ctx context.Context, s *subject) error { return h.stager.powerOn(ctx, s.Node) }})
	}
	for _, fp := range points {
		ready := fp == failpoint.Name("deleteLease", failpoint.BeforeCall)
		out = append(out, holderBack{b: brFencedBack, label: "fenced-unreachable (holder back)", fp: fp,
			whileDown: func(ctx context.Context, s *subject) error { return h.stager.heartbeat(ctx, s.Node, ready) }})
	}
	return out
}

// restorePoints are the crash points of the restore a request deleted mid-run
// goes through.
var restorePoints = []string{
	failpoint.Name(failpoint.Restore, failpoint.BeforeCall),
	failpoint.Name(failpoint.Restore, failpoint.AfterCall),
	failpoint.Name(failpoint.Restore, failpoint.BeforeFinalizerRelease),
}

// mustReach: every step's start is journaled, and a destructive step calls the
// API server; only a wait step's check may find it done at once.
func mustReach(fp string) bool {
	step, boundary, _ := strings.Cut(fp, "/")
	return boundary == failpoint.AfterJournal || slices.Contains([]string{"cordon", "deleteAffectedPods", "deleteLease", "deletePluginPod", "uncordon"}, step)
}

// settle gives a controller that reached the terminal state a moment to make
// any call it should not make afterwards (a second uncordon), so that the judge
// sees it.
func settle() { time.Sleep(3 * time.Second) }

// restoreCycle runs a request of a cordoning playbook until its cordon is done,
// deletes it, and kills the controller at restore point fp of the restore the
// deletion starts; a clean controller must then finish the restore: the node
// uncordoned once, the request gone.
func (h *harness) restoreCycle(ctx context.Context, b *branch, fp, pluginNode string) (bool, Verdict, error) {
	offset, err := h.audit.size()
	if err != nil {
		return false, Verdict{}, err
	}
	sub, err := h.stager.stage(ctx, b, pluginNode)
	if err != nil {
		return false, Verdict{}, err
	}
	p, err := h.start(procOpts{name: "restore", kubeconfig: h.cfg.kubeconfig, failpoint: fp + "=kill", noWait: true})
	if err != nil {
		return false, Verdict{}, err
	}
	if err := h.k8s.Create(ctx, sub.RR); err != nil {
		p.Kill()
		return false, Verdict{}, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		rr := &v1alpha1.RemediationRequest{}
		if err := h.k8s.Get(ctx, client.ObjectKeyFromObject(sub.RR), rr); err != nil {
			p.Kill()
			return false, Verdict{}, err
		}
		if len(rr.Status.Steps) > 0 && rr.Status.Steps[0].State == v1alpha1.StepSucceeded {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			p.Kill()
			return false, Verdict{}, fmt.Errorf("the cordon did not succeed within 60 s (controller exited %v, log %s)", p.Exited(), p.Log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sub.Deleted = true
	if err := h.k8s.Delete(ctx, sub.RR); err != nil {
		p.Kill()
		return false, Verdict{}, err
	}
	for end := time.Now().Add(30 * time.Second); !p.Exited() && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	killed := p.KilledBySIGKILL()
	if !p.Exited() {
		p.Stop()
	} else if !killed {
		return false, Verdict{}, fmt.Errorf("the controller exited on its own: %v (log %s)", p.Err(), p.Log)
	}
	p2, err := h.start(procOpts{name: "restore-restart", kubeconfig: h.cfg.kubeconfig})
	if err != nil {
		return killed, Verdict{}, err
	}
	defer p2.Stop()
	if err := h.waitTerminal(ctx, []*subject{sub}, 60*time.Second); err != nil {
		return killed, Verdict{}, fmt.Errorf("%w (logs %s, %s)", err, p.Log, p2.Log)
	}
	settle()
	v, err := h.judge(ctx, []*subject{sub}, offset)
	if err == nil && b == brPlugin {
		// The aborted playbook may have left the driver deregistered: restart the
		// node's plugin pod, as an operator would, for the next subject there.
		err = h.stager.restartPlugin(ctx, pluginNode)
	}
	return killed, v, err
}

// cycleOpts are what differs between a crash cycle of R1 and one of R2.
type cycleOpts struct {
	// kubeconfig is the controllers' (default: the cluster's); R2 passes the fault
	// proxy's.
	kubeconfig string
	// starting, when set, is held true while a controller starts (the fault proxy
	// then faults only its watches, see faults) and set false once it is ready.
	starting *atomic.Bool
	// whileDown runs after the armed controller died and before the clean one starts.
	whileDown func(context.Context, *subject) error
}

// crashCycle stages one request of branch b, runs a controller armed with
// failpoint fp until it dies (or the request ends without reaching fp), starts a
// clean one and judges the request once it is terminal.
func (h *harness) crashCycle(ctx context.Context, b *branch, fp, pluginNode string, o cycleOpts) (bool, Verdict, error) {
	offset, err := h.audit.size()
	if err != nil {
		return false, Verdict{}, err
	}
	sub, killed, p2, err := h.failpointRun(ctx, b, fp, pluginNode, o)
	if err != nil {
		return killed, Verdict{}, err
	}
	defer p2.Stop()
	settle()
	v, err := h.judge(ctx, []*subject{sub}, offset)
	return killed, v, err
}

// failpointRun stages one request of branch b, runs a controller armed with
// failpoint fp until it dies (or the request ends without reaching fp), runs
// o.whileDown, and starts a clean controller, which it returns running once the
// request is terminal: the caller stops it after judging, so that a call made
// after the end is seen too.
func (h *harness) failpointRun(ctx context.Context, b *branch, fp, pluginNode string, o cycleOpts) (*subject, bool, *proc, error) {
	kubeconfig := cmp.Or(o.kubeconfig, h.cfg.kubeconfig)
	start := func(po procOpts) (*proc, error) {
		if o.starting == nil {
			return h.start(po)
		}
		// Behind the fault proxy: wait until the controller is ready (a failpoint of
		// a step cannot fire before the request exists), then let the faults in.
		po.noWait = false
		o.starting.Store(true)
		defer o.starting.Store(false)
		return h.start(po)
	}
	sub, err := h.stager.stage(ctx, b, pluginNode)
	if err != nil {
		return nil, false, nil, err
	}
	p, err := start(procOpts{name: "crash", kubeconfig: kubeconfig, failpoint: fp + "=kill", noWait: true})
	if err != nil {
		return nil, false, nil, err
	}
	if err := h.k8s.Create(ctx, sub.RR); err != nil {
		p.Kill()
		return nil, false, nil, err
	}
	subs := []*subject{sub}
	deadline := time.Now().Add(90*time.Second + h.gate)
	for !p.Exited() && time.Now().Before(deadline) {
		if done, _ := h.terminal(ctx, subs); done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	killed := p.KilledBySIGKILL()
	if !p.Exited() {
		p.Stop()
	} else if !killed {
		return nil, false, nil, fmt.Errorf("the controller exited on its own: %v (log %s)", p.Err(), p.Log)
	}
	if o.whileDown != nil {
		if err := o.whileDown(ctx, sub); err != nil {
			return nil, killed, nil, err
		}
	}
	p2, err := start(procOpts{name: "restart", kubeconfig: kubeconfig})
	if err != nil {
		return nil, killed, nil, err
	}
	if err := h.waitTerminal(ctx, subs, 120*time.Second+h.gate); err != nil {
		p2.Stop()
		return nil, killed, nil, fmt.Errorf("%w (logs %s, %s)", err, p.Log, p2.Log)
	}
	return sub, killed, p2, nil
}

// timedKills runs one request of each playbook at once and kills the controller
// at random moments (0.2 s to 2.5 s after it started) until all four are terminal
// or eight kills were made, then lets a clean controller finish them.
// timedResult counts a batch's kills, and those made while a step was running.
type timedResult struct{ kills, midStep int }

func (h *harness) timedKills(ctx context.Context, rng *rand.Rand, pluginNode string) (timedResult, Verdict, error) {
	var n timedResult
	offset, err := h.audit.size()
	if err != nil {
		return n, Verdict{}, err
	}
	var subs []*subject
	for _, b := range playbookBranches {
		s, err := h.stager.stage(ctx, b, pluginNode)
		if err != nil {
			return n, Verdict{}, err
		}
		subs = append(subs, s)
	}
	for _, s := range subs {
		if err := h.k8s.Create(ctx, s.RR); err != nil {
			return n, Verdict{}, err
		}
	}
	for n.kills < 8 {
		if done, _ := h.terminal(ctx, subs); done {
			break
		}
		p, err := h.start(procOpts{name: "timed", kubeconfig: h.cfg.kubeconfig, noWait: true})
		if err != nil {
			return n, Verdict{}, err
		}
		time.Sleep(time.Duration(200+rng.IntN(2300)) * time.Millisecond)
		if p.Exited() {
			return n, Verdict{}, fmt.Errorf("the controller exited on its own before the kill: %v (log %s)", p.Err(), p.Log)
		}
		running := h.stepRunning(ctx, subs)
		p.Kill()
		n.kills++
		if running {
			n.midStep++
		}
	}
	p, err := h.start(procOpts{name: "timed-final", kubeconfig: h.cfg.kubeconfig})
	if err != nil {
		return n, Verdict{}, err
	}
	defer p.Stop()
	if err := h.waitTerminal(ctx, subs, 180*time.Second); err != nil {
		return n, Verdict{}, fmt.Errorf("%w (log %s)", err, p.Log)
	}
	settle()
	v, err := h.judge(ctx, subs, offset)
	return n, v, err
}

// stepRunning reports whether any of subs has a step Running right now.
func (h *harness) stepRunning(ctx context.Context, subs []*subject) bool {
	for _, s := range subs {
		rr := &v1alpha1.RemediationRequest{}
		if h.k8s.Get(ctx, client.ObjectKeyFromObject(s.RR), rr) != nil {
			continue
		}
		for _, st := range rr.Status.Steps {
			if st.State == v1alpha1.StepRunning {
				return true
			}
		}
	}
	return false
}

// terminal reports whether every subject is terminal (or, deleted, gone), and the
// ones that are not.
func (h *harness) terminal(ctx context.Context, subs []*subject) (bool, []string) {
	list := &v1alpha1.RemediationRequestList{}
	if err := h.k8s.List(ctx, list, client.InNamespace(requestNamespace), client.MatchingLabels{stage.Label: h.stager.st.RunID}); err != nil {
		return false, []string{err.Error()}
	}
	byName := map[string]*v1alpha1.RemediationRequest{}
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	var open []string
	for _, s := range subs {
		rr, ok := byName[s.RR.Name]
		switch {
		case s.Deleted && !ok:
		case s.Deleted:
			open = append(open, s.RR.Name+" (deleted, still there)")
		case !ok:
			open = append(open, s.RR.Name+" (missing)")
		case rr.Status.Phase != v1alpha1.PhaseSucceeded && rr.Status.Phase != v1alpha1.PhaseFailed && rr.Status.Phase != v1alpha1.PhaseRejected:
			open = append(open, fmt.Sprintf("%s (%s)", s.RR.Name, rr.Status.Phase))
		case rr.Status.Phase == v1alpha1.PhaseRejected && rr.Status.Decision != nil && rr.Status.Decision.RecheckAt != nil && !s.Branch.Recheck:
			// Rejected for now, re-evaluated at recheckAt (a Lease younger than the gate).
			open = append(open, fmt.Sprintf("%s (Rejected until %s)", s.RR.Name, rr.Status.Decision.RecheckAt.Format(time.TimeOnly)))
		}
	}
	return len(open) == 0, open
}

func (h *harness) waitTerminal(ctx context.Context, subs []*subject, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		done, open := h.terminal(ctx, subs)
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			if len(open) > 10 {
				open = append(open[:10], fmt.Sprintf("and %d more", len(open)-10))
			}
			return fmt.Errorf("not terminal after %s: %v", timeout, open)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// cleanup removes the run's requests (a running controller is needed for
// finalizers; none is left on a terminal request) and what was staged.
func (h *harness) cleanup(ctx context.Context) error {
	sel := client.MatchingLabels{stage.Label: h.stager.st.RunID}
	if err := h.k8s.DeleteAllOf(ctx, &v1alpha1.RemediationRequest{}, client.InNamespace(requestNamespace), sel); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	// A request deleted mid-run keeps its finalizer only while no controller runs;
	// the campaigns always finish theirs, so anything left is reported, not forced.
	list := &v1alpha1.RemediationRequestList{}
	if err := h.k8s.List(ctx, list, client.InNamespace(requestNamespace), sel); err == nil && len(list.Items) > 0 {
		logf("Cleanup: %d requests still have finalizers", len(list.Items))
	}
	return h.stager.st.Cleanup(ctx)
}
