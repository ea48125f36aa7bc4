package wtxt

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/snapshot"
)

// Trusted keys make a signature required.
func TestTrustedKeysRequireSignature(t *testing.T) {
	ctx := context.Background()
	key := testKey(9)
	pub := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	s := &snapshot.Snapshot{Meta: testMeta(5), Arrays: []*snapshot.Array{randArray(11, "W", snapshot.F32, 6, 8)}}
	hk := []byte("0123456789abcdef0123456789abcdef")
	// The attacker's file: every hash recomputed, no sign line.
	unsigned, _ := encodeBytes(t, s, EncodeOptions{HMACKey: hk})
	rep, err := Verify(ctx, bytes.NewReader(unsigned), VerifyOptions{TrustedKeys: pub, HMACKey: hk})
	var e *Error
	if err == nil || !errors.As(err, &e) || e.Check != CheckSignature || rep.OK() {
		t.Fatalf("unsigned file with trusted keys: err %v", err)
	}
	if rep.Signature != SigAbsent {
		t.Fatalf("signature state %q", rep.Signature)
	}
	if _, err := Verify(ctx, bytes.NewReader(unsigned), VerifyOptions{TrustedKeys: pub, HMACKey: hk, AllowUnsigned: true}); err != nil {
		t.Fatalf("AllowUnsigned: %v", err)
	}
	if _, err := Verify(ctx, bytes.NewReader(unsigned), VerifyOptions{TrustedKeys: pub, AllowUnsigned: true, RequireSignature: true}); err == nil {
		t.Fatal("AllowUnsigned overrides RequireSignature")
	}
	if _, err := Verify(ctx, bytes.NewReader(unsigned), VerifyOptions{}); err != nil {
		t.Fatalf("no keys, no requirement: %v", err)
	}
	signed, _ := encodeBytes(t, s, EncodeOptions{HMACKey: hk, SignKey: key})
	if rep, err := Verify(ctx, bytes.NewReader(signed), VerifyOptions{TrustedKeys: pub}); err != nil || rep.Signature != SigVerified {
		t.Fatalf("signed: %v", err)
	}
	// A streamed file whose WSUM carries no sign= field.
	var buf bytes.Buffer
	res, err := Encode(ctx, &buf, s, EncodeOptions{Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(ctx, bytes.NewReader(buf.Bytes()), VerifyOptions{TrustedKeys: pub, WSUM: res.WSUM}); err == nil {
		t.Fatal("unsigned WSUM accepted with trusted keys")
	}
	if _, err := Verify(ctx, bytes.NewReader(buf.Bytes()), VerifyOptions{TrustedKeys: pub, WSUM: res.WSUM, AllowUnsigned: true}); err != nil {
		t.Fatalf("unsigned WSUM, AllowUnsigned: %v", err)
	}
}

// signedFile builds a signed WTXT with the given body (arr blocks) whose
// root values are recomputed from the arr lines alone: what an attacker
// holding a key (or a buggy writer) could produce. Only structural checks
// can refuse it.
func signedFile(t testing.TB, body string) []byte {
	t.Helper()
	all := sha256.New()
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "arr ") {
			all.Write([]byte(l))
		}
	}
	var sum [32]byte
	all.Sum(sum[:0])
	gen, ts, build := "000001", "2026-01-02T03:04:05Z", "test"
	this := Merkle([32]byte{}, sum, ts, gen, build)
	hdr := fmt.Sprintf("WTXT 1\nmeta schema=weights/v1 gen=%s ts=%s build=%s endian=LE host=cpu cuda=off\ncap ext=%s\nroot sha256_all=%x merkle_prev=%x merkle_this=%x fastxor=%016x\n",
		gen, ts, build, baseCaps, sum, [32]byte{}, this, 0)
	key := testKey(9)
	sig := ed25519.Sign(key, []byte(hdr))
	return []byte(hdr + "sign ed25519=" + base64.StdEncoding.EncodeToString(sig) + " keyid=" + keys.KeyID(key.Public().(ed25519.PublicKey)) + "\n" + body + "endwtxt\n")
}

// Sizes near 2^63 are refused, never wrapped, and no
// reader panics.
func TestOverflowSizes(t *testing.T) {
	ctx := context.Background()
	pub := []ed25519.PublicKey{testKey(9).Public().(ed25519.PublicKey)}
	zero := strings.Repeat("0", 64)
	arr := func(name, dt, shape string, n uint64) string {
		return fmt.Sprintf("arr name=%s dtype=%s shape=%s order=C bytes=%d sha256=%s hmac=%s salt=0000000000000000\n", name, dt, shape, n, zero, zero)
	}
	cases := map[string]string{
		"bytes near 2^63, no chunks, no idx": arr("A", "u8", "9223372036854775807", 1<<63-1) + "endarr\n",
		"bytes near 2^63, no chunks":         arr("A", "u8", "9223372036854775807", 1<<63-1) + "idx rows_per_chunk=65536 row_size=1 row_blocking=on\nendarr\n",
		"f64 bytes near 2^63, no chunks":     arr("A", "f64", "1152921504606846975", 8*(1<<60-1)) + "idx rows_per_chunk=8192 row_size=8 row_blocking=on\nendarr\n",
		"idx product overflows":              arr("A", "f64", "4,2", 64) + "idx rows_per_chunk=9223372036854775807 row_size=16 row_blocking=on\nch ix=000000 off=000000000000 len=64 sha256=" + zero + " crc32c=00000000 b64=on width=76 lines=2\nendarr\n",
		"one chunk of 2^62 bytes":            arr("A", "u8", "1,4611686018427387904", 1<<62) + "idx rows_per_chunk=1 row_size=4611686018427387904 row_blocking=on\nch ix=000000 off=000000000000 len=4611686018427387904 sha256=" + zero + " crc32c=00000000 b64=on width=76 lines=80906777516270000\nendch\nendarr\n",
		"chunk lens short of bytes":          arr("A", "u8", "100", 100) + "idx rows_per_chunk=65536 row_size=1 row_blocking=on\nendarr\n",
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			in := signedFile(t, body)
			rep, err := Verify(ctx, bytes.NewReader(in), VerifyOptions{TrustedKeys: pub, RequireSignature: true})
			if err == nil || rep.OK() {
				t.Fatal("verifies")
			}
			var e *Error
			if !errors.As(err, &e) || e.Line < 6 {
				t.Fatalf("not located in the body: %v", err)
			}
			if _, err := New().Decode(ctx, bytes.NewReader(in), int64(len(in)), decodeOpts()); err == nil {
				t.Fatal("decodes")
			}
			if _, _, err := structIndex(ctx, "x", bytes.NewReader(in), int64(len(in))); err == nil {
				t.Fatal("structIndex accepts it")
			}
		})
	}
	for n, want := range map[int64]int64{0: 0, 1: 1, 56: 1, 57: 1, 58: 2, 1<<63 - 1: 161813544506224137} {
		if l := numLines(n); l != want {
			t.Errorf("numLines(%d) = %d, want %d", n, l, want)
		}
	}
	if g := (geometry{nbytes: 1<<63 - 1, chunkLen: 65536}); g.numChunks() != (1<<63-1)/65536+1 {
		t.Errorf("numChunks wraps: %d", g.numChunks())
	}
	if d := defaultRowsPerChunk(1<<62 + 1); d != 1 {
		t.Errorf("defaultRowsPerChunk(2^62+1) = %d", d)
	}
}

// Exactly one rows_per_chunk is accepted per array, an
// idx line cannot be deleted, and the writer emits that one value.
func TestRowsPerChunkCanonical(t *testing.T) {
	ctx := context.Background()
	pubs, err := keys.LoadPublicKeys(filepath.Join(vectorsDir, "keys/sign_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	data := readVector(t, "v1-basic-signed.wtxt")
	opts := VerifyOptions{TrustedKeys: pubs, RequireSignature: true}
	mutate := map[string]func([]byte) []byte{
		"8192 to 8092 (W_base, one chunk)": func(b []byte) []byte {
			return bytes.Replace(b, []byte("rows_per_chunk=8192 row_size=8"), []byte("rows_per_chunk=8092 row_size=8"), 1)
		},
		"8192 to 1024 (the row count)": func(b []byte) []byte {
			return bytes.Replace(b, []byte("rows_per_chunk=8192 row_size=8"), []byte("rows_per_chunk=1024 row_size=8"), 1)
		},
		"65536 to 100 (b, one chunk)": func(b []byte) []byte {
			return bytes.Replace(b, []byte("rows_per_chunk=65536 row_size=1"), []byte("rows_per_chunk=100 row_size=1"), 1)
		},
		"idx line deleted": func(b []byte) []byte {
			return bytes.Replace(b, []byte("idx rows_per_chunk=65536 row_size=1 row_blocking=on\n"), nil, 1)
		},
	}
	for name, m := range mutate {
		t.Run(name, func(t *testing.T) {
			in := m(slices.Clone(data))
			if bytes.Equal(in, data) {
				t.Fatal("mutation did not apply")
			}
			rep, err := Verify(ctx, bytes.NewReader(in), opts)
			if err == nil {
				t.Fatal("still verifies with --require-signature")
			}
			var e *Error
			if !errors.As(err, &e) || e.Check != CheckGrammar || (e.Array != "W_base" && e.Array != "b") {
				t.Fatalf("not named: %v (%v)", err, rep.Failures)
			}
		})
	}
	// The writer emits the canonical value for a requested one.
	for _, tc := range []struct {
		rows, rpc, want int64
	}{
		{1024, 5000, 8192},    // one chunk, the default (8192) also makes one: the default
		{1024, 1024, 8192},    // same
		{1024, 1000, 1000},    // several chunks: kept
		{10000, 20000, 10000}, // one chunk but the default (8192) would make two: the row count
		{10000, 0, 8192},      // default, several chunks
	} {
		s := &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{randArray(1, "x", snapshot.F64, tc.rows)}}
		b, _ := encodeBytes(t, s, EncodeOptions{RowsPerChunk: int(tc.rpc)})
		if want := fmt.Sprintf("\nidx rows_per_chunk=%d row_size=8 ", tc.want); !bytes.Contains(b, []byte(want)) {
			t.Errorf("rows=%d rpc=%d: want %q", tc.rows, tc.rpc, want)
		}
		if _, err := Verify(ctx, bytes.NewReader(b), VerifyOptions{}); err != nil {
			t.Errorf("rows=%d rpc=%d: %v", tc.rows, tc.rpc, err)
		}
	}
}

// TestTamperEveryBitVectors extends TestTamperEveryBit to the signed
// conformance vectors: every bit of every idx line (covered by no hash),
// and in v1-basic-signed also every bit of the header, sign and arr
// lines; one bit of every byte (a different bit at each offset) of every
// other line that is not base64 payload (header, arr, ch, endch, endarr,
// endwtxt) and of the first and last base64 line of every chunk. Each flip
// must fail verification with the vector's key. Every bit of every line
// would be ~5M verifications of 200 KiB; the base64 payload is covered by
// parity, crc32c and sha256, which TestTamperEveryBit flips bit for bit on
// a small signed file. Under the race detector (scripts/test.sh) only the
// idx lines of v1-basic-signed are flipped, one bit per byte: the full run
// takes minutes there (run `go test -run TestTamperEveryBitVectors` for it).
func TestTamperEveryBitVectors(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	ctx := context.Background()
	pubs, err := keys.LoadPublicKeys(filepath.Join(vectorsDir, "keys/sign_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	hk := vectorHMACKey(t)
	isB64 := func(l []byte) bool {
		return len(l) > 3 && l[len(l)-3] == ' ' && !bytes.Contains(l[:len(l)-3], []byte(" "))
	}
	for _, tc := range []struct {
		file, wsum string
		full       bool
	}{
		{"v1-basic-signed.wtxt", "", true},
		{"v2-ext-signed.wtxt", "", false},
		{"v3-stream.wtxt", "v3-stream.wsum", false},
	} {
		t.Run(tc.file, func(t *testing.T) {
			if raceEnabled && !tc.full {
				t.Skip("race detector: v1-basic-signed's idx lines only")
			}
			data := readVector(t, tc.file)
			opts := VerifyOptions{File: tc.file, TrustedKeys: pubs, HMACKey: hk, MaxFailures: 1}
			if tc.wsum != "" {
				opts.WSUM = readVector(t, tc.wsum)
			}
			if _, err := Verify(ctx, bytes.NewReader(data), opts); err != nil {
				t.Fatalf("pristine vector fails: %v", err)
			}
			buf := slices.Clone(data)
			flips := 0
			flip := func(o, bit int) {
				buf[o] ^= 1 << bit
				_, err := Verify(ctx, bytes.NewReader(buf), opts)
				buf[o] ^= 1 << bit
				flips++
				if err == nil {
					line, _, _ := lineOf(data, o)
					t.Fatalf("flip of bit %d at offset %d (line %d) not detected", bit, o, line)
				}
			}
			lines := bytes.SplitAfter(data, []byte("\n"))
			off := 0
			for i, l := range lines {
				b64 := isB64(l)
				edge := b64 && (i == 0 || !isB64(lines[i-1]) || i+1 == len(lines) || !isB64(lines[i+1]))
				idx := bytes.HasPrefix(l, []byte("idx "))
				all := idx || tc.full && (i < 5 || bytes.HasPrefix(l, []byte("arr ")))
				for o := off; o < off+len(l); o++ {
					switch {
					case raceEnabled && idx:
						flip(o, o%8)
					case idx:
						for bit := range 8 {
							flip(o, bit)
						}
					case raceEnabled:
					case all:
						for bit := range 8 {
							flip(o, bit)
						}
					case !b64 || edge:
						flip(o, o%8)
					}
				}
				off += len(l)
			}
			t.Logf("%d flips", flips)
		})
	}
}

// A delta whose chunk was replaced (with a ch line that
// matches the new bytes) rebuilds a streamed target that contradicts its
// own arr line; verifying with DeferWSUM catches it and names what is left
// to the WSUM.
func TestDeltaReplacedChunkStreamed(t *testing.T) {
	ctx := context.Background()
	mk := func(seed uint64) *snapshot.Snapshot {
		return &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{randArray(seed, "R", snapshot.F64, 64, 4)}}
	}
	opts := EncodeOptions{SignKey: testKey(9), Stream: true, RowsPerChunk: 8}
	base, _ := encodeBytes(t, mk(1), opts)
	target, _ := encodeBytes(t, mk(2), opts)
	other, _ := encodeBytes(t, mk(3), opts)
	delta, _ := makeDelta(t, base, target)
	// Splice chunk 3 of `other` over chunk 3 of the delta.
	block := func(b []byte) []byte {
		i := bytes.Index(b, []byte("ch ix=000003 "))
		j := bytes.Index(b[i:], []byte("endch\n"))
		return b[i : i+j+len("endch\n")]
	}
	bad := bytes.Replace(delta, block(delta), block(other), 1)
	if bytes.Equal(bad, delta) {
		t.Fatal("splice did not apply")
	}
	out, _, err := applyDelta(base, bad)
	if err != nil {
		t.Fatalf("apply refused early (fine, but the test wants the verify step): %v", err)
	}
	rep, err := Verify(ctx, bytes.NewReader(out), VerifyOptions{DeferWSUM: true})
	var e *Error
	if err == nil || !errors.As(err, &e) || e.Check != CheckArraySHA || e.Array != "R" {
		t.Fatalf("want array-sha256 failure of R, got %v", err)
	}
	if !slices.Contains(rep.Deferred, CheckSignature) {
		t.Fatalf("deferred checks not named: %v", rep.Deferred)
	}
	// The honest delta passes with the WSUM checks deferred, and fully
	// with the WSUM.
	good, _, err := applyDelta(base, delta)
	if err != nil {
		t.Fatal(err)
	}
	rep, err = Verify(ctx, bytes.NewReader(good), VerifyOptions{DeferWSUM: true})
	if err != nil || len(rep.Deferred) == 0 {
		t.Fatalf("honest delta: %v deferred %v", err, rep.Deferred)
	}
	if !bytes.Equal(good, target) {
		t.Fatal("honest delta does not rebuild the target")
	}
}
