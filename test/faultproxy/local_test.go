package faultproxy

// Tests against httptest upstreams: what the proxy forwards, and which faults it
// draws, observed from the wire.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

func startProxy(t *testing.T, upstream *rest.Config, cfg Config) *Proxy {
	t.Helper()
	p, err := New(upstream, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// noFaults forwards everything: a Config with every rate at zero.
func noFaults() Config { return Config{Hold: 10 * time.Millisecond} }

// rawClient opens a new connection per request, so that net/http never replays
// a GET after a reset and every request the test sends is one the proxy sees.
func rawClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

func TestParsePath(t *testing.T) {
	cases := []struct {
		path, key, group, resource, name, sub string
		watch                                 bool
	}{
		{"/api/v1/namespaces/ns/pods/web-0", "pods", "", "pods", "web-0", "", false},
		{"/api/v1/namespaces/ns/pods/web-0/eviction", "pods/eviction", "", "pods", "web-0", "eviction", false},
		{"/api/v1/pods", "pods", "", "pods", "", "", false},
		{"/api/v1/namespaces", "namespaces", "", "namespaces", "", "", false},
		{"/api/v1/namespaces/ns", "namespaces", "", "namespaces", "ns", "", false},
		{"/api/v1/namespaces/ns/status", "namespaces/status", "", "namespaces", "ns", "status", false},
		{"/api/v1/namespaces/ns/configmaps", "configmaps", "", "configmaps", "", "", false},
		{"/apis/coordination.k8s.io/v1/namespaces/trident/leases/l1", "leases.coordination.k8s.io", "coordination.k8s.io", "leases", "l1", "", false},
		{"/apis/storage.k8s.io/v1/csinodes/n1", "csinodes.storage.k8s.io", "storage.k8s.io", "csinodes", "n1", "", false},
		{"/api/v1/watch/namespaces/ns/pods", "pods", "", "pods", "", "", true},
		{"/api/v1/nodes/n1/status", "nodes/status", "", "nodes", "n1", "status", false},
		// No resource: discovery and the rest keep their path as the key.
		{"/api", "/api", "", "", "", "", false},
		{"/api/v1", "/api/v1", "", "", "", "", false},
		{"/apis/apps/v1", "/apis/apps/v1", "", "", "", "", false},
		{"/version", "/version", "", "", "", "", false},
		{"/healthz", "/healthz", "", "", "", "", false},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			got := parsePath(c.path)
			assert.Equal(t, target{group: c.group, resource: c.resource, name: c.name, subresource: c.sub, watch: c.watch, key: c.key}, got)
			r := httptest.NewRequest(http.MethodGet, c.path, nil)
			assert.Equal(t, c.resource == "", NonResource(r))
		})
	}
}

func TestConfigValidation(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want string // "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"all zero", func(c *Config) { *c = Config{} }, ""},
		{"every write a conflict", func(c *Config) { *c = Config{ConflictRate: 1} }, ""},
		{"negative rate", func(c *Config) { c.ConflictRate = -0.1 }, "outside [0, 1]"},
		{"rate above one", func(c *Config) { c.WatchDropRate = 1.5 }, "outside [0, 1]"},
		{"exclusive rates above one", func(c *Config) { c.ServerErrorRate, c.ConflictRate = 0.6, 0.5 }, "sum to"},
		{"watch drops without a duration", func(c *Config) { c.WatchDropAfterMin = 0 }, "WatchDropAfterMin"},
		{"watch drop range reversed", func(c *Config) { c.WatchDropAfterMax = c.WatchDropAfterMin / 2 }, "WatchDropAfterMin"},
		{"server errors without codes", func(c *Config) { c.ServerErrorCodes = nil }, "needs ServerErrorCodes"},
		{"a code the apiserver does not send for overload", func(c *Config) { c.ServerErrorCodes = []int{502} }, "unsupported server error code 502"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig(1)
			c.edit(&cfg)
			_, err := New(&rest.Config{Host: "http://127.0.0.1:1"}, cfg)
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.want)
		})
	}
}

// recorder is an upstream that remembers the last request it got.
type recorder struct {
	mu     sync.Mutex
	header http.Header
	body   []byte
	uri    string
	hits   atomic.Int64
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec.mu.Lock()
	rec.header, rec.body, rec.uri = r.Header.Clone(), body, r.URL.RequestURI()
	rec.mu.Unlock()
	rec.hits.Add(1)
	w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
	w.Header().Set("Audit-Id", "abc")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte("reply"))
}

func TestForwardsHeadersAndBodiesUnchanged(t *testing.T) {
	rec := &recorder{}
	up := httptest.NewTLSServer(rec)
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, noFaults())

	req, err := http.NewRequest(http.MethodPost, p.URL()+"/api/v1/namespaces/ns/pods?fieldManager=x&dryRun=All", strings.NewReader("\x6b\x38\x73\x00 protobuf body"))
	require.NoError(t, err)
	sent := http.Header{
		"User-Agent":              {"remediator/v1.2.3 (linux/amd64) kubernetes/abcdef/leader-election"},
		"Accept":                  {"application/vnd.kubernetes.protobuf, */*"},
		"Content-Type":            {"application/vnd.kubernetes.protobuf"},
		"Impersonate-User":        {"system:serviceaccount:remediator:remediator"},
		"Impersonate-Group":       {"system:serviceaccounts", "system:authenticated"},
		"Impersonate-Extra-Scope": {"a", "b"},
		"Impersonate-Uid":         {"1234"},
	}
	req.Header = sent.Clone()
	resp, err := rawClient().Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, "reply", string(got))
	assert.Equal(t, "application/vnd.kubernetes.protobuf", resp.Header.Get("Content-Type"))
	assert.Equal(t, "abc", resp.Header.Get("Audit-Id"))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for k, v := range sent {
		assert.Equal(t, v, rec.header.Values(k), k)
	}
	assert.Empty(t, rec.header.Values("X-Forwarded-For"), "the proxy stays invisible")
	assert.Equal(t, "\x6b\x38\x73\x00 protobuf body", string(rec.body))
	assert.Equal(t, "/api/v1/namespaces/ns/pods?fieldManager=x&dryRun=All", rec.uri)
}

func TestStreamsWatchEventsAsTheyArrive(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"type":"ADDED"}`+"\n")
		_ = http.NewResponseController(w).Flush()
		<-release // the second event waits for the client to have read the first
		_, _ = io.WriteString(w, `{"type":"DELETED"}`+"\n")
	}))
	defer up.Close()
	defer close(release)
	p := startProxy(t, &rest.Config{Host: up.URL}, noFaults())

	resp, err := rawClient().Get(p.URL() + "/api/v1/pods?watch=true")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	first := make(chan string, 1)
	go func() {
		buf := make([]byte, 64)
		n, _ := resp.Body.Read(buf)
		first <- string(buf[:n])
	}()
	select {
	case got := <-first:
		assert.Equal(t, `{"type":"ADDED"}`+"\n", got)
	case <-time.After(5 * time.Second):
		t.Fatal("the first watch event was held back until the stream ended")
	}
}

// outcome is what one request saw, from the client and the upstream.
type outcome struct {
	status  int  // 0: the connection broke
	reached bool // the upstream got the request
}

// mixedRun sends n requests of several methods and paths through a proxy with
// cfg and returns what each saw.
func mixedRun(t *testing.T, cfg Config, n int) ([]outcome, *Proxy) {
	t.Helper()
	rec := &recorder{}
	up := httptest.NewServer(rec)
	t.Cleanup(up.Close)
	p := startProxy(t, &rest.Config{Host: up.URL}, cfg)
	c := rawClient()
	methods := []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	paths := []string{"/api/v1/namespaces/ns/pods/a", "/apis/coordination.k8s.io/v1/namespaces/trident/leases/l", "/api/v1/nodes/n1"}
	out := make([]outcome, n)
	for i := range out {
		m, path := methods[i%len(methods)], paths[i%len(paths)]
		before := rec.hits.Load()
		req, err := http.NewRequest(m, p.URL()+path, bytes.NewReader([]byte("{}")))
		require.NoError(t, err)
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			out[i].status = resp.StatusCode
		}
		out[i].reached = rec.hits.Load() > before
	}
	return out, p
}

func TestSeedMakesTheFaultSequenceDeterministic(t *testing.T) {
	cfg := DefaultConfig(42)
	cfg.Hold = time.Millisecond
	a, _ := mixedRun(t, cfg, 150)
	b, _ := mixedRun(t, cfg, 150)
	require.Equal(t, a, b, "same seed, same requests: same faults")
	cfg.Seed = 43
	c, _ := mixedRun(t, cfg, 150)
	require.NotEqual(t, a, c, "another seed draws other faults")
}

func TestStatsCountWhatTheClientsSaw(t *testing.T) {
	const n = 1000
	cfg := DefaultConfig(7)
	cfg.Hold = time.Millisecond
	out, p := mixedRun(t, cfg, n)

	seen := map[Kind]uint64{}
	var clean uint64
	for i, o := range out {
		switch {
		case o.status == http.StatusCreated && o.reached:
			clean++
		case o.status >= 500 && !o.reached:
			seen[ServerError]++
		case o.status == http.StatusConflict && !o.reached:
			require.NotEqual(t, 0, i%5, "a GET drew a conflict")
			seen[Conflict]++
		case o.status == 0 && !o.reached:
			seen[TimeoutBeforeServer]++
		case o.status == 0 && o.reached:
			seen[ReplyDropped]++
		default:
			t.Fatalf("request %d saw %+v", i, o)
		}
	}
	s := p.Stats()
	assert.Equal(t, uint64(n), s.Requests)
	assert.Equal(t, uint64(0), s.Skipped)
	assert.Equal(t, clean, s.Clean)
	for _, k := range []Kind{ServerError, Conflict, TimeoutBeforeServer, ReplyDropped} {
		assert.Equal(t, seen[k], s.Injected[k], k)
	}
	assert.Equal(t, uint64(0), s.Injected[WatchDropped])
	assert.Len(t, p.DroppedReplies(), int(seen[ReplyDropped]))
	assert.Equal(t, uint64(n), s.Skipped+s.Clean+s.TotalInjected())

	// The breakdowns add up to the totals.
	for name, m := range map[string]map[string]map[Kind]uint64{"method": s.ByMethod, "resource": s.ByResource} {
		sum := map[Kind]uint64{}
		for _, byKind := range m {
			for k, v := range byKind {
				sum[k] += v
			}
		}
		for _, k := range Kinds {
			assert.Equal(t, s.Injected[k], sum[k], "by %s: %s", name, k)
		}
	}
	assert.Zero(t, s.ByMethod[http.MethodGet][Conflict], "reads get no conflicts")
	assert.NotZero(t, s.ByResource["leases.coordination.k8s.io"][ReplyDropped])

	// The figures follow the rates: 20% 5xx, 5% + 5% timeouts, 10% conflicts on
	// the 80% of requests that are writes.
	frac := func(k Kind) float64 { return float64(s.Injected[k]) / n }
	assert.InDelta(t, 0.20, frac(ServerError), 0.04)
	assert.InDelta(t, 0.05, frac(TimeoutBeforeServer), 0.02)
	assert.InDelta(t, 0.05, frac(ReplyDropped), 0.02)
	assert.InDelta(t, 0.08, frac(Conflict), 0.025)
}

func TestPauseAndExcludeLetRequestsThrough(t *testing.T) {
	rec := &recorder{}
	up := httptest.NewServer(rec)
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{
		ServerErrorRate: 1, ServerErrorCodes: []int{http.StatusInternalServerError}, Exclude: NonResource,
	})
	get := func(path string) int {
		resp, err := rawClient().Get(p.URL() + path)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusInternalServerError, get("/api/v1/pods"))
	assert.Equal(t, http.StatusCreated, get("/version"), "excluded")
	assert.Equal(t, http.StatusCreated, get("/apis/apps/v1"), "excluded")
	p.Pause()
	assert.Equal(t, http.StatusCreated, get("/api/v1/pods"), "paused")
	p.Resume()
	assert.Equal(t, http.StatusInternalServerError, get("/api/v1/pods"))

	s := p.Stats()
	assert.Equal(t, uint64(5), s.Requests)
	assert.Equal(t, uint64(3), s.Skipped)
	assert.Equal(t, uint64(2), s.Injected[ServerError])
	assert.Equal(t, map[string]map[Kind]uint64{"pods": {ServerError: 2}}, s.ByResource)
}

// TestWatchCutsAreCleanOrResets checks that a cut watch ends either as the
// apiserver ends one (a complete chunked response) or with a broken connection,
// and that both happen.
func TestWatchCutsAreCleanOrResets(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "{\"event\":%d}\n", i); err != nil {
				return
			}
			_ = http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}))
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{
		WatchDropRate: 1, WatchDropAfterMin: 50 * time.Millisecond, WatchDropAfterMax: 150 * time.Millisecond, Seed: 3,
	})
	var clean, broken int
	for range 12 {
		start := time.Now()
		resp, err := rawClient().Get(p.URL() + "/api/v1/pods?watch=true")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		elapsed := time.Since(start)
		assert.Contains(t, string(body), `{"event":0}`)
		assert.Less(t, elapsed, 2*time.Second)
		assert.GreaterOrEqual(t, elapsed, 50*time.Millisecond)
		if err == nil {
			clean++
		} else {
			assert.True(t, errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "reset"), "%v", err)
			broken++
		}
	}
	assert.NotZero(t, clean)
	assert.NotZero(t, broken)
	assert.Equal(t, uint64(12), p.Stats().Injected[WatchDropped])
}

// TestStatusBodiesUseTheAcceptedMediaType checks the body byte for byte against
// client-go's own decoder: client-go would also read a JSON Status sent to a
// protobuf client, so a client-go round trip cannot tell the two apart.
func TestStatusBodiesUseTheAcceptedMediaType(t *testing.T) {
	p := startProxy(t, &rest.Config{Host: "http://127.0.0.1:1"}, Config{ConflictRate: 1})
	for _, accept := range []string{"application/json", "application/vnd.kubernetes.protobuf, application/json"} {
		t.Run(accept, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodDelete, p.URL()+"/apis/coordination.k8s.io/v1/namespaces/trident/leases/l1", nil)
			require.NoError(t, err)
			req.Header.Set("Accept", accept)
			resp, err := rawClient().Do(req)
			require.NoError(t, err)
			defer func() { _ = resp.Body.Close() }()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)

			want := strings.Split(accept, ",")[0]
			assert.Equal(t, want, resp.Header.Get("Content-Type"))
			assert.Equal(t, want == "application/vnd.kubernetes.protobuf", bytes.HasPrefix(body, []byte("k8s\x00")))
			obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
			require.NoError(t, err)
			assert.Equal(t, "Status", gvk.Kind)
			st := obj.(*metav1.Status)
			assert.Equal(t, metav1.StatusReasonConflict, st.Reason)
			assert.Equal(t, int32(http.StatusConflict), st.Code)
			assert.Equal(t, &metav1.StatusDetails{Name: "l1", Group: "coordination.k8s.io", Kind: "leases"}, st.Details)
		})
	}
}

func TestStatsMarshalToJSON(t *testing.T) {
	p := startProxy(t, &rest.Config{Host: "http://127.0.0.1:1"}, Config{ConflictRate: 1})
	req, err := http.NewRequest(http.MethodPut, p.URL()+"/api/v1/nodes/n1", strings.NewReader("{}"))
	require.NoError(t, err)
	resp, err := rawClient().Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	b, err := json.Marshal(p.Stats())
	require.NoError(t, err)
	assert.JSONEq(t, `{"requests":1,"skipped":0,"clean":0,
		"injected":{"Conflict":1,"ReplyDropped":0,"ServerError":0,"TimeoutBeforeServer":0,"WatchDropped":0},
		"upstreamErrors":0,"byMethod":{"PUT":{"Conflict":1}},"byResource":{"nodes":{"Conflict":1}}}`, string(b))
}

func TestPauseDisarmsWatchCuts(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{WatchDropRate: 1, WatchDropAfterMin: 100 * time.Millisecond, WatchDropAfterMax: 100 * time.Millisecond})
	resp, err := rawClient().Get(p.URL() + "/api/v1/pods?watch=true")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	p.Pause()
	ended := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); ended <- err }()
	select {
	case err := <-ended:
		t.Fatalf("a watch armed before the pause was cut after it: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	s := p.Stats()
	assert.Zero(t, s.Injected[WatchDropped])
	assert.Equal(t, uint64(1), s.Clean)
}

func TestUnreachableUpstreamIsA502(t *testing.T) {
	p := startProxy(t, &rest.Config{Host: "http://127.0.0.1:1"}, noFaults())
	resp, err := rawClient().Get(p.URL() + "/api/v1/pods")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Equal(t, uint64(1), p.Stats().UpstreamErrors)
}
