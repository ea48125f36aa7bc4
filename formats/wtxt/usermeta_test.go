package wtxt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// TestReadSkeletonUserMeta: the metadata of a split WTXT is read from its
// skeleton and the attributes array's blobs only, equal to what
// ReadUserMeta reads from the WTXT; no document, no blob read; a missing
// blob wraps ErrBlobNotFound and a damaged one is a located chunk failure.
func TestReadSkeletonUserMeta(t *testing.T) {
	ctx := context.Background()
	meta, err := snapshot.ParseUserMeta([]byte(`{"step":1200,"loss":0.41,"opt":"adam w"}`))
	if err != nil {
		t.Fatal(err)
	}
	s := &snapshot.Snapshot{Meta: testMeta(3), UserMeta: meta, Arrays: []*snapshot.Array{
		randArray(1, "a.weight", snapshot.F32, 300, 64), randArray(2, "z", snapshot.U8, 5)}}
	in, _ := encodeBytes(t, s, EncodeOptions{SignKey: testKey(1)})
	skel, blobs, segs := splitBytes(t, in, 256)
	want, err := ReadUserMeta(ctx, "g.wtxt", bytes.NewReader(in), int64(len(in)))
	if err != nil || !want.Equal(meta) {
		t.Fatalf("ReadUserMeta: %v %v", want, err)
	}
	attrsSegs := map[[32]byte]bool{}
	for _, sg := range segs {
		if sg.Array == snapshot.AttrsArrayName {
			attrsSegs[sg.Digest] = true
		}
	}
	if len(attrsSegs) == 0 || len(attrsSegs) == len(segs) {
		t.Fatalf("%d of %d segments hold the attributes", len(attrsSegs), len(segs))
	}
	opened := map[[32]byte]bool{}
	src := blobSourceFunc(func(ctx context.Context, sg Segment) (io.ReadCloser, error) {
		opened[sg.Digest] = true
		return blobs.OpenBlob(ctx, sg)
	})
	got, err := ReadSkeletonUserMeta(ctx, "g.skel", bytes.NewReader(skel), int64(len(skel)), src)
	if err != nil || !got.Equal(want) {
		t.Fatalf("ReadSkeletonUserMeta: %v %v, want %v", got, err, want)
	}
	for d := range opened {
		if !attrsSegs[d] {
			t.Fatal("a blob of another array was opened")
		}
	}

	// Without a document: nil, and no blob is opened.
	plain, _ := encodeBytes(t, &snapshot.Snapshot{Meta: testMeta(3), Arrays: s.Arrays}, EncodeOptions{})
	pskel, _, _ := splitBytes(t, plain, 256)
	none := blobSourceFunc(func(context.Context, Segment) (io.ReadCloser, error) {
		t.Fatal("a blob was opened for a skeleton without an attributes document")
		return nil, nil
	})
	if m, err := ReadSkeletonUserMeta(ctx, "p.skel", bytes.NewReader(pskel), int64(len(pskel)), none); m != nil || err != nil {
		t.Fatalf("no document: %v %v", m, err)
	}

	// The document's blob collected, or damaged.
	gone, bad := mapBlobs{}, mapBlobs{}
	for d, b := range blobs {
		if !attrsSegs[d] {
			gone[d] = b
			bad[d] = b
			continue
		}
		b = bytes.Clone(b)
		b[len(b)/2] ^= 1
		bad[d] = b
	}
	var e *Error
	_, err = ReadSkeletonUserMeta(ctx, "g.skel", bytes.NewReader(skel), int64(len(skel)), gone)
	if !errors.Is(err, ErrBlobNotFound) || !errors.As(err, &e) || e.Check != CheckBlob || e.Array != snapshot.AttrsArrayName || e.Line == 0 {
		t.Fatalf("collected: %v", err)
	}
	_, err = ReadSkeletonUserMeta(ctx, "g.skel", bytes.NewReader(skel), int64(len(skel)), bad)
	if !errors.As(err, &e) || e.Check != CheckChunkSHA || e.Array != snapshot.AttrsArrayName || e.File != "g.skel" {
		t.Fatalf("damaged: %v", err)
	}
}
