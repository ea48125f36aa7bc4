package numpy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

const fixtureDir = "../../../shared/fixtures/numpy"

// npyDescr maps a snapshot dtype to the descr NumPy prints for it
// (little-endian form).
var npyDescr = map[snapshot.DType]string{
	snapshot.F64: "<f8", snapshot.F32: "<f4", snapshot.F16: "<f2",
	snapshot.I64: "<i8", snapshot.I32: "<i4", snapshot.I16: "<i2", snapshot.I8: "|i1",
	snapshot.U64: "<u8", snapshot.U32: "<u4", snapshot.U16: "<u2", snapshot.U8: "|u1",
	snapshot.Bool: "|b1", snapshot.C64: "<c8", snapshot.C128: "<c16",
}

type expArray struct {
	DType   string  `json:"dtype"`
	Fortran bool    `json:"fortran_order"`
	SHA256  string  `json:"sha256_c_order_little_endian"`
	Shape   []int64 `json:"shape"`
}

// codecFor returns the codec for path; files named *zip64* are written
// with zip64 records from 100 bytes on (as numpy_cases.py makes them).
func codecFor(path string) Codec {
	c := Codec{NPZ: strings.HasSuffix(path, ".npz")}
	if strings.Contains(filepath.Base(path), "zip64") {
		c.zip64At = 100
	}
	return c
}

func decodeBytes(t testing.TB, c Codec, raw []byte) (*snapshot.Snapshot, error) {
	t.Helper()
	return c.Decode(context.Background(), snapshot.Bytes(raw), int64(len(raw)), formats.DecodeOptions{Name: "t"})
}

func encodeBytes(t testing.TB, c Codec, s *snapshot.Snapshot, lossy bool) ([]byte, error) {
	t.Helper()
	var b bytes.Buffer
	err := c.Encode(context.Background(), &b, s, formats.EncodeOptions{Lossy: lossy})
	return b.Bytes(), err
}

// readOdd reads a source in pieces of 7 bytes (to cross element borders of
// converting sources) and compares with one whole read.
func readOdd(t *testing.T, src snapshot.Source) []byte {
	t.Helper()
	whole, err := snapshot.ReadAll(src)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	p := make([]byte, 7)
	for off := int64(0); off < src.Size(); off += 7 {
		n, err := src.ReadAt(p, off)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		got = append(got, p[:n]...)
	}
	if !bytes.Equal(got, whole) {
		t.Fatal("reading in 7-byte pieces differs from one read")
	}
	return whole
}

// TestFixtures: every fixture written by NumPy 1.24 decodes to EXPECTED
// values through a mapped file and through a plain file reader, the
// object array is refused, and every fixture re-encodes byte for byte
// (deflated members: the same arrays; Go's deflate is not zlib's).
func TestFixtures(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(fixtureDir, "EXPECTED.json"))
	if err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	var exp map[string]json.RawMessage
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	if len(exp) < 6 {
		t.Fatalf("only %d fixtures", len(exp))
	}
	ctx := context.Background()
	for file, e := range exp {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join(fixtureDir, file)
			c := codecFor(path)
			m, err := snapshot.MapFile(path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var want map[string]expArray
			if err := json.Unmarshal(e, &want); err != nil {
				// a string: the file must be refused
				_, err := c.Decode(ctx, m, m.Size(), formats.DecodeOptions{Name: file})
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "object") || !strings.Contains(err.Error(), file) {
					t.Fatalf("want a located refusal of the object array, got %v", err)
				}
				return
			}
			for _, r := range []io.ReaderAt{m, io.NewSectionReader(f, 0, m.Size())} {
				s, err := c.Decode(ctx, r, m.Size(), formats.DecodeOptions{Name: file})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Validate(); err != nil {
					t.Fatal(err)
				}
				if len(s.Arrays) != len(want) {
					t.Fatalf("%d arrays, want %d", len(s.Arrays), len(want))
				}
				for key, w := range want {
					name := key
					if name == "" {
						name = DefaultArrayName
					}
					a := s.Array(name)
					if a == nil {
						t.Fatalf("array %q missing", name)
					}
					descr := npyDescr[a.DType]
					if a.Attrs[AttrByteOrder] == "big" {
						descr = ">" + descr[1:]
					}
					if descr != w.DType || !reflect.DeepEqual(a.Shape, w.Shape) || (a.Attrs[AttrFortranOrder] == "true") != w.Fortran {
						t.Fatalf("array %q: %s %v %v, want %s %v fortran=%v", name, descr, a.Shape, a.Attrs, w.DType, w.Shape, w.Fortran)
					}
					sum := sha256.Sum256(readOdd(t, a.Data))
					if hex.EncodeToString(sum[:]) != w.SHA256 {
						t.Fatalf("array %q: sha256 of C-order little-endian bytes differs", name)
					}
				}
				out, err := encodeBytes(t, c, s, false)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(out, m.Bytes()) {
					if !strings.HasPrefix(file, "deflated") {
						t.Fatalf("re-encoding is not byte-identical")
					}
					s2, err := decodeBytes(t, c, out)
					if err != nil {
						t.Fatal(err)
					}
					sameArrays(t, s, s2)
				}
			}
		})
	}
}

func sameArrays(t testing.TB, a, b *snapshot.Snapshot) {
	t.Helper()
	if len(a.Arrays) != len(b.Arrays) {
		t.Fatalf("%d arrays, want %d", len(b.Arrays), len(a.Arrays))
	}
	for i, x := range a.Arrays {
		y := b.Arrays[i]
		if x.Name != y.Name || x.DType != y.DType || !reflect.DeepEqual(x.Shape, y.Shape) || !reflect.DeepEqual(x.Attrs, y.Attrs) {
			t.Fatalf("array %q %s %v %v came back as %q %s %v %v", x.Name, x.DType, x.Shape, x.Attrs, y.Name, y.DType, y.Shape, y.Attrs)
		}
		xb, err1 := snapshot.ReadAll(x.Data)
		yb, err2 := snapshot.ReadAll(y.Data)
		if err1 != nil || err2 != nil || !bytes.Equal(xb, yb) {
			t.Fatalf("array %q: bytes differ (%v %v)", x.Name, err1, err2)
		}
	}
	if !reflect.DeepEqual(a.Attrs, b.Attrs) {
		t.Fatalf("snapshot attrs %v, want %v", b.Attrs, a.Attrs)
	}
}

func TestSniff(t *testing.T) {
	npy, npz := New(), NewNPZ()
	for _, f := range []string{"c_order.npy", "big_endian.npy"} {
		b, _ := os.ReadFile(filepath.Join("testdata", f))
		if !npy.Sniff(b[:formats.SniffLen]) || npz.Sniff(b[:formats.SniffLen]) {
			t.Fatalf("%s: sniff", f)
		}
	}
	for _, f := range []string{"stored.npz", "deflated.npz"} {
		b, _ := os.ReadFile(filepath.Join("testdata", f))
		if npy.Sniff(b[:formats.SniffLen]) || !npz.Sniff(b[:formats.SniffLen]) {
			t.Fatalf("%s: sniff", f)
		}
	}
	// a torch.save zip starts with archive/data.pkl
	torch := append([]byte("PK\x03\x04"), make([]byte, 26)...)
	torch[26] = 16
	torch = append(torch, "archive/data.pkl"...)
	if npz.Sniff(torch) {
		t.Fatal("npz sniffs a torch zip")
	}
}

// TestConvSourceConcurrent: concurrent reads of a transposing, swapping
// source (cached row blocks, element path for unaligned reads) all return
// the bytes a plain element-by-element conversion gives.
func TestConvSourceConcurrent(t *testing.T) {
	shape := []int64{301, 7, 5}
	n := shape[0] * shape[1] * shape[2]
	stored := make([]byte, n*8)
	for i := range stored {
		stored[i] = byte(i*31 + i/8)
	}
	l := layout{esize: 8, swap: true, fortran: true, shape: shape}
	want := make([]byte, len(stored))
	gather(want, stored, shape, fortranStrides(shape), true, 0, n, 8, true)
	// small blocks, so that reads cross them; and no blocks (the path for
	// rows longer than blockBytes)
	for _, rows := range []int64{16, 0} {
		src := newConvSource(l, stored, nil, 0, &blockCache{})
		src.blockRows = rows
		readConcurrently(t, src, want)
	}
}

func readConcurrently(t *testing.T, src snapshot.Source, want []byte) {
	done := make(chan error)
	for g := 0; g < 4; g++ {
		go func(g int) {
			var err error
			for _, piece := range []int64{7, 280, 35 * 8, 4096, 1} {
				buf := make([]byte, piece)
				for off := int64(g); off < src.Size(); off += piece {
					k, rerr := src.ReadAt(buf, off)
					if rerr != nil && !errors.Is(rerr, io.EOF) {
						err = rerr
					}
					if !bytes.Equal(buf[:k], want[off:off+int64(k)]) {
						err = errors.New("bytes differ")
					}
				}
			}
			done <- err
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// hidden is a Source that is not memory backed.
type hidden struct {
	io.ReaderAt
	n int64
}

func (h hidden) Size() int64 { return h.n }

// TestFortranWriteWithinBudget: writing Fortran order from a source that
// is not memory backed gives the same bytes with the whole array in
// memory (large budget) and in passes (budget for a few last-dimension
// indices), for short and for long rows; below one index it fails.
func TestFortranWriteWithinBudget(t *testing.T) {
	for _, shape := range [][]int64{{5, 3, 7}, {2, 600000, 3}, {2, 3, 1100000}} {
		n, _ := snapshot.NumElements(shape)
		data := make([]byte, n*4)
		for i := range data {
			data[i] = byte(i*13 + i>>9)
		}
		mk := func() *snapshot.Snapshot {
			return &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "a", DType: snapshot.F32, Shape: shape,
				Data:  hidden{bytes.NewReader(data), int64(len(data))},
				Attrs: map[string]string{AttrFortranOrder: "true", AttrByteOrder: "big"}}}}
		}
		whole, err := encodeBytes(t, Codec{}, mk(), false)
		if err != nil {
			t.Fatal(err)
		}
		slice := n / shape[len(shape)-1] * 4
		// about a third of the array: three or four passes
		passes, err := encodeBytes(t, Codec{Budget: max(slice, n*4/3)}, mk(), false)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(whole, passes) {
			t.Fatalf("shape %v: writing in passes gives other bytes", shape)
		}
		s, err := decodeBytes(t, Codec{}, passes)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := snapshot.ReadAll(s.Arrays[0].Data)
		if !bytes.Equal(got, data) {
			t.Fatalf("shape %v: round trip differs", shape)
		}
		if _, err := encodeBytes(t, Codec{Budget: slice - 1}, mk(), false); !errors.Is(err, ErrLimit) {
			t.Fatalf("shape %v: budget below one slice: %v", shape, err)
		}
	}
}

// TestPython2Long: a v1.0 header with Python 2 longs ("3L"), as old NumPy
// wrote it, decodes and is written back byte for byte.
func TestPython2Long(t *testing.T) {
	raw := npyFile("{'descr': '<i2', 'fortran_order': False, 'shape': (3L, 1L), }", []byte{1, 0, 2, 0, 3, 0})
	s, err := decodeBytes(t, Codec{}, raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Arrays[0].Shape, []int64{3, 1}) || s.Arrays[0].Attrs[AttrHeader] == "" {
		t.Fatalf("shape %v attrs %v", s.Arrays[0].Shape, s.Arrays[0].Attrs)
	}
	out, err := encodeBytes(t, Codec{}, s, false)
	if err != nil || !bytes.Equal(out, raw) {
		t.Fatalf("written back differently (%v)", err)
	}
}

// TestInflateSourceConcurrent: concurrent reads at scattered offsets of a
// deflated member (more readers than decompression cursors) return the
// member's bytes.
func TestInflateSourceConcurrent(t *testing.T) {
	want := make([]byte, 50000)
	for i := range want {
		want[i] = byte(i / 1000 * 7)
	}
	z := deflate(want)
	src := &inflateSource{r: bytes.NewReader(z), csize: int64(len(z)), size: int64(len(want))}
	readConcurrently(t, src, want)
}
