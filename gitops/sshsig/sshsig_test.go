package sshsig

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// keygen makes an Ed25519 key with the real ssh-keygen and returns its
// private key, the key file path and the public key line.
func keygen(t *testing.T) (ed25519.PrivateKey, string, string) {
	t.Helper()
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("ssh-keygen not installed")
	}
	dir := t.TempDir()
	kf := filepath.Join(dir, "id")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "t@x", "-f", kf).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	raw, err := os.ReadFile(kf)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.ParseRawPrivateKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(kf + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return *k.(*ed25519.PrivateKey), kf, strings.TrimSpace(string(pub))
}

func TestSignVerifiedBySSHKeygen(t *testing.T) {
	priv, _, publine := keygen(t)
	dir := t.TempDir()
	msg := []byte("tree 1234\nauthor x\n\nhello\n")
	sig, err := Sign(priv, NamespaceGit, bytes.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	allowed := filepath.Join(dir, "allowed")
	os.WriteFile(allowed, []byte("t@x "+publine+"\n"), 0o600)
	sf := filepath.Join(dir, "sig")
	os.WriteFile(sf, sig, 0o600)
	run := func(m []byte, ns string) error {
		cmd := exec.Command("ssh-keygen", "-Y", "verify", "-f", allowed, "-I", "t@x", "-n", ns, "-s", sf)
		cmd.Stdin = bytes.NewReader(m)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return errors.New(string(out))
		}
		return nil
	}
	if err := run(msg, "git"); err != nil {
		t.Fatalf("ssh-keygen rejects our signature: %v", err)
	}
	if err := run(append([]byte("x"), msg...), "git"); err == nil {
		t.Fatal("ssh-keygen accepted a tampered message")
	}
	if err := run(msg, "file"); err == nil {
		t.Fatal("ssh-keygen accepted the wrong namespace")
	}
	// Our own verifier agrees.
	if err := Verify(priv.Public(), NamespaceGit, bytes.NewReader(msg), sig); err != nil {
		t.Fatal(err)
	}
}

func TestVerifySSHKeygenSignature(t *testing.T) {
	priv, kf, _ := keygen(t)
	msg := []byte("some payload\x00\xff binary ok\n")
	cmd := exec.Command("ssh-keygen", "-Y", "sign", "-f", kf, "-n", "git")
	cmd.Stdin = bytes.NewReader(msg)
	sig, err := cmd.Output()
	if err != nil {
		t.Fatalf("ssh-keygen -Y sign: %v", err)
	}
	pub := priv.Public()
	if err := Verify(pub, "git", bytes.NewReader(msg), sig); err != nil {
		t.Fatalf("verify ssh-keygen signature: %v", err)
	}
	sshPub, _ := ssh.NewPublicKey(pub)
	if err := Verify(sshPub, "git", bytes.NewReader(msg), sig); err != nil {
		t.Fatalf("verify with ssh.PublicKey: %v", err)
	}
	cases := []struct {
		name string
		pub  any
		ns   string
		msg  []byte
		sig  []byte
		want error
	}{
		{"tampered message", pub, "git", append([]byte{'X'}, msg[1:]...), sig, ErrBadSignature},
		{"namespace", pub, "file", msg, sig, ErrNamespace},
		{"other key", ed25519.NewKeyFromSeed(make([]byte, 32)).Public(), "git", msg, sig, ErrWrongKey},
		{"no armor", pub, "git", msg, sig[10:], ErrMalformed},
		{"garbage", pub, "git", msg, []byte("-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n"), ErrMalformed},
	}
	for _, c := range cases {
		err := Verify(c.pub, c.ns, bytes.NewReader(c.msg), c.sig)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// Flip one base64 character inside the signature bytes.
	lines := strings.Split(string(sig), "\n")
	l := []byte(lines[len(lines)-4])
	if l[5] == 'A' {
		l[5] = 'B'
	} else {
		l[5] = 'A'
	}
	lines[len(lines)-4] = string(l)
	if err := Verify(pub, "git", bytes.NewReader(msg), []byte(strings.Join(lines, "\n"))); err == nil {
		t.Fatal("flipped signature accepted")
	}
}

// FuzzParse: seeds in testdata/fuzz/FuzzParse (valid-signature is
// Sign(key from seed 7×32, "git", "m"), which the target re-creates below).
func FuzzParse(f *testing.F) {
	if m, _ := filepath.Glob("testdata/fuzz/FuzzParse/*"); len(m) == 0 {
		f.Fatal("no seeds in testdata/fuzz/FuzzParse")
	}
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	fixed := testutil.SourceTexts(f, ".")
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err == nil && s.PublicKey == nil {
			t.Fatal("nil key without error")
		}
		if err != nil {
			if run, ok := testutil.EchoedRun(err.Error(), b, fixed...); ok {
				t.Fatalf("error echoes the input run %q: %v", run, err)
			}
		}
		_ = Verify(priv.Public(), "git", strings.NewReader("m"), b)
	})
}
