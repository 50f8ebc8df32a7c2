package facts_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

func TestGatherLeaseFacts(t *testing.T) {
	w := newWorld(t)
	type want struct {
		found   bool
		message string
		// contains are parts of the message, for messages with server-made UIDs.
		contains []string
		// claim is the verified claim, namespace/name; "" when none is.
		claim          string
		ageFrom        string // prefix of lease.ageFrom
		leaseExists    bool
		holder         string
		nodeState      v1alpha1.NodeState
		nodeExists     bool
		retained       int32
		minAge, maxAge int64
		affected       []string
	}
	cases := []struct {
		name   string
		setup  func()
		target v1alpha1.Target
		want   want
	}{{
		name: "shutdown holder",
		setup: func() {
			w.node("holder-shutdown", nodeSpec{ready: corev1.ConditionFalse, taints: []string{v1alpha1.TaintOutOfService}, renewedAgo: time.Hour})
			w.volume("pvc-shutdown", "app", "data-shutdown")
			w.tridentLease("pvc-shutdown", "holder-shutdown", 20*time.Minute, 3)
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-shutdown"},
		want: want{found: true, claim: "app/data-shutdown", leaseExists: true, holder: "holder-shutdown", nodeState: v1alpha1.NodeShutdown, nodeExists: true,
			retained: 3, minAge: 1199, maxAge: 1205},
	}, {
		name: "unreachable holder",
		setup: func() {
			w.node("holder-unreachable", nodeSpec{ready: corev1.ConditionUnknown, taints: []string{v1alpha1.TaintUnreachable}, renewedAgo: 3 * time.Minute})
			w.volume("pvc-unreachable", "app", "data-unreachable")
			w.tridentLease("pvc-unreachable", "holder-unreachable", 2*time.Minute, 0)
		},
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-unreachable"}},
		// Acquired after the Lease was created: the API server's time of that write counts.
		want: want{found: true, claim: "app/data-unreachable", leaseExists: true, holder: "holder-unreachable", nodeState: v1alpha1.NodeUnreachable, nodeExists: true,
			minAge: 119, maxAge: 125, ageFrom: "the holder's last write "},
	}, {
		name: "healthy holder with affected pods",
		setup: func() {
			w.node("holder-healthy", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.node("other-healthy", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.volume("pvc-healthy", "app", "data-healthy")
			w.tridentLease("pvc-healthy", "holder-healthy", 30*time.Second, 1)
			w.pod("app", "web-1", "holder-healthy", nil, "data-healthy")
			w.pod("app", "web-0", "holder-healthy", nil, "scratch", "data-healthy")
			w.pod("app", "web-2", "other-healthy", nil, "data-healthy") // another node
			w.pod("app", "cache-0", "holder-healthy", nil, "scratch")   // another claim
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-healthy"},
		want: want{found: true, claim: "app/data-healthy", leaseExists: true, holder: "holder-healthy", nodeState: v1alpha1.NodeHealthy, nodeExists: true,
			retained: 1, minAge: 29, maxAge: 35, affected: []string{"app/web-0", "app/web-1"}},
	}, {
		name: "holder node deleted",
		setup: func() {
			w.volume("pvc-gone", "app", "data-gone")
			w.tridentLease("pvc-gone", "holder-gone", 10*time.Minute, 2)
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-gone"},
		// A missing Node is not a shutdown: the policy treats it like Unreachable.
		want: want{found: true, claim: "app/data-gone", leaseExists: true, holder: "holder-gone", nodeState: v1alpha1.NodeNotFound, retained: 2, minAge: 599, maxAge: 605},
	}, {
		name:   "no lease",
		setup:  func() { w.volume("pvc-nolease", "app", "data-nolease") },
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-nolease"}},
		want:   want{found: true, claim: "app/data-nolease"},
	}, {
		name: "pod target resolves pod -> PVC -> PV -> Lease",
		setup: func() {
			w.node("holder-pod", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.volume("pvc-podtarget", "app", "data-podtarget")
			w.volume("pvc-podscratch", "app", "scratch-podtarget")
			w.tridentLease("pvc-podtarget", "holder-pod", 15*time.Minute, 0)
			w.pod("app", "db-0", "holder-pod", nil, "scratch-podtarget", "data-podtarget")
		},
		target: v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: "app", Name: "db-0"}},
		want: want{found: true, claim: "app/data-podtarget", leaseExists: true, holder: "holder-pod", nodeState: v1alpha1.NodeHealthy, nodeExists: true,
			minAge: 899, maxAge: 905, affected: []string{"app/db-0"}},
	}, {
		name:   "missing pod",
		setup:  func() {},
		target: v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: "app", Name: "ghost-0"}},
		want:   want{message: "Pod app/ghost-0 not found"},
	}, {
		name:   "missing PVC",
		setup:  func() {},
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "ghost"}},
		want:   want{message: "PersistentVolumeClaim app/ghost not found"},
	}, {
		// The PV's claimRef carries the UID of a claim that was deleted; a claim of the
		// same name was created again since. Its pods are not the volume's and must not
		// be moved for it, but the PV and its Lease are still reported.
		name: "PV claimRef UID names an earlier claim",
		setup: func() {
			w.node("holder-reclaimed", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.claim("app", "data-reclaimed", "pvc-reclaimed")
			w.pv("pvc-reclaimed", &corev1.ObjectReference{Namespace: "app", Name: "data-reclaimed", UID: "5f0c1d2e-0000-4000-8000-000000000001"})
			w.tridentLease("pvc-reclaimed", "holder-reclaimed", 20*time.Minute, 1)
			w.pod("app", "reclaimed-0", "holder-reclaimed", nil, "data-reclaimed")
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-reclaimed"},
		want: want{found: true, leaseExists: true, holder: "holder-reclaimed", nodeState: v1alpha1.NodeHealthy, nodeExists: true, retained: 1, minAge: 1199, maxAge: 1205,
			contains: []string{
				"PersistentVolume pvc-reclaimed has claimRef app/data-reclaimed with UID 5f0c1d2e-0000-4000-8000-000000000001, but PersistentVolumeClaim app/data-reclaimed has UID ",
				"the claim was deleted and created again under the same name; the claim is not the volume's, so no pods are looked up as affected",
			}},
	}, {
		name: "PV claimRef names a missing claim",
		setup: func() {
			w.node("holder-orphan", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.pv("pvc-orphan", &corev1.ObjectReference{Namespace: "app", Name: "data-orphan", UID: "5f0c1d2e-0000-4000-8000-000000000002"})
			w.tridentLease("pvc-orphan", "holder-orphan", 20*time.Minute, 1)
			w.pod("app", "orphan-0", "holder-orphan", nil, "data-orphan")
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-orphan"},
		want: want{found: true, leaseExists: true, holder: "holder-orphan", nodeState: v1alpha1.NodeHealthy, nodeExists: true, retained: 1, minAge: 1199, maxAge: 1205,
			message: "PersistentVolume pvc-orphan has claimRef app/data-orphan, but that PersistentVolumeClaim does not exist; " +
				"the claim is not the volume's, so no pods are looked up as affected"},
	}, {
		name: "PV claimRef names a claim bound to another volume",
		setup: func() {
			w.node("holder-moved", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			c := w.claim("app", "data-moved", "pvc-moved-new")
			w.pv("pvc-moved-old", &corev1.ObjectReference{Namespace: "app", Name: "data-moved", UID: c.UID})
			w.tridentLease("pvc-moved-old", "holder-moved", 20*time.Minute, 1)
			w.pod("app", "moved-0", "holder-moved", nil, "data-moved")
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-moved-old"},
		want: want{found: true, leaseExists: true, holder: "holder-moved", nodeState: v1alpha1.NodeHealthy, nodeExists: true, retained: 1, minAge: 1199, maxAge: 1205,
			message: `PersistentVolume pvc-moved-old has claimRef app/data-moved, but that PersistentVolumeClaim is bound to PersistentVolume "pvc-moved-new"; ` +
				"the claim is not the volume's, so no pods are looked up as affected"},
	}, {
		// A pre-bound PV names its claim without a UID; the claim, bound back to it, is
		// the volume's.
		name: "PV claimRef without UID and its claim",
		setup: func() {
			w.node("holder-prebound", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.claim("app", "data-prebound", "pvc-prebound")
			w.pv("pvc-prebound", &corev1.ObjectReference{Namespace: "app", Name: "data-prebound"})
			w.tridentLease("pvc-prebound", "holder-prebound", 20*time.Minute, 1)
			w.pod("app", "prebound-0", "holder-prebound", nil, "data-prebound")
		},
		target: v1alpha1.Target{PersistentVolume: "pvc-prebound"},
		want: want{found: true, claim: "app/data-prebound", leaseExists: true, holder: "holder-prebound", nodeState: v1alpha1.NodeHealthy, nodeExists: true,
			retained: 1, minAge: 1199, maxAge: 1205, affected: []string{"app/prebound-0"}},
	}, {
		name: "PVC names a PV whose claimRef is another claim",
		setup: func() {
			w.claim("app", "data-stolen", "pvc-stolen")
			w.pv("pvc-stolen", &corev1.ObjectReference{Namespace: "app", Name: "data-thief"})
			w.tridentLease("pvc-stolen", "holder-stolen", 20*time.Minute, 0)
		},
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-stolen"}},
		want: want{message: "PersistentVolumeClaim app/data-stolen names PersistentVolume pvc-stolen, but that volume's claimRef is app/data-thief; " +
			"the claim does not lead to that volume's Lease"},
	}, {
		name: "PVC names a PV whose claimRef UID is an earlier claim's",
		setup: func() {
			w.claim("app", "data-recreated", "pvc-recreated")
			w.pv("pvc-recreated", &corev1.ObjectReference{Namespace: "app", Name: "data-recreated", UID: "5f0c1d2e-0000-4000-8000-000000000003"})
			w.tridentLease("pvc-recreated", "holder-recreated", 20*time.Minute, 0)
		},
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-recreated"}},
		want: want{contains: []string{
			"PersistentVolume pvc-recreated has claimRef app/data-recreated with UID 5f0c1d2e-0000-4000-8000-000000000003, but PersistentVolumeClaim app/data-recreated has UID ",
			"; the claim does not lead to that volume's Lease",
		}},
	}, {
		name:   "PVC names a missing PV",
		setup:  func() { w.claim("app", "data-lost", "pvc-lost") },
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-lost"}},
		want: want{message: "PersistentVolumeClaim app/data-lost names PersistentVolume pvc-lost, which does not exist, so the binding cannot be verified; " +
			"target the PersistentVolume to look up its Lease"},
	}, {
		name: "PVC names a PV without claimRef",
		setup: func() {
			w.claim("app", "data-unclaimed", "pvc-unclaimed")
			w.pv("pvc-unclaimed", nil)
		},
		target: v1alpha1.Target{PersistentVolumeClaim: &v1alpha1.ObjectReference{Namespace: "app", Name: "data-unclaimed"}},
		want: want{message: "PersistentVolumeClaim app/data-unclaimed names PersistentVolume pvc-unclaimed, but that volume has no claimRef; " +
			"the claim does not lead to that volume's Lease"},
	}, {
		// The claim whose PV has the Lease is bound to another claim; the pod's other
		// claim resolves but has no Lease. The broken one is reported, so that "no
		// Lease" is not read as "nothing is stuck".
		name: "pod with a resolving claim and one bound elsewhere",
		setup: func() {
			w.claim("app", "data-podsplit", "pvc-podsplit")
			w.pv("pvc-podsplit", &corev1.ObjectReference{Namespace: "app", Name: "data-elsewhere"})
			w.tridentLease("pvc-podsplit", "holder-podsplit", 20*time.Minute, 0)
			w.volume("pvc-podsplit-scratch", "app", "scratch-podsplit")
			w.pod("app", "podsplit-0", "holder-podsplit", nil, "data-podsplit", "scratch-podsplit")
		},
		target: v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: "app", Name: "podsplit-0"}},
		want: want{found: true, claim: "app/scratch-podsplit",
			message: "Pod app/podsplit-0: only claim scratch-podsplit resolved; the others did not: " +
				"PersistentVolumeClaim app/data-podsplit names PersistentVolume pvc-podsplit, but that volume's claimRef is app/data-elsewhere; " +
				"the claim does not lead to that volume's Lease"},
	}, {
		name: "pod whose only claim names a PV bound to another claim",
		setup: func() {
			w.node("holder-podstolen", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.claim("app", "data-podstolen", "pvc-podstolen")
			w.pv("pvc-podstolen", &corev1.ObjectReference{Namespace: "app", Name: "data-other"})
			w.tridentLease("pvc-podstolen", "holder-podstolen", 20*time.Minute, 0)
			w.pod("app", "podstolen-0", "holder-podstolen", nil, "data-podstolen")
		},
		target: v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: "app", Name: "podstolen-0"}},
		want: want{message: "PersistentVolumeClaim app/data-podstolen names PersistentVolume pvc-podstolen, but that volume's claimRef is app/data-other; " +
			"the claim does not lead to that volume's Lease"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.t = t
			tc.setup()
			f := w.gather(t, v1alpha1.RemediationReleaseLUKSLease, tc.target)
			assert.Equal(t, tc.want.found, f.Target.Found, "target found (message %q)", f.Target.Message)
			if tc.want.message != "" {
				assert.Equal(t, tc.want.message, f.Target.Message, "target message")
			}
			for _, part := range tc.want.contains {
				assert.Contains(t, f.Target.Message, part, "target message")
			}
			assert.Equal(t, tc.want.claim, f.Target.PersistentVolumeClaim, "target claim")
			if !tc.want.found && (tc.want.message != "" || len(tc.want.contains) > 0) {
				assert.Nil(t, f.Lease, "lease facts for an unresolved target")
				return
			}
			require.NotNil(t, f.Lease, "no lease facts")
			require.Equal(t, tc.want.leaseExists, f.Lease.Exists, "lease exists")
			if !tc.want.leaseExists {
				assert.Nil(t, f.Node, "node facts without a lease holder")
				return
			}
			l := f.Lease
			assert.Equal(t, tc.want.holder, l.HolderIdentity, "lease holder")
			assert.NotEmpty(t, l.UID, "lease facts incomplete: %+v", l)
			assert.NotEmpty(t, l.ResourceVersion, "lease facts incomplete: %+v", l)
			assert.NotNil(t, l.CreationTimestamp, "lease facts incomplete: %+v", l)
			assert.GreaterOrEqual(t, l.AgeSeconds, tc.want.minAge, "lease age in seconds (from %s)", l.AgeFrom)
			assert.LessOrEqual(t, l.AgeSeconds, tc.want.maxAge, "lease age in seconds (from %s)", l.AgeFrom)
			assert.NotEmpty(t, l.AgeFrom, "lease age from")
			assert.True(t, strings.HasPrefix(l.AgeFrom, tc.want.ageFrom), "lease age from %q, want it to start with %q", l.AgeFrom, tc.want.ageFrom)
			assert.Equal(t, tc.want.retained, l.RetainedEvents, "retained events")
			if tc.want.retained > 0 {
				wantMsg := fmt.Sprintf("cryptsetup luksOpen failed on %s (attempt %d): device or resource busy", tc.want.holder, tc.want.retained)
				assert.Equal(t, wantMsg, l.LastRetainedMessage, "last retained message")
			}
			require.NotNil(t, f.Node, "node facts")
			require.Equal(t, tc.want.nodeState, f.Node.State, "node state (%s)", f.Node.StateReason)
			require.Equal(t, tc.want.nodeExists, f.Node.Exists, "node exists")
			var affected []string
			for _, p := range f.AffectedPods {
				affected = append(affected, p.Namespace+"/"+p.Name)
				assert.NotEmpty(t, p.UID, "affected pod facts incomplete: %+v", p)
				assert.Equal(t, tc.want.holder, p.Node, "affected pod %s/%s node", p.Namespace, p.Name)
			}
			assert.Equal(t, tc.want.affected, affected, "affected pods")
		})
	}
}

// TestGatherLeaseAgeCountsFromServerTime: a holder whose clock runs 10 minutes slow
// writes an acquireTime 10 minutes before the API server created the Lease. The age
// must count from creationTimestamp, so the Lease looks new, not 10 minutes old: a
// slow clock must never let a Lease pass the runbook's 5-minute gate early.
func TestGatherLeaseAgeCountsFromServerTime(t *testing.T) {
	w := newWorld(t)
	w.volume("pvc-slowclock", "app", "data-slowclock")
	acquired := time.Now().Add(-10 * time.Minute)
	w.tridentLeaseAt("pvc-slowclock", "holder-slowclock", acquired, 0)

	// The real clock here: the world's clock runs ahead to stage older Leases.
	g := &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig()}
	f, err := g.Gather(context.Background(), &v1alpha1.RemediationRequest{Spec: v1alpha1.RemediationRequestSpec{
		Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{PersistentVolume: "pvc-slowclock"},
	}})
	require.NoError(t, err)
	l := f.Lease
	require.NotNil(t, l, "lease facts")
	require.True(t, l.Exists, "lease facts = %+v", l)
	require.NotNil(t, l.CreationTimestamp, "lease facts = %+v", l)
	require.NotNil(t, l.AcquireTime, "lease facts = %+v", l)
	assert.LessOrEqual(t, l.AgeSeconds, int64(5), "lease age in seconds, want about 0: the acquireTime before creationTimestamp must not count")
	want := fmt.Sprintf("creationTimestamp %s, set by the API server; acquireTime %s, set by the holder's clock, is earlier and does not count",
		l.CreationTimestamp.UTC().Format(time.RFC3339Nano), l.AcquireTime.UTC().Format(time.RFC3339Nano))
	assert.Equal(t, want, l.AgeFrom, "age from")
	// The holder is unknown to the cluster: NotFound, with what to check.
	require.NotNil(t, f.Node, "node facts, want NotFound with what to check")
	assert.Equal(t, v1alpha1.NodeNotFound, f.Node.State, "node facts = %+v", f.Node)
	assert.False(t, f.Node.Exists, "node facts = %+v", f.Node)
	assert.Contains(t, f.Node.StateReason, "kubectl get nodes", "node facts must say what to check")
}

// TestRetainedEventsOfThisIncarnationOnly: only a LeaseRetained Warning that names the
// Lease's UID and was last seen since the hold began is evidence about the operation
// holding it now (issue 22). Events without a UID, of an earlier Lease of the same
// name, or from before the current acquisition are counted apart.
func TestRetainedEventsOfThisIncarnationOnly(t *testing.T) {
	w := newWorld(t)
	w.node("holder-evidence", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
	w.volume("pvc-evidence", "app", "data-evidence")
	w.tridentLease("pvc-evidence", "holder-evidence", time.Minute, 0)
	event := func(name, uid string, at time.Time) {
		ts := metav1.NewTime(at)
		w.create(&corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: "trident", Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "Lease", Namespace: "trident", Name: "pvc-evidence", UID: types.UID(uid)},
			Reason:         "LeaseRetained", Type: corev1.EventTypeWarning, Count: 1, Message: name,
			FirstTimestamp: ts, LastTimestamp: ts,
		})
	}
	f := w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{PersistentVolume: "pvc-evidence"})
	uid := f.Lease.UID
	event("no-uid", "", w.Now().Add(-10*time.Second))
	event("other-incarnation", "0b6f1c1e-0000-4000-8000-000000000000", w.Now().Add(-10*time.Second))
	event("before-the-hold", uid, w.Now().Add(-2*time.Minute))
	f = w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{PersistentVolume: "pvc-evidence"})
	assert.Zero(t, f.Lease.RetainedEvents, "events that are not evidence about this hold counted")
	assert.Equal(t, int32(3), f.Lease.IgnoredRetainedEvents)

	event("this-hold", uid, w.Now().Add(-10*time.Second))
	f = w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{PersistentVolume: "pvc-evidence"})
	assert.Equal(t, int32(1), f.Lease.RetainedEvents)
	assert.Equal(t, "this-hold", f.Lease.LastRetainedMessage)
}

// TestAffectedPodsIncludeEphemeralVolumes: a pod that uses the claim through a
// generic ephemeral volume (claim <pod>-<volume>) uses the volume as much as one that
// names the claim; the healthy playbook must move it before the Lease goes (issue 22).
func TestAffectedPodsIncludeEphemeralVolumes(t *testing.T) {
	w := newWorld(t)
	w.node("holder-ephemeral", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
	p := w.ephemeralPod("app", "scratch-0", "holder-ephemeral", "cache")
	w.ephemeralVolume("pvc-ephemeral", "app", "scratch-0-cache", p)
	w.tridentLease("pvc-ephemeral", "holder-ephemeral", 20*time.Minute, 1)
	f := w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{PersistentVolume: "pvc-ephemeral"})
	require.Len(t, f.AffectedPods, 1, "affected pods: %+v", f.AffectedPods)
	assert.Equal(t, "scratch-0", f.AffectedPods[0].Name)

	f = w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: "app", Name: "scratch-0"}})
	assert.True(t, f.Target.Found, "a pod's ephemeral claim resolves: %s", f.Target.Message)
	assert.Equal(t, "pvc-ephemeral", f.Target.PersistentVolume)
}

// TestMissingNodeWithARenewedLease: a Node object deleted while its machine runs.
// Its kubelet still renews its node Lease, so the holder is alive: not NotFound
// (which fencing could release), and the renewal is recorded for the floor's
// fencing check. Seen failing before: the gatherer dropped the Lease it had read.
func TestMissingNodeWithARenewedLease(t *testing.T) {
	w := newWorld(t)
	w.create(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "holder-no-node"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("holder-no-node"), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: ptr.To(metav1.NewMicroTime(w.Now().Add(-2 * time.Second)))},
	})
	w.volume("pvc-no-node", "app", "data-no-node")
	w.tridentLease("pvc-no-node", "holder-no-node", 20*time.Minute, 0)
	f := w.gather(t, v1alpha1.RemediationReleaseLUKSLease, v1alpha1.Target{PersistentVolume: "pvc-no-node"})
	require.NotNil(t, f.Node)
	assert.False(t, f.Node.Exists)
	assert.Equal(t, v1alpha1.NodeUnknown, f.Node.State, f.Node.StateReason)
	assert.NotNil(t, f.Node.LeaseRenewTime, "the renewal is recorded")
	assert.NotNil(t, f.Node.LastHeartbeat, "the renewal is the last heartbeat")
}
