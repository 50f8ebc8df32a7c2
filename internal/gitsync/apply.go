package gitsync

import (
	"context"
	"fmt"
	"sort"

	"github.com/argoproj/gitops-engine/pkg/cache"
	gsync "github.com/argoproj/gitops-engine/pkg/sync"
	"github.com/argoproj/gitops-engine/pkg/sync/common"
	"github.com/argoproj/gitops-engine/pkg/utils/kube"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// apply makes the managed requests match targets through gitops-engine, in two
// passes, so that prunes run only after every apply succeeded: the first applies
// (prune off), the second, run only when something is left to prune, prunes.
//
// gitops-engine's own WithPruneLast is not used: it puts the prunes in a later wave,
// and between waves the engine waits for the applied objects to be healthy, judged
// on the live objects of a snapshot taken before the sync. A request created by
// that same sync is never in the snapshot, so a commit adding one request and
// removing another waited until --timeout and failed
// (TestSyncAddsAndPrunesInOneCommit). One wave per pass never waits on health.
func (s *Syncer) apply(ctx context.Context, targets []*unstructured.Unstructured, commit string, res *Result) error {
	log := s.opts.Log
	first, err := s.engineSync(ctx, targets, commit, false, notTerminating)
	var toPrune int
	for _, r := range first {
		line := fmt.Sprintf("%s/%s: %s", r.ResourceKey.Namespace, r.ResourceKey.Name, r.Message)
		if r.Status == common.ResultCodePruneSkipped {
			toPrune++
			if !s.opts.Prune {
				res.Pruned = append(res.Pruned, line)
				log.Info("Not pruned", "request", klogRef(r.ResourceKey), "commit", commit, "result", r.Status, "message", r.Message)
			}
			continue
		}
		res.Applied = append(res.Applied, line)
		log.Info("Applied", "request", klogRef(r.ResourceKey), "commit", commit, "result", r.Status, "message", r.Message)
	}
	sort.Strings(res.Applied)
	sort.Strings(res.Pruned)
	if err := failed(first, err); err != nil {
		return err
	}
	if !s.opts.Prune || toPrune == 0 {
		return nil
	}
	// Only the prunes: every apply succeeded in the first pass, and an apply failing
	// here would be reported after the prunes already ran.
	second, err := s.engineSync(ctx, targets, commit, true, func(k kube.ResourceKey, target, live *unstructured.Unstructured) bool {
		return target == nil && notTerminating(k, target, live)
	})
	for _, r := range second {
		if r.Status == common.ResultCodePruned || r.Status == common.ResultCodePruneSkipped {
			res.Pruned = append(res.Pruned, fmt.Sprintf("%s/%s: %s", r.ResourceKey.Namespace, r.ResourceKey.Name, r.Message))
			log.Info("Pruned", "request", klogRef(r.ResourceKey), "commit", commit, "result", r.Status, "message", r.Message)
		}
	}
	sort.Strings(res.Pruned)
	return failed(second, err)
}

// notTerminating leaves out a request already being deleted: it is finishing its
// restore (its finalizer), was pruned by an earlier sync, and is neither to be
// pruned nor reported as pruned again at every sync until it is gone.
func notTerminating(_ kube.ResourceKey, target, live *unstructured.Unstructured) bool {
	return target != nil || live == nil || live.GetDeletionTimestamp() == nil
}

// engineSync is one gitops-engine sync of targets, in a single wave, of the
// resources filter keeps.
func (s *Syncer) engineSync(ctx context.Context, targets []*unstructured.Unstructured, commit string, prune bool,
	filter func(kube.ResourceKey, *unstructured.Unstructured, *unstructured.Unstructured) bool,
) ([]common.ResourceSyncResult, error) {
	return s.engine.Sync(ctx, targets, func(r *cache.Resource) bool {
		src, _ := r.Info.(string)
		return src == s.source
	}, commit, s.opts.Namespaces[0],
		gsync.WithPrune(prune),
		gsync.WithResourcesFilter(filter),
		gsync.WithLogr(s.opts.Log.V(2)),
		// A request is a request: never delete and recreate it (that would run its
		// finalizer's restore and lose its journal), and never create it as a hook.
		gsync.WithReplace(false),
		// A request owns nothing, so there are no dependents to wait for; foreground
		// deletion would only add a finalizer that needs the garbage collector. A
		// pruned request that is mid-run stays Terminating until its finalizer has
		// restored what it changed; the sync does not wait for that.
		gsync.WithPrunePropagationPolicy(&background),
		gsync.WithOperationSettings(false, prune, false, true),
	)
}

// failed is the error of one engine sync: its own, or the first request it failed.
func failed(results []common.ResourceSyncResult, err error) error {
	if err != nil {
		return err
	}
	for _, r := range results {
		if r.Status == common.ResultCodeSyncFailed {
			return fmt.Errorf("%s/%s: %s", r.ResourceKey.Namespace, r.ResourceKey.Name, r.Message)
		}
	}
	return nil
}
