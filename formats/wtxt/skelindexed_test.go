package wtxt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
)

// splitBoth runs Split and SplitIndexed (nothing known) on in and returns
// both results.
func splitBoth(t testing.TB, in []byte, opts SplitOptions) (want, got []byte, ws, gs []Segment, werr, gerr error) {
	var wb, gb bytes.Buffer
	var wblobs, gblobs [][]byte
	ws, werr = Split(context.Background(), bytes.NewReader(in), &wb, func(_ context.Context, s Segment, b []byte) error {
		wblobs = append(wblobs, bytes.Clone(b))
		return nil
	}, opts)
	gs, _, gerr = SplitIndexed(context.Background(), bytes.NewReader(in), int64(len(in)), &gb, func(_ context.Context, s Segment, b []byte) error {
		gblobs = append(gblobs, bytes.Clone(b))
		if sha := s.Digest; len(b) != int(s.Size) || sha != sha256.Sum256(b) {
			t.Fatalf("segment %+v: sink got %d bytes with another digest", s, len(b))
		}
		return nil
	}, nil, opts)
	if werr == nil && gerr == nil && len(wblobs) != len(gblobs) {
		t.Fatalf("%d blobs from Split, %d from SplitIndexed", len(wblobs), len(gblobs))
	}
	for i := range wblobs {
		if werr == nil && gerr == nil && !bytes.Equal(wblobs[i], gblobs[i]) {
			t.Fatalf("blob %d differs", i)
		}
	}
	return wb.Bytes(), gb.Bytes(), ws, gs, werr, gerr
}

func TestSplitIndexedMatchesSplit(t *testing.T) {
	seeds := formatstest.Seeds(t, "testdata/golden-*.wtxt")
	for i, in := range seeds {
		for _, size := range []int64{1, 100, 4096, DefaultSegmentSize} {
			opts := SplitOptions{SegmentSize: size}
			want, got, ws, gs, werr, gerr := splitBoth(t, in, opts)
			if werr != nil || gerr != nil {
				t.Fatalf("seed %d size %d: Split %v, SplitIndexed %v", i, size, werr, gerr)
			}
			if !bytes.Equal(want, got) || len(ws) != len(gs) {
				t.Fatalf("seed %d size %d: skeletons differ", i, size)
			}
			// Everything known: nothing decoded, the same skeleton.
			digests := map[SegmentKey][32]byte{}
			var gb bytes.Buffer
			segs, keys, err := SplitIndexed(context.Background(), bytes.NewReader(in), int64(len(in)), &gb, nil, nil, opts)
			if err != nil {
				t.Fatal(err)
			}
			for k, s := range segs {
				digests[keys[k]] = s.Digest
			}
			// Damage every base64 body: a known segment is not read.
			damaged := bytes.Clone(in)
			x, err := ReadIndex(context.Background(), "", bytes.NewReader(in), int64(len(in)))
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range x.Arrays {
				for _, c := range a.Chunks {
					for p := c.Data; p < c.End-int64(len("endch\n")); p++ {
						if damaged[p] != ' ' && damaged[p] != '\n' {
							damaged[p] = 'A'
						}
					}
				}
			}
			var rb bytes.Buffer
			calls := 0
			if _, _, err := SplitIndexed(context.Background(), bytes.NewReader(damaged), int64(len(damaged)), &rb,
				func(context.Context, Segment, []byte) error { calls++; return nil },
				func(k SegmentKey) ([32]byte, bool) { d, ok := digests[k]; return d, ok }, opts); err != nil {
				t.Fatal(err)
			}
			if calls != 0 || !bytes.Equal(rb.Bytes(), want) {
				t.Fatalf("seed %d: known segments: %d sink calls, skeleton equal %v", i, calls, bytes.Equal(rb.Bytes(), want))
			}
		}
	}
}

func TestSplitIndexedRejectsDamage(t *testing.T) {
	in := formatstest.Seeds(t, "testdata/golden-tiny.wtxt")[0]
	i := bytes.Index(in, []byte("\nch "))
	i += bytes.IndexByte(in[i+1:], '\n') + 2 // first base64 line
	for _, tc := range []struct {
		name  string
		edit  func([]byte)
		check Check
	}{
		{"parity", func(b []byte) { j := i + bytes.IndexByte(b[i:], ' ') + 1; b[j] ^= 1 }, CheckParity},
		{"data", func(b []byte) {
			if b[i] == 'A' {
				b[i] = 'B'
			} else {
				b[i] = 'A'
			}
		}, ""},
	} {
		bad := bytes.Clone(in)
		tc.edit(bad)
		_, _, err := SplitIndexed(context.Background(), bytes.NewReader(bad), int64(len(bad)), &bytes.Buffer{}, nil, nil, SplitOptions{})
		var we *Error
		if !errors.As(err, &we) || tc.check != "" && we.Check != tc.check {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
}

// FuzzSplitIndexed: on any input SplitIndexed either fails or yields
// exactly Split's skeleton and segments (it may refuse more, since
// ReadIndex checks the structure first).
func FuzzSplitIndexed(f *testing.F) {
	for _, b := range formatstest.Seeds(f, "testdata/golden-*.wtxt") {
		f.Add(b, int64(64))
	}
	f.Fuzz(func(t *testing.T, in []byte, size int64) {
		opts := SplitOptions{SegmentSize: size%100000 + 1, MaxSegment: 1 << 20}
		want, got, ws, gs, werr, gerr := splitBoth(t, in, opts)
		if gerr != nil {
			var we *Error
			if !errors.As(gerr, &we) && !errors.Is(gerr, context.Canceled) {
				t.Fatalf("error is not a *wtxt.Error: %v", gerr)
			}
			return
		}
		if werr != nil {
			t.Fatalf("SplitIndexed accepted what Split refused (%v)", werr)
		}
		if !bytes.Equal(want, got) || len(ws) != len(gs) {
			t.Fatal("skeletons differ")
		}
	})
}
