package gitsync_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/remediator/remediator/internal/gitsync"
)

// TestNewRefusesUnencryptedTransports: the sync agent is the only writer of requests
// when Argo CD is absent, so a repository read over a transport anyone on the path can
// rewrite (http://, git://) is refused when the agent starts, before anything is
// fetched, unless AllowInsecureTransport says so; https, SSH (URL or scp-like) and
// local repositories are accepted.
func TestNewRefusesUnencryptedTransports(t *testing.T) {
	// New talks to no API server; the engine and the clients connect in Start.
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	cases := []struct {
		repo    string
		allow   bool
		wantErr []string // nil: accepted
	}{
		{repo: "https://git.example.com/platform/remediation.git"},
		{repo: "ssh://git@git.example.com/platform/remediation.git"},
		{repo: "git@git.example.com:platform/remediation.git"},
		{repo: "file:///srv/git/remediation.git"},
		{repo: "/srv/git/remediation.git"},
		{repo: "relative/remediation.git"},
		{repo: "http://git.example.com/platform/remediation.git",
			wantErr: []string{`repository http://git.example.com/platform/remediation.git is read over http`, "unencrypted", "https://", "--allow-insecure-transport"}},
		{repo: "http://bot:s3cret@git.example.com/r.git", wantErr: []string{"http://redacted@git.example.com/r.git"}},
		{repo: "HTTP://git.example.com/r.git", wantErr: []string{"unencrypted"}},
		{repo: "git://git.example.com/platform/remediation.git", wantErr: []string{"is read over git", "unencrypted"}},
		{repo: "ftp://git.example.com/r.git", wantErr: []string{"ftp"}},
		{repo: "http://git.example.com/platform/remediation.git", allow: true},
		{repo: "git://git.example.com/platform/remediation.git", allow: true},
	}
	for _, tc := range cases {
		t.Run(tc.repo, func(t *testing.T) {
			_, err := gitsync.New(cfg, gitsync.Options{Repo: tc.repo, AllowInsecureTransport: tc.allow, Namespaces: []string{"remediator"},
				WorkDir: t.TempDir(), Log: klog.NewKlogr()})
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.wantErr {
				assert.ErrorContains(t, err, w)
			}
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}
}
