package facts_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/controllers/facts"
)

// TestScanSeesPluginDaemonSetRecreated stages the deregistration incident as the
// trident-operator starts it: the node-plugin DaemonSet deleted and created again
// under the same name while its old pods still run (envtest runs no garbage collector, as a slow one
// leaves them). A scan that remembers the DaemonSet's UID finds, before any mount
// fails, the old and new pods overlapping on the node whose CSINode still lists the
// driver; on the node whose CSINode already lost it, the one finding is
// DeregisteredDriver with the overlap as its cause; a node with only a new pod has
// neither.
func TestScanSeesPluginDaemonSetRecreated(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	createDS := func() *appsv1.DaemonSet {
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "trident-node-recreated"},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: pluginLabels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: pluginLabels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/trident:1"}}},
				},
			},
		}
		require.NoError(t, env.Client.Create(ctx, ds))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ds) })
		return ds
	}
	pod := func(name, node string, owner *appsv1.DaemonSet) {
		w.ownedPod("trident", name, node, pluginLabels, owner)
		t.Cleanup(func() {
			_ = env.Client.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: name}},
				client.GracePeriodSeconds(0))
		})
	}
	ready := nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second}
	w.node("recreated-registered", ready)
	w.csiNode("recreated-registered", facts.DefaultDriverName)
	w.node("recreated-deregistered", ready)
	w.csiNode("recreated-deregistered")
	w.node("recreated-new-only", ready)
	w.csiNode("recreated-new-only", facts.DefaultDriverName)

	old := createDS()
	pod("recreated-old-a", "recreated-registered", old)
	pod("recreated-old-b", "recreated-deregistered", old)
	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig(), Clock: w}
	first, err := g.ScanWithHeld(ctx, facts.ScanOptions{LeaseAge: 10 * time.Minute, DaemonSets: &facts.DaemonSetsSeen{}})
	require.NoError(t, err)
	require.NotNil(t, first.DaemonSets)
	assert.Equal(t, old.UID, first.DaemonSets.ByName["trident/trident-node-recreated"].UID, "the UID remembered")

	require.NoError(t, env.Client.Delete(ctx, old))
	recreated := createDS()
	pod("recreated-new-a", "recreated-registered", recreated)
	pod("recreated-new-b", "recreated-deregistered", recreated)
	pod("recreated-new-c", "recreated-new-only", recreated)
	res, err := g.ScanWithHeld(ctx, facts.ScanOptions{LeaseAge: 10 * time.Minute, DaemonSets: first.DaemonSets})
	require.NoError(t, err)
	byNode := map[string][]facts.Finding{}
	for _, f := range res.Findings {
		if f.Kind != facts.FindingOverlappingPluginPods {
			byNode[f.Node] = append(byNode[f.Node], f)
		}
	}
	if fs := byNode["recreated-registered"]; assert.Len(t, fs, 1, "%+v", fs) {
		assert.Equal(t, facts.FindingOldPluginPodOverlap, fs[0].Kind)
		assert.Contains(t, fs[0].Evidence, "recreated-old-a belongs to an earlier DaemonSet trident/trident-node-recreated")
		assert.Contains(t, fs[0].Evidence, "recreated since the last scan")
		assert.Empty(t, fs[0].Symptoms, "nothing failed yet")
	}
	if fs := byNode["recreated-deregistered"]; assert.Len(t, fs, 1, "one finding for cause and symptom: %+v", fs) {
		assert.Equal(t, facts.FindingDeregisteredDriver, fs[0].Kind)
		assert.Equal(t, facts.FindingOldPluginPodOverlap, fs[0].Cause)
		assert.Contains(t, fs[0].Evidence, "cause: old and new node-plugin pods overlap")
	}
	assert.Empty(t, byNode["recreated-new-only"], "one new pod is no overlap")
	assert.Equal(t, []string{"trident/trident-node-recreated: recreated since the last scan (UID " + string(old.UID) + ", now " + string(recreated.UID) + ")"}, res.Recreated)

	// remediator scan remembers nothing and reads no DaemonSet: the two UIDs on a
	// node say it all the same.
	plain, err := g.Scan(ctx, facts.ScanOptions{LeaseAge: 10 * time.Minute})
	require.NoError(t, err)
	var kinds []string
	for _, f := range plain {
		if f.Node == "recreated-registered" {
			kinds = append(kinds, f.Kind)
		}
	}
	assert.Equal(t, []string{facts.FindingOldPluginPodOverlap, facts.FindingOverlappingPluginPods}, kinds)
}
