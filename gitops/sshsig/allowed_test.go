package sshsig

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestParseAllowedSignersErrors: lines ssh-keygen would skip make the
// file fail to load, naming file:line and the check; nothing panics.
func TestParseAllowedSignersErrors(t *testing.T) {
	_, _, publine := keygen(t)
	for _, tc := range []struct{ line, want string }{
		{`a@x namespaces=git ` + publine, "value must be double-quoted"},
		{`a@x valid-before="2000" ` + publine, `invalid "valid-before" time`},
		{`a@x valid-after="2000010x" ` + publine, `invalid "valid-after" time`},
		{`a@x bogus ` + publine, `unknown option "bogus"`},
		{`a@x namespaces="git",namespaces="file" ` + publine, `multiple "namespaces" clauses`},
		{`a@x namespaces="git ` + publine, "missing end quote"},
		{`a@x`, "no key after the principals"},
		{`"a@x ` + publine, "missing end quote"},
		{`a@x ssh-ed25519 AAAA`, "unknown option"},
		{"a@x " + publine + "\n" + publine, "a bare key line and an allowed_signers line"},
	} {
		_, err := ParseAllowedSigners("as", []byte("# c\n\n"+tc.line+"\n"), time.UTC)
		if !errors.Is(err, ErrAllowedSigners) || !strings.Contains(err.Error(), "as:3:") && !strings.Contains(err.Error(), "as:4:") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want as:3: ... %s", tc.line, err, tc.want)
		}
	}
}

// TestAllowedSignersMatchesSSHKeygen: Verify gives ssh-keygen's verdict
// (git's two steps: -Y find-principals, then -Y verify -I each principal
// with -Overify-time) for plain and certificate signatures at several
// times; times without Z are local, as ssh-keygen reads them (TZ is set
// for both).
func TestAllowedSignersMatchesSSHKeygen(t *testing.T) {
	t.Setenv("TZ", "Europe/Berlin")
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no tzdata")
	}
	priv, _, publine := keygen(t)
	ca := newEdSigner(t)
	keySigner, _ := ssh.NewSignerFromSigner(priv)
	cert := &ssh.Certificate{Key: keySigner.PublicKey(), CertType: ssh.UserCert, KeyId: "k", ValidPrincipals: []string{"a@x"},
		ValidAfter: uint64(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Unix()), ValidBefore: uint64(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).Unix())}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	certSigner, _ := ssh.NewCertSigner(cert, keySigner)
	calline := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ca.PublicKey())))
	msg := []byte("payload\n")
	sigs := map[string][]byte{}
	for name, s := range map[string]ssh.Signer{"plain": keySigner, "cert": certSigner} {
		sig, err := SignWith(s, NamespaceGit, bytes.NewReader(msg))
		if err != nil {
			t.Fatal(err)
		}
		sigs[name] = sig
	}
	files := []string{
		"a@x " + publine,
		`a@x,b@y namespaces="file" ` + publine,
		`b@y,*@x valid-after="20260101",valid-before="20260301" ` + publine,
		`a@x valid-before="20260115Z" ` + publine + "\n" + `a@x namespaces="g?t" ` + publine,
		`*@x cert-authority ` + calline,
		`b@y cert-authority ` + calline,
		`a@x cert-authority,valid-after="20260201" ` + calline,
	}
	times := []time.Time{time.Date(2026, 1, 15, 0, 30, 0, 0, time.UTC), time.Date(2026, 2, 15, 12, 0, 0, 0, loc), time.Date(2027, 6, 1, 0, 0, 0, 0, loc)}
	dir := t.TempDir()
	mf := filepath.Join(dir, "msg")
	os.WriteFile(mf, msg, 0o600)
	for fi, text := range files {
		af := filepath.Join(dir, "allowed")
		os.WriteFile(af, []byte(text+"\n"), 0o600)
		a, err := LoadAllowedSigners(af)
		if err != nil {
			t.Fatalf("file %d: %v", fi, err)
		}
		for name, sig := range sigs {
			sf := filepath.Join(dir, "sig")
			os.WriteFile(sf, sig, 0o600)
			for _, at := range times {
				want := sshKeygenVerdict(t, af, sf, mf, at)
				res, err := a.Verify(NamespaceGit, bytes.NewReader(msg), sig, at)
				if (err == nil) != want {
					af2, _ := os.ReadFile(af)
					sf2, _ := os.ReadFile(sf)
					t.Logf("allowed:\n%s\nsig:\n%s", af2, sf2)
					t.Errorf("file %d %q, %s signature at %s: Verify %v (%+v), ssh-keygen %v", fi, text, name, at, err, res, want)
				}
			}
		}
	}
}

// sshKeygenVerdict runs git's two ssh-keygen steps (gpg-interface.c:
// find-principals, then verify -I for each principal until one says
// "Good" on stdout).
func sshKeygenVerdict(t *testing.T, allowed, sig, msg string, at time.Time) bool {
	vt := "-Overify-time=" + at.Local().Format("20060102150405")
	out, err := exec.Command("ssh-keygen", "-Y", "find-principals", "-f", allowed, "-s", sig, vt).CombinedOutput()
	if err != nil {
		t.Logf("find-principals %s: %v %s", vt, err, out)
		return false
	}
	for _, p := range strings.Fields(string(out)) {
		cmd := exec.Command("ssh-keygen", "-Y", "verify", "-f", allowed, "-I", p, "-n", NamespaceGit, "-s", sig, vt)
		f, _ := os.Open(msg)
		cmd.Stdin = f
		o, err := cmd.Output() // git reads "Good" from stdout
		f.Close()
		if err == nil && bytes.HasPrefix(o, []byte("Good")) {
			return true
		}
	}
	return false
}

func newEdSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzParseAllowedSigners: no input panics; what parses names a key on
// every line.
func FuzzParseAllowedSigners(f *testing.F) {
	f.Add([]byte(`a@x namespaces="git",valid-after="20260101Z" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHu7a1p2kbNdw5yNu+N8d8b9HqgKQvNhuf8qXgG1uW6h c`))
	f.Add([]byte(`"a b" cert-authority ssh-ed25519 AAAA` + "\n# x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseAllowedSigners("f", b, time.UTC)
		if err != nil {
			return
		}
		for _, l := range a.Lines {
			if l.Key == nil || l.Principals == "" {
				t.Fatalf("%+v", l)
			}
		}
	})
}
