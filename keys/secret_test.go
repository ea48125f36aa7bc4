package keys

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestReadSecretFile: Every credential file is read
// through ReadSecretFile: group/other access is refused with the chmod
// that fixes it, anything but a regular file is refused without blocking
// (a FIFO planted at the path), symlinks count by their target's mode.
func TestReadSecretFile(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte("secret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadSecretFile(p); err != nil || string(b) != "secret-value\n" {
		t.Fatalf("0600: %q %v", b, err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		_, err := ReadSecretFile(p)
		var pe *PermissionError
		if !errors.Is(err, ErrPermissions) || !errors.As(err, &pe) || pe.Mode != mode {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	if err := os.Chmod(p, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSecretFile(p); err != nil {
		t.Errorf("0400: %v", err)
	}
	// A symlink's own mode (0777) does not matter; its target's does.
	link := filepath.Join(dir, "link.safetensors")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSecretFile(link); err != nil {
		t.Errorf("symlink to a 0400 file: %v", err)
	}
	if _, err := ReadSecretFile(dir); err == nil {
		t.Error("a directory was read")
	}
	// A FIFO: the open must not block (nobody ever writes to it).
	fifo := filepath.Join(dir, "fifo")
	if err := mkfifo(fifo); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// Called directly: if the open blocked, the test binary would hang
	// until go test's own timeout, a failure.
	if _, err := ReadSecretFile(fifo); err == nil {
		t.Error("a FIFO was read")
	}
}

// TestLoadersShareTheCheck: HMAC keys, signing keys and age identities all
// refuse a 0644 file the same way.
func TestLoadersShareTheCheck(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	g, err := Generate(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		load func(string) error
	}{
		{g.HMACKey, func(p string) error { _, err := LoadHMACKey(p); return err }},
		{g.SignKey, func(p string) error { _, err := LoadSigner(p); return err }},
		{g.AgeKey, func(p string) error { _, err := LoadAgeIdentities(p); return err }},
	} {
		if err := c.load(c.path); err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		if err := os.Chmod(c.path, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := c.load(c.path); !errors.Is(err, ErrPermissions) {
			t.Errorf("%s at 0644: %v", c.path, err)
		}
	}
}

// TestKeyErrorsNeverEchoContent: A key file of the
// wrong kind or malformed gives an error that names the file and line but
// never quotes its bytes (a secret passed where a public key, an HMAC key
// or an identity was expected must not reach a log).
func TestKeyErrorsNeverEchoContent(t *testing.T) {
	const marker = "S3CRETMARKERxK9q"
	dir := t.TempDir()
	contents := []string{
		marker + "\n",
		"AGE-SECRET-KEY-1" + marker + "\n",
		"AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ" + marker + "\n",
		"ssh-ed25519 " + marker + "\n",
		marker + " ssh-ed25519 AAAA\n",
		"-----BEGIN OPENSSH PRIVATE KEY-----\n" + marker + "\n-----END OPENSSH PRIVATE KEY-----\n",
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde" + marker + "\n",
	}
	loaders := map[string]func(string) error{
		"hmac":       func(p string) error { _, err := LoadHMACKey(p); return err },
		"signer":     func(p string) error { _, err := LoadSigner(p); return err },
		"identity":   func(p string) error { _, err := LoadAgeIdentities(p); return err },
		"recipients": func(p string) error { _, err := LoadAgeRecipients(p); return err },
		"pubkeys":    func(p string) error { _, err := LoadPublicKeys(p); return err },
	}
	for i, c := range contents {
		p := filepath.Join(dir, "k"+string(rune('a'+i)))
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
		for name, load := range loaders {
			err := load(p)
			if err == nil {
				t.Errorf("%s accepted content %d", name, i)
				continue
			}
			for _, s := range []string{marker, marker[:8], marker[8:]} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("%s: error quotes the file: %v", name, err)
					break
				}
			}
		}
	}
}
