package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/testenv"
)

var env *testenv.Env

// managerCache is the cache of the manager the running test started (see
// inManagerCache); nil before the first one.
var managerCache client.Reader

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// startManager runs the reconciler the way `remediator controller` wires it; opts
// adjust it (a cap, an injected clock) before it starts.
func startManager(t *testing.T, opts ...func(*controllers.RemediationRequestReconciler)) {
	t.Helper()
	startManagerOn(t, env.Config, opts...)
}

// startManagerOn is startManager against another control plane.
func startManagerOn(t *testing.T, cfg *rest.Config, opts ...func(*controllers.RemediationRequestReconciler)) {
	t.Helper()
	cacheOpts, clientOpts := controllers.CacheOptions(facts.DefaultConfig(), nil)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme.Scheme,
		Cache:   cacheOpts,
		Client:  clientOpts,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Each test starts its own manager in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.PrepareCache(context.Background(), mgr); err != nil {
		t.Fatal(err)
	}
	decide, recheck, recheckRelease := controllers.Gatherers(mgr, facts.DefaultConfig())
	managerCache = mgr.GetClient()
	t.Cleanup(func() { managerCache = nil })
	policy, err := policies.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	playbooks, err := remediations.DefaultPlaybooks()
	if err != nil {
		t.Fatal(err)
	}
	r := &controllers.RemediationRequestReconciler{
		Client:         mgr.GetClient(),
		Reader:         mgr.GetAPIReader(),
		Gatherer:       decide,
		Recheck:        recheck,
		RecheckRelease: recheckRelease,
		Workers:        4,
		Policy:         policy,
		Playbooks:      playbooks,
		Timeouts:       remediations.DefaultTimeouts,
		Recorder:       mgr.GetEventRecorderFor("remediator-test"),
	}
	for _, o := range opts {
		o(r)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

func ensureNamespaces(t *testing.T, names ...string) {
	t.Helper()
	for _, ns := range names {
		err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last state: %s", what, last)
}

func TestReconcileRecordsFacts(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	ensureNamespaces(t, "remediator", "trident")
	startManager(t)

	rr := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "missing-pv"},
		Spec: v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target:      v1alpha1.Target{PersistentVolume: "pvc-does-not-exist"},
			Reason:      "stuck pods on a volume that may be gone",
		},
	}
	if err := c.Create(ctx, rr); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: rr.Namespace, Name: rr.Name}
	got := &v1alpha1.RemediationRequest{}
	eventually(t, "facts in status", func() (bool, string) {
		if err := c.Get(ctx, key, got); err != nil {
			return false, err.Error()
		}
		return got.Status.Facts != nil && got.Status.ObservedGeneration == got.Generation, ""
	})
	f := got.Status.Facts
	if got.Status.Phase != v1alpha1.PhaseRejected || got.Status.Decision == nil || got.Status.Decision.Rule != "target-unresolved" {
		t.Errorf("phase = %q, decision = %+v; want Rejected by target-unresolved", got.Status.Phase, got.Status.Decision)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAccepted); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "TargetUnresolved" {
		t.Errorf("Accepted condition = %+v", c)
	}
	if f.Target.Found || f.Target.Ref != "PersistentVolume pvc-does-not-exist" ||
		f.Target.Message != "PersistentVolume pvc-does-not-exist not found; the Lease of that name is still looked up" {
		t.Errorf("target facts = %+v", f.Target)
	}
	if f.Lease == nil || f.Lease.Exists || f.Lease.Namespace != "trident" || f.Lease.Name != "pvc-does-not-exist" {
		t.Errorf("lease facts = %+v", f.Lease)
	}
	if f.TridentNamespace != "trident" || f.DriverName != facts.DefaultDriverName || f.GatheredAt.IsZero() {
		t.Errorf("facts header = %+v", f)
	}
	// A rejected request has nothing to restore, so its deletion waits for nothing.
	if controllerutil.ContainsFinalizer(got, v1alpha1.Finalizer) {
		t.Errorf("finalizer %s on a rejected request: %v", v1alpha1.Finalizer, got.Finalizers)
	}

	// A spec change is a new generation and gets new facts for it.
	gen := got.Generation
	got.Spec.Mode = v1alpha1.ModeDryRun
	got.Spec.TridentNamespace = "trident-alt"
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	eventually(t, "facts for the new generation", func() (bool, string) {
		if err := c.Get(ctx, key, got); err != nil {
			return false, err.Error()
		}
		return got.Generation > gen && got.Status.ObservedGeneration == got.Generation &&
			got.Status.Facts.TridentNamespace == "trident-alt", ""
	})
	if got.Status.Facts.Lease.Namespace != "trident-alt" {
		t.Errorf("lease looked up in %q, want the per-request override", got.Status.Facts.Lease.Namespace)
	}

	// Deleting the request releases the finalizer, so the object goes away.
	if err := c.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	eventually(t, "request deleted", func() (bool, string) {
		err := c.Get(ctx, key, got)
		return apierrors.IsNotFound(err), "still there"
	})
}

// TestShutdownHolderReleasesLease runs the node-shutdown playbook against a real API
// server: the Lease is deleted with its decision-time preconditions.
func TestShutdownHolderReleasesLease(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	ensureNamespaces(t, "remediator", "trident", corev1.NamespaceNodeLease)
	startManager(t)

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "envtest-shutdown"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}},
	}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	holder := node.Name
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-envtest-shutdown"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &metav1.MicroTime{Time: time.Now().Add(-time.Hour)}},
	}
	if err := c.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: lease.Name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: facts.DefaultDriverName, VolumeHandle: lease.Name}},
		},
	}
	if err := c.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	rr := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "shutdown"},
		Spec: v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target:      v1alpha1.Target{PersistentVolume: lease.Name},
			Reason:      "holder was powered off",
		},
	}
	if err := c.Create(ctx, rr); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.RemediationRequest{}
	eventually(t, "request Succeeded", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(rr), got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == v1alpha1.PhaseSucceeded, fmt.Sprintf("%s %+v", got.Status.Phase, got.Status.Steps)
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(lease), &coordinationv1.Lease{}); !apierrors.IsNotFound(err) {
		t.Errorf("Lease still there: %v", err)
	}
	if d := got.Status.Decision; d.Playbook != "node-shutdown" || d.Rule != "holder-shutdown" || d.PolicyDigest == "" {
		t.Errorf("decision = %+v", d)
	}
	st := got.Status.Steps
	if len(st) != 1 || st[0].Name != "deleteLease" || st[0].State != v1alpha1.StepSucceeded || st[0].ObjectUID != string(lease.UID) ||
		st[0].StartedAt == nil || st[0].CompletedAt == nil {
		t.Errorf("journal = %+v", st)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionSucceeded); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Succeeded condition = %+v", c)
	}
}

// TestMaintenanceWindowGatesThePlaybook: an allowed request outside its window waits
// for the window with the Lease untouched; an unparsable window is rejected.
func TestMaintenanceWindowGatesThePlaybook(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	ensureNamespaces(t, "remediator", "trident")
	startManager(t)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "envtest-window"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Effect: corev1.TaintEffectNoExecute}}},
	}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	holder := node.Name
	for _, name := range []string{"pvc-window-later", "pvc-window-bad"} {
		if err := c.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: facts.DefaultDriverName, VolumeHandle: name}},
			},
		}); err != nil {
			t.Fatal(err)
		}
	}
	opens := time.Now().UTC().Add(3 * time.Hour)
	mk := func(name, pv, schedule string) client.ObjectKey {
		rr := &v1alpha1.RemediationRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: name},
			Spec: v1alpha1.RemediationRequestSpec{
				Remediation:       v1alpha1.RemediationReleaseLUKSLease,
				Target:            v1alpha1.Target{PersistentVolume: pv},
				Reason:            "holder was powered off; change window only",
				MaintenanceWindow: &v1alpha1.MaintenanceWindow{Schedule: schedule, Duration: metav1.Duration{Duration: time.Hour}},
			},
		}
		if err := c.Create(ctx, rr); err != nil {
			t.Fatal(err)
		}
		return client.ObjectKeyFromObject(rr)
	}
	later := mk("window-later", "pvc-window-later", fmt.Sprintf("CRON_TZ=UTC %d %d * * *", opens.Minute(), opens.Hour()))
	// February 30th: the shape passes admission, but the window never opens. It used
	// to count as always open.
	bad := mk("window-bad", "pvc-window-bad", "0 2 30 2 *")

	got := &v1alpha1.RemediationRequest{}
	eventually(t, "request waiting for its window", func() (bool, string) {
		if err := c.Get(ctx, later, got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == v1alpha1.PhaseWaiting, string(got.Status.Phase)
	})
	p := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionProgressing)
	if p == nil || p.Reason != "WaitingForMaintenanceWindow" || got.Status.Decision.RecheckAt == nil ||
		!got.Status.Decision.RecheckAt.Time.Equal(opens.Truncate(time.Minute)) {
		t.Errorf("Progressing = %+v, recheckAt = %v, want the window opening at %s", p, got.Status.Decision.RecheckAt, opens.Truncate(time.Minute))
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "trident", Name: "pvc-window-later"}, &coordinationv1.Lease{}); err != nil {
		t.Errorf("the Lease must wait for the window: %v", err)
	}
	eventually(t, "invalid window rejected", func() (bool, string) {
		if err := c.Get(ctx, bad, got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == v1alpha1.PhaseRejected && got.Status.Decision.Rule == "invalid-maintenance-window", string(got.Status.Phase)
	})
	if !strings.Contains(got.Status.Decision.Message, "never") {
		t.Errorf("the rejection must say the window never opens: %q", got.Status.Decision.Message)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "trident", Name: "pvc-window-bad"}, &coordinationv1.Lease{}); err != nil {
		t.Errorf("the Lease must stay: %v", err)
	}
}
