package gitsync

import (
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

// checkTransport refuses a repository the sync would read over an unencrypted
// transport unless allowInsecure. The sync agent is the only writer of requests when
// Argo CD is absent: whoever can rewrite what it fetches (anyone on the network path
// of http:// or git://) decides which Leases are released and which pods evicted.
// https and SSH authenticate the server and protect the content; a local path or
// file:// is read from this machine's disk.
func checkTransport(repo string, allowInsecure bool) error {
	ep, err := transport.NewEndpoint(repo)
	if err != nil {
		return fmt.Errorf("invalid repository %q: %s", RedactURL(repo), RedactURL(err.Error()))
	}
	switch proto := strings.ToLower(ep.Protocol); proto {
	case "https", "ssh", "file":
		return nil
	case "http", "git":
		if allowInsecure {
			return nil
		}
		return fmt.Errorf("repository %s is read over %s, which is unencrypted and unauthenticated: anyone on the network path "+
			"could change which requests are applied. Use an https:// or SSH URL (ssh://host/path or git@host:path), or pass "+
			"--allow-insecure-transport (chart value sync.allowInsecureTransport) for a repository only reachable over a network you trust",
			RedactURL(repo), proto)
	default:
		return fmt.Errorf("repository %s uses the %s transport, which sync does not support: use an https:// or SSH URL "+
			"(ssh://host/path or git@host:path), or a local path", RedactURL(repo), proto)
	}
}
