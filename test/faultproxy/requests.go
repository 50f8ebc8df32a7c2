package faultproxy

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// target is what a request path names.
type target struct {
	group, resource, name, subresource string
	watch                              bool // a legacy /watch/ path
	// key names the resource in the stats: "leases.coordination.k8s.io",
	// "pods/eviction", or the path itself for a non-resource request.
	key string
}

// parsePath reads /api/v1/... and /apis/group/version/... paths. Anything else
// (discovery, /version, /healthz, /openapi) has no resource.
func parsePath(path string) target {
	t := target{key: path}
	s := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(s) >= 2 && s[0] == "api":
		s = s[2:]
	case len(s) >= 3 && s[0] == "apis":
		t.group, s = s[1], s[3:]
	default:
		return t
	}
	if len(s) > 0 && s[0] == "watch" {
		t.watch, s = true, s[1:]
	}
	// namespaces/<ns>/<resource>/..., except a namespace's own subresources.
	if len(s) >= 3 && s[0] == "namespaces" && (len(s) > 3 || (s[2] != "status" && s[2] != "finalize")) {
		s = s[2:]
	}
	if len(s) == 0 { // group-version discovery
		return target{key: path}
	}
	t.resource = s[0]
	if len(s) > 1 {
		t.name = s[1]
	}
	if len(s) > 2 {
		t.subresource = s[2]
	}
	t.key = t.resource
	if t.group != "" {
		t.key += "." + t.group
	}
	if t.subresource != "" {
		t.key += "/" + t.subresource
	}
	return t
}

// NonResource reports a request for no API resource: discovery, /version,
// /healthz, /livez, /readyz, /openapi, /metrics. Use it as Config.Exclude to
// keep client start-up out of the campaign.
func NonResource(r *http.Request) bool { return parsePath(r.URL.Path).resource == "" }

func isWatch(r *http.Request, t target) bool {
	w := r.URL.Query().Get("watch")
	return t.watch || w == "true" || w == "1"
}

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// statusFor builds the Status the apiserver itself sends for the fault, so that
// apierrors.IsInternalError, IsServiceUnavailable, IsTimeout, IsTooManyRequests
// and IsConflict classify it as they would in production.
func statusFor(f fault) metav1.Status {
	var err *apierrors.StatusError
	switch f.code {
	case http.StatusConflict:
		err = apierrors.NewConflict(schema.GroupResource{Group: f.target.group, Resource: f.target.resource}, f.target.name,
			errors.New("the object has been modified; please apply your changes to the latest version and try again (injected by faultproxy)"))
	case http.StatusServiceUnavailable:
		err = apierrors.NewServiceUnavailable("the server is currently unable to handle the request (injected by faultproxy)")
	case http.StatusGatewayTimeout:
		err = apierrors.NewTimeoutError("request did not complete within requested timeout (injected by faultproxy)", 0)
	case http.StatusTooManyRequests:
		err = apierrors.NewTooManyRequests("too many requests, please try again later (injected by faultproxy)", 1)
	default:
		err = apierrors.NewInternalError(errors.New("etcdserver: leader changed (injected by faultproxy)"))
	}
	st := err.Status()
	if f.retryAfter {
		if st.Details == nil {
			st.Details = &metav1.StatusDetails{}
		}
		st.Details.RetryAfterSeconds = 1
	}
	return st
}

// statusCodecs encode a Status the way the apiserver does: "kind: Status,
// apiVersion: v1", in JSON or in protobuf.
var statusCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, metav1.Unversioned)
	return serializer.NewCodecFactory(s)
}()

// writeStatus answers with st in the media type the client asked for: protobuf
// clients (client-go's typed clientsets for built-in kinds) get protobuf.
func writeStatus(w http.ResponseWriter, r *http.Request, st metav1.Status) {
	mt := runtime.ContentTypeJSON
	if strings.Contains(r.Header.Get("Accept"), runtime.ContentTypeProtobuf) {
		mt = runtime.ContentTypeProtobuf
	}
	info, _ := runtime.SerializerInfoForMediaType(statusCodecs.SupportedMediaTypes(), mt)
	body, err := runtime.Encode(statusCodecs.EncoderForVersion(info.Serializer, metav1.Unversioned), &st)
	if err != nil {
		http.Error(w, "faultproxy: encoding Status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	// The apiserver turns Details.RetryAfterSeconds into the header, which is
	// what makes client-go wait and retry.
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	w.Header().Set("Content-Type", mt)
	w.WriteHeader(int(st.Code))
	_, _ = w.Write(body)
}

// Stats is a snapshot of the proxy's counters. Once no request is in flight, and
// if the upstream answered every one, Requests = Skipped + Clean + the sum of
// Injected.
type Stats struct {
	Requests uint64 `json:"requests"`
	// Skipped requests were forwarded without a draw: paused or excluded.
	Skipped uint64 `json:"skipped"`
	// Clean requests drew no fault (or a watch cut that came too late) and
	// were forwarded untouched.
	Clean    uint64          `json:"clean"`
	Injected map[Kind]uint64 `json:"injected"`
	// UpstreamErrors counts the 502s the proxy answered because it could not
	// reach the apiserver: not a fault it chose, but one the client saw.
	UpstreamErrors uint64 `json:"upstreamErrors"`
	// ByMethod and ByResource break Injected down: ByMethod["DELETE"][Conflict].
	ByMethod   map[string]map[Kind]uint64 `json:"byMethod"`
	ByResource map[string]map[Kind]uint64 `json:"byResource"`
}

// TotalInjected is the sum of Injected.
func (s Stats) TotalInjected() uint64 {
	var n uint64
	for _, v := range s.Injected {
		n += v
	}
	return n
}

type detailKey struct {
	kind             Kind
	method, resource string
}

type counters struct {
	requests, skipped, clean, upstreamErrors atomic.Uint64
	kinds                                    map[Kind]*atomic.Uint64 // fixed at construction: read without locking
	detail                                   sync.Map                // detailKey → *atomic.Uint64
}

func newCounters() *counters {
	c := &counters{kinds: map[Kind]*atomic.Uint64{}}
	for _, k := range Kinds {
		c.kinds[k] = new(atomic.Uint64)
	}
	return c
}

func (c *counters) count(k Kind, method, resource string) {
	c.kinds[k].Add(1)
	v, _ := c.detail.LoadOrStore(detailKey{k, method, resource}, new(atomic.Uint64))
	v.(*atomic.Uint64).Add(1)
}

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() Stats {
	c := p.stats
	s := Stats{
		Requests: c.requests.Load(), Skipped: c.skipped.Load(), Clean: c.clean.Load(), UpstreamErrors: c.upstreamErrors.Load(),
		Injected: map[Kind]uint64{}, ByMethod: map[string]map[Kind]uint64{}, ByResource: map[string]map[Kind]uint64{},
	}
	for k, v := range c.kinds {
		s.Injected[k] = v.Load()
	}
	add := func(m map[string]map[Kind]uint64, key string, k Kind, n uint64) {
		if m[key] == nil {
			m[key] = map[Kind]uint64{}
		}
		m[key][k] += n
	}
	c.detail.Range(func(key, v any) bool {
		d, n := key.(detailKey), v.(*atomic.Uint64).Load()
		add(s.ByMethod, d.method, d.kind, n)
		add(s.ByResource, d.resource, d.kind, n)
		return true
	})
	return s
}
