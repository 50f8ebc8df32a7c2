package main

// The kube-apiserver's audit log (test/cluster/audit-policy.yaml) is the campaigns'
// record of what the controller did: a destructive call is counted when the API
// server says it ran (a 2xx response), whoever's reply was lost on the way back.
// The controller's own logs are not used: a crash or a lost reply is exactly when
// they would be wrong.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// auditEvent is the part of an audit.k8s.io/v1 Event the campaigns read.
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestObject  json.RawMessage  `json:"requestObject"`
	StageTimestamp metav1.MicroTime `json:"stageTimestamp"`
}

// Kinds of destructive call, as the report names them.
const (
	callDeleteLease = "delete-lease"
	callEvict       = "evict"
	callDeletePod   = "delete-pod"
	callCordon      = "cordon"
	callUncordon    = "uncordon"
)

// call is one destructive call the API server ran.
type call struct {
	Kind   string    // one of the call* kinds
	Object string    // namespace/name, or the node's name
	At     time.Time // when the API server completed it
	Agent  string
	// Uncertain: the API server answered 5xx (a 504 when it was too loaded to
	// answer in time), so the call may have run. It counts as evidence that a
	// call was made and as unsafe where none may be, never as a repeat.
	Uncertain bool
}

func (c call) key() string { return c.Kind + " " + c.Object }

// auditLog reads the log from an offset: each campaign reads only what happened
// since it began.
type auditLog struct {
	path string
}

func (a auditLog) size() (int64, error) {
	st, err := os.Stat(a.path)
	if err != nil {
		return 0, fmt.Errorf("the audit log %s (is the cluster started by test/cluster/up.sh with its audit policy?): %w", a.path, err)
	}
	return st.Size(), nil
}

// calls returns the destructive calls logged after offset that ran (2xx), and the
// pod deletions by anyone (kwok ends an evicted pod with a delete of its own),
// which tell when a pod was gone.
func (a auditLog) calls(offset int64) (controller []call, podGone map[string]time.Time, err error) {
	f, err := os.Open(a.path)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, nil, err
	}
	podGone = map[string]time.Time{}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, rerr := r.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var ev auditEvent
			if err := json.Unmarshal(line, &ev); err != nil {
				return nil, nil, fmt.Errorf("decoding an audit event: %w", err)
			}
			code := ev.ResponseStatus.Code
			if ev.Stage == "ResponseComplete" && (code >= 200 && code < 300 || code >= 500) {
				c, ok := classify(&ev)
				c.Uncertain = code >= 500
				if ok && c.Kind == callDeletePod && !c.Uncertain {
					if t, seen := podGone[c.Object]; !seen || c.At.After(t) {
						podGone[c.Object] = c.At
					}
				}
				if ok && strings.HasPrefix(ev.UserAgent, "remediator") {
					controller = append(controller, c)
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, nil, rerr
		}
	}
	sort.SliceStable(controller, func(i, j int) bool { return controller[i].At.Before(controller[j].At) })
	return controller, podGone, nil
}

func classify(ev *auditEvent) (call, bool) {
	o := ev.ObjectRef
	c := call{Object: o.Name, At: ev.StageTimestamp.Time, Agent: ev.UserAgent}
	if o.Namespace != "" {
		c.Object = o.Namespace + "/" + o.Name
	}
	switch {
	case o.Resource == "leases" && ev.Verb == "delete":
		c.Kind = callDeleteLease
	case ev.Verb == "deletecollection":
		// The controller never deletes collections: whatever it names, no request
		// of the campaign owns "<namespace>/*", so the judge reports it.
		c.Kind, c.Object = "delete-"+o.Resource+"-collection", o.Namespace+"/*"
	case o.Resource == "pods" && o.Subresource == "eviction" && ev.Verb == "create":
		c.Kind = callEvict
	case o.Resource == "pods" && o.Subresource == "" && ev.Verb == "delete":
		c.Kind = callDeletePod
	case o.Resource == "nodes" && o.Subresource == "" && (ev.Verb == "patch" || ev.Verb == "update"):
		var body struct {
			Spec map[string]json.RawMessage `json:"spec"`
		}
		if json.Unmarshal(ev.RequestObject, &body) != nil {
			return call{}, false
		}
		v, ok := body.Spec["unschedulable"]
		if !ok {
			return call{}, false // a taint or label change, not a cordon
		}
		c.Kind = callUncordon
		if strings.TrimSpace(string(v)) == "true" {
			c.Kind = callCordon
		}
	default:
		return call{}, false
	}
	return c, true
}
