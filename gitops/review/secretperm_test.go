package review

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/snapd-ml/snapd/keys"
)

// TestCredentialFilesPermissions: A GitHub token file
// and a GitHub App private key get the same check as an HMAC key
// (keys.ReadSecretFile): group/other access is refused.
func TestCredentialFilesPermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("ghs_abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := TokenFromFile(tok); !errors.Is(err, keys.ErrPermissions) {
		t.Errorf("0644 token file: %v", err)
	}
	app := filepath.Join(dir, "app.pem")
	if err := os.WriteFile(app, []byte("-----BEGIN RSA PRIVATE KEY-----\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadAppKey(app); !errors.Is(err, keys.ErrPermissions) {
		t.Errorf("0640 App key: %v", err)
	}
	if err := os.Chmod(tok, 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := TokenFromFile(tok); err != nil || v != "ghs_abc" {
		t.Errorf("0600 token file: %q %v", v, err)
	}
}
