package wtxt

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

func makeDelta(t testing.TB, base, target []byte) ([]byte, *DeltaInfo) {
	t.Helper()
	var buf bytes.Buffer
	info, err := MakeDelta(context.Background(), &buf, bytes.NewReader(base), int64(len(base)), bytes.NewReader(target), int64(len(target)))
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), info
}

func applyDelta(base, delta []byte) ([]byte, *DeltaInfo, error) {
	var buf bytes.Buffer
	info, err := ApplyDelta(context.Background(), &buf, bytes.NewReader(base), int64(len(base)), bytes.NewReader(delta), "d.wtxtdelta")
	return buf.Bytes(), info, err
}

// setRows overwrites rows of a (2-D) array with a fill byte.
func setRows(a *snapshot.Array, fill byte, rows ...int64) *snapshot.Array {
	b, _ := snapshot.ReadAll(a.Data)
	b = append([]byte(nil), b...)
	rs, _ := snapshot.RowGeometry(a)
	for _, r := range rows {
		for i := r * rs; i < (r+1)*rs; i++ {
			b[i] = fill
		}
	}
	return &snapshot.Array{Name: a.Name, DType: a.DType, Shape: a.Shape, Data: snapshot.Bytes(b)}
}

// TestDeltaRoundTrip: for each kind of change (none, rows, arrays added
// and removed, reshaped, retyped, rechunked, streamed target) the delta
// carries exactly the changed chunks, PlanDelta knows its size, and
// applying it to the base gives the target byte for byte, which verifies
// against the base's chain. R is 1024 x 64 f64: 8 chunks of 64 KiB.
func TestDeltaRoundTrip(t *testing.T) {
	key := testKey(3)
	hk := []byte("hmac-key")
	R := randArray(1, "R", snapshot.F64, 1024, 64)
	v := randArray(2, "v", snapshot.F32, 100)
	gone := randArray(3, "gone", snapshot.U8, 10)
	base := &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{R, v, gone}}
	bdata, bres := encodeBytes(t, base, EncodeOptions{SignKey: key, HMACKey: hk})
	for _, tc := range []struct {
		name    string
		target  *snapshot.Snapshot
		opts    EncodeOptions
		changed int64
	}{
		{"same", &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{R, v, gone}}, EncodeOptions{}, 0},
		{"rows", &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{setRows(R, 1, 5, 700, 701), v, gone}}, EncodeOptions{}, 2},
		{"added+removed", &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{R, v, randArray(4, "new.w", snapshot.BF16, 3, 3)}}, EncodeOptions{}, 1},
		{"reshaped", &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{R, {Name: "v", DType: snapshot.F32, Shape: []int64{10, 10}, Data: v.Data}, gone}}, EncodeOptions{}, 1},
		{"retyped", &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{R, {Name: "v", DType: snapshot.I32, Shape: []int64{100}, Data: v.Data}, gone}}, EncodeOptions{}, 1},
		{"rechunked", &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{R, v, gone}}, EncodeOptions{RowsPerChunk: 7}, 1024/7 + 1 + 15 + 2},
		{"streamed", &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{setRows(R, 9, 0), v, gone}}, EncodeOptions{Stream: true}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.SignKey, o.HMACKey, o.PrevMerkle = key, hk, bres.MerkleThis
			tdata, tres := encodeBytes(t, tc.target, o)
			delta, info := makeDelta(t, bdata, tdata)
			if info.Changed != tc.changed {
				t.Errorf("delta carries %d chunks, want %d", info.Changed, tc.changed)
			}
			// The plan knows the delta's exact size before writing it.
			plan, err := PlanDelta(context.Background(), bytes.NewReader(bdata), int64(len(bdata)), bytes.NewReader(tdata), int64(len(tdata)), DeltaOptions{Trusted: true, BaseSHA256All: &bres.SHA256All})
			if err != nil {
				t.Fatal(err)
			}
			if plan.Size != int64(len(delta)) || plan.Info.Changed != info.Changed || plan.Info.Chunks != info.Chunks {
				t.Errorf("plan: size %d, %d of %d chunks; delta: %d bytes, %d of %d chunks", plan.Size, plan.Info.Changed, plan.Info.Chunks, len(delta), info.Changed, info.Chunks)
			}
			out, ainfo, err := applyDelta(bdata, delta)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, tdata) {
				t.Fatalf("applied delta differs from the target at byte %d", firstDiff(out, tdata))
			}
			if ainfo.Changed != info.Changed || len(ainfo.Removed) != len(info.Removed) {
				t.Errorf("apply info %+v vs make info %+v", ainfo, info)
			}
			vo := VerifyOptions{TrustedKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, HMACKey: hk, RequireSignature: true, PrevMerkle: &bres.MerkleThis, WSUM: tres.WSUM}
			if _, err := Verify(context.Background(), bytes.NewReader(out), vo); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDeltaBadInput(t *testing.T) {
	R := randArray(1, "R", snapshot.F64, 512, 64)
	bdata, _ := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{R}}, EncodeOptions{})
	tdata, _ := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{setRows(R, 3, 200)}}, EncodeOptions{})
	other, _ := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{setRows(R, 4, 1)}}, EncodeOptions{})
	delta, _ := makeDelta(t, bdata, tdata)
	if _, _, err := applyDelta(other, delta); !errors.Is(err, ErrWrongBase) {
		t.Fatalf("wrong base: %v", err)
	}
	for name, d := range map[string][]byte{
		"truncated":   delta[:len(delta)/2],
		"no enddelta": bytes.TrimSuffix(delta, []byte("enddelta\n")),
		"bad magic":   append([]byte("WTXT-DELTA 3"), delta[12:]...),
		"bad chunk":   flipInChunk(delta),
		"garbage":     append(append([]byte{}, delta...), "x\n"...),
	} {
		_, _, err := applyDelta(bdata, d)
		var e *Error
		if !errors.As(err, &e) || e.Check != CheckDelta && e.Check != CheckText {
			t.Errorf("%s: err = %v, want a located delta error", name, err)
		} else if e.Line == 0 {
			t.Errorf("%s: no line in %v", name, err)
		}
	}
}

// flipInChunk changes one base64 character of the first chunk in a delta
// and fixes its parity, so only the chunk's sha256 can tell.
func flipInChunk(d []byte) []byte {
	d = append([]byte(nil), d...)
	i := bytes.Index(d, []byte("\nch ix="))
	i = bytes.IndexByte(d[i+1:], '\n') + i + 2
	if d[i] == 'A' {
		d[i] = 'B'
	} else {
		d[i] = 'A'
	}
	d[i+B64Width+1] = parityNibble(d[i : i+B64Width])
	return d
}

// TestDeltaShortForm: the seed's `arr name=R` blocks are applied to the
// base, the array re-hashed, its HMAC kept (so it no longer authenticates).
func TestDeltaShortForm(t *testing.T) {
	hk := []byte("k")
	R := randArray(1, "R", snapshot.F64, 512, 64)
	s := randArray(2, "s", snapshot.I64, 3)
	bdata, _ := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{R, s}}, EncodeOptions{HMACKey: hk, SignKey: testKey(1)})
	R2 := setRows(R, 7, 130)
	tdata, _ := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{R2, s}}, EncodeOptions{})
	full, _ := makeDelta(t, bdata, tdata)
	// Keep only the chunk block of the full delta, under a short arr line.
	i := bytes.Index(full, []byte("\nch ix="))
	j := bytes.Index(full, []byte("endch\n"))
	h, _ := ReadHeader(bytes.NewReader(bdata))
	short := fmt.Sprintf("%s base_sha256_all=%x\narr name=R\n%sendch\nendarr\nenddelta\n", DeltaMagic, mustAll(t, bdata), full[i+1:j])
	_ = h
	out, info, err := applyDelta(bdata, []byte(short))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Short) != 1 || info.Changed != 1 {
		t.Fatalf("info %+v", info)
	}
	rep, err := Verify(context.Background(), bytes.NewReader(out), VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Signature != SigAbsent {
		t.Fatal("short-form result cannot carry the base's signature")
	}
	// The data is the target's; R's HMAC no longer verifies, s's does.
	got, err := New().Decode(context.Background(), bytes.NewReader(out), int64(len(out)), decodeOpts())
	if err != nil {
		t.Fatal(err)
	}
	x, _ := snapshot.ReadAll(got.Array("R").Data)
	y, _ := snapshot.ReadAll(R2.Data)
	if !bytes.Equal(x, y) {
		t.Fatal("R does not hold the target's bytes")
	}
	rep, err = Verify(context.Background(), bytes.NewReader(out), VerifyOptions{HMACKey: hk})
	if err == nil || len(rep.Failures) != 1 || rep.Failures[0].Array != "R" || rep.Failures[0].Check != CheckHMAC {
		t.Fatalf("want exactly R's HMAC to fail: %v", err)
	}
}

func mustAll(t testing.TB, b []byte) [32]byte {
	rep, err := Verify(context.Background(), bytes.NewReader(b), VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := parseHex32(rep.SHA256All)
	return a
}

// TestRowLocality: when k rows of R(4096 x 64, f64) change, the delta
// carries about k chunks, and `git diff` of the two WTXT files touches only
// the header, the arr line and the lines of the chunks holding those rows.
func TestRowLocality(t *testing.T) {
	R := randArray(1, "R", snapshot.F64, 4096, 64)
	bdata, _ := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{R}}, EncodeOptions{})
	rows := []int64{3, 1000, 1001, 2222, 4095} // chunks 0, 7, 17, 31 (128 rows each)
	tdata, _ := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{setRows(R, 0, rows...)}}, EncodeOptions{})
	delta, info := makeDelta(t, bdata, tdata)
	if info.Changed != 4 || info.Chunks != 32 {
		t.Fatalf("delta carries %d of %d chunks, want 4 of 32", info.Changed, info.Chunks)
	}
	t.Logf("WTXT %d bytes, delta %d bytes (%.1f%%)", len(tdata), len(delta), 100*float64(len(delta))/float64(len(tdata)))
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.wtxt"), filepath.Join(dir, "b.wtxt")
	os.WriteFile(a, bdata, 0o644)
	os.WriteFile(b, tdata, 0o644)
	out, _ := exec.Command("git", "diff", "--no-index", "-U0", a, b).Output()
	// Allowed line ranges of the target: header (1-4), the arr line (5) and
	// the changed chunks' blocks.
	allowed := map[int]bool{1: true, 2: true, 3: true, 4: true, 5: true}
	tl := strings.Split(string(tdata), "\n")
	chunk := -1
	for i, l := range tl {
		if strings.HasPrefix(l, "ch ix=") {
			fmt.Sscanf(l, "ch ix=%d", &chunk)
		}
		if chunk == 0 || chunk == 7 || chunk == 17 || chunk == 31 {
			allowed[i+1] = true
		}
		if l == "endch" {
			chunk = -1
		}
	}
	hunks := 0
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "@@ ") {
			continue
		}
		hunks++
		var os, oc, ns, nc int
		f := strings.Fields(l)
		parseRange(f[1][1:], &os, &oc)
		parseRange(f[2][1:], &ns, &nc)
		for k := ns; k < ns+nc; k++ {
			if !allowed[k] {
				t.Fatalf("git diff touches target line %d (%q), outside the changed chunks", k, tl[k-1][:min(len(tl[k-1]), 40)])
			}
		}
	}
	if hunks == 0 {
		t.Fatal("git diff shows nothing")
	}
}

func parseRange(s string, start, count *int) {
	*count = 1
	if i := strings.IndexByte(s, ','); i >= 0 {
		fmt.Sscanf(s[:i], "%d", start)
		fmt.Sscanf(s[i+1:], "%d", count)
		return
	}
	fmt.Sscanf(s, "%d", start)
}

// BenchmarkDeltaRowLocality reports delta size and make/apply time for k
// changed rows of R(4096 x 64, f64).
func BenchmarkDeltaRowLocality(b *testing.B) {
	R := randArray(1, "R", snapshot.F64, 4096, 64)
	bdata, _ := encodeBytes(b, &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{R}}, EncodeOptions{})
	for _, k := range []int{1, 8, 64} {
		var rows []int64
		for i := range k {
			rows = append(rows, int64(i)*4096/int64(k))
		}
		tdata, _ := encodeBytes(b, &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{setRows(R, 0, rows...)}}, EncodeOptions{})
		b.Run(fmt.Sprintf("rows=%d", k), func(b *testing.B) {
			var delta []byte
			var info *DeltaInfo
			for range b.N {
				delta, info = makeDelta(b, bdata, tdata)
				if _, _, err := applyDelta(bdata, delta); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(delta)), "delta-bytes")
			b.ReportMetric(float64(info.Changed), "chunks")
			b.ReportMetric(100*float64(len(delta))/float64(len(tdata)), "%-of-wtxt")
		})
	}
}

// TestTrustedDeltaSameBytes: the trusted (structure-only) delta of files
// this process wrote equals the fully verified one, streamed base too.
func TestTrustedDeltaSameBytes(t *testing.T) {
	R := randArray(1, "R", snapshot.F64, 1024, 64)
	key := testKey(2)
	b, bres := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{R, randArray(2, "z", snapshot.U8)}}, EncodeOptions{SignKey: key, Stream: true})
	tg, _ := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{setRows(R, 1, 9, 999)}}, EncodeOptions{SignKey: key, PrevMerkle: bres.MerkleThis})
	want, _ := makeDelta(t, b, tg)
	var got bytes.Buffer
	if _, err := MakeDeltaWith(context.Background(), &got, bytes.NewReader(b), int64(len(b)), bytes.NewReader(tg), int64(len(tg)), DeltaOptions{Trusted: true, BaseSHA256All: &bres.SHA256All}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("trusted delta differs at %d", firstDiff(got.Bytes(), want))
	}
	if _, err := MakeDeltaWith(context.Background(), &got, bytes.NewReader(b), int64(len(b)), bytes.NewReader(tg), int64(len(tg)), DeltaOptions{Trusted: true}); err == nil {
		t.Fatal("trusted streamed base without its sha256_all accepted")
	}
	// Structure errors are still caught.
	bad := bytes.Replace(tg, []byte("endch\n"), []byte("endchx\n"), 1)
	if _, err := MakeDeltaWith(context.Background(), &got, bytes.NewReader(b), int64(len(b)), bytes.NewReader(bad), int64(len(bad)), DeltaOptions{Trusted: true, BaseSHA256All: &bres.SHA256All}); err == nil {
		t.Fatal("broken target accepted")
	}
}
