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
	Line         int // 1-based line number of the ch line
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
	x := &fileIndex{byName: map[string]*arrayEntry{}}
	var cur *arrayEntry
	nChunks := 0
	for lineNo := 1; ; lineNo++ {
		l, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", lineNo, maxIndexLine)
		}
		if len(l) == 0 && err == io.EOF {
			return x, nil
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		l = bytes.TrimSuffix(l, []byte{'\n'})
		switch {
		case bytes.HasPrefix(l, []byte("arr ")):
			f := lineFields(string(l[4:]))
			a := &arrayEntry{Name: f["name"], DType: f["dtype"], Shape: f["shape"], Line: lineNo}
			a.Bytes, _ = strconv.ParseInt(f["bytes"], 10, 64)
			if a.Name == "" {
				return nil, fmt.Errorf("line %d: arr line without name", lineNo)
			}
			if x.byName[a.Name] != nil {
				return nil, fmt.Errorf("line %d: array %q appears twice", lineNo, a.Name)
			}
			x.Arrays = append(x.Arrays, a)
			x.byName[a.Name] = a
			cur = a
		case bytes.HasPrefix(l, []byte("idx ")):
			if cur == nil {
				return nil, fmt.Errorf("line %d: idx line outside an array", lineNo)
			}
			f := lineFields(string(l[4:]))
			cur.RowsPerChunk, _ = strconv.ParseInt(f["rows_per_chunk"], 10, 64)
			cur.RowSize, _ = strconv.ParseInt(f["row_size"], 10, 64)
		case bytes.HasPrefix(l, []byte("ch ")):
			if cur == nil {
				return nil, fmt.Errorf("line %d: ch line outside an array", lineNo)
			}
			if nChunks++; nChunks > maxIndexChunks {
				return nil, fmt.Errorf("line %d: more than %d chunks", lineNo, maxIndexChunks)
			}
			f := lineFields(string(l[3:]))
			c := chunkEntry{SHA256: f["sha256"], Line: lineNo}
			var e1, e2, e3 error
			c.IX, e1 = strconv.ParseInt(f["ix"], 10, 64)
			c.Off, e2 = strconv.ParseInt(f["off"], 10, 64)
			c.Len, e3 = strconv.ParseInt(f["len"], 10, 64)
			if e1 != nil || e2 != nil || e3 != nil || c.IX < 0 || c.Off < 0 || c.Len < 0 {
				return nil, fmt.Errorf("line %d: array %q: malformed ch line", lineNo, cur.Name)
			}
			cur.Chunks = append(cur.Chunks, c)
			// Skip the chunk's base64 lines by arithmetic: n raw bytes are
			// 4*ceil(n/3) characters in ceil(n/57) lines of "<b64> p\n".
			lines := (c.Len + 56) / 57
			skip := 4*((c.Len+2)/3) + 3*lines
			if err == nil && skip > 0 {
				if _, derr := br.Discard(int(skip)); derr != nil {
					return nil, fmt.Errorf("line %d: array %q chunk %d: file ends inside the chunk's base64", lineNo, cur.Name, c.IX)
				}
				lineNo += int(lines)
			}
		case bytes.Equal(l, []byte("endarr")):
			cur = nil
		}
		if err == io.EOF {
			return x, nil
		}
	}
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
