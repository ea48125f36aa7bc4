package armor

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"

	"filippo.io/age"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// Seal.Check scans and verifies in one call and says what became of the
// signature, for every case its two callers (snapd verify, verify-repo)
// distinguish.
func TestSealCheck(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	otherPub, _, _ := ed25519.GenerateKey(nil)
	id, _ := age.GenerateX25519Identity()
	enc := encrypt(t, plain, id.Recipient())
	d, err := Scan(bytes.NewReader(enc))
	if err != nil {
		t.Fatal(err)
	}
	var prev, all [32]byte
	s := Seal{Kind: KindWTXT, Bytes: d.Bytes, SHA256: d.SHA256, Root: wtxt.Root{Gen: "000002", TS: "2026-01-01T00:00:00Z", Build: "b", SHA256All: all, MerklePrev: prev}}
	s.MerkleThis = wtxt.Merkle(prev, all, s.TS, s.Gen, s.Build)
	signed, unsigned := s, s
	signed.Sign(priv)
	other := s
	other.Bytes++
	other.Sign(priv)
	broken := bytes.Replace(bytes.Clone(enc), []byte("\n"), []byte("\r\n"), 1)
	for _, c := range []struct {
		name  string
		seal  Seal
		file  []byte
		opts  VerifyOptions
		sig   string
		check string // "" = no error
	}{
		{"signed, trusted", signed, enc, VerifyOptions{Trusted: []ed25519.PublicKey{pub}, RequireSignature: true}, wtxt.SigVerified, ""},
		{"signed, no keys", signed, enc, VerifyOptions{}, wtxt.SigUnchecked, "signature"},
		{"signed, other key", signed, enc, VerifyOptions{Trusted: []ed25519.PublicKey{otherPub}}, wtxt.SigFailed, "signature"},
		{"unsigned", unsigned, enc, VerifyOptions{}, wtxt.SigAbsent, ""},
		{"unsigned, required", unsigned, enc, VerifyOptions{RequireSignature: true}, wtxt.SigAbsent, "signature"},
		{"signed, other file", other, enc, VerifyOptions{Trusted: []ed25519.PublicKey{pub}}, wtxt.SigVerified, "bytes"},
		{"signed, broken armor", signed, broken, VerifyOptions{Trusted: []ed25519.PublicKey{pub}}, wtxt.SigUnchecked, "armor"},
		{"signed, truncated", signed, enc[:len(enc)/2], VerifyOptions{Trusted: []ed25519.PublicKey{pub}}, wtxt.SigUnchecked, "armor"},
	} {
		rep, err := c.seal.Check(bytes.NewReader(c.file), c.opts)
		var se *SealError
		switch {
		case rep == nil:
			t.Errorf("%s: nil report", c.name)
		case rep.Signature != c.sig:
			t.Errorf("%s: signature %q, want %q (%v)", c.name, rep.Signature, c.sig, err)
		case c.check == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.check != "" && (!errors.As(err, &se) || se.Check != c.check):
			t.Errorf("%s: %v, want a %q SealError", c.name, err, c.check)
		}
	}
}
