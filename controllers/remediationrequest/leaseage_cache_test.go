package remediationrequest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/wiring"
)

// TestCachedTridentLeaseAgesOnTheAPIServersTimes: a decision reads the Trident Lease
// from the manager's cache, and a Lease's hold counts from the API server's time of
// the holder's last write, which only the Lease's managedFields record. The cache
// keeps them for Trident's Leases: a Lease its holder re-acquired with a clock ten
// minutes slow counts from that write, and one never written again from its creation.
// Stripped, as the cache strips them from every other object, no re-acquisition could
// be ruled out, and no Lease would ever grow old enough to be released.
func TestCachedTridentLeaseAgesOnTheAPIServersTimes(t *testing.T) {
	ctx := context.Background()
	env.EnsureNamespaces(t, "trident")
	leases := map[string]*coordinationv1.Lease{}
	for _, pv := range []string{"pvc-cached-created", "pvc-cached-reacquired"} {
		require.NoError(t, env.Client.Create(ctx, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: pv},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
					Driver: facts.DefaultDriverName, VolumeHandle: pv,
				}},
			},
		}))
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("cached-holder"), AcquireTime: ptr.To(metav1.NowMicro())},
		}
		require.NoError(t, env.Client.Create(ctx, l, client.FieldOwner("trident-node")))
		leases[pv] = l
	}
	// The retry comes two seconds later (the API server's times have whole seconds),
	// from a holder whose clock is ten minutes slow.
	retried := leases["pvc-cached-reacquired"]
	time.Sleep(time.Until(retried.CreationTimestamp.Add(2*time.Second + 100*time.Millisecond)))
	retried.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(time.Now().Add(-10 * time.Minute)))
	require.NoError(t, env.Client.Update(ctx, retried, client.FieldOwner("trident-node-retry")))

	cacheOpts, clientOpts := wiring.CacheOptions(facts.DefaultConfig(), nil, types.NamespacedName{}, wiring.Runs{})
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme.Scheme, Cache: cacheOpts, Client: clientOpts,
		Metrics: metricsserver.Options{BindAddress: "0"}, Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	require.NoError(t, err)
	marks, err := wiring.PrepareCache(ctx, mgr)
	require.NoError(t, err)
	decide, _, _ := wiring.Gatherers(mgr, facts.DefaultConfig(), marks)
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	require.True(t, mgr.GetCache().WaitForCacheSync(ctx), "the manager's cache")
	require.Eventually(t, func() bool {
		got := &coordinationv1.Lease{}
		return mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(retried), got) == nil && got.ResourceVersion == retried.ResourceVersion
	}, 10*time.Second, 20*time.Millisecond, "the cache holds the retry")

	// The decision's clock ten minutes after the creation, as the API server's.
	decide.Clock = clocktesting.NewFakePassiveClock(leases["pvc-cached-created"].CreationTimestamp.Add(10 * time.Minute))
	gather := func(pv string) *v1alpha1.LeaseFacts {
		t.Helper()
		f, err := decide.Gather(ctx, &v1alpha1.RemediationRequest{Spec: v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{PersistentVolume: pv},
		}})
		require.NoError(t, err)
		require.True(t, f.Lease != nil && f.Lease.Exists, "lease facts = %+v", f.Lease)
		return f.Lease
	}
	created := gather("pvc-cached-created")
	assert.InDelta(t, 600, created.AgeSeconds, 1, "a Lease never written again is as old as its creation: %s", created.AgeFrom)
	assert.Contains(t, created.AgeFrom, "creationTimestamp ")
	reacquired := gather("pvc-cached-reacquired")
	assert.InDelta(t, 597, reacquired.AgeSeconds, 2, "the retry's hold counts from its write: %s", reacquired.AgeFrom)
	assert.Contains(t, reacquired.AgeFrom, `by the API server's clock (field manager "trident-node-retry")`)
}
