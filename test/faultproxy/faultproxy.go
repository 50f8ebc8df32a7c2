package faultproxy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kind names a kind of injected fault.
type Kind string

const (
	// ServerError answers a 5xx (or 429) Status without forwarding, as an
	// overloaded apiserver (503, 429 from priority and fairness), an etcd leader
	// change (500 "etcdserver: leader changed") or a request timing out inside
	// the apiserver (504) does. Nothing reached storage, and the client knows
	// that the call failed.
	ServerError Kind = "ServerError"
	// TimeoutBeforeServer holds the connection for Config.Hold and then resets
	// it without forwarding the request: a network partition or a load balancer
	// dropping the connection before the apiserver saw the request. Nothing was
	// written, but the client cannot tell that from the next kind.
	TimeoutBeforeServer Kind = "TimeoutBeforeServer"
	// ReplyDropped forwards the request, lets the apiserver complete it (a write
	// is committed to etcd), then holds and resets the client's connection
	// without answering: a partition or LB idle timeout after the commit. The
	// client sees a connection error for a call that did happen, the case that
	// makes a careless controller repeat a destructive call.
	ReplyDropped Kind = "ReplyDropped"
	// Conflict answers a write (POST, PUT, PATCH, DELETE) with 409 Conflict
	// without forwarding: another writer changed the object first (optimistic
	// concurrency on resourceVersion, or a failed delete precondition).
	Conflict Kind = "Conflict"
	// WatchDropped forwards a watch and cuts the stream after a short while,
	// either cleanly (as an apiserver ends a watch on shutdown or at its own
	// timeout) or by resetting the connection (LB idle timeout, lost HTTP/2
	// connection). Reflectors must re-list or resume without losing events.
	WatchDropped Kind = "WatchDropped"
)

// Kinds lists every Kind, in a fixed order.
var Kinds = []Kind{ServerError, TimeoutBeforeServer, ReplyDropped, Conflict, WatchDropped}

// Config is the fault mix. The first four rates share one draw per request, so
// they are exclusive and must sum to at most 1; a kind that does not apply to a
// request (a conflict on a read, a dropped reply on a watch) lets it through.
type Config struct {
	// Seed makes every draw deterministic.
	Seed uint64
	// ServerErrorRate is the fraction of requests answered with a 5xx.
	ServerErrorRate float64
	// TimeoutBeforeRate is the fraction of requests reset before forwarding.
	TimeoutBeforeRate float64
	// ReplyDroppedRate is the fraction of non-watch requests forwarded whose
	// reply is then dropped.
	ReplyDroppedRate float64
	// ConflictRate is the fraction of writes answered 409 Conflict.
	ConflictRate float64
	// WatchDropRate is the fraction of forwarded watches that are cut, after a
	// duration drawn uniformly from [WatchDropAfterMin, WatchDropAfterMax].
	WatchDropRate                        float64
	WatchDropAfterMin, WatchDropAfterMax time.Duration
	// ServerErrorCodes are the codes a ServerError picks from, uniformly:
	// 500, 503, 504 or 429. A 503 carries Retry-After on half of the draws and a
	// 429 always does, as the apiserver's would; client-go retries those.
	ServerErrorCodes []int
	// Hold is how long a timeout keeps the client waiting before the reset.
	Hold time.Duration
	// Exclude, if set, exempts the requests it returns true for (discovery,
	// health checks, leader election) from every fault.
	Exclude func(*http.Request) bool
}

// DefaultConfig is the mix that issue 12 asks for: 20% 5xx, 10% timeouts (half
// of them after the request reached the server), 10% conflicts on writes, and
// half of the watches cut within 1-10 s.
func DefaultConfig(seed uint64) Config {
	return Config{
		Seed:              seed,
		ServerErrorRate:   0.20,
		TimeoutBeforeRate: 0.05,
		ReplyDroppedRate:  0.05,
		ConflictRate:      0.10,
		WatchDropRate:     0.5,
		WatchDropAfterMin: time.Second,
		WatchDropAfterMax: 10 * time.Second,
		ServerErrorCodes:  []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusGatewayTimeout},
		Hold:              time.Second,
	}
}

func (c Config) validate() error {
	rates := []float64{c.ServerErrorRate, c.TimeoutBeforeRate, c.ReplyDroppedRate, c.ConflictRate, c.WatchDropRate}
	sum := 0.0
	for _, r := range rates {
		if r < 0 || r > 1 {
			return fmt.Errorf("faultproxy: rate %v is outside [0, 1]", r)
		}
		sum += r
	}
	if sum-c.WatchDropRate > 1+1e-9 {
		return fmt.Errorf("faultproxy: ServerError, TimeoutBefore, ReplyDropped and Conflict rates sum to %v, more than 1", sum-c.WatchDropRate)
	}
	if c.WatchDropRate > 0 && (c.WatchDropAfterMin <= 0 || c.WatchDropAfterMax < c.WatchDropAfterMin) {
		return fmt.Errorf("faultproxy: watch drops need 0 < WatchDropAfterMin <= WatchDropAfterMax, have %v and %v", c.WatchDropAfterMin, c.WatchDropAfterMax)
	}
	if c.ServerErrorRate > 0 && len(c.ServerErrorCodes) == 0 {
		return errors.New("faultproxy: ServerErrorRate > 0 needs ServerErrorCodes")
	}
	for _, code := range c.ServerErrorCodes {
		if !slices.Contains([]int{500, 503, 504, 429}, code) {
			return fmt.Errorf("faultproxy: unsupported server error code %d (want 500, 503, 504 or 429)", code)
		}
	}
	return nil
}

// DroppedReply records a request that reached the apiserver and completed there
// but whose reply the client never got, to be matched with the audit log's
// ResponseComplete entry (same verb, requestURI and userAgent, at about Time).
type DroppedReply struct {
	Time       time.Time `json:"time"` // when the upstream's reply was read in full
	Method     string    `json:"method"`
	RequestURI string    `json:"requestURI"` // path and query, as the audit log shows it
	Resource   string    `json:"resource"`
	UserAgent  string    `json:"userAgent"`
	Status     int       `json:"status"` // what the apiserver answered
}

// Proxy is a running fault-injecting proxy. Its methods are safe for concurrent use.
type Proxy struct {
	cfg     Config
	url     string
	srv     *http.Server
	forward *httputil.ReverseProxy
	done    chan struct{}
	closing sync.Once
	paused  atomic.Bool
	stats   *counters

	mu      sync.Mutex
	seen    map[string]uint64 // how many requests each draw key has had
	dropped []DroppedReply
}

// New starts a proxy to the apiserver that upstream reaches, with the upstream's
// TLS and credentials, listening on a free port of 127.0.0.1. Close it when done.
func New(upstream *rest.Config, cfg Config) (*Proxy, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	target, _, err := rest.DefaultServerUrlFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream URL: %w", err)
	}
	rt, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream transport: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		cfg:   cfg,
		url:   "http://" + ln.Addr().String(),
		done:  make(chan struct{}),
		stats: newCounters(),
		seen:  map[string]uint64{},
	}
	p.forward = &httputil.ReverseProxy{
		// Rewrite (unlike Director) keeps User-Agent, Accept, Content-Type,
		// Impersonate-* and the body as they are, drops only hop-by-hop
		// headers, and adds no X-Forwarded-For.
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     upstreamTransport{rt},
		FlushInterval: -1, // watch events go out as they arrive
		ErrorHandler:  p.upstreamError,
		// Copy errors on a cut watch are the point, not news.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's base URL (http://127.0.0.1:port).
func (p *Proxy) URL() string { return p.url }

// RESTConfig returns a config that reaches the upstream through the proxy, with
// no credentials of its own.
func (p *Proxy) RESTConfig() *rest.Config { return &rest.Config{Host: p.url} }

// WriteKubeconfig writes a kubeconfig file pointing at the proxy, for a
// controller process under test.
func (p *Proxy) WriteKubeconfig(path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["faultproxy"] = &clientcmdapi.Cluster{Server: p.url}
	kc.AuthInfos["faultproxy"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["faultproxy"] = &clientcmdapi.Context{Cluster: "faultproxy", AuthInfo: "faultproxy"}
	kc.CurrentContext = "faultproxy"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("faultproxy: writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// Pause stops injecting: every request is forwarded untouched until Resume, and
// armed watch cuts do not fire. Timeouts already holding still end in a reset.
func (p *Proxy) Pause() { p.paused.Store(true) }

// Resume starts injecting again after Pause.
func (p *Proxy) Resume() { p.paused.Store(false) }

// DroppedReplies returns every ReplyDropped fault so far, in order.
func (p *Proxy) DroppedReplies() []DroppedReply {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.dropped)
}

// Close stops the proxy and closes every connection to it, watches included.
func (p *Proxy) Close() error {
	p.closing.Do(func() { close(p.done) })
	return p.srv.Close()
}

// fault is one request's draw. The ReverseProxy's transport and error handler
// find it in the request's context.
type fault struct {
	kind       Kind // "" for none
	code       int  // ServerError, Conflict
	retryAfter bool // ServerError 503
	cutAfter   time.Duration
	cleanCut   bool   // WatchDropped: end the stream instead of resetting it
	status     int    // ReplyDropped: the upstream's answer
	target     target // parsed path
}

type faultKey struct{}

// ServeHTTP draws a fault for the request and injects it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.stats.requests.Add(1)
	t := parsePath(r.URL.Path)
	if p.paused.Load() || (p.cfg.Exclude != nil && p.cfg.Exclude(r)) {
		p.stats.skipped.Add(1)
		p.forward.ServeHTTP(w, r)
		return
	}
	f := p.decide(r, t)
	switch f.kind {
	case "":
		p.stats.clean.Add(1)
		p.forward.ServeHTTP(w, r)
	case ServerError, Conflict:
		p.stats.count(f.kind, r.Method, t.key)
		writeStatus(w, r, statusFor(f))
	case TimeoutBeforeServer:
		p.stats.count(f.kind, r.Method, t.key)
		p.hold(r.Context())
		resetConn(w)
	case ReplyDropped:
		// upstreamTransport reads the reply and fails; upstreamError resets.
		p.forward.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), faultKey{}, &f)))
	case WatchDropped:
		ctx, cancel := context.WithCancel(context.WithValue(r.Context(), faultKey{}, &f))
		defer cancel()
		cut := time.AfterFunc(f.cutAfter, func() {
			if p.paused.Load() { // paused since: the watch goes on untouched
				p.stats.clean.Add(1)
				return
			}
			p.stats.count(WatchDropped, r.Method, t.key)
			cancel()
		})
		p.forward.ServeHTTP(w, r.WithContext(ctx))
		if cut.Stop() { // the watch ended before its cut: nothing was injected
			p.stats.clean.Add(1)
		}
	}
}

// decide draws the request's fault from a source of its own, seeded from the
// seed, the request's method and path, and how many such requests came before.
func (p *Proxy) decide(r *http.Request, t target) fault {
	watch := isWatch(r, t)
	key := r.Method + " " + r.URL.Path
	if watch {
		key += " watch"
	}
	p.mu.Lock()
	n := p.seen[key]
	p.seen[key] = n + 1
	p.mu.Unlock()
	rng := rand.New(rand.NewChaCha8(sha256.Sum256(fmt.Appendf(nil, "%d\x00%s\x00%d", p.cfg.Seed, key, n))))

	c, f := p.cfg, fault{target: t}
	u := rng.Float64()
	switch write := isWrite(r.Method); {
	case u < c.ServerErrorRate:
		f.kind, f.code = ServerError, c.ServerErrorCodes[rng.IntN(len(c.ServerErrorCodes))]
		f.retryAfter = f.code == http.StatusTooManyRequests || (f.code == http.StatusServiceUnavailable && rng.IntN(2) == 0)
	case u < c.ServerErrorRate+c.TimeoutBeforeRate:
		f.kind = TimeoutBeforeServer
	case u < c.ServerErrorRate+c.TimeoutBeforeRate+c.ReplyDroppedRate:
		if !watch {
			f.kind = ReplyDropped
		}
	case u < c.ServerErrorRate+c.TimeoutBeforeRate+c.ReplyDroppedRate+c.ConflictRate:
		if write {
			f.kind, f.code = Conflict, http.StatusConflict
		}
	}
	if f.kind == "" && watch && rng.Float64() < c.WatchDropRate {
		f.kind, f.cleanCut = WatchDropped, rng.IntN(2) == 0
		f.cutAfter = c.WatchDropAfterMin + time.Duration(rng.Int64N(int64(c.WatchDropAfterMax-c.WatchDropAfterMin)+1))
	}
	return f
}

// hold keeps a timed-out client waiting, as a black-holed connection would,
// until Hold passes, the client gives up or the proxy closes.
func (p *Proxy) hold(ctx context.Context) {
	t := time.NewTimer(p.cfg.Hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-p.done:
	}
}

var errReplyDropped = errors.New("faultproxy: reply dropped")

// upstreamTransport carries out the faults that need the upstream's answer.
type upstreamTransport struct{ rt http.RoundTripper }

func (u upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	f, _ := req.Context().Value(faultKey{}).(*fault)
	if f == nil || f.kind != ReplyDropped {
		resp, err := u.rt.RoundTrip(req)
		if err == nil && f != nil && f.kind == WatchDropped && f.cleanCut {
			resp.Body = &cleanCutBody{ReadCloser: resp.Body, ctx: req.Context()}
		}
		return resp, err
	}
	// The apiserver finishes the request even if the client gives up meanwhile,
	// so that the write the client will not hear about does happen.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), time.Minute)
	defer cancel()
	resp, err := u.rt.RoundTrip(req.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	f.status = resp.StatusCode
	return nil, errReplyDropped
}

// cleanCutBody ends a cut watch with EOF, so that the client sees the stream end
// normally instead of the connection break.
type cleanCutBody struct {
	io.ReadCloser
	ctx context.Context
}

func (b *cleanCutBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	if err != nil && b.ctx.Err() != nil {
		err = io.EOF
	}
	return n, err
}

// upstreamError is the ReverseProxy's error handler: it drops the replies that
// upstreamTransport read, and answers 502 when the upstream is unreachable.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if f, _ := r.Context().Value(faultKey{}).(*fault); f != nil && errors.Is(err, errReplyDropped) {
		p.stats.count(ReplyDropped, r.Method, f.target.key)
		p.mu.Lock()
		p.dropped = append(p.dropped, DroppedReply{
			Time: time.Now(), Method: r.Method, RequestURI: r.URL.RequestURI(),
			Resource: f.target.key, UserAgent: r.UserAgent(), Status: f.status,
		})
		p.mu.Unlock()
		p.hold(r.Context())
		resetConn(w)
		return
	}
	if r.Context().Err() != nil { // client gone, or a watch cut before its headers
		resetConn(w)
		return
	}
	p.stats.upstreamErrors.Add(1)
	http.Error(w, "faultproxy: upstream: "+err.Error(), http.StatusBadGateway)
}

// resetConn closes the client's connection with a TCP reset and no answer, which
// client-go reports as "connection reset by peer" or an unexpected EOF.
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // the server then closes the connection
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
