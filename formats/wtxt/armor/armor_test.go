package armor

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"filippo.io/age/agessh"
	"golang.org/x/crypto/ssh"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

var plain = []byte("WTXT 1\nmeta schema=weights/v1 gen=000001 ts=2026-01-01T00:00:00Z build=x endian=LE host=cpu cuda=off\n" + strings.Repeat("line\n", 200))

func encrypt(t *testing.T, p []byte, r ...age.Recipient) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encrypt(&buf, bytes.NewReader(p), r...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func decrypt(t *testing.T, b []byte, ids ...age.Identity) ([]byte, error) {
	t.Helper()
	r, err := Decrypt(bytes.NewReader(b), ids...)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func TestRoundTripX25519AndSSH(t *testing.T) {
	id, _ := age.GenerateX25519Identity()
	pub, priv, _ := ed25519.GenerateKey(nil)
	sshPub, _ := ssh.NewPublicKey(pub)
	sshRec, err := agessh.NewEd25519Recipient(sshPub)
	if err != nil {
		t.Fatal(err)
	}
	sshID, err := agessh.NewEd25519Identity(priv)
	if err != nil {
		t.Fatal(err)
	}
	enc := encrypt(t, plain, id.Recipient(), sshRec)
	if _, err := Scan(bytes.NewReader(enc)); err != nil {
		t.Fatalf("own armor fails Scan: %v", err)
	}
	for _, ident := range []age.Identity{id, sshID} {
		got, err := decrypt(t, enc, ident)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("decrypt: %v", err)
		}
	}
	other, _ := age.GenerateX25519Identity()
	if _, err := decrypt(t, enc, other); err == nil || !strings.Contains(err.Error(), "no identity matches") {
		t.Fatalf("wrong identity: %v", err)
	}
	if _, err := Decrypt(strings.NewReader("WTXT 1\n"), id); !errors.Is(err, ErrNotArmored) {
		t.Fatalf("plain input: %v", err)
	}
}

func TestScanRejects(t *testing.T) {
	id, _ := age.GenerateX25519Identity()
	enc := encrypt(t, plain, id.Recipient())
	lines := strings.SplitAfter(string(enc), "\n")
	cases := map[string]string{
		"crlf":          strings.Replace(string(enc), "\n", "\r\n", 1),
		"no final LF":   strings.TrimSuffix(string(enc), "\n"),
		"truncated":     strings.Join(lines[:len(lines)-3], ""),
		"bad base64":    lines[0] + "!" + lines[1][1:] + strings.Join(lines[2:], ""),
		"rewrapped":     lines[0] + lines[1][:30] + "\n" + lines[1][30:] + strings.Join(lines[2:], ""),
		"trailing data": string(enc) + "x\n",
		"non-ascii":     string(enc[:100]) + "\xc3" + string(enc[101:]),
		"no header":     strings.Join(lines[1:], ""),
	}
	for name, in := range cases {
		if _, err := Scan(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "armor") {
			t.Errorf("%s: error %q does not say armor", name, err)
		}
	}
	// Bad base64 inside the body is also refused by Decrypt.
	if _, err := decrypt(t, []byte(cases["bad base64"]), id); err == nil {
		t.Error("decrypt accepted bad base64")
	}
}

func TestSealSignVerifyTamper(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	id, _ := age.GenerateX25519Identity()
	enc := encrypt(t, plain, id.Recipient())
	d, err := Scan(bytes.NewReader(enc))
	if err != nil {
		t.Fatal(err)
	}
	if d.SHA256 != sha256.Sum256(enc) || d.Bytes != int64(len(enc)) {
		t.Fatal("digest wrong")
	}
	var prev, all [32]byte
	prev[0], all[1] = 1, 2
	s := &Seal{Kind: KindWTXT, Bytes: d.Bytes, SHA256: d.SHA256, Root: wtxt.Root{Gen: "000002", TS: "2026-01-01T00:00:00Z", Build: "b", SHA256All: all, MerklePrev: prev}}
	s.MerkleThis = wtxt.Merkle(prev, all, s.TS, s.Gen, s.Build)
	s.Sign(priv)
	line := s.Marshal()
	p, err := ParseSeal(line)
	if err != nil {
		t.Fatal(err)
	}
	opts := VerifyOptions{Trusted: []ed25519.PublicKey{pub}, RequireSignature: true, PrevMerkle: &prev}
	if rep, err := p.Verify(d, opts); err != nil || !rep.Signed {
		t.Fatalf("verify: %v", err)
	}
	// Every single-bit flip of the seal line is rejected, by the parser or
	// by verification.
	for i := 0; i < len(line)*8; i++ {
		b := bytes.Clone(line)
		b[i/8] ^= 1 << (i % 8)
		if p2, err := ParseSeal(b); err == nil {
			if _, err := p2.Verify(d, opts); err == nil {
				t.Fatalf("bit %d flipped: accepted", i)
			}
		}
	}
	// A changed armored file, an unknown key, a broken chain.
	d2 := d
	d2.SHA256[0] ^= 1
	if _, err := p.Verify(d2, opts); err == nil {
		t.Fatal("changed file accepted")
	}
	otherPub, _, _ := ed25519.GenerateKey(nil)
	if _, err := p.Verify(d, VerifyOptions{Trusted: []ed25519.PublicKey{otherPub}}); err == nil || !strings.Contains(err.Error(), "not among") {
		t.Fatalf("unknown key: %v", err)
	}
	var wrong [32]byte
	if _, err := p.Verify(d, VerifyOptions{Trusted: []ed25519.PublicKey{pub}, PrevMerkle: &wrong}); err == nil || !strings.Contains(err.Error(), "chain") {
		t.Fatalf("chain: %v", err)
	}
	// Unsigned seals parse and are refused only when a signature is required.
	u := *s
	u.Sig, u.KeyID = nil, ""
	pu, err := ParseSeal(u.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pu.Verify(d, VerifyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pu.Verify(d, VerifyOptions{RequireSignature: true}); err == nil {
		t.Fatal("unsigned accepted with RequireSignature")
	}
}

// Interoperability with the real age CLI in both directions.
func TestAgeCLIInterop(t *testing.T) {
	ageBin, err := exec.LookPath("age")
	if err != nil {
		t.Skip("age CLI not installed (scripts/test.sh installs it)")
	}
	keygen, err := exec.LookPath("age-keygen")
	if err != nil {
		t.Skip("age-keygen not installed")
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key.txt")
	if out, err := exec.Command(keygen, "-o", keyFile).CombinedOutput(); err != nil {
		t.Fatalf("age-keygen: %v %s", err, out)
	}
	kb, _ := os.ReadFile(keyFile)
	ids, err := age.ParseIdentities(bytes.NewReader(kb))
	if err != nil {
		t.Fatal(err)
	}
	rec := ids[0].(*age.X25519Identity).Recipient()

	// snapd encrypts, age -d decrypts.
	enc := encrypt(t, plain, rec)
	encFile := filepath.Join(dir, "snap.wtxt.age")
	os.WriteFile(encFile, enc, 0o644)
	out, err := exec.Command(ageBin, "-d", "-i", keyFile, encFile).Output()
	if err != nil || !bytes.Equal(out, plain) {
		t.Fatalf("age -d of snapd output: %v", err)
	}

	// age -a encrypts, snapd decrypts (and Scan accepts its armor).
	plainFile := filepath.Join(dir, "plain.wtxt")
	os.WriteFile(plainFile, plain, 0o644)
	cmd := exec.Command(ageBin, "-a", "-r", rec.String(), plainFile)
	armored, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Scan(bytes.NewReader(armored)); err != nil {
		t.Fatalf("Scan of age -a output: %v", err)
	}
	got, err := decrypt(t, armored, ids...)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("snapd decrypt of age -a output: %v", err)
	}
}
