package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// deltaInfo is what `snapd inspect` shows of a DELTA v2 file
// (docs/FORMAT.md §4): the base it applies to, the target's header values
// and, per target array, the chunks the delta carries. It is read by
// structure only: the carried base64 is counted, not decoded; `snapd delta
// apply` checks every byte against the base.
type deltaInfo struct {
	File          string `json:"file"`
	Format        string `json:"format"` // "wtxt-delta"
	BaseSHA256All string `json:"base_sha256_all"`
	// Form is "full" (the target's header and every array) or "short"
	// (the seed form: replacement chunks for base arrays, no header).
	Form       string          `json:"form"`
	Meta       map[string]any  `json:"meta,omitempty"` // the target's meta and root values
	Arrays     []deltaArray    `json:"arrays"`
	Chunks     int64           `json:"chunks_carried"`
	ChunkBytes int64           `json:"chunk_bytes_carried"` // raw bytes of the carried chunks
	Audit      bool            `json:"audit"`               // the target has an (unsigned) audit line
	Bytes      int64           `json:"bytes"`               // the delta file's size
	Deferred   []string        `json:"deferred"`            // checks left to delta apply
	pending    map[string]bool // array names seen (duplicates refused)
}

// deltaArray is one array of a delta.
type deltaArray struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype,omitempty"` // absent in the short form
	Shape []int64 `json:"shape,omitempty"`
	Bytes int64   `json:"bytes,omitempty"`
	// Carried lists the chunk indexes the delta holds (empty: the array
	// is unchanged, taken from the base).
	Carried      []int64 `json:"carried"`
	CarriedBytes int64   `json:"carried_bytes"`
}

// Limits of the structural reader.
const (
	deltaMaxLine   = 64 << 10 // as the WTXT reader
	deltaMaxArrays = 1 << 20
	deltaMaxHeader = 4 // meta, cap, root|root_pending, sign
)

// errNotDelta: the file does not start with the DELTA magic.
var errNotDelta = errors.New("not a DELTA v2 file")

// isDelta reports whether head starts like a DELTA v2 file.
func isDelta(head []byte) bool { return bytes.HasPrefix(head, []byte(wtxt.DeltaMagic+" ")) }

// deltaReader reads lines with their numbers.
type deltaReader struct {
	br   *bufio.Reader
	file string
	line int
	n    int64
}

func (r *deltaReader) fail(array string, chunk int64, format string, a ...any) error {
	return &wtxt.Error{File: r.file, Line: r.line, Array: array, Chunk: chunk, Check: wtxt.CheckDelta, Msg: fmt.Sprintf(format, a...)}
}

// next returns the next line without its LF; io.EOF at the end.
func (r *deltaReader) next() ([]byte, error) {
	b, err := r.br.ReadSlice('\n')
	r.n += int64(len(b))
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		r.line++
		return nil, r.fail("", -1, "line longer than %d bytes", deltaMaxLine)
	case err == io.EOF && len(b) == 0:
		return nil, io.EOF
	case err == io.EOF:
		r.line++
		return nil, &wtxt.Error{File: r.file, Line: r.line, Chunk: -1, Check: wtxt.CheckTruncated, Msg: "the last line has no LF"}
	case err != nil:
		return nil, err
	}
	r.line++
	b = b[:len(b)-1]
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return nil, &wtxt.Error{File: r.file, Line: r.line, Chunk: -1, Check: wtxt.CheckText, Msg: "a byte that is not printable ASCII"}
		}
	}
	return b, nil
}

// kv parses "key=value" tokens after a line's keyword.
func kv(line []byte) (string, map[string]string) {
	f := strings.Fields(string(line))
	if len(f) == 0 {
		return "", nil
	}
	m := make(map[string]string, len(f)-1)
	for _, t := range f[1:] {
		if k, v, ok := strings.Cut(t, "="); ok {
			m[k] = v
		}
	}
	return f[0], m
}

// safeName returns name when it is short printable ASCII (it goes into
// output and error messages), else "".
func safeName(name string) string {
	if len(name) == 0 || len(name) > 1024 {
		return ""
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= 0x20 || c > 0x7e {
			return ""
		}
	}
	return name
}

// readDeltaInfo reads a DELTA v2 file's structure from r. Every count is
// bounded before it is used; nothing is allocated by a declared size.
func readDeltaInfo(ctx context.Context, name string, r io.Reader) (*deltaInfo, error) {
	rd := &deltaReader{br: bufio.NewReaderSize(r, deltaMaxLine+1), file: name}
	info := &deltaInfo{File: name, Format: "wtxt-delta", Arrays: []deltaArray{}, pending: map[string]bool{},
		Deferred: []string{"base", "parity", "base64", "chunk-sha256", "crc32c", "array-sha256", "signature"}}
	defer func() { info.pending = nil }()
	eof := func(array string, chunk int64) error {
		return &wtxt.Error{File: name, Line: rd.line + 1, Array: array, Chunk: chunk, Check: wtxt.CheckTruncated, Msg: "the file ends before enddelta"}
	}
	line, err := rd.next()
	if err == io.EOF {
		return nil, eof("", -1)
	}
	if err != nil {
		return nil, err
	}
	kw, m := kv(bytes.TrimPrefix(line, []byte("WTXT-")))
	if !bytes.HasPrefix(line, []byte(wtxt.DeltaMagic+" base_sha256_all=")) || kw != "DELTA" || !wtxt.IsHex64(m["base_sha256_all"]) || len(m) != 1 {
		return nil, rd.fail("", -1, "%v: the first line must be %q base_sha256_all=<64 lowercase hex>", errNotDelta, wtxt.DeltaMagic)
	}
	info.BaseSHA256All = m["base_sha256_all"]
	info.Form = "full"
	headers := 0
	meta := map[string]any{}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		line, err = rd.next()
		if err == io.EOF {
			return nil, eof("", -1)
		}
		if err != nil {
			return nil, err
		}
		kw, m := kv(line)
		switch kw {
		case "meta", "cap", "root", "root_pending", "sign":
			if len(info.Arrays) > 0 || headers == deltaMaxHeader {
				return nil, rd.fail("", -1, "%s line out of place (header lines come before the first arr line, at most %d)", kw, deltaMaxHeader)
			}
			headers++
			for _, k := range []string{"schema", "ts", "build", "sha256_all", "merkle_prev", "merkle_this", "keyid"} {
				if v, ok := m[k]; ok && safeName(v) != "" {
					meta[k] = v
				}
			}
			if v, ok := m["gen"]; ok && kw == "meta" {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil || len(v) < 6 || len(v) > 18 {
					return nil, rd.fail("", -1, "meta gen: want 6 to 18 decimal digits")
				}
				meta["gen"], meta["gen_text"] = n, v
			}
			if kw == "root_pending" {
				meta["streamed"] = true
			}
			if kw == "sign" {
				meta["signed"] = true
			}
		case "arr":
			if len(info.Arrays) == deltaMaxArrays {
				return nil, rd.fail("", -1, "more than %d arrays", deltaMaxArrays)
			}
			a, err := readDeltaArray(ctx, rd, info, line, m, headers)
			if err != nil {
				return nil, err
			}
			info.Arrays = append(info.Arrays, *a)
		case "audit":
			if info.Audit {
				return nil, rd.fail("", -1, "a second audit line")
			}
			info.Audit = true
		case "enddelta":
			if len(line) != len("enddelta") {
				return nil, rd.fail("", -1, "enddelta takes no fields")
			}
			if _, err := rd.br.ReadByte(); err != io.EOF {
				return nil, &wtxt.Error{File: name, Line: rd.line + 1, Chunk: -1, Check: wtxt.CheckDelta, Msg: "content after enddelta"}
			}
			if len(meta) > 0 {
				info.Meta = meta
			}
			info.Bytes = rd.n
			return info, nil
		default:
			return nil, rd.fail("", -1, "unexpected line kind (want meta, cap, root, sign, arr, audit or enddelta)")
		}
	}
}

// readDeltaArray reads an array from its arr line (already read) to endarr.
func readDeltaArray(ctx context.Context, rd *deltaReader, info *deltaInfo, line []byte, m map[string]string, headers int) (*deltaArray, error) {
	name := m["name"]
	if safeName(name) == "" {
		return nil, rd.fail("", -1, "arr: name missing, longer than 1024 bytes or not printable")
	}
	if info.pending[name] {
		return nil, rd.fail(name, -1, "array appears twice")
	}
	info.pending[name] = true
	short := bytes.Count(line, []byte(" ")) == 1
	switch {
	case short && headers > 0:
		return nil, rd.fail(name, -1, "short form `arr name=...` cannot be mixed with a target header")
	case short && len(info.Arrays) == 0:
		info.Form = "short"
	case short != (info.Form == "short"):
		return nil, rd.fail(name, -1, "short and full arr lines mixed")
	}
	a := &deltaArray{Name: name, Carried: []int64{}}
	if !short {
		a.DType = m["dtype"]
		if safeName(a.DType) == "" || len(a.DType) > 16 {
			return nil, rd.fail(name, -1, "arr: dtype missing or not a token")
		}
		if s := m["shape"]; s != "" && s != "scalar" {
			parts := strings.Split(s, ",")
			if len(parts) > 64 {
				return nil, rd.fail(name, -1, "arr: rank above 64")
			}
			for _, p := range parts {
				d, err := strconv.ParseInt(p, 10, 64)
				if err != nil || d < 0 {
					return nil, rd.fail(name, -1, "arr: shape: want non-negative decimal dimensions")
				}
				a.Shape = append(a.Shape, d)
			}
		}
		n, err := strconv.ParseInt(m["bytes"], 10, 64)
		if err != nil || n < 0 {
			return nil, rd.fail(name, -1, "arr: bytes: want a non-negative decimal")
		}
		a.Bytes = n
	}
	last := int64(-1)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l, err := rd.next()
		if err == io.EOF {
			return nil, &wtxt.Error{File: rd.file, Line: rd.line + 1, Array: name, Chunk: -1, Check: wtxt.CheckTruncated, Msg: "the file ends inside the array"}
		}
		if err != nil {
			return nil, err
		}
		kw, cm := kv(l)
		switch kw {
		case "idx":
			if len(a.Carried) > 0 || short {
				return nil, rd.fail(name, -1, "idx line out of place")
			}
		case "ch":
			ix, err1 := strconv.ParseInt(cm["ix"], 10, 64)
			ln, err2 := strconv.ParseInt(cm["len"], 10, 64)
			lines, err3 := strconv.ParseInt(cm["lines"], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil || ix < 0 || ln < 0 || lines < 0 {
				return nil, rd.fail(name, -1, "ch: ix, len and lines must be non-negative decimals")
			}
			if ix <= last {
				return nil, rd.fail(name, ix, "chunks out of order or repeated")
			}
			// 57 raw bytes per 76-character line at most: more lines than
			// the chunk's bytes need is refused before they are read.
			if lines > ln/57+2 {
				return nil, rd.fail(name, ix, "ch: %d base64 lines for %d bytes", lines, ln)
			}
			for i := int64(0); i < lines; i++ {
				b, err := rd.next()
				if err == io.EOF {
					return nil, &wtxt.Error{File: rd.file, Line: rd.line + 1, Array: name, Chunk: ix, Check: wtxt.CheckTruncated, Msg: "the file ends inside the chunk"}
				}
				if err != nil {
					return nil, err
				}
				if len(b) == 0 || bytes.HasPrefix(b, []byte("endch")) {
					return nil, rd.fail(name, ix, "base64 line %d of %d missing", i+1, lines)
				}
			}
			end, err := rd.next()
			if err == io.EOF {
				return nil, &wtxt.Error{File: rd.file, Line: rd.line + 1, Array: name, Chunk: ix, Check: wtxt.CheckTruncated, Msg: "the file ends inside the chunk"}
			}
			if err != nil {
				return nil, err
			}
			if string(end) != "endch" {
				return nil, rd.fail(name, ix, "want endch after %d base64 lines", lines)
			}
			if a.CarriedBytes+ln < a.CarriedBytes || info.ChunkBytes+ln < info.ChunkBytes {
				return nil, rd.fail(name, ix, "carried bytes overflow")
			}
			last = ix
			a.Carried = append(a.Carried, ix)
			a.CarriedBytes += ln
			info.Chunks++
			info.ChunkBytes += ln
		case "endarr":
			if len(l) != len("endarr") {
				return nil, rd.fail(name, -1, "endarr takes no fields")
			}
			return a, nil
		default:
			return nil, rd.fail(name, -1, "unexpected line kind inside an array (want idx, ch or endarr)")
		}
	}
}

// inspectDelta prints what a DELTA v2 file holds.
func inspectDelta(ctx context.Context, e *env, o *inspectOptions) error {
	f, err := os.Open(o.file)
	if err != nil {
		return ioError{err}
	}
	defer f.Close()
	info, err := readDeltaInfo(ctx, o.file, f)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(e.stdout, info)
	}
	w := e.stdout
	fmt.Fprintf(w, "%s: DELTA v2 (%s form), %d arrays, %d chunks carried (%d raw bytes), %d bytes\n",
		info.File, info.Form, len(info.Arrays), info.Chunks, info.ChunkBytes, info.Bytes)
	fmt.Fprintf(w, "  base:        sha256_all %s\n", info.BaseSHA256All)
	if info.Form == "short" {
		fmt.Fprintf(w, "  target:      the base with these chunks replaced (no header: sha256_all and merkle_this are recomputed, no signature)\n")
	}
	for _, k := range []string{"gen_text", "ts", "build", "schema", "sha256_all", "merkle_prev", "merkle_this", "keyid"} {
		if v, ok := info.Meta[k]; ok {
			label := k
			if k == "gen_text" {
				label = "gen"
			}
			fmt.Fprintf(w, "  %-12s %v\n", label+":", v)
		}
	}
	if info.Meta["streamed"] == true {
		fmt.Fprintf(w, "  streamed:    root_pending (the target's root values are in its WSUM)\n")
	}
	if info.Audit {
		fmt.Fprintf(w, "  audit:       the target has an (unsigned) audit line\n")
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tDTYPE\tSHAPE\tBYTES\tCARRIED CHUNKS\tCARRIED BYTES")
	for _, a := range info.Arrays {
		dt, shape, size := a.DType, snapshot.FormatShape(a.Shape), fmt.Sprint(a.Bytes)
		if info.Form == "short" {
			dt, shape, size = "(base)", "(base)", "(base)"
		}
		carried := "none (unchanged)"
		if len(a.Carried) > 0 {
			carried = fmt.Sprintf("%d: %s", len(a.Carried), snapshot.FormatInts(a.Carried, 12))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\n", a.Name, dt, shape, size, carried, a.CarriedBytes)
	}
	tw.Flush()
	fmt.Fprintf(w, "  not checked here (snapd delta apply BASE DELTA OUT does): %s\n", strings.Join(info.Deferred, ", "))
	return nil
}
