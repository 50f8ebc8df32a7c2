package remediationrequest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/lifecycle"
	"github.com/remediator/remediator/test/badinput"
)

// controllerJudged are malformed requests admission cannot see through: a window
// that parses as a shape but not as a schedule, or never opens; a target or a fencing
// statement whose meaning depends on the cluster. The controller rejects each one,
// and its rejection names the field to fix.
type controllerJudged struct {
	name   string
	change func(*v1alpha1.RemediationRequestSpec)
	rule   string
	// field is what the Accepted condition's message must name.
	field string
	want  []string
	// lease is a Lease the request is about, which must be kept.
	lease string
}

// shutdownNode stages a holder node that is shut down: the out-of-service taint,
// and Ready False.
func shutdownNode(t *testing.T, name string) {
	t.Helper()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}},
	}
	create(t, node)
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", LastTransitionTime: metav1.Now()}}
	require.NoError(t, env.Client.Status().Update(context.Background(), node))
	inManagerCache(t, node)
}

// TestMalformedRequests is the bad-input campaign's table (issue 12, R3): every
// malformed request of test/badinput is refused at admission with its field named,
// every one only the controller can judge is rejected by the running controller with
// its field named, and a valid request filed among them is decided and carried out as
// if they were not there.
func TestMalformedRequests(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator", "trident", "app", corev1.NamespaceNodeLease)
	startManager(t)

	const down = "envtest-bad-down"
	shutdownNode(t, down)
	window := func(schedule string) func(*v1alpha1.RemediationRequestSpec) {
		return func(s *v1alpha1.RemediationRequestSpec) {
			s.MaintenanceWindow = &v1alpha1.MaintenanceWindow{Schedule: schedule, Duration: metav1.Duration{Duration: time.Hour}}
		}
	}
	// The window is weighed once the policy allows: each window case targets its own
	// Lease of the shut-down holder, which the policy would release at once.
	windowCase := func(name, schedule string, want ...string) controllerJudged {
		pv := "pvc-bad-" + name
		return controllerJudged{name: name, lease: pv, rule: lifecycle.RuleInvalidWindow, field: "spec.maintenanceWindow.schedule",
			want: append([]string{fmt.Sprintf("%q", schedule)}, want...),
			change: func(s *v1alpha1.RemediationRequestSpec) {
				s.Target = v1alpha1.Target{PersistentVolume: pv}
				window(schedule)(s)
			}}
	}
	target := func(tg v1alpha1.Target) func(*v1alpha1.RemediationRequestSpec) {
		return func(s *v1alpha1.RemediationRequestSpec) { s.Target = tg }
	}
	ref := func(ns, name string) *v1alpha1.ObjectReference {
		return &v1alpha1.ObjectReference{Namespace: ns, Name: name}
	}
	fencing := func(f v1alpha1.Fencing, pv string) func(*v1alpha1.RemediationRequestSpec) {
		return func(s *v1alpha1.RemediationRequestSpec) {
			s.Target, s.Fencing = v1alpha1.Target{PersistentVolume: pv}, &f
		}
	}
	judged := []controllerJudged{
		// February 30th: the shape passes admission, but the window never opens.
		windowCase("never-opens", "0 2 30 2 *", "never fires"),
		windowCase("minute-out-of-range", "99 2 * * *", "above maximum"),
		windowCase("unknown-time-zone", "CRON_TZ=Mars/Olympus_Mons 0 2 * * *", "Mars/Olympus_Mons"),
		windowCase("unknown-weekday", "0 2 * * FUNDAY", "FUNDAY"),
		windowCase("every-bad-duration", "@every 1.2.3h", "1.2.3h"),
		{name: "pv-not-found", change: target(v1alpha1.Target{PersistentVolume: "pvc-bad-nowhere"}), rule: "target-unresolved", field: "spec.target",
			want: []string{"PersistentVolume pvc-bad-nowhere not found"}},
		{name: "pvc-not-found", change: target(v1alpha1.Target{PersistentVolumeClaim: ref("app", "bad-nowhere")}), rule: "target-unresolved", field: "spec.target",
			want: []string{"PersistentVolumeClaim app/bad-nowhere not found"}},
		{name: "pvc-not-bound", change: target(v1alpha1.Target{PersistentVolumeClaim: ref("app", "bad-unbound")}), rule: "target-unresolved", field: "spec.target",
			want: []string{"PersistentVolumeClaim app/bad-unbound is not bound"}},
		{name: "pod-not-found", change: target(v1alpha1.Target{Pod: ref("app", "bad-nowhere")}), rule: "target-unresolved", field: "spec.target",
			want: []string{"Pod app/bad-nowhere not found"}},
		{name: "pod-without-claims", change: target(v1alpha1.Target{Pod: ref("app", "bad-no-claims")}), rule: "target-unresolved", field: "spec.target",
			want: []string{"Pod app/bad-no-claims mounts no PersistentVolumeClaim"}},
		{name: "node-not-found", change: func(s *v1alpha1.RemediationRequestSpec) {
			s.Remediation, s.Target = v1alpha1.RemediationReregisterCSIDriver, v1alpha1.Target{Node: "envtest-bad-nowhere"}
		}, rule: "target-unresolved", field: "spec.target.node", want: []string{"envtest-bad-nowhere"}},
		{name: "fencing-names-another-node", lease: "pvc-envtest-bad-cut-a", rule: "fencing-names-another-node", field: "spec.fencing.node",
			change: fencing(v1alpha1.Fencing{Confirmed: true, Method: v1alpha1.FencingNodeShutdown, Node: "envtest-bad-cut-z"}, "pvc-envtest-bad-cut-a"),
			want:   []string{"names node envtest-bad-cut-z"}},
		{name: "fencing-not-confirmed", lease: "pvc-envtest-bad-cut-b", rule: "unreachable-not-fenced", field: "spec.fencing.confirmed",
			change: fencing(v1alpha1.Fencing{Method: v1alpha1.FencingNodeShutdown, Node: "envtest-bad-cut-b"}, "pvc-envtest-bad-cut-b"),
			want:   []string{"envtest-bad-cut-b"}},
	}

	// The cluster the requests are about.
	for _, c := range judged {
		if strings.HasPrefix(c.lease, "pvc-bad-") {
			leaseHeldBy(t, c.lease, down)
		}
	}
	unreachableHolder(t, "envtest-bad-cut-a", time.Now())
	unreachableHolder(t, "envtest-bad-cut-b", time.Now())
	create(t, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "bad-unbound"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	})
	create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "bad-no-claims"},
		Spec:       corev1.PodSpec{NodeName: down, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	})
	const validPV = "pvc-bad-valid"
	leaseHeldBy(t, validPV, down)

	// File them all, the valid request in the middle, the admission cases between the
	// controller's: the controller runs throughout.
	admission := badinput.Admission()
	var keys []client.ObjectKey
	var valid client.ObjectKey
	refused := 0
	for i := range max(len(admission), len(judged)) {
		if i < len(judged) {
			keys = append(keys, requestFor(t, "bad-"+judged[i].name, v1alpha1.Target{}, judged[i].change))
		}
		if i == len(judged)/2 {
			valid = requestFor(t, "bad-neighbour-valid", v1alpha1.Target{PersistentVolume: validPV}, nil)
		}
		if i < len(admission) {
			tc := admission[i]
			var opts []client.CreateOption
			if tc.Strict {
				opts = append(opts, client.FieldValidation("Strict"))
			}
			err := env.Client.Create(ctx, tc.Malformed("remediator", fmt.Sprintf("bad-admission-%d", i)), opts...)
			require.Error(t, err, "admission accepted %s", tc.Name)
			require.True(t, apierrors.IsInvalid(err) || tc.Strict && apierrors.IsBadRequest(err), "%s: %v", tc.Name, err)
			for _, w := range append([]string{tc.Field}, tc.Want...) {
				require.Contains(t, err.Error(), w, "%s: the refusal must name what is wrong", tc.Name)
			}
			refused++
		}
	}

	rr := waitFor(t, valid, 30*time.Second, "Succeeded", terminal)
	assert.Equal(t, v1alpha1.PhaseSucceeded, rr.Status.Phase, "the valid request among the malformed: %+v", rr.Status.Conditions)
	assert.Equal(t, "holder-shutdown", rr.Status.Decision.Rule)
	assert.False(t, leaseExists(t, validPV), "the valid request's Lease is released")

	rejected := 0
	for i, c := range judged {
		t.Run(c.name, func(t *testing.T) {
			rr := waitFor(t, keys[i], 30*time.Second, "a terminal phase", terminal)
			require.Equal(t, v1alpha1.PhaseRejected, rr.Status.Phase, "%+v", rr.Status.Decision)
			assert.Equal(t, c.rule, rr.Status.Decision.Rule)
			accepted := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionAccepted)
			require.NotNil(t, accepted)
			assert.Equal(t, metav1.ConditionFalse, accepted.Status)
			for _, w := range append([]string{c.field}, c.want...) {
				assert.Contains(t, accepted.Message, w, "the rejection must name what to fix")
			}
			if c.lease != "" {
				assert.True(t, leaseExists(t, c.lease), "the Lease of a rejected request is kept")
			}
			t.Logf("rejected by %s: %s", rr.Status.Decision.Rule, accepted.Message)
			rejected++
		})
	}
	list := &v1alpha1.RemediationRequestList{}
	require.NoError(t, env.Client.List(ctx, list, client.InNamespace("remediator")))
	for _, item := range list.Items {
		assert.False(t, strings.HasPrefix(item.Name, "bad-admission-"), "%s was stored", item.Name)
	}
	require.Equal(t, len(judged), rejected)
	require.GreaterOrEqual(t, refused+rejected, 30, "the campaign asks for at least 30 malformed requests")
	t.Logf("%d malformed requests: %d refused at admission, %d rejected by the controller; the valid request among them %s by %s",
		refused+rejected, refused, rejected, rr.Status.Phase, rr.Status.Decision.Rule)
}
