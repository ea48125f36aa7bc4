package registrytest

import (
	"encoding/hex"
	"os"
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
