package gitrepo

import (
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"testing"
)

// ServeSmartHTTP serves the bare origin over Git's smart-HTTP protocol, the way a Git
// host does (`git http-backend`, which the test machine has and the product never
// runs), behind basic auth with user and password, and returns the repository's URL.
func (r *Repo) ServeSmartHTTP(t *testing.T, user, password string) string {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("the smart-HTTP test server needs the git binary: %v", err)
	}
	backend := &cgi.Handler{
		Path: gitBin,
		Args: []string{"http-backend"},
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(r.Bare), "GIT_HTTP_EXPORT_ALL=1"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/" + filepath.Base(r.Bare)
}
