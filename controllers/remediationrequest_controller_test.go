package controllers_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// startManager runs the reconciler the way `remediator controller` wires it.
func startManager(t *testing.T) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  scheme.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &controllers.RemediationRequestReconciler{
		Client:   mgr.GetClient(),
		Gatherer: &facts.Gatherer{Reader: mgr.GetAPIReader(), Config: facts.DefaultConfig()},
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
	for _, ns := range []string{"remediator", "trident"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
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
	if got.Status.Phase != v1alpha1.PhasePending {
		t.Errorf("phase = %q, want Pending", got.Status.Phase)
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
	if !controllerutil.ContainsFinalizer(got, v1alpha1.Finalizer) {
		t.Errorf("finalizer %s missing: %v", v1alpha1.Finalizer, got.Finalizers)
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
