// Package formatstest is the conformance suite of formats.Codec, run by
// every codec from its own package test (as restic's backend test suite is
// run by every backend):
//
//	func TestConformance(t *testing.T) {
//		formatstest.Suite{Codec: New(), Files: []string{"testdata/a.stb"}}.Run(t)
//	}
//
// For each testdata file it checks every path a file takes through snapd:
// Decode from a plain io.ReaderAt, from a memory mapping and from bytes
// (same snapshot), decode -> WTXT -> Encode -> Decode (same arrays and
// attributes) with a second Encode byte-identical to the first (fixed
// point, determinism), a one-byte decode budget (nil or formats.ErrLimit,
// nothing else, also when the arrays are read), and damaged copies of the
// file (truncated, bits flipped), whose errors must not panic, must match
// a formats sentinel and must not echo the file's bytes.
//
// It also holds the helpers codec tests share: ReadTestdata, SimulateWTXT,
// Equal, EqualSorted, NoEcho, IsFormatError and Seeds (the fuzz targets'
// seed loader).
package formatstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// Suite describes one codec's conformance run.
type Suite struct {
	// Codec is the codec under test.
	Codec formats.Codec
	// Files are paths (relative to the package directory, usually under
	// testdata/) of files the codec decodes and re-encodes losslessly.
	Files []string
	// Exact lists the Files whose re-encoding must reproduce the file
	// byte for byte (canonical files, written by snapd's own encoder or a
	// reference writer snapd imitates exactly).
	Exact []string
	// NoEncode lists the Files for which Encode is not tried (formats that
	// cannot hold what the file's snapshot holds without Lossy), with why.
	NoEncode map[string]string
	// Hostile builds a small file (at most HostileMaxSize bytes) that
	// declares or inflates to far more than the decode budget of its size
	// (formats.DefaultMaxDecoded): a zip member, a zstd chunk or metadata
	// that decompresses or parses beyond it, a header that declares more
	// than the codec's limits. The suite decodes it (reading every array's
	// data) and requires HostileErr, with the bytes charged to the budget
	// (formats.Budget.Peak) within its limit. nil skips the check, saying
	// so.
	Hostile func(tb testing.TB) []byte
	// HostileErr is the sentinel the hostile decode must match; nil
	// selects formats.ErrLimit. A format that stores every byte it
	// declares uncompressed and has no size limit of its own (STB) sets
	// formats.ErrCorrupt: a size beyond the file is then corruption,
	// refused before anything is read.
	HostileErr error
	// EchoWindow is the length of a run of the file's bytes that an error
	// message must not contain; 0 selects 24. Names a decoder quotes (zip
	// members, tensors) must be shorter than it.
	EchoWindow int
}

// HostileMaxSize bounds the files Suite.Hostile builds: 1 MiB.
const HostileMaxSize = 1 << 20

// Run runs the suite as subtests of t, one per file, and the hostile-file
// check ("hostile").
func (s Suite) Run(t *testing.T) {
	t.Helper()
	if len(s.Files) == 0 {
		t.Fatal("formatstest: Suite.Files is empty")
	}
	t.Run("hostile", s.hostile)
	exact := map[string]bool{}
	for _, f := range s.Exact {
		exact[f] = true
	}
	for _, name := range s.Files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			b := ReadTestdata(t, name)
			s1 := s.decode(t, opaque{bytes.NewReader(b)}, int64(len(b)), name)
			t.Run("mmap", func(t *testing.T) {
				m, err := snapshot.MapFile(name)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				Equal(t, s.decode(t, m, m.Size(), name), s1)
			})
			t.Run("bytes", func(t *testing.T) {
				Equal(t, s.decode(t, snapshot.Bytes(b), int64(len(b)), name), s1)
			})
			if why, ok := s.NoEncode[name]; ok {
				t.Logf("no fixed-point run: %s", why)
			} else {
				t.Run("fixedpoint", func(t *testing.T) {
					out := s.encode(t, SimulateWTXT(t, s1))
					if exact[name] && !bytes.Equal(out, b) {
						t.Errorf("re-encoded file differs from %s (%d vs %d bytes)", name, len(out), len(b))
					}
					s2 := s.decode(t, snapshot.Bytes(out), int64(len(out)), "re-encoded")
					EqualSorted(t, s2, s1)
					if again := s.encode(t, SimulateWTXT(t, s2)); !bytes.Equal(again, out) {
						t.Errorf("second encode differs from the first (%d vs %d bytes): not a fixed point", len(again), len(out))
					}
				})
			}
			t.Run("limit", func(t *testing.T) {
				snap, err := s.Codec.Decode(context.Background(), opaque{bytes.NewReader(b)}, int64(len(b)), formats.DecodeOptions{Name: name, MaxDecoded: 1})
				if err != nil {
					if !errors.Is(err, formats.ErrLimit) {
						t.Errorf("decode with a 1-byte budget: %v, want nil or formats.ErrLimit", err)
					}
					return
				}
				// Lazy sources charge the budget when read.
				for _, a := range snap.Arrays {
					if _, err := snapshot.ReadAll(a.Data); err != nil && !errors.Is(err, formats.ErrLimit) {
						t.Errorf("array %q read with a 1-byte budget: %v, want nil or formats.ErrLimit", a.Name, err)
					}
				}
			})
			t.Run("damaged", func(t *testing.T) {
				s.damaged(t, b)
			})
		})
	}
}

// hostile decodes Suite.Hostile's file with the default budget and with
// a shared budget it can inspect, from a plain reader and from bytes.
func (s Suite) hostile(t *testing.T) {
	if s.Hostile == nil {
		t.Skipf("codec %q supplies no hostile-file builder (Suite.Hostile): its decode budget is not checked against a small file that declares a large decode", s.Codec.Name())
	}
	b := s.Hostile(t)
	if len(b) > HostileMaxSize {
		t.Fatalf("hostile file of %d bytes is larger than %d", len(b), HostileMaxSize)
	}
	want := s.HostileErr
	if want == nil {
		want = formats.ErrLimit
	}
	limit := formats.DefaultMaxDecoded(int64(len(b)))
	for _, in := range []struct {
		name string
		r    io.ReaderAt
	}{{"reader", opaque{bytes.NewReader(b)}}, {"bytes", snapshot.Bytes(b)}} {
		t.Run(in.name, func(t *testing.T) {
			bud := formats.NewBudget(limit)
			err := DecodeAll(s.Codec, in.r, int64(len(b)), formats.DecodeOptions{Name: "hostile", SharedBudget: bud})
			switch {
			case err == nil:
				t.Fatalf("hostile file of %d bytes decoded (and its arrays read) without error; want %v", len(b), want)
			case !errors.Is(err, want):
				t.Fatalf("hostile file: %v, want an error matching %v", err, want)
			}
			if msg := NoEcho(t, err, b, 24); msg != "" {
				t.Error(msg)
			}
			if p := bud.Peak(); p > limit {
				t.Errorf("hostile file materialised %d bytes, more than its budget of %d", p, limit)
			}
			t.Logf("refused with %d of %d budget bytes charged at the peak: %v", bud.Peak(), limit, err)
			// The default budget (no SharedBudget) refuses it too.
			if err := DecodeAll(s.Codec, in.r, int64(len(b)), formats.DecodeOptions{Name: "hostile"}); !errors.Is(err, want) {
				t.Errorf("hostile file with the default budget: %v, want an error matching %v", err, want)
			}
		})
	}
}

// DecodeAll decodes r with c and reads every array's data (streaming, so
// the reading itself holds at most 1 MiB); it returns the first error.
func DecodeAll(c formats.Codec, r io.ReaderAt, size int64, opts formats.DecodeOptions) error {
	snap, err := c.Decode(context.Background(), r, size, opts)
	if err != nil {
		return err
	}
	var buf []byte
	for _, a := range snap.Arrays {
		n := a.Data.Size()
		if buf == nil && n > 0 {
			buf = make([]byte, 1<<20)
		}
		for off := int64(0); off < n; {
			k := min(int64(len(buf)), n-off)
			if err := snapshot.ReadFullAt(a.Data, buf[:k], off); err != nil {
				return fmt.Errorf("array %q at %d: %w", a.Name, off, err)
			}
			off += k
		}
	}
	return nil
}

func (s Suite) decode(t *testing.T, r io.ReaderAt, size int64, name string) *snapshot.Snapshot {
	t.Helper()
	snap, err := s.Codec.Decode(context.Background(), r, size, formats.DecodeOptions{Name: name})
	if err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
	return snap
}

func (s Suite) encode(t *testing.T, snap *snapshot.Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.Codec.Encode(context.Background(), &buf, snap, formats.EncodeOptions{}); err != nil {
		t.Fatalf("encode: %v", err)
	}
	return buf.Bytes()
}

// damaged decodes truncated and bit-flipped copies of b: no panic, and no
// error message holds a run of EchoWindow bytes of b.
func (s Suite) damaged(t *testing.T, b []byte) {
	t.Helper()
	w := s.EchoWindow
	if w == 0 {
		w = 24
	}
	var inputs [][]byte
	for _, n := range []int{0, 1, len(b) / 3, len(b) / 2, len(b) - 1} {
		if n >= 0 && n < len(b) {
			inputs = append(inputs, b[:n])
		}
	}
	for _, at := range []int{4, 8, 9, 16, len(b) / 4, len(b) / 2, 3 * len(b) / 4, len(b) - 1} {
		if at >= 0 && at < len(b) {
			c := bytes.Clone(b)
			c[at] ^= 0x55
			inputs = append(inputs, c)
		}
	}
	for i, in := range inputs {
		snap, err := s.Codec.Decode(context.Background(), snapshot.Bytes(in), int64(len(in)), formats.DecodeOptions{Name: "damaged"})
		if err == nil {
			// A flip the format does not check (padding, a value):
			// the arrays must still read within their sizes.
			for _, a := range snap.Arrays {
				if _, err := snapshot.ReadAll(a.Data); err != nil {
					// A lazy reader may fail here: an error, not a panic.
					if msg := NoEcho(t, err, b, w); msg != "" {
						t.Errorf("damaged input %d: array %q: %s", i, a.Name, msg)
					}
				}
			}
			continue
		}
		if msg := NoEcho(t, err, b, w); msg != "" {
			t.Errorf("damaged input %d: %s", i, msg)
		}
		if !IsFormatError(err) {
			t.Errorf("damaged input %d: %v matches none of the formats sentinels", i, err)
		}
	}
}

// IsFormatError reports whether err matches one of formats.ErrCorrupt,
// ErrTruncated, ErrLimit, ErrChecksum or ErrUnsupported (the contract of
// formats.Codec.Decode).
func IsFormatError(err error) bool {
	for _, k := range []error{formats.ErrCorrupt, formats.ErrTruncated, formats.ErrLimit, formats.ErrChecksum, formats.ErrUnsupported} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// NoEcho returns a complaint when err's message contains a run of window
// bytes of content, "" when it does not. Runs of hex digits do not count:
// they are digests, and a decoder names the digest it computed, which is
// the one the file states when another part of the file was damaged.
func NoEcho(t testing.TB, err error, content []byte, window int) string {
	t.Helper()
	msg := []byte(err.Error())
	if len(msg) < window {
		return ""
	}
	for i := 0; i+window <= len(content); i++ {
		if run := content[i : i+window]; !isHex(run) && bytes.Contains(msg, run) {
			return fmt.Sprintf("error echoes %d bytes of the file at offset %d: %v", window, i, err)
		}
	}
	return ""
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// opaque hides a memory-backed reader so that snapshot.BytesOf does not
// see through it: the decoder takes its io.ReaderAt path.
type opaque struct{ r io.ReaderAt }

func (o opaque) ReadAt(p []byte, off int64) (int, error) { return o.r.ReadAt(p, off) }

// ReadTestdata returns the file name (relative to the package directory;
// a bare name is looked up under testdata/).
func ReadTestdata(t testing.TB, name string) []byte {
	t.Helper()
	if filepath.Dir(name) == "." {
		name = filepath.Join("testdata", name)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SimulateWTXT does to s what a trip through WTXT does: the header's Meta
// kept, arrays sorted by name, names, dtypes, shapes and bytes copied, the attributes carried by
// snapshot.EncodeAttrs / ApplyAttrs onto a fresh snapshot.
func SimulateWTXT(t testing.TB, s *snapshot.Snapshot) *snapshot.Snapshot {
	t.Helper()
	doc, err := snapshot.EncodeAttrs(s)
	if err != nil {
		t.Fatal(err)
	}
	out := &snapshot.Snapshot{Meta: s.Meta}
	for _, a := range s.Sorted() {
		if !snapshot.PortableName(a.Name) {
			t.Fatalf("array name %q is not WTXT-legal", a.Name)
		}
		b, err := snapshot.ReadAll(a.Data)
		if err != nil {
			t.Fatalf("array %q: %v", a.Name, err)
		}
		out.Arrays = append(out.Arrays, &snapshot.Array{Name: a.Name, DType: a.DType,
			Shape: append([]int64{}, a.Shape...), Data: snapshot.Bytes(bytes.Clone(b))})
	}
	if doc != nil {
		if err := snapshot.ApplyAttrs(out, doc); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Equal fails t unless got and want hold the same arrays in the same
// order (names, dtypes, shapes, bytes, attributes) and the same snapshot
// attributes. A nil and an empty attribute map are equal.
func Equal(t testing.TB, got, want *snapshot.Snapshot) {
	t.Helper()
	equal(t, got, want, got.Arrays, want.Arrays)
}

// EqualSorted is Equal ignoring the order of the arrays.
func EqualSorted(t testing.TB, got, want *snapshot.Snapshot) {
	t.Helper()
	equal(t, got, want, got.Sorted(), want.Sorted())
}

func equal(t testing.TB, got, want *snapshot.Snapshot, ga, wa []*snapshot.Array) {
	t.Helper()
	if len(got.Attrs)+len(want.Attrs) > 0 && !reflect.DeepEqual(got.Attrs, want.Attrs) {
		t.Fatalf("snapshot attrs %v, want %v", got.Attrs, want.Attrs)
	}
	if len(ga) != len(wa) {
		t.Fatalf("%d arrays, want %d", len(ga), len(wa))
	}
	for i := range wa {
		g, w := ga[i], wa[i]
		if g.Name != w.Name || g.DType != w.DType || !reflect.DeepEqual(g.Shape, w.Shape) {
			t.Fatalf("array %d: %q %s %v, want %q %s %v", i, g.Name, g.DType, g.Shape, w.Name, w.DType, w.Shape)
		}
		if len(g.Attrs)+len(w.Attrs) > 0 && !reflect.DeepEqual(g.Attrs, w.Attrs) {
			t.Fatalf("array %q attrs %v, want %v", g.Name, g.Attrs, w.Attrs)
		}
		gd, err := snapshot.ReadAll(g.Data)
		if err != nil {
			t.Fatalf("array %q: %v", g.Name, err)
		}
		wd, err := snapshot.ReadAll(w.Data)
		if err != nil {
			t.Fatalf("array %q: %v", w.Name, err)
		}
		if !bytes.Equal(gd, wd) {
			t.Fatalf("array %q: bytes differ", g.Name)
		}
	}
}

// Seeds returns the files matching the glob patterns (relative to the
// package directory), for a fuzz target's f.Add; it fails tb when they
// match nothing, so a fuzz target cannot silently lose its seed corpus.
func Seeds(tb testing.TB, patterns ...string) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, pat := range patterns {
		files, err := filepath.Glob(pat)
		if err != nil {
			tb.Fatal(err)
		}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				tb.Fatal(err)
			}
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		tb.Fatalf("no seed files match %q", patterns)
	}
	return out
}
