package sshsig

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestErrorsNeverEcho: a signature blob is hostile input. A namespace,
// hash algorithm, key algorithm or version taken from it is refused with
// the check named and never quoted.
func TestErrorsNeverEcho(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	sshPub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	good, err := Sign(priv, "git", strings.NewReader("m"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	wire := func(w wireSig) []byte {
		return armor(append([]byte(magic), ssh.Marshal(w)...))
	}
	base := wireSig{Version: version, PublicKey: sshPub.Marshal(), Namespace: "git", HashAlg: HashSHA512, Signature: ssh.Marshal(g.Sig)}
	for _, evil := range []string{testutil.EvilMarker, testutil.EvilMarkerEsc} {
		// A signature for another (hostile) namespace.
		ns, err := Sign(priv, evil, strings.NewReader("m"))
		if err != nil {
			t.Fatal(err)
		}
		err = Verify(priv.Public(), "git", strings.NewReader("m"), ns)
		check(t, "namespace", err, ErrNamespace, "namespace")

		w := base
		w.HashAlg = evil
		_, err = Parse(wire(w))
		check(t, "hash algorithm", err, ErrMalformed, "hash algorithm")

		w = base
		w.PublicKey = ssh.Marshal(struct{ Alg, Key string }{evil, evil})
		_, err = Parse(wire(w))
		check(t, "key algorithm", err, ErrMalformed, "public key")
	}
	w := base
	w.Version = 0x4556494c // "EVIL"
	_, err = Parse(wire(w))
	check(t, "version", err, ErrMalformed, "version")
	if strings.Contains(err.Error(), "1163282764") {
		t.Errorf("version: error quotes it: %v", err)
	}
}

func check(t *testing.T, what string, err, want error, names string) {
	t.Helper()
	if !errors.Is(err, want) || !strings.Contains(err.Error(), names) {
		t.Fatalf("%s: %v, want %v naming %s", what, err, want, names)
	}
	if p, ok := testutil.EchoesEvil(err.Error()); ok {
		t.Errorf("%s: error quotes the blob's value (%q): %v", what, p, err)
	}
}
