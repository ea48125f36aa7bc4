package wtxt

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// Codec is WTXT as a formats.Codec. Decode verifies every integrity check
// that needs no key (a file that fails any is rejected) and returns arrays
// whose bytes are decoded from the file on demand, chunk by chunk, so a
// large snapshot never sits in the heap. Encode writes with default
// options (unsigned, default geometry); use Encode directly for keys,
// chaining and streaming.
type Codec struct {
	// Options are used by Encode.
	Options EncodeOptions
}

// New returns the WTXT codec.
func New() *Codec { return &Codec{} }

// Name implements formats.Codec.
func (*Codec) Name() string { return "wtxt" }

// Extensions implements formats.Codec.
func (*Codec) Extensions() []string { return []string{".wtxt"} }

// Sniff implements formats.Codec.
func (*Codec) Sniff(head []byte) bool { return bytes.HasPrefix(head, []byte(magicLine+"\n")) }

// Encode implements formats.Codec.
func (c *Codec) Encode(ctx context.Context, w io.Writer, s *snapshot.Snapshot, _ formats.EncodeOptions) error {
	_, err := Encode(ctx, w, s, c.Options)
	return err
}

// Decode implements formats.Codec. The snapshot's array data reads from r,
// which must stay valid while it is used. Attributes carried in
// snapshot.AttrsArrayName are restored and that array removed.
func (c *Codec) Decode(ctx context.Context, r io.ReaderAt, size int64, opts formats.DecodeOptions) (*snapshot.Snapshot, error) {
	v := newVerifier(ctx, VerifyOptions{File: opts.Name, allowPending: true, index: true, MaxFailures: 1})
	rep, err := v.run(io.NewSectionReader(r, 0, size))
	if err != nil {
		return nil, err
	}
	s := &snapshot.Snapshot{Meta: rep.Header.Meta}
	var attrs *snapshot.Array
	for _, ai := range rep.index.Arrays {
		head := ai.head
		offs := make([]int64, len(ai.Chunks))
		for i, c := range ai.Chunks {
			offs[i] = c.Data
		}
		arr := &snapshot.Array{Name: head.name, DType: head.dt, Shape: head.shape,
			Data: &chunkSource{ra: r, geo: head.geo, offs: offs, name: head.name}}
		if head.name == snapshot.AttrsArrayName {
			attrs = arr
			continue
		}
		s.Arrays = append(s.Arrays, arr)
	}
	if attrs != nil {
		if attrs.DType != snapshot.U8 || len(attrs.Shape) != 1 || attrs.Data.Size() > snapshot.MaxAttrsSize {
			return nil, fmt.Errorf("%s: reserved array %s must be u8 of rank 1 and at most %d bytes", opts.Name, snapshot.AttrsArrayName, snapshot.MaxAttrsSize)
		}
		doc, err := snapshot.ReadAll(attrs.Data)
		if err != nil {
			return nil, err
		}
		if err := snapshot.ApplyAttrs(s, doc); err != nil {
			return nil, fmt.Errorf("%s: %w", opts.Name, err)
		}
	}
	return s, nil
}

// chunkSource serves an array's raw bytes by decoding base64 lines of a
// verified WTXT file on demand. Every full line is 79 bytes in the file
// (76 characters, space, parity, LF), so the line holding a raw offset is
// found by arithmetic.
//
// A read needing more than one line fetches the file bytes through a
// window of at least minBatch and at most maxBatch bytes read with one
// ReadAt (crossing chunk boundaries: the lines of the next chunk follow
// in the file). From a snapshot.Guarded such a read is a pread(2), which
// never faults the file's mapping in, so decoding a whole snapshot (a
// checkout converting its WTXT) keeps the WTXT out of the resident set;
// line-sized reads copied from the mapping left every page they touched
// resident.
type chunkSource struct {
	ra   io.ReaderAt
	geo  geometry
	offs []int64 // file offset of each chunk's first base64 line
	name string
}

const (
	// minBatch is the smallest window read for a multi-line read: the
	// size from which snapshot.Guarded reads with pread (32 KiB).
	minBatch = 32 << 10
	// maxBatch bounds one window (a whole number of lines).
	maxBatch = 832 * (B64Width + 3)
)

func (c *chunkSource) Size() int64 { return c.geo.nbytes }

// ReadAt implements io.ReaderAt; it is safe for concurrent use.
func (c *chunkSource) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("wtxt: array %s: negative offset", c.name)
	}
	const lineLen = B64Width + 3
	n := 0
	var small [lineLen]byte
	var batch []byte // the window's buffer, allocated on first use
	var win []byte   // file bytes [winOff, winOff+len(win))
	winOff := int64(0)
	var raw [rawPerLine]byte
	for n < len(p) {
		pos := off + int64(n)
		if pos >= c.geo.nbytes {
			return n, io.EOF
		}
		ix := pos / c.geo.chunkLen
		cOff, cLen := c.geo.chunk(ix)
		in := pos - cOff
		k := in / rawPerLine
		lineRaw := min(int64(rawPerLine), cLen-k*rawPerLine)
		w := int64(base64.StdEncoding.EncodedLen(int(lineRaw)))
		fo := c.offs[ix] + k*lineLen
		if fo < winOff || fo+w > winOff+int64(len(win)) {
			// The file bytes of the lines holding the rest of p.
			rest := int64(len(p)-n) + in - k*rawPerLine
			need := (rest + rawPerLine - 1) / rawPerLine * lineLen
			var buf []byte
			if need <= lineLen {
				buf = small[:w]
			} else {
				if batch == nil {
					batch = make([]byte, maxBatch)
				}
				buf = batch[:min(max(need, minBatch), maxBatch)]
			}
			got, err := c.ra.ReadAt(buf, fo)
			if err != nil && !(errors.Is(err, io.EOF) && int64(got) >= w) {
				return n, fmt.Errorf("wtxt: array %s chunk %d: read line at offset %d: %w", c.name, ix, fo, err)
			}
			win, winOff = buf[:got], fo
		}
		line := win[fo-winOff : fo-winOff+w]
		if dn, err := base64.StdEncoding.Decode(raw[:], line); err != nil || int64(dn) != lineRaw {
			return n, fmt.Errorf("wtxt: array %s chunk %d: line at offset %d no longer decodes (file changed?)", c.name, ix, fo)
		}
		n += copy(p[n:], raw[in-k*rawPerLine:lineRaw])
	}
	return n, nil
}
