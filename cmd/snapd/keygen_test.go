package main

import (
	"bytes"
	"context"
	"os"
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
