package wtxt

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestReadIndex: every arr and ch line ReadIndex reports is at the line
// number and byte offset it says, with the values the line states.
func TestReadIndex(t *testing.T) {
	for _, name := range []string{"golden-tiny.wtxt", "golden-widerow.wtxt", "golden-ext.wtxt", "golden-signed.wtxt", "golden-stream.wtxt"} {
		t.Run(name, func(t *testing.T) {
			b := formatstest.ReadTestdata(t, name)
			x, err := ReadIndex(context.Background(), name, snapshot.Bytes(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			var offs []int64
			sc := bufio.NewScanner(bytes.NewReader(b))
			sc.Buffer(nil, 1<<20)
			for off := int64(0); sc.Scan(); off += int64(len(sc.Bytes())) + 1 {
				lines, offs = append(lines, sc.Text()), append(offs, off)
			}
			if len(x.Arrays) == 0 {
				t.Fatal("no arrays")
			}
			for _, a := range x.Arrays {
				if l := lines[a.Line-1]; !strings.HasPrefix(l, "arr name="+a.Name+" ") || offs[a.Line-1] != a.Start {
					t.Errorf("array %s: line %d at %d is %.40q at %d", a.Name, a.Line, a.Start, l, offs[a.Line-1])
				}
				if a.End > int64(len(b)) || string(b[a.End-7:a.End]) != "endarr\n" {
					t.Errorf("array %s: End %d is not after endarr", a.Name, a.End)
				}
				for _, c := range a.Chunks {
					l := lines[c.Line-1]
					if !strings.HasPrefix(l, "ch ix=") || offs[c.Line-1] != c.Start || offs[c.Line] != c.Data || string(b[c.End-6:c.End]) != "endch\n" {
						t.Errorf("array %s chunk %d: line %d at %d/%d/%d", a.Name, c.IX, c.Line, c.Start, c.Data, c.End)
					}
				}
			}
		})
	}
	if _, err := ReadIndex(context.Background(), "x", snapshot.Bytes("WTXT 1\n"), 7); err == nil {
		t.Error("a header-only file indexed")
	}
}

// FuzzReadIndex: ReadIndex never panics on hostile input, and what it
// indexes lies inside the file, in order.
func FuzzReadIndex(f *testing.F) {
	for _, b := range formatstest.Seeds(f, "testdata/golden-tiny.wtxt", "testdata/golden-ext.wtxt", "testdata/golden-signed.wtxt") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := ReadIndex(context.Background(), "fuzz", snapshot.Bytes(b), int64(len(b)))
		if err != nil {
			return
		}
		prev, line := int64(0), 0
		for _, a := range x.Arrays {
			if a.Start < prev || a.Line <= line || a.End > int64(len(b)) {
				t.Fatalf("array %q at line %d, %d..%d out of order or outside the file", a.Name, a.Line, a.Start, a.End)
			}
			prev, line = a.Start, a.Line
			for _, c := range a.Chunks {
				if c.Start < prev || c.Line <= line || c.Data < c.Start || c.End < c.Data || c.End > a.End {
					t.Fatalf("array %q chunk %d: line %d, %d/%d/%d out of order", a.Name, c.IX, c.Line, c.Start, c.Data, c.End)
				}
				prev, line = c.End, c.Line
			}
		}
		// ReadChunk on what the index found: an error or the chunk's
		// bytes, never a panic or an allocation beyond the file.
		for i := range x.Arrays {
			a := &x.Arrays[i]
			for j := range a.Chunks {
				if raw, err := ReadChunk(snapshot.Bytes(b), "fuzz", a, &a.Chunks[j]); err == nil && int64(len(raw)) != a.Chunks[j].Len {
					t.Fatalf("array %q chunk %d: %d bytes, ch line says %d", a.Name, j, len(raw), a.Chunks[j].Len)
				}
			}
		}
	})
}

// A ch line whose len makes the chunk's base64 longer than the file (or
// than int64) is refused naming the chunk.
func TestReadIndexHugeChunk(t *testing.T) {
	b := formatstest.ReadTestdata(t, "golden-tiny.wtxt")
	for _, n := range []string{"99999999999", "9223372036854775807"} {
		c := bytes.Replace(b, []byte("bytes=3 "), []byte("bytes="+n+" "), 1)
		c = bytes.Replace(c, []byte("shape=3 "), []byte("shape="+n+" "), 1)
		c = bytes.Replace(c, []byte(" len=3 "), []byte(" len="+n+" "), 1)
		c = bytes.Replace(c, []byte("rows_per_chunk=65536 "), []byte("rows_per_chunk="+n+" "), 1)
		v, _ := strconv.ParseInt(n, 10, 64)
		c = bytes.Replace(c, []byte(" lines=1\n"), []byte(" lines="+strconv.FormatInt(numLines(v), 10)+"\n"), 1)
		_, err := ReadIndex(context.Background(), "huge", snapshot.Bytes(c), int64(len(c)))
		if err == nil || !strings.Contains(err.Error(), "chunk 0: grammar: file ends inside the chunk") {
			t.Errorf("len=%s: %v, want an error naming chunk 0", n, err)
		}
	}
}

// The index's ranges tile the file: header, arrays, trailer; the verifier's
// index (used by Decode and the delta) agrees with ReadIndex entry for entry.
func TestReadIndexTiles(t *testing.T) {
	for _, name := range []string{"golden-tiny.wtxt", "golden-signed.wtxt", "golden-stream.wtxt"} {
		b := formatstest.ReadTestdata(t, name)
		x, err := ReadIndex(context.Background(), name, snapshot.Bytes(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		at := x.BodyStart
		for _, a := range x.Arrays {
			if a.Start != at {
				t.Errorf("%s: array %s starts at %d, want %d", name, a.Name, a.Start, at)
			}
			at = a.End
		}
		if x.TrailerStart != at || x.Size != int64(len(b)) {
			t.Errorf("%s: trailer at %d (size %d), want %d (%d)", name, x.TrailerStart, x.Size, at, len(b))
		}
		if tail := string(b[x.TrailerStart:]); !strings.HasSuffix(tail, "endwtxt\n") || (x.Audit != "" && !strings.HasPrefix(tail, x.Audit+"\n")) {
			t.Errorf("%s: trailer %.40q", name, tail)
		}
		v, _, err := verifiedIndex(context.Background(), name, snapshot.Bytes(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		if v.BodyStart != x.BodyStart || v.TrailerStart != x.TrailerStart || v.TrailerLine != x.TrailerLine || v.Audit != x.Audit || len(v.Arrays) != len(x.Arrays) {
			t.Fatalf("%s: verifier's index %+v, ReadIndex %+v", name, v, x)
		}
		for i := range x.Arrays {
			va, xa := v.Arrays[i], x.Arrays[i]
			if va.Name != xa.Name || va.Line != xa.Line || va.Start != xa.Start || va.End != xa.End || !va.SameGeometry(&xa) || len(va.Chunks) != len(xa.Chunks) {
				t.Fatalf("%s: array %d: verifier %+v, ReadIndex %+v", name, i, va, xa)
			}
			for j := range xa.Chunks {
				if va.Chunks[j] != xa.Chunks[j] {
					t.Errorf("%s: array %s chunk %d: verifier %+v, ReadIndex %+v", name, xa.Name, j, va.Chunks[j], xa.Chunks[j])
				}
			}
		}
	}
}

// An index that would pass IndexOptions.MaxBytes is refused at the chunk
// that passes it, as formats.ErrLimit, naming the line.
func TestReadIndexLimit(t *testing.T) {
	b := formatstest.ReadTestdata(t, "golden-widerow.wtxt")
	x, err := ReadIndex(context.Background(), "w", snapshot.Bytes(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, a := range x.Arrays {
		n += len(a.Chunks)
	}
	atChunk := false
	for limit := int64(1); ; limit += 8 {
		_, err = ReadIndexWith(context.Background(), "w", snapshot.Bytes(b), int64(len(b)), IndexOptions{MaxBytes: limit})
		if err == nil {
			break
		}
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, formats.ErrLimit) || e.Check != CheckLimit || e.Line == 0 || e.File != "w" || e.Array == "" {
			t.Fatalf("MaxBytes %d over %d chunks: %v, want a located limit error", limit, n, err)
		}
		atChunk = atChunk || e.Chunk >= 0
	}
	if !atChunk {
		t.Error("no limit was reached at a chunk")
	}
	if _, err := ReadIndexWith(context.Background(), "w", snapshot.Bytes(b), int64(len(b)), IndexOptions{MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
}

// ReadChunk returns each chunk's bytes as Decode does, and refuses a
// damaged base64 line (parity) or an index entry whose crc32c disagrees,
// naming the line, array, chunk and check.
func TestReadChunk(t *testing.T) {
	b := formatstest.ReadTestdata(t, "golden-widerow.wtxt")
	r := snapshot.Bytes(b)
	x, err := ReadIndex(context.Background(), "w", r, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New().Decode(context.Background(), r, int64(len(b)), formats.DecodeOptions{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range x.Arrays {
		a := &x.Arrays[i]
		var got []byte
		for j := range a.Chunks {
			c, err := ReadChunk(r, "w", a, &a.Chunks[j])
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, c...)
		}
		want, err := snapshot.ReadAll(s.Array(a.Name).Data)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("array %s: ReadChunk gives other bytes than Decode", a.Name)
		}
	}
	a := &x.Arrays[0]
	c := a.Chunks[0]
	c.CRC32C ^= 1
	var e *Error
	if _, err := ReadChunk(r, "w", a, &c); !errors.As(err, &e) || e.Check != CheckCRC32C || e.Line != c.Line || e.Array != a.Name || e.Chunk != 0 {
		t.Errorf("wrong crc32c: %v", err)
	}
	d := append([]byte(nil), b...)
	d[a.Chunks[0].Data] ^= 'A' ^ 'B'
	if _, err := ReadChunk(snapshot.Bytes(d), "w", a, &a.Chunks[0]); !errors.As(err, &e) || e.Check != CheckParity || e.Line != a.Chunks[0].Line+1 {
		t.Errorf("damaged line: %v", err)
	}
}

// ReadChunkRange returns any byte range of a chunk as ReadChunk does, and
// refuses a damaged line it reads and a range outside the chunk.
func TestReadChunkRange(t *testing.T) {
	b := formatstest.ReadTestdata(t, "golden-widerow.wtxt")
	r := snapshot.Bytes(b)
	x, err := ReadIndex(context.Background(), "w", r, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range x.Arrays {
		a := &x.Arrays[i]
		for j := range a.Chunks {
			c := &a.Chunks[j]
			whole, err := ReadChunk(r, "w", a, c)
			if err != nil {
				t.Fatal(err)
			}
			for _, span := range [][2]int64{{0, c.Len}, {0, 0}, {0, 1}, {c.Len - 1, 1}, {56, 2}, {57, 57}, {3, 200}, {c.Len / 2, c.Len - c.Len/2}} {
				off, n := span[0], min(span[1], c.Len-span[0])
				if off < 0 || n < 0 {
					continue
				}
				got, err := ReadChunkRange(r, "w", a, c, off, n)
				if err != nil {
					t.Fatalf("array %s chunk %d bytes %d+%d: %v", a.Name, c.IX, off, n, err)
				}
				if !bytes.Equal(got, whole[off:off+n]) {
					t.Errorf("array %s chunk %d bytes %d+%d: other bytes than ReadChunk", a.Name, c.IX, off, n)
				}
			}
		}
	}
	a := &x.Arrays[0]
	c := &a.Chunks[0]
	var e *Error
	if _, err := ReadChunkRange(r, "w", a, c, c.Len, 1); !errors.As(err, &e) || e.Check != CheckGeometry || e.Chunk != 0 {
		t.Errorf("range past the chunk: %v", err)
	}
	d := append([]byte(nil), b...)
	d[c.Data+79] ^= 'A' ^ 'B' // the second line
	if _, err := ReadChunkRange(snapshot.Bytes(d), "w", a, c, 60, 4); !errors.As(err, &e) || e.Check != CheckParity || e.Line != c.Line+2 {
		t.Errorf("damaged line: %v", err)
	}
	if _, err := ReadChunkRange(snapshot.Bytes(d), "w", a, c, 0, 4); err != nil {
		t.Errorf("a line before the damaged one: %v", err)
	}
}

// countReader counts its ReadAt calls.
type countReader struct {
	r     io.ReaderAt
	reads int
}

func (c *countReader) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	return c.r.ReadAt(p, off)
}

// ReadChunkPieces fills every piece as ReadChunkRange would, reads pieces
// close together in the file with one ReadAt and far ones with their own,
// and names the chunk and line of a damaged line it reads.
func TestReadChunkPieces(t *testing.T) {
	b := formatstest.ReadTestdata(t, "golden-widerow.wtxt")
	r := snapshot.Bytes(b)
	x, err := ReadIndex(context.Background(), "w", r, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	var a *IndexArray
	for i := range x.Arrays {
		if len(x.Arrays[i].Chunks) >= 3 && x.Arrays[i].Chunks[0].Len > 120 {
			a = &x.Arrays[i]
			break
		}
	}
	if a == nil {
		t.Fatal("the golden file has no array of three chunks over 120 bytes")
	}
	var ps []ChunkPiece
	var want [][]byte
	for j := range a.Chunks {
		c := &a.Chunks[j]
		whole, err := ReadChunk(r, "w", a, c)
		if err != nil {
			t.Fatal(err)
		}
		for _, span := range [][2]int64{{0, 3}, {50, 10}, {0, 0}, {c.Len - 5, 5}} {
			off, n := max(0, min(span[0], c.Len-1)), min(span[1], c.Len-max(0, min(span[0], c.Len-1)))
			ps = append(ps, ChunkPiece{Chunk: c, Off: off, Dst: make([]byte, n)})
			want = append(want, whole[off:off+n])
		}
	}
	var buf []byte
	for _, gap := range []int64{0, 1 << 20} {
		cr := &countReader{r: r}
		buf, err = ReadChunkPieces(cr, "w", a, ps, gap, buf)
		if err != nil {
			t.Fatalf("gap %d: %v", gap, err)
		}
		for i, p := range ps {
			if !bytes.Equal(p.Dst, want[i]) {
				t.Fatalf("gap %d: piece %d (chunk %d bytes %d+%d): other bytes than ReadChunk", gap, i, p.Chunk.IX, p.Off, len(p.Dst))
			}
			clear(p.Dst)
		}
		if gap > 0 && cr.reads != 1 || gap == 0 && cr.reads <= len(a.Chunks) {
			t.Errorf("gap %d: %d reads for %d pieces in %d chunks", gap, cr.reads, len(ps), len(a.Chunks))
		}
	}
	// Out of file order: each piece read on its own, same bytes.
	rev := []ChunkPiece{ps[len(ps)-1], ps[0]}
	if _, err := ReadChunkPieces(r, "w", a, rev, 1<<20, nil); err != nil || !bytes.Equal(rev[0].Dst, want[len(ps)-1]) || !bytes.Equal(rev[1].Dst, want[0]) {
		t.Errorf("pieces out of order: %v", err)
	}
	var e *Error
	c := &a.Chunks[1]
	d := append([]byte(nil), b...)
	d[c.Data] ^= 'A' ^ 'B' // chunk 1's first line
	if _, err := ReadChunkPieces(snapshot.Bytes(d), "w", a, ps, 1<<20, nil); !errors.As(err, &e) || e.Check != CheckParity || e.Line != c.Line+1 || e.Chunk != c.IX || e.Array != a.Name || e.File != "w" {
		t.Errorf("damaged line: %v", err)
	}
	bad := []ChunkPiece{{Chunk: c, Off: c.Len, Dst: make([]byte, 1)}}
	if _, err := ReadChunkPieces(r, "w", a, bad, 0, nil); !errors.As(err, &e) || e.Check != CheckGeometry || e.Chunk != c.IX {
		t.Errorf("piece past the chunk: %v", err)
	}
}
