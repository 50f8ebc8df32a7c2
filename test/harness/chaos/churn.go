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
	t := fmt.Sprint(churnStepTimeout)
	extra := []string{"--leader-elect", "--leader-election-namespace", requestNamespace, "--max-concurrent-remediations", fmt.Sprint(churnCap),
		"--eviction-timeout", t, "--pod-termination-timeout", t, "--plugin-restart-timeout", t}
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
	var mu sync.Mutex
	replicas := map[string]*proc{}
	seq := 0
	startReplica := func() error {
		seq++
		name := fmt.Sprintf("replica-%d", seq)
		p, err := h.start(procOpts{name: name, kubeconfig: h.cfg.kubeconfig, extra: extra})
		if err != nil {
			return err
		}
		mu.Lock()
		replicas[name] = p
		mu.Unlock()
		return nil
	}
	defer func() {
		for _, p := range replicas {
			p.Stop()
		}
	}()
	for range 2 {
		if err := startReplica(); err != nil {
			return err
		}
	}
	var twoMu sync.Mutex
	leader := func() string {
		mu.Lock()
		defer mu.Unlock()
		var leading []string
		for _, name := range sortedKeys(replicas) {
			if v, err := replicas[name].labelled(ctx, "leader_election_master_status"); err == nil && v == 1 {
				leading = append(leading, name)
			}
		}
		if len(leading) > 1 {
			twoMu.Lock()
			res.TwoLeaders = append(res.TwoLeaders, time.Now().Format("15:04:05.000")+": "+strings.Join(leading, ", "))
			twoMu.Unlock()
		}
		if len(leading) == 0 {
			return ""
		}
		return leading[0]
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	stuck := map[string]string{}
	var leaders []string // the leaders seen, in order
	var leadersMu sync.Mutex
	var leaderSince time.Time
	observeLeader := func(l string) {
		leadersMu.Lock()
		defer leadersMu.Unlock()
		if l != "" && (len(leaders) == 0 || leaders[len(leaders)-1] != l) {
			leaders = append(leaders, l)
			leaderSince = time.Now()
		}
	}
	var watchWG sync.WaitGroup
	watchWG.Add(1)
	go func() {
		defer watchWG.Done()
		for watchCtx.Err() == nil {
			observeLeader(leader())
			for name, why := range h.stuckRunning(watchCtx, churnStepTimeout+churnSlack) {
				if _, seen := stuck[name]; !seen {
					stuck[name] = why
				}
			}
			select {
			case <-watchCtx.Done():
			case <-time.After(time.Second):
			}
		}
	}()

	// Waves of 50 requests every 3 s; one in five is deleted 0-10 s after it was
	// created, often mid-run.
	var delWG sync.WaitGroup
	created := 0
	restartsAt := map[int]bool{}
	for i := 1; i <= h.p.churnRestarts; i++ {
		restartsAt[i*len(subs)/(h.p.churnRestarts+1)/50*50] = true
	}
	var delErr error
	var delMu sync.Mutex
	restart := func() error {
		// After a SIGKILL the next leader takes over only once the old one's
		// lease expires (15 s): wait for it, as the kill is of the leader.
		l := leader()
		for deadline := time.Now().Add(90 * time.Second); l == "" && time.Now().Before(deadline); l = leader() {
			time.Sleep(500 * time.Millisecond)
		}
		observeLeader(l)
		// A leader serves at least minLeadership before it is killed: a real
		// failover is rare, and a leader killed within seconds of taking over has
		// no time to work, which would make every request look stuck.
		leadersMu.Lock()
		wait := minLeadership - time.Since(leaderSince)
		leadersMu.Unlock()
		time.Sleep(wait)
		mu.Lock()
		p := replicas[l]
		mu.Unlock()
		if p == nil {
			return fmt.Errorf("no leader among %v", sortedKeys(replicas))
		}
		if res.Restarts%2 == 0 {
			p.Kill()
		} else {
			p.Stop()
		}
		mu.Lock()
		delete(replicas, l)
		mu.Unlock()
		res.Restarts++
		logf("R4 restart %d: %s (the leader) %s", res.Restarts, l, map[bool]string{true: "killed", false: "stopped"}[res.Restarts%2 == 1])
		return startReplica()
	}
	for created < len(subs) {
		if restartsAt[created] {
			if err := restart(); err != nil {
				return err
			}
		}
		wave := subs[created:min(created+50, len(subs))]
		for _, s := range wave {
			if err := h.k8s.Create(ctx, s.RR); err != nil {
				return err
			}
			if rng.IntN(5) == 0 {
				s.Deleted = true
				res.DeletedMidRun++
				delWG.Add(1)
				go func(s *subject, after time.Duration) {
					defer delWG.Done()
					time.Sleep(after)
					if err := h.k8s.Delete(ctx, s.RR); client.IgnoreNotFound(err) != nil {
						delMu.Lock()
						delErr = err
						delMu.Unlock()
					}
				}(s, time.Duration(rng.IntN(10_000))*time.Millisecond)
			}
		}
		created += len(wave)
		res.Created = created
		time.Sleep(3 * time.Second)
	}
	for res.Restarts < h.p.churnRestarts {
		time.Sleep(5 * time.Second)
		if err := restart(); err != nil {
			return err
		}
	}
	delWG.Wait()
	if delErr != nil {
		return delErr
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
	// The leader after the last restart.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if l := leader(); l != "" {
			observeLeader(l)
			break
		}
	}
	res.LeaderChanges = max(0, len(leaders)-1)
	res.Leaders = leaders
	for _, name := range sortedKeys(stuck) {
		res.Stuck = append(res.Stuck, name+": "+stuck[name])
	}
	settle()
	res.Verdict, err = h.judge(ctx, subs, offset)
	return err
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
