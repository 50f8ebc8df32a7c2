package gitsync

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/argoproj/gitops-engine/pkg/sync/common"
)

// What a RemediationRequest from Git may not carry although admission accepts it:
// fields and annotations that would let the manifest decide how or when the request
// is applied or deleted, instead of the reviewed sync. remediator sync refuses a
// revision with any of them; remediator plan refuses them in the pull request, so
// that the Argo CD path, which applies whatever Git holds, is told before the merge.

// hookAnnotations make Argo CD (and Helm) treat an object as a hook: it is applied
// at a sync phase outside the normal sync, not compared with Git afterwards, and
// deleted or replaced by its delete policy.
var hookAnnotations = []string{
	common.AnnotationKeyHook,
	common.AnnotationKeyHookDeletePolicy,
	"helm.sh/hook",
	"helm.sh/hook-delete-policy",
}

// recreatingSyncOptions make Argo CD replace the request, or delete and recreate it,
// instead of applying it; each with what that does to a request.
var recreatingSyncOptions = map[string]string{
	common.SyncOptionReplace: "replace the live request wholesale instead of applying it (kubectl replace), " +
		"dropping the controller's restore finalizer from a running one",
	common.SyncOptionForce: "delete and recreate the request, running its restore and deciding it again from scratch",
}

// Refusals says why a request read from Git must not be applied as it is, one
// message per field, each naming the field and why; none for a request that may be.
// obj is the request as its manifest spells it. The callers put the file in front.
func Refusals(obj map[string]any) []string {
	md, _ := obj["metadata"].(map[string]any)
	var out []string
	ann, _ := md["annotations"].(map[string]any)
	for _, a := range hookAnnotations {
		if _, ok := ann[a]; ok {
			out = append(out, fmt.Sprintf("annotation %s is not allowed on a RemediationRequest: it makes the request a hook, "+
				"applied outside the normal sync and deleted or replaced by its delete policy, out of review; remove it", a))
		}
	}
	if opts, ok := ann[common.AnnotationSyncOptions].(string); ok {
		if found := recreatingOptions(opts); len(found) > 0 {
			var why []string
			for _, o := range found {
				why = append(why, o+" would have Argo CD "+recreatingSyncOptions[o])
			}
			out = append(out, fmt.Sprintf("annotation %s %q is not allowed on a RemediationRequest: %s, out of review; remove %s",
				common.AnnotationSyncOptions, opts, strings.Join(why, "; "), strings.Join(found, " and ")))
		}
	}
	// A present but empty list sets nothing; the API server drops it.
	if f, ok := md["finalizers"]; ok && !empty(f) {
		out = append(out, "metadata.finalizers is not allowed on a RemediationRequest from Git: finalizers belong to the controller "+
			"(its restore finalizer) and the API server; one from Git can keep a deleted request Terminating for good, "+
			"or take the controller's own away by a later commit; remove the field")
	}
	if o, ok := md["ownerReferences"]; ok && !empty(o) {
		out = append(out, "metadata.ownerReferences is not allowed on a RemediationRequest from Git: an owner hands the request's deletion "+
			"to the garbage collector, which deletes it, mid-run too, when the owner goes, outside review and outside the sync's prune; "+
			"remove the field")
	}
	return out
}

// recreatingOptions are the recreating sync options that opts (comma-separated, as
// Argo CD reads them) holds. It matches more loosely than Argo CD (any case, also
// inside another item), so that nothing Argo CD would honour gets through.
func recreatingOptions(opts string) []string {
	lower := strings.ToLower(opts)
	var found []string
	for _, o := range slices.Sorted(maps.Keys(recreatingSyncOptions)) {
		if strings.Contains(lower, strings.ToLower(o)) {
			found = append(found, o)
		}
	}
	return found
}

// empty reports a field value that sets nothing: null, or an empty list or map.
func empty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}
