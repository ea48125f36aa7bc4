package review

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// chunkEntry is one `ch` line of a WTXT file.
type chunkEntry struct {
	IX, Off, Len int64
	SHA256       string
	CRC32C       string
	Line         int   // 1-based line number of the ch line
	Pos          int64 // byte offset of the chunk's first base64 line
}

// arrayEntry is one `arr` block of a WTXT file, without its data.
type arrayEntry struct {
	Name         string
	DType        string
	Shape        string
	Bytes        int64
	Line         int   // line number of the arr line
	RowsPerChunk int64 // 0 without an idx line
	RowSize      int64 // 0 without an idx line
	Chunks       []chunkEntry
}

// fileIndex is the structure of a WTXT file: its arrays and chunks with
// the line numbers of their `arr` and `ch` lines.
type fileIndex struct {
	Arrays []*arrayEntry
	byName map[string]*arrayEntry
}

func (x *fileIndex) array(name string) *arrayEntry {
	if x == nil {
		return nil
	}
	return x.byName[name]
}

// maxIndexLine bounds one structural line (an arr line with a 1024-byte
// name and a long shape fits easily).
const maxIndexLine = 64 << 10

// maxIndexChunks bounds the chunk entries kept per file; a file with more
// ch lines than this is refused (documented limit, ~100 bytes each).
const maxIndexChunks = 8 << 20

// scanIndex reads a WTXT file once, streaming, and records the arr, idx and
// ch lines with their line numbers. It does not verify anything (that is
// wtxt.Verify's job); it only needs the structure to be readable.
func scanIndex(r io.Reader) (*fileIndex, error) {
	br := bufio.NewReaderSize(r, maxIndexLine)
	s := newIndexScanner()
	for {
		l, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", s.lineNo, maxIndexLine)
		}
		if len(l) == 0 && err == io.EOF {
			return s.x, nil
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("line %d: %w", s.lineNo, err)
		}
		skip, serr := s.line(bytes.TrimSuffix(l, []byte{'\n'}))
		if serr != nil {
			return nil, serr
		}
		s.off += int64(len(l)) + skip
		if err == io.EOF {
			return s.x, nil
		}
		if skip > 0 {
			if _, derr := br.Discard(int(skip)); derr != nil {
				return nil, s.truncated()
			}
		}
	}
}

// scanIndexBytes is scanIndex over a file held in memory (an mmap): the
// base64 of the chunks is skipped without being touched, so the cost is
// per chunk, not per byte.
func scanIndexBytes(b []byte) (*fileIndex, error) {
	s := newIndexScanner()
	for pos := 0; pos < len(b); {
		end := bytes.IndexByte(b[pos:min(len(b), pos+maxIndexLine)], '\n')
		if end < 0 && len(b)-pos >= maxIndexLine {
			return nil, fmt.Errorf("line %d: longer than %d bytes", s.lineNo, maxIndexLine)
		}
		last := end < 0
		if last {
			end = len(b) - pos
		}
		skip, err := s.line(b[pos : pos+end])
		if err != nil {
			return nil, err
		}
		s.off += int64(end) + 1 + skip
		if last {
			break
		}
		pos += end + 1
		if skip > int64(len(b)-pos) {
			return nil, s.truncated()
		}
		pos += int(skip)
	}
	return s.x, nil
}

// indexScanner records the structure line by line.
type indexScanner struct {
	x       *fileIndex
	cur     *arrayEntry
	nChunks int
	lineNo  int   // the line being read (1-based)
	off     int64 // byte offset of that line
}

func newIndexScanner() *indexScanner {
	return &indexScanner{x: &fileIndex{byName: map[string]*arrayEntry{}}, lineNo: 1}
}

func (s *indexScanner) truncated() error {
	return fmt.Errorf("line %d: array %q chunk %d: file ends inside the chunk's base64", s.lineNo, s.cur.Name, s.cur.Chunks[len(s.cur.Chunks)-1].IX)
}

// line reads one line (without its newline) and returns how many bytes of
// base64 follow it to be skipped.
func (s *indexScanner) line(l []byte) (int64, error) {
	x, lineNo := s.x, s.lineNo
	s.lineNo++
	switch {
	case bytes.HasPrefix(l, []byte("arr ")):
		f := lineFields(string(l[4:]))
		a := &arrayEntry{Name: f["name"], DType: f["dtype"], Shape: f["shape"], Line: lineNo}
		a.Bytes, _ = strconv.ParseInt(f["bytes"], 10, 64)
		if a.Name == "" {
			return 0, fmt.Errorf("line %d: arr line without name", lineNo)
		}
		if x.byName[a.Name] != nil {
			return 0, fmt.Errorf("line %d: array %q appears twice", lineNo, a.Name)
		}
		x.Arrays = append(x.Arrays, a)
		x.byName[a.Name] = a
		s.cur = a
	case bytes.HasPrefix(l, []byte("idx ")):
		if s.cur == nil {
			return 0, fmt.Errorf("line %d: idx line outside an array", lineNo)
		}
		f := lineFields(string(l[4:]))
		s.cur.RowsPerChunk, _ = strconv.ParseInt(f["rows_per_chunk"], 10, 64)
		s.cur.RowSize, _ = strconv.ParseInt(f["row_size"], 10, 64)
	case bytes.HasPrefix(l, []byte("ch ")):
		if s.cur == nil {
			return 0, fmt.Errorf("line %d: ch line outside an array", lineNo)
		}
		if s.nChunks++; s.nChunks > maxIndexChunks {
			return 0, fmt.Errorf("line %d: more than %d chunks", lineNo, maxIndexChunks)
		}
		f := lineFields(string(l[3:]))
		c := chunkEntry{SHA256: f["sha256"], CRC32C: f["crc32c"], Line: lineNo, Pos: s.off + int64(len(l)) + 1}
		var e1, e2, e3 error
		c.IX, e1 = strconv.ParseInt(f["ix"], 10, 64)
		c.Off, e2 = strconv.ParseInt(f["off"], 10, 64)
		c.Len, e3 = strconv.ParseInt(f["len"], 10, 64)
		// Lengths beyond 2^40 cannot be a chunk (and would overflow the
		// arithmetic below).
		if e1 != nil || e2 != nil || e3 != nil || c.IX < 0 || c.Off < 0 || c.Len < 0 || c.Len > 1<<40 {
			return 0, fmt.Errorf("line %d: array %q: malformed ch line", lineNo, s.cur.Name)
		}
		s.cur.Chunks = append(s.cur.Chunks, c)
		// Skip the chunk's base64 lines by arithmetic: n raw bytes are
		// 4*ceil(n/3) characters in ceil(n/57) lines of "<b64> p\n".
		lines := (c.Len + 56) / 57
		s.lineNo += int(lines)
		return 4*((c.Len+2)/3) + 3*lines, nil
	case bytes.Equal(l, []byte("endarr")):
		s.cur = nil
	}
	return 0, nil
}

// lineFields splits "k=v k=v" (values without spaces; quoted values only
// occur on lines this scanner does not read).
func lineFields(s string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Fields(s) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
