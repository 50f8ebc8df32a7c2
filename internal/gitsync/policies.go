package gitsync

// The policies of the remediation repository reach the controller through the sync:
// the CUE files under Options.PoliciesPath become the ConfigMap the chart mounts as
// the controller's --policies-dir. So a policy change reviewed in a pull request
// governs the cluster, not only the CI check, and status.decision.policyDigest equals
// the digest `remediator plan --policies-dir policies/` printed in that pull request.

import (
	"context"
	"fmt"
	"path"
	"strings"
	"testing/fstest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/remediator/remediator/policies"
)

// AnnotationPolicyDigest is the digest of the policies in the synced ConfigMap, as
// the controller and plan compute it.
const AnnotationPolicyDigest = "remediator.io/policy-digest"

// syncedPolicies is a revision's policies, compiled and ready to be applied.
type syncedPolicies struct {
	data   map[string]string
	digest string
}

// readPolicies reads and checks the policies at commit: they must compile and name
// only playbooks the controller runs, or the whole revision is refused.
func (s *Syncer) readPolicies(ctx context.Context, commit string) (*syncedPolicies, error) {
	dir := strings.Trim(path.Clean("/"+s.opts.PoliciesPath), "/")
	files, err := s.mirror.filesMatching(ctx, commit, dir, isPolicy(dir))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no .cue policy files under %q: the controller would have no policy to load", dir)
	}
	fsys := fstest.MapFS{}
	data := map[string]string{}
	for _, f := range files {
		name := path.Base(f.Path)
		fsys[name] = &fstest.MapFile{Data: f.Data}
		data[name] = string(f.Data)
	}
	engine, err := policies.FromFS(fsys)
	if err != nil {
		return nil, fmt.Errorf("the policies under %q do not load: %w", dir, err)
	}
	return &syncedPolicies{data: data, digest: engine.Digest()}, nil
}

// applyPolicies writes the policies into the ConfigMap, by server-side apply, as the
// one object besides requests that the sync may write.
func applyPolicies(ctx context.Context, cs kubernetes.Interface, key types.NamespacedName, p *syncedPolicies, commit string) error {
	cm := corev1ac.ConfigMap(key.Name, key.Namespace).
		WithLabels(map[string]string{"app.kubernetes.io/managed-by": "remediator-sync"}).
		WithAnnotations(map[string]string{AnnotationPolicyDigest: p.digest, AnnotationGitCommit: commit}).
		WithData(p.data)
	if _, err := cs.CoreV1().ConfigMaps(key.Namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "remediator-sync", Force: true}); err != nil {
		return fmt.Errorf("applying the policies to ConfigMap %s: %w", key, err)
	}
	return nil
}
