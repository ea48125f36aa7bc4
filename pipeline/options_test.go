package pipeline

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/wal"
)

// TestEncryptedRing: with recipients every ring file is age armor with a
// signed WSEAL seal that verifies (chain included) with public keys only,
// the plaintext decrypts to a verifying WTXT, deltas decrypt and apply,
// and only the head's plaintext copy is kept.
func TestEncryptedRing(t *testing.T) {
	f := newFixture(t)
	rcp, err := keys.LoadAgeRecipients(f.keys.gen.AgePub)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := keys.LoadAgeIdentities(f.keys.gen.AgeKey)
	if err != nil {
		t.Fatal(err)
	}
	f.start(t, func(c *Config, d *Deps) { c.Recipients = rcp })
	for g := uint64(1); g <= 3; g++ {
		request(t, f.dir, g, publish(t, f.dir, g))
	}
	for g := uint64(1); g <= 3; g++ {
		if r := f.wait(t, g); r.State != wal.Done || r.Seal == "" {
			t.Fatalf("gen %d: %+v", g, r)
		}
	}
	f.stop(t)
	ring := filepath.Join(f.dir, RingDir)
	decrypt := func(p string) []byte {
		fh, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		r, err := armor.Decrypt(fh, ids...)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		var b bytes.Buffer
		if _, err := b.ReadFrom(r); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	var prev *[32]byte
	var prevPlain []byte
	for g := uint64(1); g <= 3; g++ {
		for _, ext := range []string{ExtWTXT, ExtDelta} {
			if g == 1 && ext == ExtDelta {
				continue
			}
			p := ringPath(ring, g, ext)
			sb, err := os.ReadFile(armor.SealPath(p))
			if err != nil {
				t.Fatal(err)
			}
			s, err := armor.ParseSeal(sb)
			if err != nil {
				t.Fatal(err)
			}
			fh, _ := os.Open(p)
			dg, err := armor.Scan(fh)
			fh.Close()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Verify(dg, armor.VerifyOptions{Trusted: []ed25519.PublicKey{f.keys.pub}, RequireSignature: true, PrevMerkle: prev}); err != nil {
				t.Fatalf("gen %d %s seal: %v", g, ext, err)
			}
		}
		plain := decrypt(ringPath(ring, g, ExtWTXT))
		rep, err := wtxt.Verify(context.Background(), bytes.NewReader(plain), wtxt.VerifyOptions{TrustedKeys: []ed25519.PublicKey{f.keys.pub}, HMACKey: f.keys.hmac, PrevMerkle: prev, RequireSignature: true})
		if err != nil {
			t.Fatalf("gen %d: %v", g, err)
		}
		if g > 1 {
			var out bytes.Buffer
			delta := decrypt(ringPath(ring, g, ExtDelta))
			if _, err := wtxt.ApplyDelta(context.Background(), &out, bytes.NewReader(prevPlain), int64(len(prevPlain)), bytes.NewReader(delta), "delta"); err != nil || !bytes.Equal(out.Bytes(), plain) {
				t.Fatalf("gen %d: delta: %v", g, err)
			}
		}
		var mt [32]byte
		copy(mt[:], mustHex(t, rep.MerkleThis))
		prev, prevPlain = &mt, plain
	}
	ents, _ := os.ReadDir(filepath.Join(ring, plainDir))
	if len(ents) != 1 || ents[0].Name() != "gen-000003.wtxt" {
		t.Fatalf("plaintext copies: %v", ents)
	}
}

// TestStreamingWSUM: with Stream the ring holds a WSUM per generation and
// the WTXT verifies with it.
func TestStreamingWSUM(t *testing.T) {
	f := newFixture(t)
	f.start(t, func(c *Config, d *Deps) { c.Stream = true })
	for g := uint64(1); g <= 2; g++ {
		request(t, f.dir, g, publish(t, f.dir, g))
	}
	var prev *[32]byte
	for g := uint64(1); g <= 2; g++ {
		r := f.wait(t, g)
		if r.State != wal.Done || r.WSUM == "" {
			t.Fatalf("gen %d: %+v", g, r)
		}
		ws, _ := os.ReadFile(r.WSUM)
		fh, _ := os.Open(r.WTXT)
		rep, err := wtxt.Verify(context.Background(), fh, wtxt.VerifyOptions{TrustedKeys: []ed25519.PublicKey{f.keys.pub}, HMACKey: f.keys.hmac, WSUM: ws, PrevMerkle: prev, RequireSignature: true})
		fh.Close()
		if err != nil || !rep.Streamed || rep.MerkleThis != r.MerkleThis {
			t.Fatalf("gen %d: %v %+v", g, err, rep)
		}
		var mt [32]byte
		copy(mt[:], mustHex(t, rep.MerkleThis))
		prev = &mt
	}
	if r, _ := f.d.Wait(context.Background(), 2); r.Commit == "" {
		t.Fatal("streamed generation not committed")
	}
}
