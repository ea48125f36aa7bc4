package armor

import (
	"crypto/ed25519"
	"os"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// TestWriteSeedSeal regenerates testdata/signed.wseal when SNAPD_REGEN=1;
// otherwise it checks the checked-in seed still parses and verifies
// against the deterministic test key.
func TestSeedSeal(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(make([]byte, 32))
	s := &Seal{Kind: KindDelta, Bytes: 10, Root: wtxt.Root{Gen: "000042", TS: "2026-01-01T00:00:00Z", Build: "seed"}}
	s.MerkleThis = wtxt.Merkle(s.MerklePrev, s.SHA256All, s.TS, s.Gen, s.Build)
	s.Sign(priv)
	if os.Getenv("SNAPD_REGEN") == "1" {
		os.WriteFile("testdata/signed.wseal", s.Marshal(), 0o644)
	}
	b, err := os.ReadFile("testdata/signed.wseal")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseSeal(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Verify(Digest{Bytes: 10, SHA256: s.SHA256}, VerifyOptions{Trusted: []ed25519.PublicKey{priv.Public().(ed25519.PublicKey)}, RequireSignature: true}); err != nil {
		t.Fatal(err)
	}
}
