package main

// R4: churn under restarts. Two replicas elect a leader; requests across every
// branch are created and some deleted mid-run, while the leader is killed (SIGKILL
// or SIGTERM, alternately) and replaced five times, so that leadership moves
// between the replicas. Nothing may leak (a finalizer, a cordon), no request may
// sit in Running past its step timeout, and no destructive call may run twice.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/harness/admissionwatch"
	"github.com/remediator/remediator/test/stage"
)

// churnStepTimeout is the step timeout the churn's controllers run with; a request
// Running on one step for longer than this plus churnSlack is stuck.
const (
	churnStepTimeout = 60 * time.Second
	churnSlack       = 45 * time.Second
	minLeadership    = 20 * time.Second
	// churnCap is the replicas' --max-concurrent-remediations: the binary's default.
	churnCap = 2
)

func (h *harness) churn(ctx context.Context) error {
	res := &Churn{}
	h.result.Churn = res
	rng := rand.New(rand.NewPCG(uint64(h.cfg.seed), 4))
	subs, err := h.mixed(ctx, h.p.churnRequests, 2)
	if err != nil {
		return err
	}
	rng.Shuffle(len(subs), func(i, j int) { subs[i], subs[j] = subs[j], subs[i] })
	offset, err := h.audit.size()
	if err != nil {
		return err
	}
	c := newChurnRun(ctx, h, res)
	// The cap and the order of admission, from the API server's order of changes,
	// across every restart and leader change.
	playbooks, err := remediations.DefaultPlaybooks()
	if err != nil {
		return err
	}
	watcher, err := admissionwatch.Start(ctx, h.rest, churnCap, playbooks.Disruptive)
	if err != nil {
		return err
	}
	defer watcher.Stop()
	defer c.stopReplicas()
	for range 2 {
		if err := c.startReplica(); err != nil {
			return err
		}
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watchWG sync.WaitGroup
	watchWG.Add(1)
	go func() {
		defer watchWG.Done()
		c.watch(watchCtx)
	}()

	if err := c.createAll(rng, subs); err != nil {
		return err
	}
	logf("R4 %d created, %d deleted mid-run, %d restarts; waiting for the rest", res.Created, res.DeletedMidRun, res.Restarts)
	if err := h.waitTerminal(ctx, subs, 10*time.Minute); err != nil {
		return err
	}
	report := watcher.Stop()
	res.Admission, res.MaxHeld, res.Grants = report.Violations, report.MaxHeld, len(report.Grants)
	if report.Err != nil {
		res.Admission = append(res.Admission, "the watch could not follow every change: "+report.Err.Error())
	}
	stopWatch()
	watchWG.Wait()
	c.record()
	settle()
	res.Verdict, err = h.judge(ctx, subs, offset)
	return err
}

// churnRun is the state R4 shares between its main loop, the restarts, the
// watching goroutine and the mid-run deletions.
type churnRun struct {
	h     *harness
	ctx   context.Context
	res   *Churn
	extra []string // the replicas' flags

	mu       sync.Mutex // guards replicas
	replicas map[string]*proc
	seq      int

	twoMu sync.Mutex // guards res.TwoLeaders

	leaders     []string // the leaders seen, in order
	leadersMu   sync.Mutex
	leaderSince time.Time

	stuck map[string]string // written by watch, read once it has ended

	delWG  sync.WaitGroup
	delErr error
	delMu  sync.Mutex
}

func newChurnRun(ctx context.Context, h *harness, res *Churn) *churnRun {
	t := fmt.Sprint(churnStepTimeout)
	extra := []string{"--leader-elect", "--leader-election-namespace", requestNamespace, "--max-concurrent-remediations", fmt.Sprint(churnCap),
		"--eviction-timeout", t, "--pod-termination-timeout", t, "--plugin-restart-timeout", t}
	return &churnRun{h: h, ctx: ctx, res: res, extra: extra, replicas: map[string]*proc{}, stuck: map[string]string{}}
}

func (c *churnRun) startReplica() error {
	c.seq++
	name := fmt.Sprintf("replica-%d", c.seq)
	p, err := c.h.start(procOpts{name: name, kubeconfig: c.h.cfg.kubeconfig, extra: c.extra})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.replicas[name] = p
	c.mu.Unlock()
	return nil
}

func (c *churnRun) stopReplicas() {
	for _, p := range c.replicas {
		p.Stop()
	}
}

// leader is the replica leading now, or "" if none is; two at once are recorded.
func (c *churnRun) leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var leading []string
	for _, name := range sortedKeys(c.replicas) {
		if v, err := c.replicas[name].labelled(c.ctx, "leader_election_master_status"); err == nil && v == 1 {
			leading = append(leading, name)
		}
	}
	if len(leading) > 1 {
		c.twoMu.Lock()
		c.res.TwoLeaders = append(c.res.TwoLeaders, time.Now().Format("15:04:05.000")+": "+strings.Join(leading, ", "))
		c.twoMu.Unlock()
	}
	if len(leading) == 0 {
		return ""
	}
	return leading[0]
}

func (c *churnRun) observeLeader(l string) {
	c.leadersMu.Lock()
	defer c.leadersMu.Unlock()
	if l != "" && (len(c.leaders) == 0 || c.leaders[len(c.leaders)-1] != l) {
		c.leaders = append(c.leaders, l)
		c.leaderSince = time.Now()
	}
}

// watch follows the leader and the requests stuck in Running, once a second,
// until ctx ends.
func (c *churnRun) watch(ctx context.Context) {
	for ctx.Err() == nil {
		c.observeLeader(c.leader())
		for name, why := range c.h.stuckRunning(ctx, churnStepTimeout+churnSlack) {
			if _, seen := c.stuck[name]; !seen {
				c.stuck[name] = why
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// createAll creates subs, restarting the leader at the planned points and then
// until every restart is done, and waits for the mid-run deletions.
func (c *churnRun) createAll(rng *rand.Rand, subs []*subject) error {
	// Waves of 50 requests every 3 s; one in five is deleted 0-10 s after it was
	// created, often mid-run.
	res := c.res
	created := 0
	restartsAt := map[int]bool{}
	for i := 1; i <= c.h.p.churnRestarts; i++ {
		restartsAt[i*len(subs)/(c.h.p.churnRestarts+1)/50*50] = true
	}
	for created < len(subs) {
		if restartsAt[created] {
			if err := c.restart(); err != nil {
				return err
			}
		}
		wave := subs[created:min(created+50, len(subs))]
		if err := c.createWave(rng, wave); err != nil {
			return err
		}
		created += len(wave)
		res.Created = created
		time.Sleep(3 * time.Second)
	}
	for res.Restarts < c.h.p.churnRestarts {
		time.Sleep(5 * time.Second)
		if err := c.restart(); err != nil {
			return err
		}
	}
	c.delWG.Wait()
	return c.delErr
}

// createWave creates one wave and schedules the deletions of some of it.
func (c *churnRun) createWave(rng *rand.Rand, wave []*subject) error {
	for _, s := range wave {
		if err := c.h.k8s.Create(c.ctx, s.RR); err != nil {
			return err
		}
		if rng.IntN(5) == 0 {
			s.Deleted = true
			c.res.DeletedMidRun++
			c.delWG.Add(1)
			go func(s *subject, after time.Duration) {
				defer c.delWG.Done()
				time.Sleep(after)
				if err := c.h.k8s.Delete(c.ctx, s.RR); client.IgnoreNotFound(err) != nil {
					c.delMu.Lock()
					c.delErr = err
					c.delMu.Unlock()
				}
			}(s, time.Duration(rng.IntN(10_000))*time.Millisecond)
		}
	}
	return nil
}

// restart kills (SIGKILL or SIGTERM, alternately) the leader and starts a
// replica in its place.
func (c *churnRun) restart() error {
	res := c.res
	// After a SIGKILL the next leader takes over only once the old one's
	// lease expires (15 s): wait for it, as the kill is of the leader.
	l := c.leader()
	for deadline := time.Now().Add(90 * time.Second); l == "" && time.Now().Before(deadline); l = c.leader() {
		time.Sleep(500 * time.Millisecond)
	}
	c.observeLeader(l)
	// A leader serves at least minLeadership before it is killed: a real
	// failover is rare, and a leader killed within seconds of taking over has
	// no time to work, which would make every request look stuck.
	c.leadersMu.Lock()
	wait := minLeadership - time.Since(c.leaderSince)
	c.leadersMu.Unlock()
	time.Sleep(wait)
	c.mu.Lock()
	p := c.replicas[l]
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("no leader among %v", sortedKeys(c.replicas))
	}
	if res.Restarts%2 == 0 {
		p.Kill()
	} else {
		p.Stop()
	}
	c.mu.Lock()
	delete(c.replicas, l)
	c.mu.Unlock()
	res.Restarts++
	logf("R4 restart %d: %s (the leader) %s", res.Restarts, l, map[bool]string{true: "killed", false: "stopped"}[res.Restarts%2 == 1])
	return c.startReplica()
}

// record notes the leader after the last restart, and puts the leaders and
// the stuck requests in the result; watch must have ended.
func (c *churnRun) record() {
	// The leader after the last restart.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if l := c.leader(); l != "" {
			c.observeLeader(l)
			break
		}
	}
	c.res.LeaderChanges = max(0, len(c.leaders)-1)
	c.res.Leaders = c.leaders
	for _, name := range sortedKeys(c.stuck) {
		c.res.Stuck = append(c.res.Stuck, name+": "+c.stuck[name])
	}
}

// stuckRunning lists the run's requests Running with a step started longer than
// bound ago.
func (h *harness) stuckRunning(ctx context.Context, bound time.Duration) map[string]string {
	list := &v1alpha1.RemediationRequestList{}
	if err := h.k8s.List(ctx, list, client.InNamespace(requestNamespace), client.MatchingLabels{stage.Label: h.stager.st.RunID}); err != nil {
		return nil
	}
	out := map[string]string{}
	for i := range list.Items {
		rr := &list.Items[i]
		if rr.Status.Phase != v1alpha1.PhaseRunning {
			continue
		}
		for _, st := range rr.Status.Steps {
			if st.State == v1alpha1.StepRunning && st.StartedAt != nil && time.Since(st.StartedAt.Time) > bound {
				out[rr.Name] = fmt.Sprintf("step %s Running since %s (%s)", st.Name, st.StartedAt.Format(time.TimeOnly), st.Message)
			}
		}
	}
	return out
}
