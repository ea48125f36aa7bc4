package gittest

import (
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Mode selects how an HTTPRemote answers.
type Mode int

// Modes.
const (
	Up      Mode = iota // serve through git-http-backend
	Down                // answer every request with 503
	LoseAck             // apply receive-pack, then answer 502 (the ack is lost)
	HangAck             // apply receive-pack, then hold the response until the client goes away
)

// HTTPRemote is a bare repository served by the real C git-http-backend
// behind net/http/cgi on 127.0.0.1.
type HTTPRemote struct {
	Dir string // the bare repository
	URL string // http://127.0.0.1:port/remote.git
	srv *httptest.Server

	mu    sync.Mutex
	mode  Mode
	token string // required Basic-auth password ("" = none)

	// Applied counts receive-pack POSTs that reached git-http-backend.
	Applied atomic.Int32
	// Requests counts every request.
	Requests atomic.Int32
	// Hung receives a value when a HangAck request has been applied.
	Hung chan struct{}
}

// NewHTTPRemote creates an empty bare repository and serves it.
func NewHTTPRemote(t testing.TB) *HTTPRemote {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "remote.git")
	Git(t, root, "init", "-q", "--bare", dir)
	Git(t, dir, "config", "http.receivepack", "true")
	execPath := strings.TrimSpace(Git(t, root, "--exec-path"))
	backend := filepath.Join(execPath, "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Skipf("git-http-backend not available: %v", err)
	}
	r := &HTTPRemote{Dir: dir, Hung: make(chan struct{}, 16)}
	cgiH := &cgi.Handler{
		Path: backend,
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=" + root},
	}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.Requests.Add(1)
		r.mu.Lock()
		mode, token := r.mode, r.token
		r.mu.Unlock()
		if token != "" {
			if _, pass, ok := req.BasicAuth(); !ok || pass != token {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		if mode == Down {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		push := req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/git-receive-pack")
		if !push || mode == Up {
			if push {
				r.Applied.Add(1)
			}
			cgiH.ServeHTTP(w, req)
			return
		}
		rec := httptest.NewRecorder()
		cgiH.ServeHTTP(rec, req)
		r.Applied.Add(1)
		if mode == LoseAck {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		r.Hung <- struct{}{}
		<-req.Context().Done()
	}))
	r.URL = r.srv.URL + "/remote.git"
	t.Cleanup(r.srv.Close)
	return r
}

// SetMode switches the remote's behaviour.
func (r *HTTPRemote) SetMode(m Mode) {
	r.mu.Lock()
	r.mode = m
	r.mu.Unlock()
}

// RequireToken makes every request need Basic auth with this password.
func (r *HTTPRemote) RequireToken(tok string) {
	r.mu.Lock()
	r.token = tok
	r.mu.Unlock()
}

// Fsck runs `git fsck --strict` on the remote and fails the test on error.
func (r *HTTPRemote) Fsck(t testing.TB) {
	t.Helper()
	Git(t, r.Dir, "fsck", "--strict", "--no-dangling")
}
