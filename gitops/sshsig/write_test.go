package sshsig

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestWriteAllowedSigners: the file snapd writes is read back by
// ParseAllowedSigners with the key allowed in namespaces git and file; an
// identical file is left alone, another key's replaced; a principal snapd
// would not write is refused.
func TestWriteAllowedSigners(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	dir := filepath.Join(t.TempDir(), "keys")
	p, err := WriteAllowedSigners(dir, "snapd@host-1", pub)
	if err != nil || p != filepath.Join(dir, AllowedSignersFile) {
		t.Fatalf("%q %v", p, err)
	}
	b, _ := os.ReadFile(p)
	a, err := ParseAllowedSigners(p, b, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"git", NamespaceFile} {
		if ks := a.Ed25519Keys(ns, time.Now()); len(ks) != 1 || !slices.Equal(ks[0], pub) {
			t.Fatalf("namespace %s: keys %v", ns, ks)
		}
	}
	st, _ := os.Stat(p)
	if _, err := WriteAllowedSigners(dir, "snapd@host-1", pub); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(p); !os.SameFile(st, st2) {
		t.Fatal("an identical file was rewritten")
	}
	seed[0] = 1
	other := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	if _, err := WriteAllowedSigners(dir, "snapd@host-1", other); err != nil {
		t.Fatal(err)
	}
	if b2, _ := os.ReadFile(p); string(b2) == string(b) {
		t.Fatal("another key's file was kept")
	}
	if _, err := WriteAllowedSigners(dir, "bad principal", pub); err == nil {
		t.Fatal("a principal with a space was written")
	}
	if DefaultPrincipal("host-1") != "snapd@host-1" || DefaultPrincipal("") != "snapd@localhost" || DefaultPrincipal("a b") != "snapd@localhost" {
		t.Fatal("DefaultPrincipal")
	}
}
