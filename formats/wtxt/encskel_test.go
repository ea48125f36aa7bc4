package wtxt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// sinkCall is one call of a SegmentSink.
type sinkCall struct {
	seg Segment
	b   []byte
}

// skelRun is what a skeleton writer produced.
type skelRun struct {
	skel  []byte
	segs  []Segment
	keys  []SegmentKey
	calls []sinkCall
	asked []SegmentKey // the keys known was asked about, in order
}

// recorders returns a sink and a known (answering from digests, nil for
// none) that record their calls in r.
func (r *skelRun) recorders(digests map[SegmentKey][32]byte) (SegmentSink, KnownSegment) {
	sink := func(_ context.Context, s Segment, b []byte) error {
		r.calls = append(r.calls, sinkCall{s, bytes.Clone(b)})
		return nil
	}
	known := func(k SegmentKey) ([32]byte, bool) {
		r.asked = append(r.asked, k)
		d, ok := digests[k]
		return d, ok
	}
	return sink, known
}

// refSkeleton is the reference: Encode to a buffer, then SplitIndexed.
func refSkeleton(t testing.TB, s *snapshot.Snapshot, opts EncodeOptions, sopts SplitOptions, digests map[SegmentKey][32]byte) (*Result, *skelRun, []byte) {
	t.Helper()
	in, res := encodeBytes(t, s, opts)
	r := &skelRun{}
	sink, known := r.recorders(digests)
	var skel bytes.Buffer
	segs, keys, err := SplitIndexed(context.Background(), bytes.NewReader(in), int64(len(in)), &skel, sink, known, sopts)
	if err != nil {
		t.Fatalf("SplitIndexed: %v", err)
	}
	r.skel, r.segs, r.keys = skel.Bytes(), segs, keys
	return res, r, in
}

func encSkeleton(t testing.TB, s *snapshot.Snapshot, opts EncodeOptions, sopts SplitOptions, digests map[SegmentKey][32]byte) (*Result, *skelRun) {
	t.Helper()
	r := &skelRun{}
	sink, known := r.recorders(digests)
	var skel bytes.Buffer
	res, segs, keys, err := EncodeSkeleton(context.Background(), &skel, s, opts, sopts, known, sink)
	if err != nil {
		t.Fatalf("EncodeSkeleton: %v", err)
	}
	r.skel, r.segs, r.keys = skel.Bytes(), segs, keys
	return res, r
}

// sameRun fails unless got is want in every respect.
func sameRun(t testing.TB, name string, wres, gres *Result, want, got *skelRun) {
	t.Helper()
	if !bytes.Equal(got.skel, want.skel) {
		t.Fatalf("%s: skeletons differ at byte %d (len %d, want %d)", name, firstDiff(got.skel, want.skel), len(got.skel), len(want.skel))
	}
	if !reflect.DeepEqual(gres, wres) {
		t.Fatalf("%s: Result differs:\n got %+v\nwant %+v", name, gres, wres)
	}
	if !reflect.DeepEqual(got.segs, want.segs) || !reflect.DeepEqual(got.keys, want.keys) {
		t.Fatalf("%s: segments or keys differ (%d vs %d segments)", name, len(got.segs), len(want.segs))
	}
	if !reflect.DeepEqual(got.asked, want.asked) {
		t.Fatalf("%s: known asked about %d keys, SplitIndexed %d (or in another order)", name, len(got.asked), len(want.asked))
	}
	if len(got.calls) != len(want.calls) {
		t.Fatalf("%s: %d sink calls, want %d", name, len(got.calls), len(want.calls))
	}
	for i := range got.calls {
		if got.calls[i].seg != want.calls[i].seg || !bytes.Equal(got.calls[i].b, want.calls[i].b) {
			t.Fatalf("%s: sink call %d: %+v (%d bytes), want %+v (%d bytes)", name, i, got.calls[i].seg, len(got.calls[i].b), want.calls[i].seg, len(want.calls[i].b))
		}
	}
}

// skelSnapshots are the snapshots EncodeSkeleton is compared on. big adds
// an array whose rows (and chunks) exceed bigChunk and DefaultSegmentSize.
func skelSnapshots(big bool) map[string]func() *snapshot.Snapshot {
	m := map[string]func() *snapshot.Snapshot{
		"mixed": func() *snapshot.Snapshot {
			return &snapshot.Snapshot{Meta: testMeta(9), Arrays: []*snapshot.Array{
				randArray(2, "R", snapshot.F64, 2048, 64), // 16 chunks of 64 KiB
				randArray(3, "odd", snapshot.U8, 1000, 3),
				randArray(4, "layer.0/w", snapshot.BF16, 33, 17),
				randArray(5, "scalar", snapshot.I64),
				randArray(6, "empty", snapshot.F16, 0, 5),
				randArray(7, "w", snapshot.F32, 700, 33), // odd row size: 92400 bytes in chunks of 63 KiB
			}}
		},
		"attrs": func() *snapshot.Snapshot {
			s := &snapshot.Snapshot{Meta: testMeta(3), Attrs: map[string]string{"safetensors.metadata": `{"format":"pt"}`}, Arrays: []*snapshot.Array{
				randArray(1, "w", snapshot.F32, 300, 7),
				randArray(2, "b", snapshot.Bool, 9),
			}}
			s.Arrays[0].Attrs = map[string]string{"stb.layout": "COL_MAJOR"}
			return s
		},
		"reader": func() *snapshot.Snapshot { // non-memory sources: the ReadAt paths
			s := &snapshot.Snapshot{Meta: testMeta(4), Arrays: []*snapshot.Array{
				randArray(1, "many", snapshot.U8, 3000, 7),
				randArray(2, "x", snapshot.F32, 300, 300),
				randArray(3, "z", snapshot.U8, 0),
			}}
			for _, a := range s.Arrays {
				b, _ := snapshot.BytesOf(a.Data)
				a.Data = readerSource{snapshot.Bytes(b)}
			}
			return s
		},
		"none": func() *snapshot.Snapshot { return &snapshot.Snapshot{Meta: testMeta(2)} },
	}
	if big {
		m["big"] = func() *snapshot.Snapshot {
			return &snapshot.Snapshot{Meta: testMeta(5), Arrays: []*snapshot.Array{
				randArray(1, "big_rows", snapshot.F32, 2, (bigChunk/4)+100),
				randArray(2, "after", snapshot.U8, 5, 5),
			}}
		}
	}
	return m
}

// TestEncodeSkeletonMatchesSplit: EncodeSkeleton's skeleton, Result,
// segments, keys and sink calls are those of Encode then SplitIndexed,
// for every snapshot, option set, segment size and worker count.
func TestEncodeSkeletonMatchesSplit(t *testing.T) {
	optSets := []struct {
		name string
		opts EncodeOptions
	}{
		{"plain", EncodeOptions{}},
		{"signed", EncodeOptions{SignKey: testKey(1), PrevMerkle: [32]byte{7, 7}}},
		{"hmac", EncodeOptions{HMACKey: []byte("k")}},
		{"all", EncodeOptions{SignKey: testKey(2), HMACKey: []byte("key"), PrevMerkle: [32]byte{1}}},
		{"stream", EncodeOptions{SignKey: testKey(3), HMACKey: []byte("k"), Stream: true}},
		{"rpc1", EncodeOptions{RowsPerChunk: 1, HMACKey: []byte("k")}},
		{"rpc7", EncodeOptions{RowsPerChunk: 7, SignKey: testKey(1)}},
	}
	// 1: a segment a chunk; 100 KiB: 64 KiB chunks do not divide it; 128
	// KiB: they do; 0: the default 4 MiB, below the big array's chunks.
	segSizes := []int64{1, 100 << 10, 128 << 10, 0}
	for sname, mk := range skelSnapshots(true) {
		for oi, o := range optSets {
			oname, opts := o.name, o.opts
			if sname == "big" && oname != "all" && oname != "stream" {
				continue // the big array is slow under -race; two option sets cover it
			}
			sizes := segSizes
			if raceEnabled { // the race detector makes this 10x slower: one size each, in turn
				sizes = segSizes[oi%len(segSizes) : oi%len(segSizes)+1]
			}
			for _, size := range sizes {
				sopts := SplitOptions{SegmentSize: size}
				wres, want, in := refSkeleton(t, mk(), opts, sopts, nil)
				if n, err := EncodedSize(mk(), opts); err != nil || n != int64(len(in)) {
					t.Fatalf("%s/%s: EncodedSize = %d, %v; Encode wrote %d bytes", sname, oname, n, err, len(in))
				}
				for wi, workers := range []int{1, 4} {
					if raceEnabled && sname == "big" && wi != oi%2 {
						continue // the big array under the race detector: one worker count per option set, in turn
					}
					o := opts
					o.Workers = workers
					gres, got := encSkeleton(t, mk(), o, sopts, nil)
					sameRun(t, fmt.Sprintf("%s/%s/seg=%d/workers=%d", sname, oname, size, workers), wres, gres, want, got)
				}
			}
		}
	}
}

// TestEncodeSkeletonKnown: segments known recognizes are not handed to
// sink and take known's digest, as in SplitIndexed; known is asked about
// every segment, in file order.
func TestEncodeSkeletonKnown(t *testing.T) {
	for sname, mk := range skelSnapshots(false) {
		opts := EncodeOptions{SignKey: testKey(1), HMACKey: []byte("k"), Workers: 3}
		sopts := SplitOptions{SegmentSize: 100 << 10}
		_, first, _ := refSkeleton(t, mk(), opts, sopts, nil)
		for _, every := range []int{1, 2, 3} {
			// Recognize every every-th segment, with a digest that is not the
			// segment's (known is trusted, not checked).
			digests := map[SegmentKey][32]byte{}
			for i, k := range first.keys {
				if i%every == 0 {
					digests[k] = [32]byte{byte(i), 0xee}
				}
			}
			wres, want, _ := refSkeleton(t, mk(), opts, sopts, digests)
			gres, got := encSkeleton(t, mk(), opts, sopts, digests)
			name := fmt.Sprintf("%s/every=%d", sname, every)
			sameRun(t, name, wres, gres, want, got)
			if len(got.asked) != len(got.segs) {
				t.Fatalf("%s: known asked %d times for %d segments", name, len(got.asked), len(got.segs))
			}
			for _, c := range got.calls {
				if _, ok := digests[segmentKeyOf(t, got, c.seg)]; ok {
					t.Fatalf("%s: sink called for a known segment", name)
				}
			}
			if n := len(got.segs) - len(got.calls); len(got.segs) > 0 && n == 0 {
				t.Fatalf("%s: nothing was recognized", name)
			}
		}
	}
}

func segmentKeyOf(t *testing.T, r *skelRun, s Segment) SegmentKey {
	for i, x := range r.segs {
		if x.Array == s.Array && x.FirstChunk == s.FirstChunk {
			return r.keys[i]
		}
	}
	t.Fatalf("segment %+v not returned", s)
	return SegmentKey{}
}

// TestEncodeSkeletonDeterminism: the output does not depend on Workers,
// GOMAXPROCS, which work is served first (SegmentsFirst), or how many
// chunk sums may wait for the header (maxSums: the segment pipeline then
// stalls until sha256_all is known).
func TestEncodeSkeletonDeterminism(t *testing.T) {
	mk := skelSnapshots(false)["mixed"]
	opts := EncodeOptions{SignKey: testKey(1), HMACKey: []byte("k"), PrevMerkle: [32]byte{1}}
	sopts := SplitOptions{SegmentSize: 100 << 10}
	wres, want, _ := refSkeleton(t, mk(), opts, sopts, nil)
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	for pi, procs := range []int{1, 2, 4} {
		runtime.GOMAXPROCS(procs)
		for wi, workers := range []int{0, 1, 5} {
			for mi, maxSums := range []int64{0, 1, 3} {
				if raceEnabled && (pi+wi+mi)%3 != 0 {
					continue // under the race detector a Latin square: every pair of values meets once
				}
				for _, first := range []bool{false, true} {
					o, so := opts, sopts
					o.Workers, o.maxSums = workers, maxSums
					so.SegmentsFirst = first
					gres, got := encSkeleton(t, mk(), o, so, nil)
					sameRun(t, fmt.Sprintf("GOMAXPROCS=%d workers=%d maxSums=%d segmentsFirst=%v", procs, workers, maxSums, first), wres, gres, want, got)
				}
			}
		}
	}
}

// TestEncodeSkeletonAssembles: the skeleton and the blobs the sink got
// assemble to Encode's WTXT, which verifies.
func TestEncodeSkeletonAssembles(t *testing.T) {
	s := skelSnapshots(false)["mixed"]()
	opts := EncodeOptions{SignKey: testKey(1), HMACKey: []byte("k")}
	in, _ := encodeBytes(t, s, opts)
	_, got := encSkeleton(t, s, opts, SplitOptions{SegmentSize: 200 << 10}, nil)
	blobs := mapBlobs{}
	for _, c := range got.calls {
		blobs[c.seg.Digest] = c.b
	}
	out, err := assembleBytes(got.skel, blobs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, in) {
		t.Fatalf("assembled WTXT differs from Encode's at %d", firstDiff(out, in))
	}
}

// shortSource claims n bytes but has only half of them.
type shortSource struct{ n int64 }

func (s shortSource) ReadAt(p []byte, off int64) (int, error) {
	if off >= s.n/2 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), s.n/2-off)
	clear(p[:k])
	if k < int64(len(p)) {
		return int(k), io.EOF
	}
	return int(k), nil
}
func (s shortSource) Size() int64 { return s.n }

// TestEncodeSkeletonSourceErrors: a failing or short array source gives
// a located error naming the array, as Encode's does; no panic, no hang.
func TestEncodeSkeletonSourceErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		src  snapshot.Source
		want string
	}{
		"failing": {failingSource{4 << 20}, "disk on fire"},
		"short":   {shortSource{3 << 20}, "unexpected EOF"},
	} {
		for _, workers := range []int{1, 4} {
			s := &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{
				randArray(1, "first", snapshot.U8, 1000),
				{Name: "a", DType: snapshot.U8, Shape: []int64{tc.src.Size()}, Data: tc.src},
			}}
			calls := 0
			_, _, _, err := EncodeSkeleton(context.Background(), io.Discard, s, EncodeOptions{HMACKey: []byte("k"), Workers: workers}, SplitOptions{},
				nil, func(context.Context, Segment, []byte) error { calls++; return nil })
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `array "a"`) || !strings.Contains(err.Error(), " at ") {
				t.Fatalf("%s workers=%d: err = %v", name, workers, err)
			}
			if _, encErr := Encode(context.Background(), io.Discard, s, EncodeOptions{Workers: workers}); encErr == nil || !strings.Contains(encErr.Error(), tc.want) {
				t.Fatalf("%s: Encode err = %v", name, encErr)
			}
			if calls > 2 { // "first" and a's readable segment at most
				t.Fatalf("%s: %d sink calls", name, calls)
			}
		}
	}
}

// TestEncodeSkeletonRejects: a bad snapshot gets Encode's error; a chunk
// over MaxSegment gets SplitIndexed's check, before any sink call.
func TestEncodeSkeletonRejects(t *testing.T) {
	good := func() *snapshot.Snapshot {
		return &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{randArray(1, "a", snapshot.U8, 4)}}
	}
	for name, mut := range map[string]func(s *snapshot.Snapshot){
		"bad name":   func(s *snapshot.Snapshot) { s.Arrays[0].Name = "a b" },
		"dup name":   func(s *snapshot.Snapshot) { s.Arrays = append(s.Arrays, randArray(2, "a", snapshot.U8, 1)) },
		"short data": func(s *snapshot.Snapshot) { s.Arrays[0].Data = snapshot.Bytes{1} },
		"bad build":  func(s *snapshot.Snapshot) { s.Meta.Build = "a b" },
		"reserved name": func(s *snapshot.Snapshot) {
			s.Arrays[0].Name = snapshot.AttrsArrayName
			s.Attrs = map[string]string{"x": "y"}
		},
	} {
		s := good()
		mut(s)
		_, encErr := Encode(context.Background(), io.Discard, s, EncodeOptions{})
		_, _, _, err := EncodeSkeleton(context.Background(), io.Discard, s, EncodeOptions{}, SplitOptions{}, nil, nil)
		if err == nil || encErr == nil || err.Error() != encErr.Error() {
			t.Errorf("%s: EncodeSkeleton %v, Encode %v", name, err, encErr)
		}
		if _, err := EncodedSize(s, EncodeOptions{}); err == nil || encErr == nil || err.Error() != encErr.Error() {
			t.Errorf("%s: EncodedSize %v, Encode %v", name, err, encErr)
		}
	}
	if _, _, _, err := EncodeSkeleton(context.Background(), io.Discard, good(), EncodeOptions{SignKey: testKey(1)[:10]}, SplitOptions{}, nil, nil); err == nil {
		t.Error("short sign key accepted")
	}

	s := &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{
		randArray(1, "ok", snapshot.U8, 10),
		randArray(2, "rows", snapshot.U8, 4, 3000),
	}}
	sopts := SplitOptions{MaxSegment: 2999, File: "x.wtxt"}
	in, _ := encodeBytes(t, s, EncodeOptions{})
	_, _, wantErr := SplitIndexed(context.Background(), bytes.NewReader(in), int64(len(in)), io.Discard, nil, nil, sopts)
	calls := 0
	_, _, _, err := EncodeSkeleton(context.Background(), io.Discard, s, EncodeOptions{}, sopts, nil,
		func(context.Context, Segment, []byte) error { calls++; return nil })
	var we, ww *Error
	if !errors.As(err, &we) || !errors.As(wantErr, &ww) || we.Check != ww.Check || we.Array != ww.Array || we.Chunk != ww.Chunk || we.File != ww.File || calls != 0 {
		t.Fatalf("over MaxSegment: err = %v, SplitIndexed's %v, %d sink calls", err, wantErr, calls)
	}
}

// TestEncodeSkeletonSinkAndCancel: a sink error is returned wrapped and
// located; a context canceled during the run stops it with ctx's error.
func TestEncodeSkeletonSinkAndCancel(t *testing.T) {
	s := skelSnapshots(false)["mixed"]()
	sopts := SplitOptions{SegmentSize: 64 << 10}
	boom := errors.New("registry says no")
	calls := 0
	_, _, _, err := EncodeSkeleton(context.Background(), io.Discard, s, EncodeOptions{Workers: 2}, sopts, nil,
		func(_ context.Context, seg Segment, _ []byte) error {
			calls++
			if calls == 3 {
				return boom
			}
			return nil
		})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "array ") || !strings.Contains(err.Error(), "segment at chunk") || calls != 3 {
		t.Fatalf("sink error: err = %v after %d calls", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var skel bytes.Buffer
	calls = 0
	_, _, _, err = EncodeSkeleton(ctx, &skel, s, EncodeOptions{Workers: 2, HMACKey: []byte("k")}, sopts, nil,
		func(sctx context.Context, _ Segment, _ []byte) error {
			calls++
			cancel()
			<-sctx.Done() // the sink's context follows the caller's
			return nil
		})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("canceled: err = %v after %d sink calls", err, calls)
	}
	if _, _, _, err := EncodeSkeleton(ctx, io.Discard, s, EncodeOptions{}, sopts, nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled before the start: err = %v", err)
	}
}

// readerOnly hides that a source is memory-backed, so the encoder reads
// it with ReadAt (as it reads files) instead of copying from memory.
type readerOnly struct{ b snapshot.Bytes }

func (r readerOnly) ReadAt(p []byte, off int64) (int, error) { return r.b.ReadAt(p, off) }
func (r readerOnly) Size() int64                             { return r.b.Size() }

// TestEncodeReadSourcesMatchMemory: arrays read from a ReaderAt (sha256
// and HMAC from one read of each block, hashShaMAC; the header's hashes
// before the segment workers, cpuGate) give the bytes memory-backed
// arrays give, for Encode and EncodeSkeleton, at block-aligned and
// unaligned sizes, with and without an HMAC key, at any worker count.
func TestEncodeReadSourcesMatchMemory(t *testing.T) {
	mk := func(read bool) *snapshot.Snapshot {
		arrs := []*snapshot.Array{
			randArray(1, "a_one_block", snapshot.U8, blockSize),
			randArray(2, "b_unaligned", snapshot.F32, 5, blockSize/8+3), // 2.5 blocks and 60 bytes
			randArray(3, "c_tiny", snapshot.U8, 1),
			randArray(4, "d_empty", snapshot.F32, 0, 3),
		}
		if read {
			for _, a := range arrs {
				b, _ := snapshot.BytesOf(a.Data)
				a.Data = readerOnly{snapshot.Bytes(b)}
			}
		}
		return &snapshot.Snapshot{Meta: testMeta(3), Arrays: arrs}
	}
	for oi, opts := range []EncodeOptions{
		{SignKey: testKey(1), HMACKey: []byte("key")},
		{SignKey: testKey(1)},
	} {
		workersSet := []int{1, 2, 5}
		if raceEnabled { // two of the three worker counts per option set, in turn
			workersSet = append(workersSet[:oi:oi], workersSet[oi+1:]...)
		}
		want, wres := encodeBytes(t, mk(false), opts)
		// The memory-backed reference skeleton: Encode's bytes do not
		// depend on the worker count (TestDeterminism), so it is made once.
		sopts := SplitOptions{SegmentSize: 300 << 10}
		_, mem, _ := refSkeleton(t, mk(false), opts, sopts, nil)
		for _, workers := range workersSet {
			o := opts
			o.Workers = workers
			got, gres := encodeBytes(t, mk(true), o)
			if !bytes.Equal(got, want) || gres.Root != wres.Root {
				t.Fatalf("hmac=%v workers=%d: Encode of read arrays differs from memory-backed ones", opts.HMACKey != nil, workers)
			}
			rres, read := encSkeleton(t, mk(true), o, sopts, nil)
			sameRun(t, fmt.Sprintf("hmac=%v workers=%d", opts.HMACKey != nil, workers), wres, rres, mem, read)
		}
	}
}

// TestCPUGatePriority: a freed token goes to a waiting header task before
// a waiting worker, whichever came first (with segmentsFirst, to the
// worker); one gets it at once when nothing else waits; a nil gate does
// nothing.
func TestCPUGatePriority(t *testing.T) {
	var nilGate *cpuGate
	nilGate.acquire(true)
	nilGate.release()

	for _, segmentsFirst := range []bool{false, true} {
		g := newCPUGate(1, segmentsFirst)
		g.acquire(true)
		waiting := func(high, low int) {
			t.Helper()
			for {
				g.mu.Lock()
				h, l := g.highWait, g.lowWait
				g.mu.Unlock()
				if h == high && l == low {
					return
				}
				runtime.Gosched()
			}
		}
		// The one served second waits first.
		first, second := "header", "worker"
		if segmentsFirst {
			first, second = second, first
		}
		order := make(chan string, 2)
		go func() { g.acquire(second == "header"); order <- second; g.release() }()
		waiting(0, 1)
		go func() { g.acquire(first == "header"); order <- first; g.release() }()
		waiting(1, 1)
		g.release()
		if a, b := <-order, <-order; a != first || b != second {
			t.Fatalf("segmentsFirst %v: tokens went to %s then %s", segmentsFirst, a, b)
		}
		g.acquire(false) // nothing waits: a worker gets it at once
		g.release()
		g.acquire(true)
		g.release()
	}
}

// TestEncodeGuardedViews: arrays that are Sections of a Guarded mapping
// (how checkpoints named on a command line are read) are hashed straight
// from the mapping (snapshot.Viewer) and give the bytes memory-backed
// arrays give; a file that shrank under the mapping is a located
// ErrSourceFault, not a crash.
func TestEncodeGuardedViews(t *testing.T) {
	mem := cacheGen(2, 100, 120, false)
	var file []byte
	var offs []int64
	for _, a := range mem.Arrays {
		b, _ := snapshot.BytesOf(a.Data)
		offs = append(offs, int64(len(file)))
		file = append(file, b...)
	}
	path := filepath.Join(t.TempDir(), "ckpt.bin")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.MapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g := m.Guarded()
	mapped := func() *snapshot.Snapshot {
		s := &snapshot.Snapshot{Meta: mem.Meta}
		for i, a := range mem.Arrays {
			c := *a
			c.Data = snapshot.Section(g, offs[i], a.Data.Size())
			if _, ok := c.Data.(snapshot.Viewer); !ok {
				t.Fatalf("array %s: %T is not a Viewer", a.Name, c.Data)
			}
			s.Arrays = append(s.Arrays, &c)
		}
		return s
	}
	opts := EncodeOptions{SignKey: testKey(1), HMACKey: []byte("k"), Workers: 2}
	want, wres := encodeBytes(t, mem, opts)
	got, gres := encodeBytes(t, mapped(), opts)
	if !bytes.Equal(got, want) || gres.Root != wres.Root {
		t.Fatal("Encode of mapped arrays differs from memory-backed ones")
	}
	sopts := SplitOptions{SegmentSize: 100 << 10}
	_, ref, _ := refSkeleton(t, mem, opts, sopts, nil)
	sres, sk := encSkeleton(t, mapped(), opts, sopts, nil)
	sameRun(t, "mapped", wres, sres, ref, sk)

	if err := os.Truncate(path, offs[1]+4096); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = EncodeSkeleton(context.Background(), io.Discard, mapped(), opts, sopts, nil, nil)
	if !errors.Is(err, snapshot.ErrSourceFault) || !strings.Contains(err.Error(), "ckpt.bin") {
		t.Fatalf("shrunk file: %v", err)
	}
}
