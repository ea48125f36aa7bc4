package keys

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPublicKeyFileIsPrivate: a private key given as a public key file
// says so, names the .pub to give instead, and never echoes the key.
func TestPublicKeyFileIsPrivate(t *testing.T) {
	priv, err := os.ReadFile("testdata/sign_ed25519")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "sign_ed25519")
	if err := os.WriteFile(p, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	want := p + " is an OpenSSH private key; give the public key (" + p + ".pub) or an allowed_signers file"
	for name, err := range map[string]error{"LoadPublicKeys": func() error { _, err := LoadPublicKeys(p); return err }(), "CheckPublicKeyFile": CheckPublicKeyFile(p)} {
		if !errors.Is(err, ErrPrivateKey) || err.Error() != want {
			t.Errorf("%s: %v\nwant %s", name, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "PRIVATE KEY-----") {
			t.Errorf("%s echoes the key file: %v", name, err)
		}
	}
	if err := CheckPublicKeyFile("testdata/sign_ed25519.pub"); err != nil {
		t.Errorf("public key: %v", err)
	}
	if err := CheckPublicKeyFile(filepath.Join(t.TempDir(), "missing")); err != nil {
		t.Errorf("missing file is left to the reader: %v", err)
	}
}
