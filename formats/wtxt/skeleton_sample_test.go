package wtxt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestCheckSkeletonSample: only the picked segments' blobs are opened;
// a damaged picked blob is a located error, a damaged unpicked one is not
// read; every seg/ch line is still checked.
func TestCheckSkeletonSample(t *testing.T) {
	in := skeletonInputs(t)["generated"]
	skel, blobs, segs := splitBytes(t, in, 256)
	if len(segs) < 4 {
		t.Fatalf("%d segments", len(segs))
	}
	opened := map[[32]byte]bool{}
	src := blobSourceFunc(func(ctx context.Context, s Segment) (io.ReadCloser, error) {
		opened[s.Digest] = true
		return blobs.OpenBlob(ctx, s)
	})
	pick := func(i int, s Segment) bool { return i%2 == 1 && s.Size > 0 }
	got, info, err := CheckSkeletonSample(context.Background(), bytes.NewReader(skel), "g.skel", src, pick)
	if err != nil || len(got) != len(segs) {
		t.Fatalf("%v, %d segments", err, len(got))
	}
	n := 0
	for i, s := range segs {
		if pick(i, s) {
			n++
			if !opened[s.Digest] {
				t.Fatalf("picked segment %d not read", i)
			}
		}
	}
	if len(opened) >= len(segs) {
		t.Fatalf("%d blobs opened for %d segments, %d picked", len(opened), len(segs), n)
	}
	if info.Segments != len(segs) || n == 0 {
		t.Fatalf("info %+v, %d picked", info, n)
	}
	// Damage an unpicked segment's blob: not read, passes. A picked one:
	// located failure.
	pickedDigests := map[[32]byte]bool{}
	var picked, unpicked Segment
	for i, s := range segs {
		if pick(i, s) {
			picked, pickedDigests[s.Digest] = s, true
		}
	}
	for i, s := range segs {
		if !pick(i, s) && s.Size > 0 && !pickedDigests[s.Digest] {
			unpicked = s
			break
		}
	}
	if unpicked.Size == 0 {
		t.Fatal("no unpicked segment with a blob of its own")
	}
	for _, c := range []struct {
		seg  Segment
		fail bool
	}{{unpicked, false}, {picked, true}} {
		bad := mapBlobs{}
		for d, b := range blobs {
			bad[d] = b
		}
		b := bytes.Clone(bad[c.seg.Digest])
		b[len(b)/2] ^= 1
		bad[c.seg.Digest] = b
		_, _, err := CheckSkeletonSample(context.Background(), bytes.NewReader(skel), "g.skel", bad, pick)
		var e *Error
		if c.fail != (err != nil) || c.fail && (!errors.As(err, &e) || e.Line == 0 || e.Array != c.seg.Array || e.File != "g.skel") {
			t.Fatalf("damaged segment (picked %v): %v", c.fail, err)
		}
	}
	// A seg line disagreeing with its ch lines fails even when nothing is picked.
	badSkel := bytes.Replace(skel, []byte("seg chunks=1 "), []byte("seg chunks=2 "), 1)
	if bytes.Equal(badSkel, skel) {
		t.Fatal("no single-chunk segment")
	}
	_, _, err = CheckSkeletonSample(context.Background(), bytes.NewReader(badSkel), "g.skel", blobs, func(int, Segment) bool { return false })
	var e *Error
	if !errors.As(err, &e) || e.Check != CheckSkeleton && e.Check != CheckGeometry {
		t.Fatalf("bad skeleton: %v", err)
	}
}

type blobSourceFunc func(context.Context, Segment) (io.ReadCloser, error)

func (f blobSourceFunc) OpenBlob(ctx context.Context, s Segment) (io.ReadCloser, error) {
	return f(ctx, s)
}

// FuzzCheckSkeletonSample: any skeleton, any pick: no panic, and an
// accepted one lists segments whose sizes are not negative.
func FuzzCheckSkeletonSample(f *testing.F) {
	for _, b := range testutil.Seeds(f, "testdata/golden-*.wtxt") {
		if len(b) < 16<<10 {
			skel, _, _ := splitBytes(f, b, 64)
			f.Add(skel, uint8(3))
		}
	}
	f.Fuzz(func(t *testing.T, skel []byte, mask uint8) {
		segs, _, err := CheckSkeletonSample(context.Background(), bytes.NewReader(skel), "f.skel", mapBlobs{}, func(i int, _ Segment) bool { return mask>>(i%8)&1 == 1 })
		if err != nil {
			return
		}
		for _, s := range segs {
			if s.Size < 0 || s.Chunks < 1 {
				t.Fatalf("accepted segment %+v", s)
			}
		}
	})
}

// BenchmarkSplit64MiB: Split of a 64 MiB-raw WTXT held in memory into
// skeleton + 4 MiB segments (every chunk's sha256 and crc32c checked), as
// `snapd oci push` does before any upload. MB/s are of raw bytes.
func BenchmarkSplit64MiB(b *testing.B) {
	s := benchSnapshot(64 << 20)
	var buf bytes.Buffer
	if _, err := Encode(context.Background(), &buf, s, EncodeOptions{SignKey: testKey(1)}); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.SetBytes(rawSize(s))
	b.ResetTimer()
	for range b.N {
		if _, err := Split(context.Background(), bytes.NewReader(data), io.Discard, nil, SplitOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
