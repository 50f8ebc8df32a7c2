package remediationrequest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/pause"
	"github.com/remediator/remediator/controllers/remediationrequest"
	"github.com/remediator/remediator/controllers/setup"
	"github.com/remediator/remediator/controllers/verification"
	"github.com/remediator/remediator/controllers/wiring"
	"github.com/remediator/remediator/policies"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/testenv"
)

var env *testenv.Env

// managerCache is the cache of the manager the running test started (see
// inManagerCache); nil before the first one.
var managerCache client.Reader

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// startManager runs the reconciler the way `remediator-controller` wires it; opts
// adjust it (a cap, an injected clock) before it starts.
func startManager(t *testing.T, opts ...func(*remediationrequest.Reconciler)) {
	t.Helper()
	startManagerOn(t, env.Config, opts...)
}

// startStoppableManager is startManager, and returns what stops the manager before
// the test ends (a controller restart); the test's cleanup stops it otherwise.
func startStoppableManager(t *testing.T, opts ...func(*remediationrequest.Reconciler)) (stop func()) {
	t.Helper()
	return startManagerOn(t, env.Config, opts...)
}

// startManagerOn is startManager against another control plane.
func startManagerOn(t *testing.T, cfg *rest.Config, opts ...func(*remediationrequest.Reconciler)) (stop func()) {
	t.Helper()
	return startManagerLogging(t, cfg, logr.Logger{}, 0, opts...)
}

// startManagerLogging is startManagerOn with the manager logging to log (the
// default logger when it has no sink), for tests that read the controller's lines,
// and with the verification of fixes for verifyFixFor (none when zero), as
// --verify-fix-for wires it.
func startManagerLogging(t *testing.T, cfg *rest.Config, log logr.Logger, verifyFixFor time.Duration, opts ...func(*remediationrequest.Reconciler)) (stop func()) {
	t.Helper()
	cacheOpts, clientOpts := wiring.CacheOptions(facts.DefaultConfig(), nil, types.NamespacedName{}, wiring.Runs{Detect: true, VerifyFixes: true})
	mgrOpts := ctrl.Options{
		Scheme:  scheme.Scheme,
		Cache:   cacheOpts,
		Client:  clientOpts,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Each test starts its own manager in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if log.GetSink() != nil {
		mgrOpts.Logger = log
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	require.NoError(t, err)
	// The controller's namespace, where admission keeps the slots Lease.
	env.EnsureNamespaces(t, pause.DefaultConfigMap.Namespace)
	marks, err := wiring.PrepareCache(context.Background(), mgr)
	require.NoError(t, err)
	decide, fresh, freshRelease := wiring.Gatherers(mgr, facts.DefaultConfig(), marks)
	managerCache = mgr.GetClient()
	t.Cleanup(func() { managerCache = nil })
	policy, err := policies.Embedded()
	require.NoError(t, err)
	playbooks, err := remediations.DefaultPlaybooks()
	require.NoError(t, err)
	r := &remediationrequest.Reconciler{
		Client:       mgr.GetClient(),
		Reader:       mgr.GetAPIReader(),
		Gatherer:     decide,
		Fresh:        fresh,
		FreshRelease: freshRelease,
		Workers:      4,
		Policy:       policy,
		Playbooks:    playbooks,
		Timeouts:     remediations.DefaultTimeouts,
		Recorder:     mgr.GetEventRecorderFor("remediator-test"),
	}
	for _, o := range opts {
		o(r)
	}
	v := &verification.Reconciler{Client: mgr.GetClient(), Gatherer: wiring.VerifyGatherer(mgr, facts.DefaultConfig()), Window: verifyFixFor, Recorder: r.Recorder, Clock: r.Clock}
	require.NoError(t, setup.Runnables(mgr, r, v))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		assert.NoError(t, <-done, "manager")
	})
	t.Cleanup(stop)
	return stop
}

func TestReconcileRecordsFacts(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	env.EnsureNamespaces(t, "remediator", "trident")
	// A request may name a Trident namespace of its own only when the settings allow it.
	startManager(t, func(r *remediationrequest.Reconciler) {
		for _, g := range []*facts.Gatherer{r.Gatherer, r.Fresh, r.FreshRelease} {
			g.Config.AllowedTridentNamespaces = []string{"trident-alt"}
		}
	})

	rr := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "missing-pv"},
		Spec: v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target:      v1alpha1.Target{PersistentVolume: "pvc-does-not-exist"},
			Reason:      "stuck pods on a volume that may be gone",
		},
	}
	require.NoError(t, c.Create(ctx, rr))
	key := types.NamespacedName{Namespace: rr.Namespace, Name: rr.Name}
	got := &v1alpha1.RemediationRequest{}
	testenv.Eventually(t, "facts in status", func() (bool, string) {
		if err := c.Get(ctx, key, got); err != nil {
			return false, err.Error()
		}
		return got.Status.Facts != nil && got.Status.ObservedGeneration == got.Generation, ""
	})
	f := got.Status.Facts
	assert.Equal(t, v1alpha1.PhaseRejected, got.Status.Phase, "phase, want Rejected by target-unresolved")
	if assert.NotNil(t, got.Status.Decision, "decision") {
		assert.Equal(t, "target-unresolved", got.Status.Decision.Rule, "decision = %+v", got.Status.Decision)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAccepted); assert.NotNil(t, c, "Accepted condition") {
		assert.Equal(t, metav1.ConditionFalse, c.Status, "Accepted condition = %+v", c)
		assert.Equal(t, "TargetUnresolved", c.Reason, "Accepted condition = %+v", c)
	}
	assert.False(t, f.Target.Found, "target facts = %+v", f.Target)
	assert.Equal(t, "PersistentVolume pvc-does-not-exist", f.Target.Ref, "target facts = %+v", f.Target)
	assert.Equal(t, "PersistentVolume pvc-does-not-exist not found; the Lease of that name is still looked up", f.Target.Message, "target message")
	if assert.NotNil(t, f.Lease, "lease facts") {
		assert.False(t, f.Lease.Exists, "lease facts = %+v", f.Lease)
		assert.Equal(t, "trident", f.Lease.Namespace, "lease facts = %+v", f.Lease)
		assert.Equal(t, "pvc-does-not-exist", f.Lease.Name, "lease facts = %+v", f.Lease)
	}
	assert.Equal(t, "trident", f.TridentNamespace, "facts header")
	assert.Equal(t, facts.DefaultDriverName, f.DriverName, "facts header")
	assert.False(t, f.GatheredAt.IsZero(), "facts header: no gatheredAt")
	// A rejected request has nothing to restore, so its deletion waits for nothing.
	assert.False(t, controllerutil.ContainsFinalizer(got, v1alpha1.Finalizer), "finalizer %s on a rejected request: %v", v1alpha1.Finalizer, got.Finalizers)

	// A spec change is a new generation and gets new facts for it.
	gen := got.Generation
	got.Spec.Mode = v1alpha1.ModeDryRun
	got.Spec.TridentNamespace = "trident-alt"
	require.NoError(t, c.Update(ctx, got))
	testenv.Eventually(t, "facts for the new generation", func() (bool, string) {
		if err := c.Get(ctx, key, got); err != nil {
			return false, err.Error()
		}
		return got.Generation > gen && got.Status.ObservedGeneration == got.Generation &&
			got.Status.Facts.TridentNamespace == "trident-alt", ""
	})
	require.NotNil(t, got.Status.Facts.Lease, "lease facts")
	assert.Equal(t, "trident-alt", got.Status.Facts.Lease.Namespace, "lease looked up in the wrong namespace, want the per-request override")

	// Deleting the request releases the finalizer, so the object goes away.
	require.NoError(t, c.Delete(ctx, got))
	testenv.Eventually(t, "request deleted", func() (bool, string) {
		err := c.Get(ctx, key, got)
		return apierrors.IsNotFound(err), "still there"
	})
}

// TestShutdownHolderReleasesLease runs the node-shutdown playbook against a real API
// server: the Lease is deleted with its decision-time preconditions.
// shutdownRelease stages a shut-down holder node named envtest-<name> holding the
// Lease of PV pvc-envtest-<name>, and returns the Lease and a request (not created
// yet) to release it.
func shutdownRelease(t *testing.T, name string) (*coordinationv1.Lease, *v1alpha1.RemediationRequest) {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	env.EnsureNamespaces(t, "remediator", "trident", corev1.NamespaceNodeLease)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "envtest-" + name},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}},
	}
	require.NoError(t, c.Create(ctx, node))
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", LastTransitionTime: metav1.Now()}}
	require.NoError(t, c.Status().Update(ctx, node))
	holder := node.Name
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-envtest-" + name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &metav1.MicroTime{Time: time.Now().Add(-time.Hour)}},
	}
	require.NoError(t, c.Create(ctx, lease))
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: lease.Name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: facts.DefaultDriverName, VolumeHandle: lease.Name}},
		},
	}
	require.NoError(t, c.Create(ctx, pv))
	return lease, &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: name},
		Spec: v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target:      v1alpha1.Target{PersistentVolume: lease.Name},
			Reason:      "holder was powered off",
		},
	}
}

func TestShutdownHolderReleasesLease(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	startManager(t)
	lease, rr := shutdownRelease(t, "shutdown")
	require.NoError(t, c.Create(ctx, rr))
	got := &v1alpha1.RemediationRequest{}
	testenv.Eventually(t, "request Succeeded", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(rr), got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == v1alpha1.PhaseSucceeded, fmt.Sprintf("%s %+v", got.Status.Phase, got.Status.Steps)
	})
	err := c.Get(ctx, client.ObjectKeyFromObject(lease), &coordinationv1.Lease{})
	assert.True(t, apierrors.IsNotFound(err), "Lease still there: %v", err)
	if d := got.Status.Decision; assert.NotNil(t, d, "decision") {
		assert.Equal(t, "node-shutdown", d.Playbook, "decision = %+v", d)
		assert.Equal(t, "holder-shutdown", d.Rule, "decision = %+v", d)
		assert.NotEmpty(t, d.PolicyDigest, "decision = %+v", d)
	}
	st := got.Status.Steps
	if assert.Len(t, st, 1, "journal") {
		assert.Equal(t, "deleteLease", st[0].Name, "journal = %+v", st)
		assert.Equal(t, v1alpha1.StepSucceeded, st[0].State, "journal = %+v", st)
		assert.Equal(t, string(lease.UID), st[0].ObjectUID, "journal = %+v", st)
		assert.NotNil(t, st[0].StartedAt, "journal = %+v", st)
		assert.NotNil(t, st[0].CompletedAt, "journal = %+v", st)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionSucceeded); assert.NotNil(t, c, "Succeeded condition") {
		assert.Equal(t, metav1.ConditionTrue, c.Status, "Succeeded condition = %+v", c)
	}
}

// TestMaintenanceWindowGatesThePlaybook: an allowed request outside its window waits
// for the window with the Lease untouched; an unparsable window is rejected.
func TestMaintenanceWindowGatesThePlaybook(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	env.EnsureNamespaces(t, "remediator", "trident")
	startManager(t)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "envtest-window"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Effect: corev1.TaintEffectNoExecute}}},
	}
	require.NoError(t, c.Create(ctx, node))
	holder := node.Name
	for _, name := range []string{"pvc-window-later", "pvc-window-bad"} {
		require.NoError(t, c.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
		}))
		require.NoError(t, c.Create(ctx, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: facts.DefaultDriverName, VolumeHandle: name}},
			},
		}))
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
		require.NoError(t, c.Create(ctx, rr))
		return client.ObjectKeyFromObject(rr)
	}
	later := mk("window-later", "pvc-window-later", fmt.Sprintf("CRON_TZ=UTC %d %d * * *", opens.Minute(), opens.Hour()))
	// February 30th: the shape passes admission, but the window never opens. It used
	// to count as always open.
	bad := mk("window-bad", "pvc-window-bad", "0 2 30 2 *")

	got := &v1alpha1.RemediationRequest{}
	testenv.Eventually(t, "request waiting for its window", func() (bool, string) {
		if err := c.Get(ctx, later, got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == v1alpha1.PhaseWaiting, string(got.Status.Phase)
	})
	p := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionProgressing)
	if assert.NotNil(t, p, "Progressing condition") {
		assert.Equal(t, "WaitingForMaintenanceWindow", p.Reason, "Progressing = %+v", p)
	}
	if assert.NotNil(t, got.Status.Decision.RecheckAt, "recheckAt, want the window opening at %s", opens.Truncate(time.Minute)) {
		assert.True(t, got.Status.Decision.RecheckAt.Time.Equal(opens.Truncate(time.Minute)),
			"recheckAt = %v, want the window opening at %s", got.Status.Decision.RecheckAt, opens.Truncate(time.Minute))
	}
	assert.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "trident", Name: "pvc-window-later"}, &coordinationv1.Lease{}),
		"the Lease must wait for the window")
	testenv.Eventually(t, "invalid window rejected", func() (bool, string) {
		if err := c.Get(ctx, bad, got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == v1alpha1.PhaseRejected && got.Status.Decision.Rule == "invalid-maintenance-window", string(got.Status.Phase)
	})
	assert.Contains(t, got.Status.Decision.Message, "never", "the rejection must say the window never opens")
	assert.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "trident", Name: "pvc-window-bad"}, &coordinationv1.Lease{}),
		"the Lease must stay")
}
