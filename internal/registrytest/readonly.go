package registrytest

import (
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const readOnlyYAML = "storage:\n  maintenance:\n    readonly:\n      enabled: true\n"

// SetReadOnly stops the registry, switches its storage.maintenance
// readonly mode on or off (a read-only registry serves pulls and refuses
// every push and delete with 405) and starts it again on the same address.
func (r *Registry) SetReadOnly(t *testing.T, on bool) {
	t.Helper()
	b, err := os.ReadFile(r.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), readOnlyYAML, "storage:\n", 1)
	if on {
		cfg = strings.Replace(cfg, "storage:\n", readOnlyYAML, 1)
	}
	if err := os.WriteFile(r.Config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.stop()
	r.serve(t)
}

// BlobPath returns where the registry's filesystem storage keeps the
// blob whose SHA-256 is d.
func BlobPath(r *Registry, d [32]byte) string {
	hx := hex.EncodeToString(d[:])
	return filepath.Join(r.Storage, "docker/registry/v2/blobs/sha256", hx[:2], hx, "data")
}

// GarbageCollectReadOnly runs `docker-registry garbage-collect [args]
// CONFIG` while the registry keeps serving pulls in read-only mode (the
// distribution docs' alternative to stopping it: no upload can race the
// mark phase), then makes it writable again. It returns the output.
func (r *Registry) GarbageCollectReadOnly(t *testing.T, args ...string) string {
	t.Helper()
	r.SetReadOnly(t, true)
	out, err := exec.Command(r.bin, append(append([]string{"garbage-collect"}, args...), r.Config)...).CombinedOutput()
	if err != nil {
		t.Fatalf("garbage-collect: %v\n%s", err, out)
	}
	r.SetReadOnly(t, false)
	return string(out)
}

// DeleteBlob deletes blob digest ("sha256:<hex>") from repository name
// through the API (DELETE /v2/NAME/blobs/DIGEST; the registry has
// deletion enabled), as an operator would: a manifest referencing it
// stays.
func (r *Registry) DeleteBlob(t *testing.T, name, digest string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, "http://"+r.Host+"/v2/"+name+"/blobs/"+digest, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("DELETE blob %s: %s", digest, resp.Status)
	}
}
