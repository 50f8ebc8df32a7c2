package faultproxy

// Tests against a real kube-apiserver (envtest): client-go through the proxy,
// and a direct client to check what really reached storage.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/remediator/remediator/test/testenv"
)

// The control plane starts on first use, so that the httptest tests run without it.
var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}
	os.Exit(code)
}

// apiserver returns the shared control plane and a direct clientset to it.
func apiserver(t *testing.T) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	envOnce.Do(func() { env, envErr = testenv.Start() })
	require.NoError(t, envErr)
	return env.Config, kubernetes.NewForConfigOrDie(env.Config)
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// namespace creates a namespace of the test's own.
func namespace(t *testing.T, direct kubernetes.Interface) string {
	t.Helper()
	name := strings.Trim(nonName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	_, err := direct.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return name
}

// through returns a clientset that goes through p, with a user agent of its own
// and the content type given ("" for JSON).
func through(t *testing.T, p *Proxy, contentType string) kubernetes.Interface {
	t.Helper()
	cfg := p.RESTConfig()
	cfg.UserAgent = "faultproxy-test/v0 (campaign)"
	cfg.ContentType = contentType
	cfg.QPS, cfg.Burst = 1000, 1000
	return kubernetes.NewForConfigOrDie(cfg)
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}
}

func TestClientGoWorksThroughTheProxy(t *testing.T) {
	upstream, direct := apiserver(t)
	for _, ct := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		t.Run(ct, func(t *testing.T) {
			ctx := context.Background()
			ns := namespace(t, direct)
			p := startProxy(t, upstream, noFaults())
			cs := through(t, p, ct)
			cms := cs.CoreV1().ConfigMaps(ns)

			w, err := cms.Watch(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			defer w.Stop()

			created, err := cms.Create(ctx, configMap("cm"), metav1.CreateOptions{})
			require.NoError(t, err)
			// The apiserver names the field manager after the user agent: the
			// agent reached it unchanged.
			require.NotEmpty(t, created.ManagedFields)
			assert.Equal(t, "faultproxy-test", created.ManagedFields[0].Manager)

			created.Data["k"] = "updated"
			_, err = cms.Update(ctx, created, metav1.UpdateOptions{})
			require.NoError(t, err)
			_, err = cms.Patch(ctx, "cm", types.MergePatchType, []byte(`{"data":{"p":"patched"}}`), metav1.PatchOptions{})
			require.NoError(t, err)
			got, err := cms.Get(ctx, "cm", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"k": "updated", "p": "patched"}, got.Data)
			list, err := cms.List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			assert.Len(t, list.Items, 1)
			require.NoError(t, cms.Delete(ctx, "cm", metav1.DeleteOptions{}))
			_, err = direct.CoreV1().ConfigMaps(ns).Get(ctx, "cm", metav1.GetOptions{})
			require.True(t, apierrors.IsNotFound(err), "%v", err)

			var events []watch.EventType
			for len(events) < 4 {
				select {
				case e := <-w.ResultChan():
					events = append(events, e.Type)
				case <-time.After(10 * time.Second):
					t.Fatalf("watch through the proxy saw only %v", events)
				}
			}
			assert.Equal(t, []watch.EventType{watch.Added, watch.Modified, watch.Modified, watch.Deleted}, events)

			s := p.Stats()
			assert.Zero(t, s.TotalInjected())
			assert.Equal(t, s.Requests, s.Clean, "every request, the open watch too, went through untouched")
		})
	}
}

func TestKubeconfigAndImpersonationReachTheAPIServer(t *testing.T) {
	upstream, _ := apiserver(t)
	p := startProxy(t, upstream, noFaults())
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, p.WriteKubeconfig(path))
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	require.NoError(t, err)
	assert.Equal(t, p.URL(), cfg.Host)
	assert.Empty(t, cfg.CertData, "the controller under test needs no credentials")
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"ops", "system:authenticated"}, Extra: map[string][]string{"scope": {"trident"}}}

	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	u := review.Status.UserInfo
	assert.Equal(t, "alice", u.Username)
	assert.Equal(t, []string{"ops", "system:authenticated"}, u.Groups)
	assert.Equal(t, authenticationv1.ExtraValue{"trident"}, u.Extra["scope"])
}

func TestConflictsFailWritesAndWriteNothing(t *testing.T) {
	upstream, direct := apiserver(t)
	ctx := context.Background()
	ns := namespace(t, direct)
	existing, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, configMap("existing"), metav1.CreateOptions{})
	require.NoError(t, err)
	p := startProxy(t, upstream, Config{ConflictRate: 1})
	cms := through(t, p, "application/vnd.kubernetes.protobuf").CoreV1().ConfigMaps(ns)

	_, err = cms.Create(ctx, configMap("new"), metav1.CreateOptions{})
	require.True(t, apierrors.IsConflict(err), "%v", err)
	_, err = direct.CoreV1().ConfigMaps(ns).Get(ctx, "new", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "a refused create wrote nothing: %v", err)

	changed := existing.DeepCopy()
	changed.Data["k"] = "changed"
	_, err = cms.Update(ctx, changed, metav1.UpdateOptions{})
	require.True(t, apierrors.IsConflict(err), "%v", err)
	assert.Contains(t, err.Error(), `Operation cannot be fulfilled on configmaps "existing": the object has been modified`)
	_, err = cms.Patch(ctx, "existing", types.MergePatchType, []byte(`{"data":{"k":"patched"}}`), metav1.PatchOptions{})
	require.True(t, apierrors.IsConflict(err), "%v", err)
	err = cms.Delete(ctx, "existing", metav1.DeleteOptions{})
	require.True(t, apierrors.IsConflict(err), "%v", err)

	got, err := cms.Get(ctx, "existing", metav1.GetOptions{})
	require.NoError(t, err, "reads draw no conflicts")
	assert.Equal(t, existing.ResourceVersion, got.ResourceVersion, "the object was neither changed nor deleted")

	s := p.Stats()
	assert.Equal(t, uint64(4), s.Injected[Conflict])
	assert.Equal(t, map[string]map[Kind]uint64{
		"POST": {Conflict: 1}, "PUT": {Conflict: 1}, "PATCH": {Conflict: 1}, "DELETE": {Conflict: 1},
	}, s.ByMethod)
	assert.Equal(t, map[string]map[Kind]uint64{"configmaps": {Conflict: 4}}, s.ByResource)
}

func TestDroppedRepliesHideWritesThatHappened(t *testing.T) {
	upstream, direct := apiserver(t)
	ctx := context.Background()
	ns := namespace(t, direct)
	const hold = 200 * time.Millisecond
	p := startProxy(t, upstream, Config{ReplyDroppedRate: 1, Hold: hold})
	cms := through(t, p, "").CoreV1().ConfigMaps(ns)

	start := time.Now()
	_, err := cms.Create(ctx, configMap("cm"), metav1.CreateOptions{})
	requireConnectionError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), hold, "the client waited, as for a timeout")
	got, err := direct.CoreV1().ConfigMaps(ns).Get(ctx, "cm", metav1.GetOptions{})
	require.NoError(t, err, "the create the client did not hear about happened")
	assert.Equal(t, "v", got.Data["k"])

	err = cms.Delete(ctx, "cm", metav1.DeleteOptions{})
	requireConnectionError(t, err)
	_, err = direct.CoreV1().ConfigMaps(ns).Get(ctx, "cm", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the delete happened: %v", err)

	dropped := p.DroppedReplies()
	require.Len(t, dropped, 2)
	assert.Equal(t, DroppedReply{Method: "POST", RequestURI: "/api/v1/namespaces/" + ns + "/configmaps",
		Resource: "configmaps", UserAgent: "faultproxy-test/v0 (campaign)", Status: 201, Time: dropped[0].Time}, dropped[0])
	assert.Equal(t, DroppedReply{Method: "DELETE", RequestURI: "/api/v1/namespaces/" + ns + "/configmaps/cm",
		Resource: "configmaps", UserAgent: "faultproxy-test/v0 (campaign)", Status: 200, Time: dropped[1].Time}, dropped[1])
	assert.WithinRange(t, dropped[0].Time, start, dropped[1].Time)
	assert.Equal(t, uint64(2), p.Stats().Injected[ReplyDropped])
}

func TestTimeoutsBeforeTheServerWriteNothing(t *testing.T) {
	upstream, direct := apiserver(t)
	ctx := context.Background()
	ns := namespace(t, direct)
	const hold = 200 * time.Millisecond
	p := startProxy(t, upstream, Config{TimeoutBeforeRate: 1, Hold: hold})
	cms := through(t, p, "").CoreV1().ConfigMaps(ns)

	start := time.Now()
	_, err := cms.Create(ctx, configMap("cm"), metav1.CreateOptions{})
	requireConnectionError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), hold)
	_, err = direct.CoreV1().ConfigMaps(ns).Get(ctx, "cm", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "nothing reached the apiserver: %v", err)

	// A client that gives up first sees its own timeout.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = cms.Create(short, configMap("cm"), metav1.CreateOptions{})
	require.ErrorIs(t, err, context.DeadlineExceeded)

	assert.Equal(t, uint64(2), p.Stats().Injected[TimeoutBeforeServer])
	assert.Empty(t, p.DroppedReplies())
}

// requireConnectionError checks that err is a broken connection, not an answer.
func requireConnectionError(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	var status apierrors.APIStatus
	require.False(t, errors.As(err, &status), "the client got an answer: %v", err)
	require.True(t, utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err), "%v", err)
}

func TestServerErrorsLookLikeTheAPIServers(t *testing.T) {
	upstream, direct := apiserver(t)
	ns := namespace(t, direct)
	cases := []struct {
		code       int
		is         func(error) bool
		retryAfter bool
	}{
		{500, apierrors.IsInternalError, false},
		{503, apierrors.IsServiceUnavailable, false},
		{504, apierrors.IsTimeout, false},
		{429, apierrors.IsTooManyRequests, true},
	}
	for _, c := range cases {
		for _, ct := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
			t.Run(fmt.Sprintf("%d %s", c.code, ct), func(t *testing.T) {
				p := startProxy(t, upstream, Config{ServerErrorRate: 1, ServerErrorCodes: []int{c.code}})
				rc := through(t, p, ct).CoreV1().RESTClient()
				// MaxRetries(0): client-go would retry a Retry-After for 10 s.
				res := rc.Post().Namespace(ns).Resource("configmaps").Body(configMap("cm")).MaxRetries(0).Do(context.Background())
				err := res.Error()
				require.True(t, c.is(err), "%v", err)
				assert.Contains(t, err.Error(), "injected by faultproxy")
				var code int
				res.StatusCode(&code)
				assert.Equal(t, c.code, code)
				if c.retryAfter {
					delay, ok := apierrors.SuggestsClientDelay(err)
					assert.True(t, ok)
					assert.Equal(t, 1, delay)
				}
				_, err = direct.CoreV1().ConfigMaps(ns).Get(context.Background(), "cm", metav1.GetOptions{})
				require.True(t, apierrors.IsNotFound(err), "%v", err)
			})
		}
	}
}

func TestClientGoRetriesAServiceUnavailableWithRetryAfter(t *testing.T) {
	upstream, direct := apiserver(t)
	ns := namespace(t, direct)
	// Seed 1 draws a 503 with Retry-After for the first request to the path:
	// client-go waits 1 s and sends it again (a fresh draw, here without one).
	p := startProxy(t, upstream, Config{Seed: 1, ServerErrorRate: 1, ServerErrorCodes: []int{503}})
	_, err := through(t, p, "").CoreV1().ConfigMaps(ns).Get(context.Background(), "cm", metav1.GetOptions{})
	require.True(t, apierrors.IsServiceUnavailable(err), "%v", err)
	s := p.Stats()
	assert.Greater(t, s.Injected[ServerError], uint64(1), "client-go retried on Retry-After")
	assert.Less(t, s.Injected[ServerError], uint64(11))
}

func TestInformersRecoverFromCutWatches(t *testing.T) {
	upstream, direct := apiserver(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := namespace(t, direct)
	p := startProxy(t, upstream, Config{Seed: 5, WatchDropRate: 1, WatchDropAfterMin: 100 * time.Millisecond, WatchDropAfterMax: 400 * time.Millisecond})
	factory := informers.NewSharedInformerFactoryWithOptions(through(t, p, "application/vnd.kubernetes.protobuf"), 0, informers.WithNamespace(ns))
	lister := factory.Core().V1().ConfigMaps().Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		require.True(t, ok, "%v", typ)
	}

	// Write directly, across several cuts, and expect the cache to end up
	// exactly like the apiserver.
	const n = 30
	for i := range n {
		name := fmt.Sprintf("cm-%d", i)
		_, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, configMap(name), metav1.CreateOptions{})
		require.NoError(t, err)
		if i%3 == 0 {
			_, err = direct.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"k":"patched"}}`), metav1.PatchOptions{})
			require.NoError(t, err)
		}
		if i%5 == 0 {
			require.NoError(t, direct.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}))
		}
		time.Sleep(50 * time.Millisecond)
	}
	want, err := direct.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, want.Items, n-n/5)
	require.Eventually(t, func() bool {
		got, err := lister.List(labels.Everything())
		if err != nil || len(got) != len(want.Items) {
			return false
		}
		versions := map[string]string{}
		for _, cm := range got {
			versions[cm.Name] = cm.ResourceVersion
		}
		for _, cm := range want.Items {
			if versions[cm.Name] != cm.ResourceVersion {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the informer's cache did not catch up")
	assert.GreaterOrEqual(t, p.Stats().Injected[WatchDropped], uint64(3), "the watch was cut several times meanwhile")
}
