package wtxt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// streamCall is one call of a SegmentStreamSink; its bytes are read after
// EncodeSkeleton has returned (the reader outlives the call).
type streamCall struct {
	seg Segment
	r   io.Reader
}

// TestEncodeSkeletonWholeArray: with WholeArray and a stream sink, every
// array of 1..WholeArray bytes is one segment whose digest is the array's
// sha256 and whose bytes come through the reader, readable after the
// encode; larger arrays are cut at SegmentSize and go to the sink; known
// is asked only about those; the skeleton assembles to Encode's WTXT byte
// for byte, the Result is Encode's, and nothing depends on the workers.
func TestEncodeSkeletonWholeArray(t *testing.T) {
	const whole, segSize = 100 << 10, 32 << 10
	optSets := []EncodeOptions{
		{SignKey: testKey(1), HMACKey: []byte("k")},
		{HMACKey: []byte("k"), Stream: true},
		{},
	}
	for sname, mk := range skelSnapshots(true) {
		for oi, opts := range optSets {
			if sname == "big" && (oi > 0 || raceEnabled) {
				continue // slow, and 10x so under -race: one option set, without it
			}
			in, wres := encodeBytes(t, mk(), opts)
			var first []byte
			workerCounts := []int{1, 2, 4}
			if raceEnabled {
				workerCounts = []int{1, 3}
			}
			for _, workers := range workerCounts {
				name := fmt.Sprintf("%s/%d/workers=%d", sname, oi, workers)
				o := opts
				o.Workers = workers
				s := mk()
				var streams []streamCall
				run := &skelRun{}
				sink, known := run.recorders(nil)
				sopts := SplitOptions{SegmentSize: segSize, WholeArray: whole, StreamSink: func(_ context.Context, seg Segment, r io.Reader) error {
					streams = append(streams, streamCall{seg, r})
					return nil
				}}
				var skel bytes.Buffer
				res, segs, keys, err := EncodeSkeleton(context.Background(), &skel, s, o, sopts, known, sink)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !bytes.Equal(res.Header, wres.Header) || res.Written != wres.Written || res.Root != wres.Root {
					t.Fatalf("%s: the Result differs from Encode's", name)
				}
				if first == nil {
					first = skel.Bytes()
				} else if !bytes.Equal(skel.Bytes(), first) {
					t.Fatalf("%s: skeleton differs from workers=1's at byte %d", name, firstDiff(skel.Bytes(), first))
				}
				blobs := mapBlobs{}
				for _, c := range run.calls {
					blobs[c.seg.Digest] = c.b
				}
				// Which arrays are whole, and their chunks, from Encode's WTXT
				// (attributes are an array of their own there).
				x, err := ReadIndex(context.Background(), "in", snapshot.Bytes(in), int64(len(in)))
				if err != nil {
					t.Fatal(err)
				}
				wantStreams := 0
				for _, a := range x.Arrays {
					if a.Bytes == 0 || a.Bytes > whole {
						continue
					}
					if wantStreams >= len(streams) {
						t.Fatalf("%s: array %s was not streamed", name, a.Name)
					}
					c := streams[wantStreams]
					wantStreams++
					got, rerr := io.ReadAll(c.r)
					if rerr != nil {
						t.Fatalf("%s: read %s: %v", name, a.Name, rerr)
					}
					if c.seg.Array != a.Name || c.seg.FirstChunk != 0 || c.seg.Chunks != int64(len(a.Chunks)) || c.seg.Size != a.Bytes || int64(len(got)) != a.Bytes {
						t.Fatalf("%s: stream of %s: %+v with %d bytes, want the whole array (%d bytes, %d chunks)", name, a.Name, c.seg, len(got), a.Bytes, len(a.Chunks))
					}
					if c.seg.Digest != sha256.Sum256(got) || c.seg.Digest != a.head.sha {
						t.Fatalf("%s: stream of %s: the digest is not its bytes' sha256 or not the arr line's", name, a.Name)
					}
					blobs[c.seg.Digest] = got
				}
				if wantStreams != len(streams) {
					t.Fatalf("%s: %d streams, want %d", name, len(streams), wantStreams)
				}
				for _, c := range run.calls {
					if c.seg.Size > segSize && c.seg.Chunks > 1 {
						t.Fatalf("%s: a sink segment of %d bytes (%d chunks) above the segment size", name, c.seg.Size, c.seg.Chunks)
					}
				}
				if len(run.asked) != len(run.calls) || len(segs) != len(keys) {
					t.Fatalf("%s: known asked about %d keys for %d cut segments; %d segments, %d keys", name, len(run.asked), len(run.calls), len(segs), len(keys))
				}
				out, err := assembleBytes(skel.Bytes(), blobs)
				if err != nil {
					t.Fatalf("%s: assemble: %v", name, err)
				}
				if !bytes.Equal(out, in) {
					t.Fatalf("%s: assembled WTXT differs from Encode's at %d", name, firstDiff(out, in))
				}
			}
		}
	}
}

// TestEncodeSkeletonWholeArrayErrors: a stream sink's error stops the
// encode with an error naming the array; a short source of a whole array
// fails with a located error, and so does reading its stream.
func TestEncodeSkeletonWholeArrayErrors(t *testing.T) {
	boom := errors.New("registry says no")
	s := skelSnapshots(false)["mixed"]()
	calls := 0
	sopts := SplitOptions{SegmentSize: 32 << 10, WholeArray: 1 << 20, StreamSink: func(context.Context, Segment, io.Reader) error {
		calls++
		if calls == 2 {
			return boom
		}
		return nil
	}}
	_, _, _, err := EncodeSkeleton(context.Background(), io.Discard, s, EncodeOptions{Workers: 2, HMACKey: []byte("k")}, sopts, nil, nil)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "array ") || calls != 2 {
		t.Fatalf("stream sink error: err = %v after %d calls", err, calls)
	}

	short := &snapshot.Snapshot{Meta: testMeta(3), Arrays: []*snapshot.Array{
		{Name: "w", DType: snapshot.F32, Shape: []int64{64, 64}, Data: shortSource{64 * 64 * 4}},
	}}
	var streamed atomic.Int32
	sopts.StreamSink = func(context.Context, Segment, io.Reader) error { streamed.Add(1); return nil }
	_, _, _, err = EncodeSkeleton(context.Background(), io.Discard, short, EncodeOptions{Workers: 2}, sopts, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Fatalf("short whole array: err = %v", err)
	}
	if streamed.Load() != 0 {
		t.Fatal("a whole array whose sha256 failed was streamed")
	}
	r := &arrayReader{p: &arrPlan{name: "w", nbytes: 64 * 64 * 4, src: shortSource{64 * 64 * 4}}}
	if _, err := io.ReadAll(r); err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Fatalf("stream of a short source: err = %v", err)
	}
}
