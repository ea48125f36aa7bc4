package armor

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// sealFor encrypts the WTXT plain to id and returns the armored bytes and
// a seal signed by priv carrying the plaintext's chain values.
func sealFor(t *testing.T, plain []byte, id *age.X25519Identity, priv ed25519.PrivateKey) ([]byte, *Seal) {
	t.Helper()
	rep, err := wtxt.Verify(context.Background(), bytes.NewReader(plain), wtxt.VerifyOptions{File: "gen.wtxt"})
	if err != nil {
		t.Fatal(err)
	}
	enc := encrypt(t, plain, id.Recipient())
	d, err := Scan(bytes.NewReader(enc))
	if err != nil {
		t.Fatal(err)
	}
	s := &Seal{Kind: KindWTXT, Bytes: d.Bytes, SHA256: d.SHA256, Root: wtxt.Root{Gen: rep.Header.Gen, TS: rep.Header.TS, Build: rep.Header.Meta.Build}}
	for dst, src := range map[*[32]byte]string{&s.SHA256All: rep.SHA256All, &s.MerklePrev: rep.MerklePrev, &s.MerkleThis: rep.MerkleThis} {
		if _, err := hex.Decode(dst[:], []byte(src)); err != nil {
			t.Fatal(err)
		}
	}
	s.Sign(priv)
	return enc, s
}

// VerifySealed checks the seal, then (with identities) decrypts and fully
// verifies the plaintext against the seal; every failure names its file.
func TestVerifySealed(t *testing.T) {
	plain, err := os.ReadFile("../testdata/golden-tiny.wtxt")
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := ed25519.GenerateKey(nil)
	id, _ := age.GenerateX25519Identity()
	other, _ := age.GenerateX25519Identity()
	enc, seal := sealFor(t, plain, id, priv)
	trusted := VerifyOptions{Trusted: []ed25519.PublicKey{pub}, RequireSignature: true}
	ids := func(i ...age.Identity) func() ([]age.Identity, error) {
		return func() ([]age.Identity, error) { return i, nil }
	}
	// A seal of another generation with the same armored bytes: its own
	// Merkle values are consistent, the plaintext is not the one it names.
	foreign := *seal
	foreign.Gen = "999999"
	foreign.MerkleThis = wtxt.Merkle(foreign.MerklePrev, foreign.SHA256All, foreign.TS, foreign.Gen, foreign.Build)
	foreign.Sign(priv)
	tampered := *seal
	tampered.Bytes++
	tampered.Sign(priv)
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		seal      *Seal
		ids       func() ([]age.Identity, error)
		decrypted bool
		fail      string // "" = every check passes; else the start of the first failure
		check     string // the *SealError check of the first failure, if one
	}{
		{name: "seal only", seal: seal},
		{name: "decrypted", seal: seal, ids: ids(id), decrypted: true},
		{name: "other generation", seal: &foreign, ids: ids(id), decrypted: true, fail: "seal: plaintext: ", check: "plaintext"},
		{name: "wrong identity", seal: seal, ids: ids(other), fail: "gen.wtxt.age: decrypt: no identity matches"},
		{name: "bad seal", seal: &tampered, ids: func() ([]age.Identity, error) { t.Error("identities loaded after a failed seal"); return nil, nil },
			fail: "gen.wtxt.age.wseal: seal: bytes: ", check: "bytes"},
	} {
		rep, err := VerifySealed(ctx, "gen.wtxt.age", bytes.NewReader(enc), c.seal, SealedOptions{Seal: trusted, Identities: c.ids, Plaintext: wtxt.VerifyOptions{File: "gen.wtxt.age"}})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if rep.Seal == nil || rep.Decrypted != c.decrypted {
			t.Errorf("%s: seal report %v, decrypted %v, want %v", c.name, rep.Seal, rep.Decrypted, c.decrypted)
		}
		if c.decrypted && (rep.Plaintext == nil || rep.Plaintext.Failures == nil) {
			t.Errorf("%s: no plaintext report (or nil Failures)", c.name)
		}
		switch {
		case c.fail == "" && len(rep.Failures) > 0:
			t.Errorf("%s: %v", c.name, rep.Failures)
		case c.fail != "" && (len(rep.Failures) == 0 || !strings.HasPrefix(rep.Failures[0].Error(), c.fail)):
			t.Errorf("%s: failures %v, want one starting %q", c.name, rep.Failures, c.fail)
		case c.check != "":
			if se := (*SealError)(nil); !errors.As(rep.Failures[0], &se) || se.Check != c.check {
				t.Errorf("%s: %v, want a %q SealError", c.name, rep.Failures[0], c.check)
			}
		}
	}
	// A callback's error ends the verification and is returned as it is.
	errKeys := errors.New("identity file unreadable")
	if _, err := VerifySealed(ctx, "gen.wtxt.age", bytes.NewReader(enc), seal, SealedOptions{Seal: trusted, Identities: func() ([]age.Identity, error) { return nil, errKeys }}); !errors.Is(err, errKeys) {
		t.Errorf("identities error: %v", err)
	}
	errWSUM := errors.New("wsum unreadable")
	if _, err := VerifySealed(ctx, "gen.wtxt.age", bytes.NewReader(enc), seal, SealedOptions{Seal: trusted, Identities: ids(id), WSUM: func() ([]byte, error) { return nil, errWSUM }}); !errors.Is(err, errWSUM) {
		t.Errorf("wsum error: %v", err)
	}
	// MatchHeader never panics on a report without a header.
	for _, rep := range []*wtxt.Report{nil, {}} {
		if err := seal.MatchHeader(rep); err == nil {
			t.Errorf("MatchHeader(%v) accepted", rep)
		}
	}
}
