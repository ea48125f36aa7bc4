package ranks

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// vectors are the files of testdata/ and the check each fails ("" for a
// valid index). The invalid ones are edits of gen-000003.ranks
// (SNAPD_UPDATE_SEEDS=1 rewrites them from it, see TestSeedIndexParses).
var vectors = []struct {
	file  string
	check wtxt.Check
	edit  func(string) string
}{
	{"gen-000003.ranks", "", nil},
	{"bad-rank-sha.ranks", CheckSHA256All, func(s string) string {
		l := strings.Split(s, "\n")
		a, _, _ := strings.Cut(strings.SplitN(l[2], "sha256_all=", 2)[1], " ")
		b, _, _ := strings.Cut(strings.SplitN(l[3], "sha256_all=", 2)[1], " ")
		l[3] = strings.Replace(l[3], b, a, 1)
		return strings.Join(l, "\n")
	}},
	{"bad-rank-order.ranks", CheckRank, func(s string) string {
		l := strings.Split(s, "\n")
		l[2], l[3] = l[3], l[2]
		return strings.Join(l, "\n")
	}},
	{"bad-world-size.ranks", CheckWorldSize, func(s string) string { return strings.Replace(s, "world_size=2", "world_size=3", 1) }},
	{"bad-ts.ranks", CheckMerkle, func(s string) string { return strings.Replace(s, "ts=2026", "ts=2027", 1) }},
	{"bad-crlf.ranks", CheckGrammar, func(s string) string { return strings.Replace(s, "\n", "\r\n", 1) }},
	{"bad-no-end.ranks", CheckGrammar, func(s string) string { return strings.TrimSuffix(s, "endranks\n") }},
}

// writeVectors rewrites the invalid vectors from the valid one.
func writeVectors(t *testing.T, good []byte) {
	for _, v := range vectors[1:] {
		if err := os.WriteFile(filepath.Join("testdata", v.file), []byte(v.edit(string(good))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVectors runs every testdata file through every API path: Parse,
// Decode (also with a size that runs past the end), Encode and WriteTo.
func TestVectors(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", v.file))
			if err != nil {
				t.Fatal(err)
			}
			ix, perr := Parse(b, v.file)
			dx, derr := Decode(bytes.NewReader(b), int64(len(b)), v.file)
			for _, err := range []error{perr, derr} {
				if v.check == "" {
					if err != nil {
						t.Fatal(err)
					}
					continue
				}
				var e *wtxt.Error
				if !errors.As(err, &e) || e.Check != v.check || !errors.Is(err, ErrInvalid) {
					t.Fatalf("want %s, got %v", v.check, err)
				}
			}
			if v.check != "" {
				return
			}
			if !bytes.Equal(ix.Encode(), b) || !bytes.Equal(dx.Encode(), b) {
				t.Fatal("decode/encode is not the identity")
			}
			var w bytes.Buffer
			if n, err := ix.WriteTo(&w); err != nil || n != int64(len(b)) || !bytes.Equal(w.Bytes(), b) {
				t.Fatalf("WriteTo: %d %v", n, err)
			}
			_, err = Decode(bytes.NewReader(b), int64(len(b))+1, v.file)
			var e *wtxt.Error
			if !errors.As(err, &e) || e.Check != wtxt.CheckTruncated {
				t.Fatalf("size past the end: want %s, got %v", wtxt.CheckTruncated, err)
			}
			if _, err := Decode(bytes.NewReader(b), MaxIndexBytes+1, v.file); err == nil || !strings.Contains(err.Error(), "more than") {
				t.Fatalf("size over the limit: %v", err)
			}
		})
	}
}

// randomParts returns the parts of a valid generation gen of world size
// world, with random hashes, ts, keyids, skeleton names and manifests.
func randomParts(rng *rand.Rand, gen string, world int, chain [32]byte) []Part {
	h := func() (b [32]byte) {
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	ps := make([]Part, world)
	for r := range ps {
		p := Part{Rank: r, Gen: gen, MerklePrev: chain, SHA256All: h(), MerkleThis: h(), SkeletonSHA256: h(),
			TS:       fmt.Sprintf("20%02d-%02d-%02dT%02d:%02d:%02dZ", rng.IntN(100), 1+rng.IntN(12), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60)),
			Skeleton: SkeletonName(r), Manifest: fmt.Sprintf("sha256:%x", h())}
		if rng.IntN(2) == 0 {
			k := h()
			p.KeyID = fmt.Sprintf("%x", k[:8])
		}
		if rng.IntN(4) == 0 {
			p.Skeleton = fmt.Sprintf("r_%d-x.%d", r, rng.IntN(1000))
		}
		ps[r] = p
	}
	rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	return ps
}

// TestRoundTripProperty: for random generations (world size, parts in any
// order, signed or not, any previous merkle_this), what New builds
// encodes to bytes that Parse and Decode accept, that re-encode byte for
// byte, whose values are New's, and that verify with the signing key.
func TestRoundTripProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 7))
	for i := range 300 {
		world := 1 + rng.IntN(9)
		if i%50 == 0 {
			world = 1 + rng.IntN(300)
		}
		gen := fmt.Sprintf("%06d", 1+rng.Uint64N(999999))
		if i%7 == 0 {
			gen = fmt.Sprint(1000000 + rng.Uint64N(1<<40))
		}
		chain := ChainID(fmt.Sprint("job-", i))
		var prev [32]byte
		if i%3 != 0 {
			prev = ChainID(fmt.Sprint("prev-", i))
		}
		var key ed25519.PrivateKey
		if i%2 == 0 {
			key = testKey(byte(i))
		}
		ix, err := New(gen, world, chain, randomParts(rng, gen, world, chain), prev, "b.1/x", key)
		if err != nil {
			t.Fatalf("case %d: New: %v", i, err)
		}
		b := ix.Encode()
		got, err := Parse(b, "p")
		if err != nil {
			t.Fatalf("case %d: Parse: %v", i, err)
		}
		dx, err := Decode(bytes.NewReader(b), int64(len(b)), "p")
		if err != nil {
			t.Fatalf("case %d: Decode: %v", i, err)
		}
		if !bytes.Equal(got.Encode(), b) || !bytes.Equal(dx.Encode(), b) {
			t.Fatalf("case %d: re-encoding differs", i)
		}
		if got.Gen != ix.Gen || got.WorldSize != world || got.TS != ix.TS || got.Chain != chain || got.MerklePrev != prev ||
			got.SHA256All != ix.SHA256All || got.MerkleThis != ix.MerkleThis || got.KeyID != ix.KeyID || got.GenNumber() != ix.GenNumber() {
			t.Fatalf("case %d: parsed values differ from New's", i)
		}
		for r := range world {
			want := ix.Ranks[r]
			want.TS = "" // a part's ts is not in the index (the latest is the generation's)
			if got.Ranks[r] != want {
				t.Fatalf("case %d: rank %d: %+v, want %+v", i, r, got.Ranks[r], ix.Ranks[r])
			}
		}
		vo := VerifyOptions{Prev: prev, CheckChain: true, Chain: chain}
		if key != nil {
			vo.Trusted = []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
		}
		if err := got.Verify("p", vo); err != nil {
			t.Fatalf("case %d: Verify: %v", i, err)
		}
	}
}
