package wtxt

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// shortDelta is the seed's short form carrying the first changed chunk of
// array R between base and target (both WTXT).
func shortDelta(t *testing.T, base, target []byte) []byte {
	t.Helper()
	full, _ := makeDeltaWith(t, base, target, DeltaOptions{})
	i := bytes.Index(full, []byte("\nch ix="))
	j := bytes.Index(full, []byte("endch\n"))
	if i < 0 || j < i {
		t.Fatal("full delta carries no chunk")
	}
	_, all, err := verifiedIndex(context.Background(), "base", bytes.NewReader(base), int64(len(base)))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, "%s base_sha256_all=%x\narr name=R\n%sendch\nendarr\nenddelta\n", DeltaMagic, all, full[i+1:j])
}

func makeDeltaWith(t *testing.T, base, target []byte, opts DeltaOptions) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	_, err := MakeDeltaWith(context.Background(), &buf, bytes.NewReader(base), int64(len(base)), bytes.NewReader(target), int64(len(target)), opts)
	return buf.Bytes(), err
}

func applyDeltaWith(base, delta []byte, opts ApplyOptions) ([]byte, error) {
	var buf bytes.Buffer
	_, err := ApplyDeltaWith(context.Background(), &buf, bytes.NewReader(base), int64(len(base)), bytes.NewReader(delta), "d.wtxtdelta", opts)
	return buf.Bytes(), err
}

// A short-form delta on a streamed base keeps the chain: the result's
// merkle_prev is the one in the base's WSUM. Without the WSUM it is
// refused (it used to start a new chain with merkle_prev all zeros).
func TestDeltaShortFormStreamedBaseKeepsChain(t *testing.T) {
	R := randArray(1, "R", snapshot.F64, 512, 64)
	s := randArray(2, "s", snapshot.I64, 3)
	_, g1 := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{s}}, EncodeOptions{})
	chain := g1.MerkleThis
	bdata, bres := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{R, s}}, EncodeOptions{Stream: true, PrevMerkle: chain, SignKey: testKey(1)})
	tdata, _ := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{setRows(R, 7, 130), s}}, EncodeOptions{})
	short := shortDelta(t, bdata, tdata)

	_, err := applyDeltaWith(bdata, short, ApplyOptions{})
	var e *Error
	if !errors.Is(err, ErrNeedWSUM) || !errors.As(err, &e) || e.Check != CheckWSUM || e.File != "base" {
		t.Fatalf("short form on a streamed base without its WSUM: %v, want ErrNeedWSUM", err)
	}
	out, err := applyDeltaWith(bdata, short, ApplyOptions{BaseWSUM: bres.WSUM})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(context.Background(), bytes.NewReader(out), VerifyOptions{PrevMerkle: &chain})
	if err != nil {
		t.Fatal(err)
	}
	if rep.MerklePrev != hex.EncodeToString(chain[:]) || rep.Chain != "continues" || rep.Streamed {
		t.Fatalf("result: merkle_prev %s chain %s streamed %v, want the base's merkle_prev %x", rep.MerklePrev, rep.Chain, rep.Streamed, chain)
	}
	if !bytes.Equal(out[:bytes.Index(out, []byte("\nroot "))], bdata[:bytes.Index(bdata, []byte("\nroot_pending "))]) {
		t.Fatal("result's WTXT, meta and cap lines are not the base's")
	}

	// Another generation's WSUM does not verify the base.
	_, other := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{s}}, EncodeOptions{Stream: true, PrevMerkle: chain})
	if _, err := applyDeltaWith(bdata, short, ApplyOptions{BaseWSUM: other.WSUM}); !errors.As(err, &e) || e.Check != CheckWSUM {
		t.Fatalf("wrong WSUM: %v", err)
	}
	// A WSUM for a base that is not streamed is refused, not ignored.
	plain, _ := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{R, s}}, EncodeOptions{PrevMerkle: chain})
	if _, err := applyDeltaWith(plain, shortDelta(t, plain, tdata), ApplyOptions{BaseWSUM: bres.WSUM}); !errors.As(err, &e) || e.Check != CheckWSUM {
		t.Fatalf("WSUM for a plain base: %v", err)
	}
	// The full form needs no base WSUM (the target's header is carried).
	full, err := makeDeltaWith(t, bdata, tdata, DeltaOptions{BaseWSUM: bres.WSUM})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := applyDeltaWith(bdata, full, ApplyOptions{}); err != nil || !bytes.Equal(got, tdata) {
		t.Fatalf("full form on a streamed base: %v", err)
	}
}

// MakeDeltaWith verifies a streamed input with its WSUM and, with
// RequireWSUM, refuses one without it.
func TestMakeDeltaStreamedInputsNeedWSUM(t *testing.T) {
	R := randArray(1, "R", snapshot.F64, 512, 64)
	bdata, bres := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{R}}, EncodeOptions{Stream: true})
	tdata, tres := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{setRows(R, 3, 9)}}, EncodeOptions{Stream: true, PrevMerkle: bres.MerkleThis})
	var e *Error
	for name, opts := range map[string]DeltaOptions{
		"base":   {RequireWSUM: true, TargetWSUM: tres.WSUM},
		"target": {RequireWSUM: true, BaseWSUM: bres.WSUM},
	} {
		if _, err := makeDeltaWith(t, bdata, tdata, opts); !errors.Is(err, ErrNeedWSUM) || !errors.As(err, &e) || e.File != name {
			t.Fatalf("%s without its WSUM: %v, want ErrNeedWSUM naming it", name, err)
		}
	}
	d, err := makeDeltaWith(t, bdata, tdata, DeltaOptions{RequireWSUM: true, BaseWSUM: bres.WSUM, TargetWSUM: tres.WSUM})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := applyDeltaWith(bdata, d, ApplyOptions{BaseWSUM: bres.WSUM}); err != nil || !bytes.Equal(got, tdata) {
		t.Fatalf("apply: %v", err)
	}
	// Swapped WSUMs do not verify.
	if _, err := makeDeltaWith(t, bdata, tdata, DeltaOptions{BaseWSUM: tres.WSUM, TargetWSUM: bres.WSUM}); !errors.As(err, &e) || e.Check != CheckWSUM {
		t.Fatalf("swapped WSUMs: %v", err)
	}
	// WSUMs and Trusted exclude each other.
	if _, err := makeDeltaWith(t, bdata, tdata, DeltaOptions{Trusted: true, BaseSHA256All: &bres.SHA256All, TargetWSUM: tres.WSUM}); err == nil {
		t.Fatal("Trusted with a WSUM accepted")
	}
}
