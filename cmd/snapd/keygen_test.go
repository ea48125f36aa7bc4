package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/keys"
)

func TestKeygen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "k")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"keygen", dir}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	priv, err := keys.LoadSigner(filepath.Join(dir, keys.SignKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := keys.LoadPublicKeys(filepath.Join(dir, keys.SignPubFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(priv[32:], pubs[0]) {
		t.Fatal("sign_ed25519.pub does not match sign_ed25519")
	}
	out := stdout.String()
	for _, name := range []string{keys.SignKeyFile, keys.SignPubFile, keys.HMACKeyFile, keys.AgeKeyFile, keys.AgePubFile} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "wrote "+p+"\t") {
			t.Fatalf("output does not name %s:\n%s", p, out)
		}
	}
	if !strings.Contains(out, "keyid "+keys.KeyID(pubs[0])+"\n") {
		t.Fatalf("output lacks the keyid %s:\n%s", keys.KeyID(pubs[0]), out)
	}

	// A second run refuses to overwrite: exit 2 with a hint.
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), []string{"keygen", dir}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("second keygen: exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr.String(), "refusing to overwrite") || !strings.Contains(stderr.String(), "snapd: hint:") {
		t.Fatalf("second keygen stderr: %s", stderr.String())
	}

	// Wrong argument count is a usage error.
	if code := run(context.Background(), []string{"keygen"}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("keygen without DIR: exit %d, want %d", code, exitUsage)
	}
}

// TestKeygenAllowedSigners: keygen writes allowed_signers with the
// --principal given, and git/ssh-keygen accept it for the key: a file
// signed with the key verifies for that principal.
func TestKeygenAllowedSigners(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "k")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"keygen", "--principal", "ml-bot@trainer-01", dir}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	as := filepath.Join(dir, "allowed_signers")
	b, err := os.ReadFile(as)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := os.ReadFile(filepath.Join(dir, keys.SignPubFile))
	if f := strings.Fields(string(pub)); !strings.HasPrefix(string(b), `ml-bot@trainer-01 namespaces="git,file" ssh-ed25519 `+f[1]+"\n") {
		t.Fatalf("allowed_signers: %q", b)
	}
	if pubs, err := keys.LoadPublicKeys(as); err != nil || len(pubs) != 1 {
		t.Fatalf("snapd cannot read its allowed_signers: %v", err)
	}
	if !strings.Contains(stdout.String(), "wrote "+as+"\t") {
		t.Fatalf("output: %s", stdout.String())
	}
	sk, err := exec.LookPath("ssh-keygen")
	if err != nil {
		t.Skip("ssh-keygen not installed")
	}
	msg := filepath.Join(dir, "msg")
	os.WriteFile(msg, []byte("hello\n"), 0o644)
	if out, err := exec.Command(sk, "-Y", "sign", "-f", filepath.Join(dir, keys.SignKeyFile), "-n", "file", msg).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -Y sign: %v\n%s", err, out)
	}
	cmd := exec.Command(sk, "-Y", "verify", "-f", as, "-I", "ml-bot@trainer-01", "-n", "file", "-s", msg+".sig")
	cmd.Stdin = strings.NewReader("hello\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -Y verify: %v\n%s", err, out)
	}
	// A principal that would break the file's syntax is refused.
	if code := run(context.Background(), []string{"keygen", "--principal", "a b", filepath.Join(t.TempDir(), "k2")}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("bad principal: exit %d", code)
	}
}
