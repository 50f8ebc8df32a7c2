package facts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestJudgePluginOverlap: the deregistration incident's cause, judged before any
// mount fails. Old and new node-plugin pods overlap on a node when one of them
// belongs to an earlier UID of its DaemonSet (or to none any more), terminates while
// another runs, two DaemonSets own them, or their DaemonSet was recreated (seen by
// its UID changing between scans, remembered while its pods overlap, or on a
// detector's first scan by its youth); one pod per node is no overlap, however
// recreated its DaemonSet. Without the DaemonSets (remediator scan) only the pods
// say what is old.
func TestJudgePluginOverlap(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ds := func(uid types.UID, age time.Duration) appsv1.DaemonSet {
		return appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "trident-csi", UID: uid,
			CreationTimestamp: metav1.NewTime(now.Add(-age))}}
	}
	pod := func(name, node string, owner types.UID, terminating bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "DaemonSet", Name: "trident-csi", UID: owner, Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: node}}
		if terminating {
			p.DeletionTimestamp = &metav1.Time{Time: now}
		}
		return p
	}
	seen := func(uid types.UID) DaemonSetsSeen {
		return DaemonSetsSeen{Scanned: true, ByName: map[string]SeenDaemonSet{"trident/trident-csi": {UID: uid}}}
	}
	const key = "trident/trident-csi"
	copyDS := ds("copy", time.Minute)
	copyDS.Name = "trident-csi-2"
	copyPod := pod("csi-2-a", "node-1", "copy", false)
	copyPod.OwnerReferences[0].Name = "trident-csi-2"
	for _, tc := range []struct {
		name          string
		in            pluginOverlapInput
		wantNodes     map[string][]string
		wantRecreated []string
		wantNext      DaemonSetsSeen
	}{
		{
			name: "recreated since the last scan, old and new pods overlapping on one node",
			in: pluginOverlapInput{known: true, seen: seen("old"), daemonSets: []appsv1.DaemonSet{ds("new", time.Minute)},
				pods: []corev1.Pod{pod("csi-old-1", "node-1", "old", false), pod("csi-new-1", "node-1", "new", false), pod("csi-new-2", "node-2", "new", false)}},
			wantNodes: map[string][]string{"node-1": {
				"DaemonSet trident/trident-csi recreated since the last scan (UID old, now new)",
				"csi-old-1 belongs to an earlier DaemonSet trident/trident-csi (UID old, now new)",
			}},
			wantRecreated: []string{"trident/trident-csi: recreated since the last scan (UID old, now new)"},
			wantNext:      DaemonSetsSeen{Scanned: true, ByName: map[string]SeenDaemonSet{key: {UID: "new", Recreated: true, Previous: "old"}}},
		},
		{
			name: "one plugin pod per node",
			in: pluginOverlapInput{known: true, seen: seen("uid"), daemonSets: []appsv1.DaemonSet{ds("uid", time.Hour)},
				pods: []corev1.Pod{pod("csi-1", "node-1", "uid", false), pod("csi-2", "node-2", "uid", false)}},
			wantNodes: map[string][]string{},
			wantNext:  seen("uid"),
		},
		{
			name: "recreated, its old pods all gone: no overlap, and not remembered as recreating",
			in: pluginOverlapInput{known: true, seen: seen("old"), daemonSets: []appsv1.DaemonSet{ds("new", time.Minute)},
				pods: []corev1.Pod{pod("csi-new-1", "node-1", "new", false), pod("csi-new-2", "node-2", "new", false)}},
			wantNodes:     map[string][]string{},
			wantRecreated: []string{"trident/trident-csi: recreated since the last scan (UID old, now new)"},
			wantNext:      seen("new"),
		},
		{
			name: "remembered as recreated while an adopted old pod overlaps a new one under the same UID",
			in: pluginOverlapInput{known: true, seen: DaemonSetsSeen{Scanned: true, ByName: map[string]SeenDaemonSet{key: {UID: "new", Recreated: true, Previous: "old"}}},
				daemonSets: []appsv1.DaemonSet{ds("new", time.Minute)},
				pods:       []corev1.Pod{pod("csi-a", "node-1", "new", false), pod("csi-b", "node-1", "new", false)}},
			wantNodes: map[string][]string{"node-1": {"DaemonSet trident/trident-csi recreated earlier (UID old, now new), its pods still overlap"}},
			wantNext:  DaemonSetsSeen{Scanned: true, ByName: map[string]SeenDaemonSet{key: {UID: "new", Recreated: true, Previous: "old"}}},
		},
		{
			name: "a restart: the first scan counts a DaemonSet younger than the interval as recreated",
			in: pluginOverlapInput{known: true, window: 30 * time.Second, now: now, daemonSets: []appsv1.DaemonSet{ds("new", 10*time.Second)},
				pods: []corev1.Pod{pod("csi-a", "node-1", "new", false), pod("csi-b", "node-1", "new", false)}},
			wantNodes: map[string][]string{"node-1": {"DaemonSet trident/trident-csi created 10s ago, before the detector's first scan"}},
			wantNext:  DaemonSetsSeen{Scanned: true, ByName: map[string]SeenDaemonSet{key: {UID: "new", Recreated: true}}},
		},
		{
			name: "a restart: an older DaemonSet with two running pods of its UID on a node is no recreation",
			in: pluginOverlapInput{known: true, window: 30 * time.Second, now: now, daemonSets: []appsv1.DaemonSet{ds("uid", time.Hour)},
				pods: []corev1.Pod{pod("csi-a", "node-1", "uid", false), pod("csi-b", "node-1", "uid", false)}},
			wantNodes: map[string][]string{},
			wantNext:  seen("uid"),
		},
		{
			name: "a restart: pods of a UID that no longer exists",
			in: pluginOverlapInput{known: true, window: 30 * time.Second, now: now, daemonSets: []appsv1.DaemonSet{ds("new", time.Hour)},
				pods: []corev1.Pod{pod("csi-old", "node-1", "old", false), pod("csi-new", "node-1", "new", false)}},
			wantNodes: map[string][]string{"node-1": {
				"DaemonSet trident/trident-csi recreated: pods of its earlier UID old remain",
				"csi-old belongs to an earlier DaemonSet trident/trident-csi (UID old, now new)",
			}},
			wantNext: DaemonSetsSeen{Scanned: true, ByName: map[string]SeenDaemonSet{key: {UID: "new", Recreated: true}}},
		},
		{
			name: "deleted and not created again yet: remembered, its pod beside another is old",
			in: pluginOverlapInput{known: true, seen: seen("old"),
				pods: []corev1.Pod{pod("csi-old", "node-1", "old", true), pod("csi-other", "node-1", "old", false)}},
			wantNodes: map[string][]string{"node-1": {
				"csi-old belongs to DaemonSet trident/trident-csi (UID old), which no longer exists",
				"csi-old terminates while csi-other runs",
				"csi-other belongs to DaemonSet trident/trident-csi (UID old), which no longer exists",
			}},
			wantNext: seen("old"),
		},
		{
			name: "one pod terminating while another runs, same UID",
			in: pluginOverlapInput{known: true, seen: seen("uid"), daemonSets: []appsv1.DaemonSet{ds("uid", time.Hour)},
				pods: []corev1.Pod{pod("csi-a", "node-1", "uid", true), pod("csi-b", "node-1", "uid", false)}},
			wantNodes: map[string][]string{"node-1": {"csi-a terminates while csi-b runs"}},
			wantNext:  seen("uid"),
		},
		{
			name: "two pods terminating, none running: nothing left to deregister the driver from",
			in: pluginOverlapInput{known: true, seen: seen("uid"), daemonSets: []appsv1.DaemonSet{ds("uid", time.Hour)},
				pods: []corev1.Pod{pod("csi-a", "node-1", "uid", true), pod("csi-b", "node-1", "uid", true)}},
			wantNodes: map[string][]string{},
			wantNext:  seen("uid"),
		},
		{
			name:      "remediator scan, no DaemonSets read: two UIDs of one DaemonSet on a node",
			in:        pluginOverlapInput{pods: []corev1.Pod{pod("csi-old", "node-1", "old", false), pod("csi-new", "node-1", "new", false)}},
			wantNodes: map[string][]string{"node-1": {"pods of DaemonSet trident/trident-csi from 2 UIDs"}},
			wantNext:  DaemonSetsSeen{ByName: map[string]SeenDaemonSet{}},
		},
		{
			name: "a copy of the DaemonSet (the incident's reproduction): two DaemonSets' pods on a node",
			in: pluginOverlapInput{known: true, seen: seen("uid"), daemonSets: []appsv1.DaemonSet{ds("uid", time.Hour), copyDS},
				pods: []corev1.Pod{pod("csi-a", "node-1", "uid", false), copyPod}},
			wantNodes: map[string][]string{"node-1": {"pods of trident/trident-csi and trident/trident-csi-2 on one node"}},
			wantNext:  DaemonSetsSeen{Scanned: true, ByName: map[string]SeenDaemonSet{key: {UID: "uid"}, "trident/trident-csi-2": {UID: "copy"}}},
		},
		{
			name:      "remediator scan, no DaemonSets read: two running pods of one UID",
			in:        pluginOverlapInput{pods: []corev1.Pod{pod("csi-a", "node-1", "uid", false), pod("csi-b", "node-1", "uid", false)}},
			wantNodes: map[string][]string{},
			wantNext:  DaemonSetsSeen{ByName: map[string]SeenDaemonSet{}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := judgePluginOverlap(tc.in)
			assert.Equal(t, tc.wantNodes, got.nodes, "nodes")
			assert.Equal(t, tc.wantRecreated, got.recreated, "recreated")
			assert.Equal(t, tc.wantNext, got.next, "what the next scan remembers")
		})
	}
}

// TestPluginDaemonSets: the node-plugin DaemonSets are those whose pods the
// node-plugin selector matches, whatever their name, and those that control a
// node-plugin pod; no other DaemonSet of the namespace.
func TestPluginDaemonSets(t *testing.T) {
	sel, err := labels.Parse(DefaultNodePluginSelector)
	assert.NoError(t, err)
	mk := func(name string, l map[string]string) appsv1.DaemonSet {
		return appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: name},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}}}}
	}
	owned := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "csi-1", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "DaemonSet", Name: "trident-csi", UID: "earlier", Controller: ptr.To(true)}}}}
	got := pluginDaemonSets([]appsv1.DaemonSet{
		mk("trident-node-linux", map[string]string{"app": "node.csi.trident.netapp.io"}),
		mk("trident-csi", map[string]string{"app": "relabelled"}),
		mk("other", map[string]string{"app": "other"}),
	}, sel, []corev1.Pod{owned})
	var names []string
	for _, ds := range got {
		names = append(names, ds.Name)
	}
	assert.Equal(t, []string{"trident-node-linux", "trident-csi"}, names)
}
