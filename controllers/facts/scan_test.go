package facts_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

func TestScan(t *testing.T) {
	w := newWorld(t)
	ready := nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second}
	w.node("scan-holder", ready)
	w.volume("pvc-scan-old", "app", "scan-old")
	w.tridentLease("pvc-scan-old", "scan-holder", 20*time.Minute, 0)
	w.volume("pvc-scan-retained", "app", "scan-retained")
	w.tridentLease("pvc-scan-retained", "scan-holder", time.Minute, 2)
	w.volume("pvc-scan-young", "app", "scan-young")
	w.tridentLease("pvc-scan-young", "scan-holder", time.Minute, 0)
	// Not named after a PV: some other component's Lease, not Trident's cryptsetup lock.
	w.create(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "scan-trident-leader"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("trident-controller-0"), AcquireTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Hour)))},
	})

	w.node("scan-deregistered", ready)
	w.csiNode("scan-deregistered")
	w.pod("trident", "trident-csi-scan-a", "scan-deregistered", pluginLabels)
	w.node("scan-overlap", ready)
	w.csiNode("scan-overlap", facts.DefaultDriverName)
	w.pod("trident", "trident-csi-scan-b", "scan-overlap", pluginLabels)
	w.pod("trident", "trident-csi-2-scan-c", "scan-overlap", pluginLabels)
	w.node("scan-fine", ready)
	w.csiNode("scan-fine", facts.DefaultDriverName)
	w.pod("trident", "trident-csi-scan-d", "scan-fine", pluginLabels)

	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig(), Clock: w}
	got, err := g.Scan(context.Background(), facts.ScanOptions{LeaseAge: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	find := func(kind, node, lease string) *facts.Finding {
		for i := range got {
			if got[i].Kind == kind && got[i].Node == node && got[i].Lease == lease {
				return &got[i]
			}
		}
		return nil
	}
	if f := find(facts.FindingStuckLease, "scan-holder", "trident/pvc-scan-old"); f == nil || f.NodeState != v1alpha1.NodeHealthy || f.AgeSeconds < 1199 {
		t.Errorf("old Lease: %+v", f)
	}
	if f := find(facts.FindingStuckLease, "scan-holder", "trident/pvc-scan-retained"); f == nil || f.RetainedEvents != 2 || !strings.Contains(f.Evidence, "LeaseRetained") {
		t.Errorf("Lease with LeaseRetained events: %+v", f)
	}
	if f := find(facts.FindingStuckLease, "scan-holder", "trident/pvc-scan-young"); f != nil {
		t.Errorf("a young Lease without events is not stuck: %+v", f)
	}
	if slices.ContainsFunc(got, func(f facts.Finding) bool { return strings.Contains(f.Lease, "leader") }) {
		t.Error("a Lease not named after a PV was reported")
	}
	if f := find(facts.FindingDeregisteredDriver, "scan-deregistered", ""); f == nil || len(f.PluginPods) != 1 {
		t.Errorf("deregistered driver: %+v", f)
	}
	if f := find(facts.FindingOverlappingPluginPods, "scan-overlap", ""); f == nil || len(f.PluginPods) != 2 {
		t.Errorf("overlapping pods: %+v", f)
	}
	for _, f := range got {
		if f.Node == "scan-fine" || (f.Node == "scan-overlap" && f.Kind == facts.FindingDeregisteredDriver) {
			t.Errorf("unexpected finding %+v", f)
		}
	}
	if !slices.IsSortedFunc(got, func(a, b facts.Finding) int {
		return strings.Compare(a.Kind+"\x00"+a.Node+"\x00"+a.Lease, b.Kind+"\x00"+b.Node+"\x00"+b.Lease)
	}) {
		t.Error("findings are not sorted")
	}
}

// TestScanLeaseAgeCountsFromServerTime: scan measures a Lease's age as the decision
// does, so a holder whose clock runs 20 minutes slow does not make a Lease created
// just now look stuck.
func TestScanLeaseAgeCountsFromServerTime(t *testing.T) {
	w := newWorld(t)
	w.node("scan-slowclock", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
	w.volume("pvc-scan-slowclock", "app", "scan-slowclock")
	w.tridentLeaseAt("pvc-scan-slowclock", "scan-slowclock", time.Now().Add(-20*time.Minute), 0)

	// The real clock: the Lease was created just now.
	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig()}
	got, err := g.Scan(context.Background(), facts.ScanOptions{LeaseAge: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range got {
		if f.Lease == "trident/pvc-scan-slowclock" {
			t.Errorf("a Lease created just now was reported as stuck because of its holder's acquireTime: %+v", f)
		}
	}
}
