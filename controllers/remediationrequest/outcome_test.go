package remediationrequest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/remediationrequest"
	"github.com/remediator/remediator/test/testenv"
)

// capturedLog keeps every line a logger wrote, verbose ones included, decoded from
// funcr's JSON.
type capturedLog struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (c *capturedLog) logger() logr.Logger {
	return funcr.NewJSON(func(obj string) {
		m := map[string]any{}
		if json.Unmarshal([]byte(obj), &m) != nil {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.lines = append(c.lines, m)
	}, funcr.Options{Verbosity: 5})
}

// about returns the lines whose message starts with msg that controller-runtime
// logged for the request named name (its reconcile logger carries the name).
func (c *capturedLog) about(msg, name string) []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[string]any
	for _, l := range c.lines {
		if m, _ := l["msg"].(string); strings.HasPrefix(m, msg) && l["name"] == name {
			out = append(out, l)
		}
	}
	return out
}

// shutdownLease stages incident A with a holder that is shut down: the node-shutdown
// playbook releases the Lease at once. It returns the Lease.
func shutdownLease(t *testing.T, node, pv string) *coordinationv1.Lease {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}},
	}
	require.NoError(t, c.Create(ctx, n))
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", LastTransitionTime: metav1.Now()}}
	require.NoError(t, c.Status().Update(ctx, n))
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &node, AcquireTime: &metav1.MicroTime{Time: time.Now().Add(-time.Hour)}},
	}
	require.NoError(t, c.Create(ctx, lease))
	require.NoError(t, c.Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: facts.DefaultDriverName, VolumeHandle: pv}},
		},
	}))
	return lease
}

// fixHeldIs waits for FixHeld with status st and reason.
func fixHeldIs(st metav1.ConditionStatus, reason string) func(*v1alpha1.RemediationRequest) bool {
	return func(rr *v1alpha1.RemediationRequest) bool {
		c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionFixHeld)
		return c != nil && c.Status == st && c.Reason == reason
	}
}

// waitRequest waits until the request satisfies cond and returns it.
func waitRequest(t *testing.T, key client.ObjectKey, what string, cond func(*v1alpha1.RemediationRequest) bool) *v1alpha1.RemediationRequest {
	t.Helper()
	got := &v1alpha1.RemediationRequest{}
	testenv.Eventually(t, what, func() (bool, string) {
		if err := env.Client.Get(context.Background(), key, got); err != nil {
			return false, err.Error()
		}
		return cond(got), fmt.Sprintf("phase %s, conditions %+v, outcome %+v", got.Status.Phase, got.Status.Conditions, got.Status.Outcome)
	})
	return got
}

// TestOutcomeRecordedOnce: a Succeeded and a Rejected request each get status.outcome
// and exactly one "Remediation outcome recorded" line, with the commit, rule,
// playbook and step durations, however often they are reconciled and their status
// written afterwards, a controller restart included.
func TestOutcomeRecordedOnce(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	env.EnsureNamespaces(t, "remediator", "trident", corev1.NamespaceNodeLease)
	logs := &capturedLog{}
	// Verification writes the ended request's status again (FixHeld Unknown, then
	// True): those writes must not log the outcome again.
	stop := startManagerLogging(t, env.Config, logs.logger(), 3*time.Second)

	lease := shutdownLease(t, "envtest-record", "pvc-envtest-record")
	const commit = "0123456789abcdef0123456789abcdef01234567"
	done := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "record-succeeded",
			Annotations: map[string]string{v1alpha1.AnnotationGitCommit: commit}},
		Spec: v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target:      v1alpha1.Target{PersistentVolume: lease.Name},
			Reason:      "holder was powered off",
		},
	}
	rejected := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "record-rejected"},
		Spec: v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target:      v1alpha1.Target{PersistentVolume: "pvc-envtest-record-missing"},
			Reason:      "stuck pods on a volume that may be gone",
		},
	}
	require.NoError(t, c.Create(ctx, done))
	require.NoError(t, c.Create(ctx, rejected))

	got := waitRequest(t, client.ObjectKeyFromObject(done), "Succeeded with an outcome", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseSucceeded && rr.Status.Outcome != nil
	})
	o := got.Status.Outcome
	assert.Equal(t, v1alpha1.PhaseSucceeded, o.Result)
	assert.Equal(t, v1alpha1.ReasonPlaybookCompleted, o.Reason)
	assert.Equal(t, commit, o.Commit)
	assert.Equal(t, got.Generation, o.Generation)
	if assert.Len(t, got.Status.Steps, 1) && assert.NotNil(t, got.Status.Steps[0].CompletedAt) {
		assert.False(t, o.FinishedAt.Before(got.Status.Steps[0].CompletedAt), "finishedAt %s before the last step's end %s", o.FinishedAt, got.Status.Steps[0].CompletedAt)
	}
	gotRejected := waitRequest(t, client.ObjectKeyFromObject(rejected), "Rejected with an outcome", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Phase == v1alpha1.PhaseRejected && rr.Status.Outcome != nil
	})
	assert.Equal(t, v1alpha1.Outcome{Result: v1alpha1.PhaseRejected, Reason: "TargetUnresolved", Generation: 1, FinishedAt: gotRejected.Status.Outcome.FinishedAt},
		*gotRejected.Status.Outcome, "no commit: the request carries no annotation")

	// Reconcile both again (an annotation change starts a reconcile), then restart.
	// controller-runtime logs "Reconcile successful" or "Reconcile done, ..." after
	// the reconcile, its status write included.
	reconciled := func(name string) int { return len(logs.about("Reconcile ", name)) }
	before := map[string]int{done.Name: reconciled(done.Name), rejected.Name: reconciled(rejected.Name)}
	for _, rr := range []*v1alpha1.RemediationRequest{done, rejected} {
		patch := client.MergeFrom(rr.DeepCopy())
		metav1.SetMetaDataAnnotation(&rr.ObjectMeta, "remediator.io/test-touch", "1")
		require.NoError(t, c.Patch(ctx, rr, patch))
	}
	for name, n := range before {
		testenv.Eventually(t, "a reconcile of "+name+" after the annotation", func() (bool, string) {
			return reconciled(name) > n, fmt.Sprint(reconciled(name))
		})
	}
	stop()
	for name := range before {
		before[name] = reconciled(name)
	}
	startManagerLogging(t, env.Config, logs.logger(), 3*time.Second)
	for name, n := range before {
		testenv.Eventually(t, "the restarted controller reconciling "+name, func() (bool, string) {
			return reconciled(name) > n, fmt.Sprint(reconciled(name))
		})
	}
	waitRequest(t, client.ObjectKeyFromObject(done), "FixHeld True", fixHeldIs(metav1.ConditionTrue, v1alpha1.ReasonNoRecurrence))

	lines := logs.about(remediationrequest.OutcomeLogMessage, done.Name)
	require.Len(t, lines, 1, "outcome lines of %s: %v", done.Name, lines)
	l := lines[0]
	assert.Equal(t, "Succeeded", l["result"])
	assert.Equal(t, v1alpha1.ReasonPlaybookCompleted, l["reason"])
	assert.Equal(t, commit, l["commit"])
	assert.Equal(t, "holder-shutdown", l["rule"])
	assert.Equal(t, v1alpha1.PlaybookNodeShutdown, l["playbook"])
	if steps, ok := l["steps"].([]any); assert.True(t, ok, "steps = %#v", l["steps"]) && assert.Len(t, steps, 1) {
		assert.Regexp(t, `^deleteLease Succeeded [0-9]+(\.[0-9]+)?m?s$`, steps[0])
	}
	lines = logs.about(remediationrequest.OutcomeLogMessage, rejected.Name)
	require.Len(t, lines, 1, "outcome lines of %s: %v", rejected.Name, lines)
	assert.Equal(t, "Rejected", lines[0]["result"])
	assert.Equal(t, "TargetUnresolved", lines[0]["reason"])
	assert.Equal(t, "target-unresolved", lines[0]["rule"])
	assert.Contains(t, lines[0]["commit"], "unknown")
}
