// Package registrytest runs a real CNCF distribution registry (Debian
// package docker-registry) on 127.0.0.1 for tests.
package registrytest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Registry is a real CNCF distribution registry (Debian
// docker-registry) on 127.0.0.1.
type Registry struct {
	Host    string // 127.0.0.1:PORT
	Storage string // the registry's storage root
	Config  string // its config file (for docker-registry garbage-collect)

	bin string
	cmd *exec.Cmd
	log *bytes.Buffer
}

// Start starts `docker-registry serve` on a free loopback port with
// a temp storage dir; with user set, htpasswd (bcrypt) basic auth.
func Start(t *testing.T, user, pass string) *Registry {
	t.Helper()
	return start(t, user, pass, "")
}

// StartToken starts a registry with Docker token auth: clients are sent to
// realm (WWW-Authenticate: Bearer realm=...,service=...) and present JWTs
// issued by issuer for audience service, signed by a key whose
// certificate is in the PEM file certBundle.
func StartToken(t *testing.T, realm, service, issuer, certBundle string) *Registry {
	t.Helper()
	return start(t, "", "", fmt.Sprintf("auth:\n  token:\n    realm: %s\n    service: %s\n    issuer: %s\n    rootcertbundle: %s\n", realm, service, issuer, certBundle))
}

func start(t *testing.T, user, pass, authYAML string) *Registry {
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Skip("docker-registry not installed (Debian package docker-registry; scripts/test.sh installs it)")
	}
	dir := t.TempDir()
	storage := filepath.Join(dir, "storage")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, storage, addr)
	if user != "" {
		htpasswd, err := exec.LookPath("htpasswd")
		if err != nil {
			t.Skip("htpasswd not installed (Debian package apache2-utils)")
		}
		out, err := exec.Command(htpasswd, "-Bbn", user, pass).Output()
		if err != nil {
			t.Fatal(err)
		}
		hp := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(hp, out, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: snapd-test\n    path: %s\n", hp)
	}
	cfg += authYAML
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &Registry{Host: addr, Storage: storage, Config: cfgPath, bin: bin}
	r.serve(t)
	t.Cleanup(r.stop)
	return r
}

// serve starts the server and waits until it answers.
func (r *Registry) serve(t *testing.T) {
	t.Helper()
	r.log = &bytes.Buffer{}
	r.cmd = exec.Command(r.bin, "serve", r.Config)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Readiness: poll /v2/ (bounded); any HTTP answer means it serves.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + r.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			r.stop()
			t.Fatalf("registry did not start: %v\n%s", err, r.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *Registry) stop() {
	if r.cmd != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		r.cmd = nil
	}
}

// GarbageCollect stops the registry, runs `docker-registry
// garbage-collect CONFIG` on its storage (the registry must not serve
// meanwhile) and starts it again on the same address. It returns the
// command's output.
func (r *Registry) GarbageCollect(t *testing.T) string {
	t.Helper()
	r.stop()
	out, err := exec.Command(r.bin, "garbage-collect", r.Config).CombinedOutput()
	if err != nil {
		t.Fatalf("garbage-collect: %v\n%s", err, out)
	}
	r.serve(t)
	return string(out)
}
