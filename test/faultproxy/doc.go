// Package faultproxy owns a fault-injecting reverse proxy for the Kubernetes API. It
// sits between a controller under test (client-go, controller-runtime) and a real
// kube-apiserver and makes the API misbehave the way a production control plane
// does: 5xx answers, timeouts before and after the request reached the server,
// 409 conflicts on writes and watch streams cut short. The R2 "API faults"
// campaign (issue 12) runs the controller through it and checks, from the
// kube-apiserver's audit log, that no destructive call ran twice or unsafely.
//
// Every draw comes from a math/rand/v2 ChaCha8 source seeded from Config.Seed and
// the request itself (the n-th request with a given method and path), so a seed
// reproduces the same faults on the same calls however the controller's
// unrelated requests interleave.
//
// The proxy listens on 127.0.0.1 over plain HTTP and needs no credentials from its
// clients: it reaches the upstream with the upstream's own rest.Config. It speaks
// HTTP/1.1 to its clients (so that it can hijack and reset a connection), which
// rules out exec/attach upgrades; a controller does not use them. The apiserver
// sees every call as made by the upstream's user (the audit log's user), with
// the client's User-Agent and Impersonate-* headers unchanged.
//
// A campaign harness uses it like this:
//
//	p, err := faultproxy.New(clusterConfig, faultproxy.DefaultConfig(seed))
//	defer p.Close()
//	err = p.WriteKubeconfig(path) // the controller under test runs with it
//	... drive requests; then p.Pause() and let the system settle ...
//	stats, lost := p.Stats(), p.DroppedReplies() // to match with the audit log
package faultproxy
