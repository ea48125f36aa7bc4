package gitops

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/snapd-ml/snapd/keys"
)

// TestPushCredentialPermissions: The Git token file and
// SSH key of a push remote get the same check as an HMAC key.
func TestPushCredentialPermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("tok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := NewPusher(dir, Remote{URL: "https://example.com/r.git", TokenFile: tok})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := p.gitEnv(); !errors.Is(err, keys.ErrPermissions) {
		t.Errorf("0644 token file: %v", err)
	}
	key := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(key, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err = NewPusher(dir, Remote{URL: "git@example.com:r.git", SSHKeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := p.gitEnv(); !errors.Is(err, keys.ErrPermissions) {
		t.Errorf("0644 SSH key: %v", err)
	}
}
