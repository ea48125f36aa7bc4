package keys

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParsePublicKey checks that public key lines never panic the parser
// and that every accepted key survives MarshalPublicKey → ParsePublicKey.
func FuzzParsePublicKey(f *testing.F) {
	pub, err := os.ReadFile(filepath.Join("testdata", "sign_ed25519.pub"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(pub))
	f.Add(`"a b,c" namespaces="git" ` + string(pub))
	f.Add("* cert-authority " + string(pub))
	f.Fuzz(func(t *testing.T, line string) {
		k, err := ParsePublicKey(line)
		if err != nil {
			return
		}
		k2, err := ParsePublicKey(MarshalPublicKey(k))
		if err != nil || !bytes.Equal(k, k2) {
			t.Fatalf("round trip of %q: %v", line, err)
		}
	})
}

// FuzzParseHMACKey checks that HMAC key files never panic the parser and
// that accepted ones are exactly 32 bytes.
func FuzzParseHMACKey(f *testing.F) {
	h, err := os.ReadFile(filepath.Join("testdata", "hmac.key"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(h)
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseHMACKey(b)
		if err == nil && len(k) != HMACKeySize {
			t.Fatalf("accepted %q as a %d-byte key", b, len(k))
		}
	})
}

// FuzzParseSigner checks that private key files never panic the parser.
func FuzzParseSigner(f *testing.F) {
	k, err := os.ReadFile(filepath.Join("testdata", "sign_ed25519"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(k)
	f.Fuzz(func(t *testing.T, b []byte) {
		if priv, err := ParseSigner(b); err == nil && len(priv) != 64 {
			t.Fatalf("accepted a %d-byte private key", len(priv))
		}
	})
}
