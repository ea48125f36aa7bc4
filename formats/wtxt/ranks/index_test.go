package ranks

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

var testChain = ChainID("test-job")

func testKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, 32))
}

// shard returns rank r's shard of generation gen: two f32 arrays whose
// values depend on gen and r.
func shard(gen uint64, r int) *snapshot.Snapshot {
	mk := func(name string, rows, cols int64, salt uint32) *snapshot.Array {
		b := make([]byte, rows*cols*4)
		for i := range rows * cols {
			binary.LittleEndian.PutUint32(b[i*4:], uint32(gen)*1000+uint32(r)*100+uint32(i)+salt)
		}
		return &snapshot.Array{Name: name, DType: snapshot.F32, Shape: []int64{rows, cols}, Data: snapshot.Bytes(b)}
	}
	m := snapshot.DefaultMeta()
	m.TS = time.Date(2026, 11, 24, 7, 0, int(gen)%60, 0, time.UTC)
	m.Build = "test"
	return &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{
		mk(fmt.Sprintf("layers.%d.w", r), 64, 16, 0),
		mk(fmt.Sprintf("layers.%d.b", r), 1, 16, 7),
	}}
}

// testPart encodes rank r of gen, splits it, and returns its WTXT, its
// skeleton and its Part.
func testPart(t testing.TB, gen uint64, r int, chain [32]byte, key ed25519.PrivateKey) (wt, skel []byte, p Part) {
	t.Helper()
	var w bytes.Buffer
	if _, err := EncodePart(context.Background(), &w, shard(gen, r), PartOptions{Gen: gen, Chain: chain, SignKey: key}); err != nil {
		t.Fatal(err)
	}
	var sk bytes.Buffer
	if _, err := wtxt.Split(context.Background(), bytes.NewReader(w.Bytes()), &sk, func(context.Context, wtxt.Segment, []byte) error { return nil }, wtxt.SplitOptions{SegmentSize: 1024}); err != nil {
		t.Fatal(err)
	}
	h, err := SkeletonHeader(sk.Bytes(), "skel")
	if err != nil {
		t.Fatal(err)
	}
	p = PartFromHeader(r, h)
	p.Skeleton = SkeletonName(r)
	p.SkeletonSHA256 = sha256.Sum256(sk.Bytes())
	p.Manifest = fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(fmt.Sprint("manifest", gen, r))))
	return w.Bytes(), sk.Bytes(), p
}

func parts(t testing.TB, gen uint64, world int) ([]Part, [][]byte) {
	var ps []Part
	var sks [][]byte
	for r := range world {
		_, sk, p := testPart(t, gen, r, testChain, testKey(byte(r+1)))
		ps = append(ps, p)
		sks = append(sks, sk)
	}
	return ps, sks
}

// errRank is the rank an error names, -1 for none.
func errRank(e *wtxt.Error) int {
	if e.Rank == nil {
		return -1
	}
	return *e.Rank
}

func wantCheck(t *testing.T, err error, check wtxt.Check, rank int) {
	t.Helper()
	var e *wtxt.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *wtxt.Error with check %s, got %v", check, err)
	}
	if e.Check != check || errRank(e) != rank {
		t.Fatalf("want check %s rank %d, got check %s rank %d (%v)", check, rank, e.Check, errRank(e), err)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v does not wrap ErrInvalid", err)
	}
}

func TestIndexRoundTripAndChain(t *testing.T) {
	key := testKey(9)
	pub := key.Public().(ed25519.PublicKey)
	var prev [32]byte
	for gen := uint64(1); gen <= 3; gen++ {
		ps, sks := parts(t, gen, 4)
		// Any order of the parts gives the same index.
		rev := []Part{ps[3], ps[1], ps[0], ps[2]}
		ix, err := New(fmt.Sprintf("%06d", gen), 4, testChain, rev, prev, "ranks", key)
		if err != nil {
			t.Fatal(err)
		}
		ix2, err := New(fmt.Sprintf("%06d", gen), 4, testChain, ps, prev, "ranks", key)
		if err != nil {
			t.Fatal(err)
		}
		b := ix.Encode()
		if !bytes.Equal(b, ix2.Encode()) {
			t.Fatal("index depends on the order of the parts")
		}
		got, err := Parse(b, "gen.ranks")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Encode(), b) {
			t.Fatal("parse/encode is not the identity")
		}
		if err := got.Verify("gen.ranks", VerifyOptions{Trusted: []ed25519.PublicKey{pub}, Prev: prev, CheckChain: true, Chain: testChain}); err != nil {
			t.Fatal(err)
		}
		for r, sk := range sks {
			if err := got.CheckSkeleton(r, sk, SkeletonName(r)); err != nil {
				t.Fatal(err)
			}
		}
		// The root is recomputable from the parts alone.
		want := sha256.Sum256(RootText(ix.Gen, 4, ps))
		if got.SHA256All != want || got.MerkleThis != wtxt.Merkle(prev, want, ix.TS, ix.Gen, "ranks") {
			t.Fatal("root values do not follow the construction")
		}
		// A wrong previous generation is a chain failure.
		if err := got.Verify("gen.ranks", VerifyOptions{Prev: [32]byte{1}, CheckChain: true}); err == nil {
			t.Fatal("chain break not detected")
		} else {
			wantCheck(t, err, CheckChain, -1)
		}
		prev = got.MerkleThis
	}
}

func TestIndexBadParts(t *testing.T) {
	ps, _ := parts(t, 5, 4)
	gen := "000005"
	t.Run("world size", func(t *testing.T) {
		_, err := New(gen, 3, testChain, ps, [32]byte{}, "ranks", nil) // rank 3 of W=3
		wantCheck(t, err, CheckRank, -1)
		_, err = New(gen, 0, testChain, ps, [32]byte{}, "ranks", nil)
		wantCheck(t, err, CheckWorldSize, -1)
		_, err = New(gen, MaxWorldSize+1, testChain, ps, [32]byte{}, "ranks", nil)
		wantCheck(t, err, CheckWorldSize, -1)
	})
	t.Run("two shards claim one rank", func(t *testing.T) {
		_, _, other := testPart(t, 5, 2, testChain, testKey(3))
		other.Rank = 1
		_, err := New(gen, 4, testChain, append(append([]Part{}, ps...), other), [32]byte{}, "ranks", nil)
		wantCheck(t, err, CheckRank, 1)
		// The same part offered twice (a re-push) is not a conflict.
		if _, err := New(gen, 4, testChain, append(append([]Part{}, ps...), ps[1]), [32]byte{}, "ranks", nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing rank", func(t *testing.T) {
		_, err := New(gen, 4, testChain, ps[:3], [32]byte{}, "ranks", nil)
		wantCheck(t, err, CheckRank, 3)
	})
	t.Run("another generation", func(t *testing.T) {
		_, _, old := testPart(t, 4, 2, testChain, testKey(3))
		_, err := New(gen, 4, testChain, []Part{ps[0], ps[1], old, ps[3]}, [32]byte{}, "ranks", nil)
		wantCheck(t, err, CheckGen, 2)
	})
	t.Run("another chain", func(t *testing.T) {
		_, _, foreign := testPart(t, 5, 2, ChainID("other-job"), testKey(3))
		_, err := New(gen, 4, testChain, []Part{ps[0], ps[1], foreign, ps[3]}, [32]byte{}, "ranks", nil)
		wantCheck(t, err, CheckChain, 2)
	})
	t.Run("skeleton of another part", func(t *testing.T) {
		ix, err := New(gen, 4, testChain, ps, [32]byte{}, "ranks", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, sk, _ := testPart(t, 5, 1, testChain, testKey(2))
		if err := ix.CheckSkeleton(1, sk, "rank-00001.skel"); err != nil {
			t.Fatal(err)
		}
		wantCheck(t, ix.CheckSkeleton(2, sk, "rank-00002.skel"), CheckSkeleton, 2)
	})
}

func TestIndexTamper(t *testing.T) {
	ps, _ := parts(t, 7, 2)
	key := testKey(9)
	ix, err := New("000007", 2, testChain, ps, [32]byte{}, "ranks", key)
	if err != nil {
		t.Fatal(err)
	}
	good := ix.Encode()
	cases := []struct {
		name  string
		edit  func(string) string
		check wtxt.Check
	}{
		{"rank sha changed", func(s string) string {
			return strings.Replace(s, fmt.Sprintf("sha256_all=%x", ps[1].SHA256All), fmt.Sprintf("sha256_all=%x", ps[0].SHA256All), 1)
		}, CheckSHA256All},
		{"ranks swapped", func(s string) string {
			l := strings.Split(s, "\n")
			l[2], l[3] = l[3], l[2]
			return strings.Join(l, "\n")
		}, CheckRank},
		{"world size lies", func(s string) string { return strings.Replace(s, "world_size=2", "world_size=3", 1) }, CheckWorldSize},
		{"ts changed", func(s string) string { return strings.Replace(s, "ts=2026", "ts=2027", 1) }, CheckMerkle},
		{"crlf", func(s string) string { return strings.Replace(s, "\n", "\r\n", 1) }, CheckGrammar},
		{"trailing", func(s string) string { return s + "x\n" }, CheckGrammar},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.edit(string(good))), "gen.ranks")
			var e *wtxt.Error
			if !errors.As(err, &e) || e.Check != c.check {
				t.Fatalf("want %s, got %v", c.check, err)
			}
			if strings.Contains(err.Error(), "\x00") || len(err.Error()) > 300 {
				t.Fatalf("error too long or echoes content: %q", err)
			}
		})
	}
	// A re-signed index (hashes consistent) by an untrusted key: signer.
	other, _ := New("000007", 2, testChain, ps, [32]byte{}, "ranks", testKey(10))
	p, err := Parse(other.Encode(), "gen.ranks")
	if err != nil {
		t.Fatal(err)
	}
	wantCheck(t, p.Verify("gen.ranks", VerifyOptions{Trusted: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}}), CheckSigner, -1)
	// A flipped signature bit: signature.
	p.Signature[0] ^= 1
	wantCheck(t, p.Verify("gen.ranks", VerifyOptions{Trusted: []ed25519.PublicKey{testKey(10).Public().(ed25519.PublicKey)}}), CheckSignature, -1)
	// Unsigned with trusted keys given.
	un, _ := New("000007", 2, testChain, ps, [32]byte{}, "ranks", nil)
	wantCheck(t, un.Verify("x", VerifyOptions{Trusted: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}}), CheckSignature, -1)
}

// TestWriteSeeds keeps testdata/ in step with the writer (run with
// SNAPD_UPDATE_SEEDS=1 to regenerate).
func TestSeedIndexParses(t *testing.T) {
	ps, _ := parts(t, 3, 2)
	ix, err := New("000003", 2, testChain, ps, [32]byte{}, "ranks", testKey(9))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "gen-000003.ranks")
	if os.Getenv("SNAPD_UPDATE_SEEDS") != "" {
		if err := os.WriteFile(path, ix.Encode(), 0o644); err != nil {
			t.Fatal(err)
		}
		writeVectors(t, ix.Encode())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, ix.Encode()) {
		t.Fatalf("%s is not what the writer produces (SNAPD_UPDATE_SEEDS=1 regenerates it)", path)
	}
	if _, err := Parse(b, path); err != nil {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	for _, b := range testutil.Seeds(f, "testdata/*.ranks") {
		f.Add(b)
	}
	fixed := testutil.SourceTexts(f, ".", "..")
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := Parse(b, "fuzz")
		dx, derr := Decode(bytes.NewReader(b), int64(len(b)), "fuzz")
		if (err == nil) != (derr == nil) || err != nil && err.Error() != derr.Error() {
			t.Fatalf("Parse and Decode disagree: %v, %v", err, derr)
		}
		if err != nil {
			var e *wtxt.Error
			if !errors.As(err, &e) {
				t.Fatalf("error is not a *wtxt.Error: %v", err)
			}
			if run, ok := testutil.EchoedRun(err.Error(), b, fixed...); ok {
				t.Fatalf("error echoes the input run %q: %v", run, err)
			}
			return
		}
		if !bytes.Equal(ix.Encode(), b) || !bytes.Equal(dx.Encode(), b) {
			t.Fatal("accepted a non-canonical index")
		}
		_ = ix.Verify("fuzz", VerifyOptions{Trusted: []ed25519.PublicKey{testKey(9).Public().(ed25519.PublicKey)}})
	})
}
