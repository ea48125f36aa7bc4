package wtxt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
)

// mapBlobs is an in-memory BlobSource keyed by digest.
type mapBlobs map[[32]byte][]byte

func (m mapBlobs) OpenBlob(_ context.Context, s Segment) (io.ReadCloser, error) {
	b, ok := m[s.Digest]
	if !ok {
		return nil, fmt.Errorf("%s: %w", s.DigestString(), ErrBlobNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// splitBytes splits in into a skeleton and its blobs.
func splitBytes(t testing.TB, in []byte, segSize int64) ([]byte, mapBlobs, []Segment) {
	t.Helper()
	var skel bytes.Buffer
	blobs := mapBlobs{}
	segs, err := Split(context.Background(), bytes.NewReader(in), &skel, func(_ context.Context, s Segment, b []byte) error {
		blobs[s.Digest] = bytes.Clone(b)
		return nil
	}, SplitOptions{SegmentSize: segSize})
	if err != nil {
		t.Fatal(err)
	}
	return skel.Bytes(), blobs, segs
}

func assembleBytes(skel []byte, src BlobSource) ([]byte, error) {
	var out bytes.Buffer
	_, err := Assemble(context.Background(), bytes.NewReader(skel), src, &out)
	return out.Bytes(), err
}

// skeletonInputs are the conformance vectors, the golden files and a
// generated file with several arrays, a zero-size one and a big-row one.
func skeletonInputs(t *testing.T) map[string][]byte {
	in := map[string][]byte{}
	for _, v := range []string{"v1-basic-unsigned.wtxt", "v1-basic-signed.wtxt", "v2-ext-signed.wtxt", "v3-stream.wtxt"} {
		in[v] = readVector(t, v)
	}
	golden, _ := filepath.Glob("testdata/golden-*.wtxt")
	for _, p := range golden {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		in[filepath.Base(p)] = b
	}
	s := &snapshot.Snapshot{Meta: testMeta(7), Arrays: []*snapshot.Array{
		randArray(1, "a.weight", snapshot.F32, 1000, 256),
		randArray(2, "b", snapshot.U8, 3),
		randArray(3, "c", snapshot.F64, 0, 4),
		randArray(4, "d", snapshot.BF16, 2, 40000),
	}}
	b, _ := encodeBytes(t, s, EncodeOptions{SignKey: testKey(1), HMACKey: []byte("k")})
	in["generated"] = b
	return in
}

func TestSkeletonRoundTrip(t *testing.T) {
	for name, in := range skeletonInputs(t) {
		for _, segSize := range []int64{1, 100 << 10, DefaultSegmentSize} {
			t.Run(fmt.Sprintf("%s/%d", name, segSize), func(t *testing.T) {
				skel, blobs, segs := splitBytes(t, in, segSize)
				if !bytes.HasPrefix(skel, []byte(SkeletonMagic+"\nWTXT 1\n")) {
					t.Fatalf("skeleton starts %q", skel[:min(len(skel), 40)])
				}
				// Every non-base64 line of the WTXT is in the skeleton, in order.
				var want []string
				for _, l := range strings.Split(string(in), "\n") {
					if !isB64Line(l) {
						want = append(want, l)
					}
				}
				var got []string
				for _, l := range strings.Split(string(skel), "\n")[1:] {
					if !strings.HasPrefix(l, "seg ") {
						got = append(got, l)
					}
				}
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatal("skeleton without seg lines differs from the WTXT without base64 lines")
				}
				var raw int64
				for _, s := range segs {
					raw += s.Size
					if s.Size > segSize && s.Chunks != 1 {
						t.Fatalf("segment %+v exceeds %d with more than one chunk", s, segSize)
					}
				}
				out, err := assembleBytes(skel, blobs)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(out, in) {
					t.Fatal("assembled WTXT differs from the original")
				}
				// Deterministic.
				skel2, _, _ := splitBytes(t, in, segSize)
				if !bytes.Equal(skel, skel2) {
					t.Fatal("split is not deterministic")
				}
			})
		}
	}
}

func isB64Line(l string) bool {
	kw, _, _ := strings.Cut(l, " ")
	switch kw {
	case "WTXT", "meta", "cap", "root", "root_pending", "sign", "arr", "idx", "ch", "endch", "endarr", "audit", "endwtxt", "":
		return false
	}
	return true
}

// TestSkeletonDiffLocality: changing a cluster of rows changes only the
// ch lines of their chunks and the seg lines of their segments.
func TestSkeletonDiffLocality(t *testing.T) {
	a := randArray(1, "W", snapshot.F32, 8192, 64) // 2 MiB, 256-row chunks of 64 KiB
	s1 := &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{a}}
	w1, _ := encodeBytes(t, s1, EncodeOptions{})
	b := bytes.Clone(a.Data.(snapshot.Bytes))
	for i := 300 * 256; i < 310*256; i++ { // rows 300..309: chunk 1
		b[i] ^= 0x55
	}
	s2 := &snapshot.Snapshot{Meta: testMeta(2), Arrays: []*snapshot.Array{{Name: "W", DType: snapshot.F32, Shape: a.Shape, Data: snapshot.Bytes(b)}}}
	w2, _ := encodeBytes(t, s2, EncodeOptions{})
	k1, _, segs1 := splitBytes(t, w1, 256<<10)
	k2, _, segs2 := splitBytes(t, w2, 256<<10)
	l1, l2 := strings.Split(string(k1), "\n"), strings.Split(string(k2), "\n")
	if len(l1) != len(l2) {
		t.Fatalf("line counts %d vs %d", len(l1), len(l2))
	}
	var diff []string
	for i := range l1 {
		if l1[i] != l2[i] {
			kw, _, _ := strings.Cut(l1[i], " ")
			diff = append(diff, kw)
		}
	}
	// meta (gen), root (sums), arr (sha256), one ch, one seg.
	if strings.Join(diff, ",") != "meta,root,arr,seg,ch" {
		t.Fatalf("changed lines: %v", diff)
	}
	changed := 0
	for i := range segs1 {
		if segs1[i].Digest != segs2[i].Digest {
			changed++
		}
	}
	if len(segs1) != 8 || changed != 1 {
		t.Fatalf("%d segments, %d changed; want 8, 1", len(segs1), changed)
	}
}

func TestSkeletonBadInput(t *testing.T) {
	in := skeletonInputs(t)["generated"]
	skel, blobs, segs := splitBytes(t, in, 100<<10)
	if len(segs) < 3 {
		t.Fatalf("want several segments, got %d", len(segs))
	}
	seg := segs[1]
	clone := func() mapBlobs {
		m := mapBlobs{}
		for k, v := range blobs {
			m[k] = v
		}
		return m
	}
	// line number of seg's seg line
	segLineNo := 0
	n := 0
	for i, l := range strings.Split(string(skel), "\n") {
		if strings.HasPrefix(l, "seg ") {
			if n == 1 {
				segLineNo = i + 1
			}
			n++
		}
	}
	cases := []struct {
		name  string
		skel  []byte
		src   mapBlobs
		check Check
		msg   string
	}{
		{"missing blob", skel, func() mapBlobs { m := clone(); delete(m, seg.Digest); return m }(), CheckBlob, "cannot be read"},
		{"truncated blob", skel, func() mapBlobs { m := clone(); m[seg.Digest] = m[seg.Digest][:seg.Size-10]; return m }(), CheckBlob, "truncated"},
		{"long blob", skel, func() mapBlobs { m := clone(); m[seg.Digest] = append(bytes.Clone(m[seg.Digest]), 0); return m }(), CheckBlob, "longer"},
		{"wrong bytes", skel, func() mapBlobs {
			m := clone()
			b := bytes.Clone(m[seg.Digest])
			b[len(b)-1] ^= 1
			m[seg.Digest] = b
			return m
		}(), CheckChunkSHA, "does not match"},
		{"seg declares too many chunks", bytes.Replace(skel, fmt.Appendf(nil, "seg chunks=%d len=", seg.Chunks), fmt.Appendf(nil, "seg chunks=%d len=", seg.Chunks+1), 1), blobs, CheckSkeleton, "declares"},
		{"seg len disagrees", bytes.Replace(skel, fmt.Appendf(nil, " len=%d sha256=", seg.Size), fmt.Appendf(nil, " len=%d sha256=", seg.Size+1), 1), blobs, CheckSkeleton, "len="},
		{"ch without seg", bytes.Replace(skel, append(segLine(nil, seg), '\n'), nil, 1), blobs, CheckSkeleton, ""},
		{"base64 line", bytes.Replace(skel, []byte("endch\n"), []byte("AQID d\nendch\n"), 1), blobs, CheckSkeleton, "no base64"},
		{"not a skeleton", in, blobs, CheckSkeleton, "is not"},
		{"endwtxt with more", bytes.Replace(skel, []byte("\nendwtxt\n"), []byte("\nendwtxt fastxor=0000000000030201\n"), 1), blobs, CheckGrammar, endLineExtra},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := assembleBytes(tc.skel, tc.src)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("want *Error, got %v", err)
			}
			if e.Check != tc.check || !strings.Contains(e.Msg, tc.msg) || e.Line == 0 {
				t.Fatalf("got %v (check %s), want check %s with %q", err, e.Check, tc.check, tc.msg)
			}
			if tc.check == CheckBlob && tc.name != "not a skeleton" && (e.Array != seg.Array || e.Line < segLineNo) {
				t.Fatalf("error not located at the segment (line %d, array %s): %v", segLineNo, seg.Array, err)
			}
			if strings.Contains(err.Error(), "AQID") {
				t.Fatal("error echoes content")
			}
		})
	}
	if _, err := assembleBytes(skel[:len(skel)-20], blobs); !errors.Is(err, ErrInvalid) {
		t.Fatalf("truncated skeleton: %v", err)
	}
}

// FuzzSkeleton: Split never panics; what splits assembles back byte for
// byte; Assemble of any skeleton never panics.
func FuzzSkeleton(f *testing.F) {
	for _, b := range testutil.Seeds(f, "testdata/golden-*.wtxt") {
		if len(b) < 16<<10 {
			f.Add(b, false)
			skel, _, _ := splitBytes(f, b, 64)
			f.Add(skel, true)
		}
	}
	ctx := context.Background()
	fixed := append(fixedTexts(), testutil.SourceTexts(f, ".")...)
	f.Fuzz(func(t *testing.T, in []byte, asSkeleton bool) {
		if asSkeleton {
			if _, err := assembleBytes(in, mapBlobs{}); err != nil {
				if run, ok := testutil.EchoedRun(err.Error(), in, fixed...); ok {
					t.Fatalf("Assemble error echoes the input run %q: %v", run, err)
				}
			}
			return
		}
		var skel bytes.Buffer
		blobs := mapBlobs{}
		_, err := Split(ctx, bytes.NewReader(in), &skel, func(_ context.Context, s Segment, b []byte) error {
			blobs[s.Digest] = bytes.Clone(b)
			return nil
		}, SplitOptions{SegmentSize: 64, MaxSegment: 1 << 20})
		if err != nil {
			if run, ok := testutil.EchoedRun(err.Error(), in, fixed...); ok {
				t.Fatalf("Split error echoes the input run %q: %v", run, err)
			}
			return
		}
		out, err := assembleBytes(skel.Bytes(), blobs)
		if err != nil {
			t.Fatalf("split but does not assemble: %v", err)
		}
		if !bytes.Equal(out, in) {
			t.Fatal("assembled differs from input")
		}
	})
}

// TestSplitBadInput: a damaged WTXT is refused by Split with a located
// error, and the sink sees no segment of the damaged chunk.
func TestSplitBadInput(t *testing.T) {
	in := skeletonInputs(t)["generated"]
	lines := strings.Split(string(in), "\n")
	// Find the third base64 line of array a.weight's first chunk.
	at := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "ch ix=000000") {
			at = i + 3
			break
		}
	}
	flip := func(b []byte) []byte {
		c := bytes.Clone(b)
		c[0] ^= 0x01
		return c
	}
	mut := func(f func([]string)) []byte {
		l := append([]string(nil), lines...)
		f(l)
		return []byte(strings.Join(l, "\n"))
	}
	for name, tc := range map[string]struct {
		in    []byte
		check Check
	}{
		"parity":     {mut(func(l []string) { l[at] = string(flip([]byte(l[at]))) }), CheckParity},
		"chunk sha":  {mut(func(l []string) { b := []byte(l[at]); b[0], b[1] = b[1], b[0]; l[at] = string(b) }), CheckChunkSHA},
		"short line": {mut(func(l []string) { l[at] = l[at][4:] }), CheckBase64},
		"no endch":   {mut(func(l []string) { l[at] = "endarr" }), CheckBase64},
		"not wtxt":   {[]byte("WTXT 2\n"), CheckGrammar},
		"endwtxt with more": {mut(func(l []string) {
			for i := len(l) - 1; i >= 0; i-- {
				if l[i] == "endwtxt" {
					l[i] = "endwtxt fastxor=0000000000030201"
					break
				}
			}
		}), CheckGrammar},
	} {
		t.Run(name, func(t *testing.T) {
			var sinkCalls int
			_, err := Split(context.Background(), bytes.NewReader(tc.in), io.Discard, func(context.Context, Segment, []byte) error {
				sinkCalls++
				return nil
			}, SplitOptions{File: "g.wtxt"})
			var e *Error
			if !errors.As(err, &e) || e.Check != tc.check || e.File != "g.wtxt" || e.Line == 0 {
				t.Fatalf("got %v, want check %s", err, tc.check)
			}
			wantLine := at + 1
			if tc.check == CheckChunkSHA {
				wantLine = at - 2 // the ch line
			}
			if name == "endwtxt with more" {
				if e.Line != len(lines)-1 || e.Msg != endLineExtra {
					t.Fatalf("not located at the endwtxt line %d: %v", len(lines)-1, err)
				}
				return
			}
			if name != "not wtxt" && (e.Array != "a.weight" || e.Chunk != 0 || e.Line != wantLine) {
				t.Fatalf("not located at line %d array a.weight chunk 0: %v", wantLine, err)
			}
			if sinkCalls != 0 {
				t.Fatalf("sink called %d times before the damaged chunk", sinkCalls)
			}
		})
	}
}

func TestSkeletonSegments(t *testing.T) {
	in := skeletonInputs(t)["generated"]
	skel, _, segs := splitBytes(t, in, 100<<10)
	got, err := SkeletonSegments(context.Background(), bytes.NewReader(skel), "g.skel")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(segs) {
		t.Fatalf("SkeletonSegments %v\nSplit %v", got, segs)
	}
	bad := bytes.Replace(skel, []byte("seg chunks=1 "), []byte("seg chunks=2 "), 1)
	var e *Error
	if _, err := SkeletonSegments(context.Background(), bytes.NewReader(bad), "g.skel"); !errors.As(err, &e) || e.Check != CheckSkeleton {
		t.Fatalf("damaged: %v", err)
	}
}
