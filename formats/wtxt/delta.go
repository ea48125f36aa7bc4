package wtxt

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DeltaMagic starts every DELTA v2 file.
const DeltaMagic = "WTXT-DELTA 2"

// deltaStartShape is the rest of a delta's first line, as its error spells it.
const deltaStartShape = "base_sha256_all=<hex64>"

// ErrWrongBase is wrapped when a delta is applied to a base whose computed
// sha256_all is not the delta's base_sha256_all.
var ErrWrongBase = errors.New("delta does not apply to this base")

// ErrNeedWSUM is wrapped when a streamed input (root_pending) is refused
// because its WSUM, which holds its root values, was not given: a
// short-form delta on a streamed base (the target's merkle_prev is the
// base's, in its WSUM), or MakeDelta with DeltaOptions.RequireWSUM.
var ErrNeedWSUM = errors.New("WSUM needed")

// DeltaInfo summarizes a delta that was made or applied.
type DeltaInfo struct {
	BaseSHA256All [32]byte
	Arrays        int      // arrays of the target
	Chunks        int64    // chunks of the target
	Changed       int64    // chunks carried in the delta
	Added         []string // arrays new in the target (or changed in type, shape or geometry)
	Removed       []string // base arrays absent from the target
	// Short lists arrays given in the seed's short form `arr name=R`
	// (apply only); their HMAC is kept from the base and is therefore
	// unauthenticated.
	Short []string
}

// verifiedIndex verifies a WTXT file without keys and returns its index
// and computed sha256_all (a streamed file as far as the WTXT alone
// proves).
func verifiedIndex(ctx context.Context, name string, r io.ReaderAt, size int64) (*Index, [32]byte, error) {
	return verifiedIndexWSUM(ctx, name, r, size, nil)
}

// verifiedIndexWSUM is verifiedIndex verifying a streamed file jointly
// with wsum when it is given (its sha256_all, merkle_this). A wsum for a
// file that is not streamed is refused: it would be silently ignored.
func verifiedIndexWSUM(ctx context.Context, name string, r io.ReaderAt, size int64, wsum []byte) (*Index, [32]byte, error) {
	v := newVerifier(ctx, VerifyOptions{File: name, allowPending: true, index: true, MaxFailures: 1, WSUM: wsum})
	rep, err := v.run(io.NewSectionReader(r, 0, size))
	if err != nil {
		return nil, [32]byte{}, err
	}
	if wsum != nil && !rep.index.Header.Pending {
		return nil, [32]byte{}, &Error{File: name, Line: 4, Chunk: -1, Check: CheckWSUM,
			Msg: "a WSUM was given but the file is not streamed (it has a root line, not root_pending)"}
	}
	all, _ := parseHex32(rep.SHA256All)
	rep.index.Size = size
	return rep.index, all, nil
}

// needWSUM is the refusal of streamed input name without its WSUM.
func needWSUM(name, why string) error {
	return &Error{File: name, Line: 4, Chunk: -1, Check: CheckWSUM, Err: ErrNeedWSUM,
		Msg: "streamed snapshot (root_pending) given without its WSUM: " + why}
}

// structIndex is ReadIndex with the header's sha256_all (zero for
// root_pending), the trusted counterpart of verifiedIndex.
func structIndex(ctx context.Context, name string, r io.ReaderAt, size int64) (*Index, [32]byte, error) {
	x, err := ReadIndex(ctx, name, r, size)
	if err != nil {
		return nil, [32]byte{}, err
	}
	return x, x.Header.SHA256All, nil
}

// copyRange copies [start, end) of r to w in bounded pieces.
func copyRange(w io.Writer, r io.ReaderAt, start, end int64) error {
	_, err := io.Copy(w, io.NewSectionReader(r, start, end-start))
	return err
}

// MakeDelta writes the DELTA v2 (profile section 9) that turns base into
// target. Both are verified first (without keys; a file failing any check
// is refused; a streamed file only as far as the WTXT alone proves —
// MakeDeltaWith verifies it with its WSUM, or refuses it without one).
// The delta holds the target's header lines, every target
// arr (and idx) line, and only the chunks whose bytes differ from the base
// chunk with the same ix — all chunks of arrays that are new or changed in
// dtype, shape or geometry. Memory holds the two files' indexes (a few
// dozen bytes per chunk), never chunk data beyond a copy buffer.
func MakeDelta(ctx context.Context, w io.Writer, base io.ReaderAt, baseSize int64, target io.ReaderAt, targetSize int64) (*DeltaInfo, error) {
	return MakeDeltaWith(ctx, w, base, baseSize, target, targetSize, DeltaOptions{})
}

// DeltaOptions tune MakeDeltaWith.
type DeltaOptions struct {
	// Trusted skips verifying base and target: both files are only
	// indexed by their structure (line grammar, chunk geometry), and
	// chunks are compared by the sha256 their ch lines declare. Use it
	// only for files this process wrote and verified itself (the daemon's
	// ring); the delta's result is still verified when applied.
	Trusted bool
	// BaseSHA256All is base_sha256_all for a trusted streamed base
	// (root_pending), whose header does not hold it. Ignored otherwise.
	BaseSHA256All *[32]byte
	// BaseWSUM and TargetWSUM are the WSUM files (one line and its LF)
	// of a streamed base and target: each such input is verified jointly
	// with its WSUM (sha256_all and merkle_this must match). A WSUM
	// given for an input that is not streamed is an error. Not with
	// Trusted.
	BaseWSUM, TargetWSUM []byte
	// RequireWSUM refuses (ErrNeedWSUM) a streamed input whose WSUM is
	// not given, instead of verifying it only as far as the WTXT alone
	// proves.
	RequireWSUM bool
}

// MakeDeltaWith is MakeDelta with options.
func MakeDeltaWith(ctx context.Context, w io.Writer, base io.ReaderAt, baseSize int64, target io.ReaderAt, targetSize int64, opts DeltaOptions) (*DeltaInfo, error) {
	p, err := PlanDelta(ctx, base, baseSize, target, targetSize, opts)
	if err != nil {
		return nil, err
	}
	return p.Info, p.Write(w)
}

// DeltaPlan is a delta decided but not yet written: what MakeDeltaWith
// checks and compares before the first byte goes out. It lets a caller
// that keeps a delta only when it is smaller than the target skip writing
// one that is not (Size is exact).
type DeltaPlan struct {
	// Info is what the delta will hold (the counts MakeDeltaWith returns).
	Info *DeltaInfo
	// Size is the exact byte count Write will write.
	Size int64
	// Base and Target are the two files' indexes (ReadIndex, or the
	// verifier's when not Trusted), for a caller that reads the files
	// further.
	Base, Target *Index

	target io.ReaderAt
	trep   *Index
	// keep[i][ix] is whether chunk ix of target array i is carried.
	keep [][]bool
}

// deltaHead is the delta's first line.
func deltaHead(all [32]byte) string {
	return DeltaMagic + " base_sha256_all=" + hex.EncodeToString(all[:]) + "\n"
}

// PlanDelta indexes (and, unless opts.Trusted, verifies) base and target
// as MakeDeltaWith does and decides which target chunks the delta
// carries, reading no chunk data: the work before the delta's first byte.
// The plan reads target again when written; it must not change meanwhile.
func PlanDelta(ctx context.Context, base io.ReaderAt, baseSize int64, target io.ReaderAt, targetSize int64, opts DeltaOptions) (*DeltaPlan, error) {
	index := verifiedIndexWSUM
	if opts.Trusted {
		if opts.BaseWSUM != nil || opts.TargetWSUM != nil {
			return nil, errors.New("delta: WSUM files verify inputs, which Trusted skips: give one or the other")
		}
		index = func(ctx context.Context, name string, r io.ReaderAt, size int64, _ []byte) (*Index, [32]byte, error) {
			return structIndex(ctx, name, r, size)
		}
	}
	brep, ball, err := index(ctx, "base", base, baseSize, opts.BaseWSUM)
	if err != nil {
		return nil, fmt.Errorf("delta base: %w", err)
	}
	if opts.Trusted && brep.Header.Pending {
		if opts.BaseSHA256All == nil {
			return nil, errors.New("delta base: a trusted streamed base needs its sha256_all (from its WSUM)")
		}
		ball = *opts.BaseSHA256All
	}
	if opts.RequireWSUM && brep.Header.Pending && opts.BaseWSUM == nil {
		return nil, fmt.Errorf("delta base: %w", needWSUM("base", "its root values cannot be verified"))
	}
	trep, _, err := index(ctx, "target", target, targetSize, opts.TargetWSUM)
	if err != nil {
		return nil, fmt.Errorf("delta target: %w", err)
	}
	if opts.RequireWSUM && trep.Header.Pending && opts.TargetWSUM == nil {
		return nil, fmt.Errorf("delta target: %w", needWSUM("target", "its root values cannot be verified"))
	}
	info := &DeltaInfo{BaseSHA256All: ball, Arrays: len(trep.Arrays)}
	p := &DeltaPlan{Info: info, Base: brep, Target: trep, target: target, trep: trep, keep: make([][]bool, len(trep.Arrays))}
	// The sizes below are those of the ranges Write copies.
	p.Size = int64(len(deltaHead(ball))) + trep.BodyStart - int64(len(magicLine)+1)
	baseArr := brep.byName()
	inTarget := map[string]bool{}
	for i := range trep.Arrays {
		ta := &trep.Arrays[i]
		inTarget[ta.Name] = true
		p.Size += ta.Chunks[0].Start - ta.Start + int64(len("endarr\n"))
		ba := baseArr[ta.Name]
		same := ba != nil && ta.SameGeometry(ba)
		if !same {
			info.Added = append(info.Added, ta.Name)
		}
		keep := make([]bool, len(ta.Chunks))
		for ix, c := range ta.Chunks {
			info.Chunks++
			if same && ba.Chunks[ix].SHA256 == c.SHA256 {
				continue
			}
			info.Changed++
			keep[ix] = true
			p.Size += c.End - c.Start
		}
		p.keep[i] = keep
	}
	for _, ba := range brep.Arrays {
		if !inTarget[ba.Name] {
			info.Removed = append(info.Removed, ba.Name)
		}
	}
	if trep.Audit != "" {
		p.Size += int64(len(trep.Audit)) + 1
	}
	p.Size += int64(len("enddelta\n"))
	return p, nil
}

// Write writes the planned delta (DeltaPlan.Size bytes) to w.
func (p *DeltaPlan) Write(w io.Writer) error {
	trep, target := p.trep, p.target
	bw := bufio.NewWriterSize(w, 256<<10)
	bw.WriteString(deltaHead(p.Info.BaseSHA256All))
	// The target's header lines after "WTXT 1".
	if err := copyRange(bw, target, int64(len(magicLine)+1), trep.BodyStart); err != nil {
		return err
	}
	for i := range trep.Arrays {
		ta := &trep.Arrays[i]
		// arr (+ idx) line(s): from the arr line to the first chunk.
		if err := copyRange(bw, target, ta.Start, ta.Chunks[0].Start); err != nil {
			return err
		}
		for ix, c := range ta.Chunks {
			if !p.keep[i][ix] {
				continue
			}
			if err := copyRange(bw, target, c.Start, c.End); err != nil {
				return err
			}
		}
		bw.WriteString("endarr\n")
	}
	if trep.Audit != "" {
		bw.WriteString(trep.Audit + "\n")
	}
	bw.WriteString("enddelta\n")
	return bw.Flush()
}

// deltaReader reads a delta's lines with their numbers: the one reader of
// the DELTA v2 grammar, shared by ApplyDelta and ReadDeltaStructure.
type deltaReader struct {
	lr *lineReader
	// where, when set, places an end of input: the error keeps Check
	// "truncated" and takes the array, chunk and message where returns
	// (ReadDeltaStructure). Without it the error is Check "delta",
	// "unexpected end of delta (no enddelta)" (ApplyDelta).
	where func() (array string, chunk int64, msg string)
}

func (d *deltaReader) fail(check Check, array string, chunk int64, format string, a ...any) error {
	return &Error{File: d.lr.file, Line: d.lr.n, Array: array, Chunk: chunk, Check: check, Msg: fmt.Sprintf(format, a...)}
}

// next returns the next line; the end of input is a truncation error.
func (d *deltaReader) next() ([]byte, error) {
	l, err := d.lr.next()
	var e *Error
	if errors.As(err, &e) && e.Check == CheckTruncated {
		if d.where != nil {
			e.Array, e.Chunk, e.Msg = d.where()
		} else {
			e.Check, e.Msg = CheckDelta, "unexpected end of delta (no enddelta)"
		}
	}
	return l, err
}

// readStart reads the first line and returns its base_sha256_all.
func (d *deltaReader) readStart() ([32]byte, error) {
	line, err := d.next()
	if err != nil {
		return [32]byte{}, err
	}
	v, msg := fields(line, DeltaMagic, []string{"base_sha256_all"}, false)
	if msg != "" {
		return [32]byte{}, d.fail(CheckDelta, "", -1, "first line must be %q %s", DeltaMagic, deltaStartShape)
	}
	want, ok := parseHex32(v[0])
	if !ok {
		return [32]byte{}, d.fail(CheckDelta, "", -1, "base_sha256_all: want 64 lowercase hex digits")
	}
	return want, nil
}

// readTargetHeader reads the target's header lines of the profile form
// (at most 4, up to the first arr, audit or enddelta line) and checks them
// as a WTXT header. hdr is "WTXT 1" and those lines, each with its LF; h is
// nil when there are none (the seed's short form). next is the line after
// them.
func (d *deltaReader) readTargetHeader() (hdr []byte, h *Header, next []byte, err error) {
	var b bytes.Buffer
	b.WriteString(magicLine + "\n")
	n := 0
	for {
		if next, err = d.next(); err != nil {
			return nil, nil, nil, err
		}
		if bytes.HasPrefix(next, []byte("arr ")) || bytes.HasPrefix(next, []byte("audit")) || string(next) == "enddelta" {
			break
		}
		if n++; n > 4 {
			return nil, nil, nil, d.fail(CheckDelta, "", -1, "more than 4 header lines before the first arr line")
		}
		b.Write(next)
		b.WriteByte('\n')
	}
	if n == 0 {
		return nil, nil, next, nil
	}
	hlr := newLineReader(bytes.NewReader(append(b.Bytes(), "endwtxt\n"...)), d.lr.file)
	// The delta's line numbers: its header lines start at line 2, as a
	// WTXT's do.
	h, rest, err := readHeader(hlr)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Check = CheckDelta
			e.Msg = "target header: " + e.Msg
		}
		return nil, nil, nil, err
	}
	if string(rest) != endLine {
		return nil, nil, nil, &Error{File: d.lr.file, Line: hlr.n, Chunk: -1, Check: CheckDelta,
			Msg: "target header: a line after the header lines that is not arr, audit or enddelta"}
	}
	return b.Bytes(), h, next, nil
}

// readEnd checks line is enddelta and the last line of the input.
func (d *deltaReader) readEnd(line []byte, want string) error {
	if string(line) != "enddelta" {
		return d.fail(CheckDelta, "", -1, "want %s", want)
	}
	if _, err := d.lr.raw(); err != io.EOF {
		if err == nil {
			return d.fail(CheckDelta, "", -1, "data after enddelta")
		}
		return err
	}
	return nil
}

// chGeometry checks a carried chunk's ch line against its array's
// geometry; "" when it matches.
func chGeometry(head *arrHead, ch *chHead) string {
	off, n := head.geo.chunk(ch.ix)
	if ch.off != off || ch.n != n || ch.lines != numLines(n) {
		return fmt.Sprintf("ch line says off=%d len=%d lines=%d, the array's geometry needs off=%d len=%d lines=%d", ch.off, ch.n, ch.lines, off, n, numLines(n))
	}
	return ""
}

// ApplyDelta applies a DELTA v2 to base and writes the resulting WTXT to w.
// The base is verified first and its computed sha256_all must equal the
// delta's base_sha256_all (else an error wrapping ErrWrongBase). With the
// profile's form (the delta carries the target's header and arr lines) the
// output is the target byte for byte, signature included; every chunk taken
// from the delta is checked against its ch line's sha256 while copying.
// The seed's short form `arr name=R` is accepted too (see applyShort).
//
// Callers must treat w's content as valid only after the whole output
// verifies (cmd/snapd writes to a temp file, verifies it, then renames).
//
// A short-form delta on a streamed base (root_pending) fails with
// ErrNeedWSUM: the result's merkle_prev is the base's, which only the
// base's WSUM holds (ApplyDeltaWith takes it).
func ApplyDelta(ctx context.Context, w io.Writer, base io.ReaderAt, baseSize int64, delta io.Reader, deltaName string) (*DeltaInfo, error) {
	return ApplyDeltaWith(ctx, w, base, baseSize, delta, deltaName, ApplyOptions{})
}

// ApplyOptions tune ApplyDeltaWith.
type ApplyOptions struct {
	// BaseWSUM is the WSUM file (one line and its LF) of a streamed base:
	// the base is verified jointly with it, and a short-form delta takes
	// the base's merkle_prev from it. A WSUM given for a base that is not
	// streamed is an error.
	BaseWSUM []byte
}

// ApplyDeltaWith is ApplyDelta with options.
func ApplyDeltaWith(ctx context.Context, w io.Writer, base io.ReaderAt, baseSize int64, delta io.Reader, deltaName string, opts ApplyOptions) (*DeltaInfo, error) {
	brep, ball, err := verifiedIndexWSUM(ctx, "base", base, baseSize, opts.BaseWSUM)
	if err != nil {
		return nil, fmt.Errorf("delta base: %w", err)
	}
	var prev [32]byte // the base's merkle_prev, kept by the short form
	if brep.Header.Pending {
		if opts.BaseWSUM != nil {
			ws, err := ParseWSUM(opts.BaseWSUM) // verifiedIndex checked it
			if err != nil {
				return nil, fmt.Errorf("delta base: %w", err)
			}
			prev = ws.MerklePrev
		}
	} else {
		prev = brep.Header.MerklePrev
	}
	d := &deltaReader{lr: newLineReader(delta, deltaName)}
	want, err := d.readStart()
	if err != nil {
		return nil, err
	}
	info := &DeltaInfo{BaseSHA256All: want}
	if want != ball {
		return nil, &Error{File: deltaName, Line: 1, Chunk: -1, Check: CheckDelta, Err: ErrWrongBase,
			Msg: fmt.Sprintf("base_sha256_all is %x, the given base's computed sha256_all is %x", want, ball)}
	}
	// Header lines (profile form) until the first arr/audit/enddelta line.
	hdr, th, line, err := d.readTargetHeader()
	if err != nil {
		return nil, err
	}
	if th == nil {
		if brep.Header.Pending && opts.BaseWSUM == nil {
			return nil, fmt.Errorf("delta base: %w", needWSUM("base", "a short-form delta keeps the base's merkle_prev, which only its WSUM holds (the result would start a new chain)"))
		}
		return applyShort(ctx, w, base, brep, prev, d, line, info)
	}
	baseArr := brep.byName()
	bw := bufio.NewWriterSize(w, 256<<10)
	bw.Write(hdr)
	seen := map[string]bool{}
	for bytes.HasPrefix(line, []byte("arr ")) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if bytes.Count(line, []byte(" ")) == 1 {
			return nil, d.fail(CheckDelta, "", -1, "short form `arr name=...` cannot be mixed with a target header")
		}
		head, msg := parseArr(line)
		if msg != "" {
			return nil, d.fail(CheckDelta, "", -1, "%s", msg)
		}
		if seen[head.name] {
			return nil, d.fail(CheckDelta, head.name, -1, "array appears twice")
		}
		seen[head.name] = true
		info.Arrays++
		bw.Write(line)
		bw.WriteByte('\n')
		if line, err = d.next(); err != nil {
			return nil, err
		}
		head.geo = geometry{nbytes: head.nbytes, chunkLen: UnblockedChunk}
		if bytes.HasPrefix(line, []byte("idx ")) {
			if msg := parseIdx(line, head); msg != "" {
				return nil, d.fail(CheckDelta, head.name, -1, "%s", msg)
			}
			bw.Write(line)
			bw.WriteByte('\n')
			if line, err = d.next(); err != nil {
				return nil, err
			}
		}
		if msg := idxPresence(head); msg != "" {
			return nil, d.fail(CheckDelta, head.name, -1, "%s", msg)
		}
		ba := baseArr[head.name]
		ta := newIndexArray(head, 0)
		same := ba != nil && ta.SameGeometry(ba)
		if !same {
			info.Added = append(info.Added, head.name)
		}
		for ix := range head.geo.numChunks() {
			info.Chunks++
			if bytes.HasPrefix(line, []byte("ch ix=")) {
				ch, msg := parseCh(line)
				if msg != "" {
					return nil, d.fail(CheckDelta, head.name, -1, "%s", msg)
				}
				if ch.ix < ix {
					return nil, d.fail(CheckDelta, head.name, ch.ix, "chunks out of order or repeated")
				}
				if ch.ix == ix {
					info.Changed++
					if line, err = copyDeltaChunk(bw, d, head, ch); err != nil {
						return nil, err
					}
					continue
				}
			}
			if !same {
				return nil, d.fail(CheckDelta, head.name, ix, "the delta lacks chunk %d and the base has no array %q of the same dtype, shape and geometry to take it from", ix, head.name)
			}
			c := ba.Chunks[ix]
			if err := copyRange(bw, base, c.Start, c.End); err != nil {
				return nil, fmt.Errorf("read base: %w", err)
			}
		}
		if string(line) != "endarr" {
			if bytes.HasPrefix(line, []byte("ch ")) {
				return nil, d.fail(CheckDelta, head.name, -1, "chunk beyond the array's %d chunks", head.geo.numChunks())
			}
			return nil, d.fail(CheckDelta, head.name, -1, "want endarr")
		}
		bw.WriteString("endarr\n")
		if line, err = d.next(); err != nil {
			return nil, err
		}
	}
	for _, ba := range brep.Arrays {
		if !seen[ba.Name] {
			info.Removed = append(info.Removed, ba.Name)
		}
	}
	if bytes.HasPrefix(line, []byte("audit")) {
		if msg := checkAudit(line); msg != "" {
			return nil, d.fail(CheckDelta, "", -1, "%s", msg)
		}
		bw.Write(line)
		bw.WriteByte('\n')
		if line, err = d.next(); err != nil {
			return nil, err
		}
	}
	if err := d.readEnd(line, "arr, audit or enddelta"); err != nil {
		return nil, err
	}
	bw.WriteString(endLine + "\n")
	return info, bw.Flush()
}

// copyDeltaChunk copies one chunk block from the delta (its ch line is
// already read) after checking its geometry, line form and sha256; it
// returns the line after endch.
func copyDeltaChunk(w *bufio.Writer, d *deltaReader, head *arrHead, ch *chHead) ([]byte, error) {
	if msg := chGeometry(head, ch); msg != "" {
		return nil, d.fail(CheckDelta, head.name, ch.ix, "%s", msg)
	}
	n := ch.n
	w.WriteString(chLineText(ch))
	h := sha256.New()
	var raw [rawPerLine]byte
	rem := n
	for k := int64(0); k < ch.lines; k++ {
		l, err := d.next()
		if err != nil {
			return nil, err
		}
		r := min(rem, rawPerLine)
		wd := base64.StdEncoding.EncodedLen(int(r))
		if len(l) != wd+2 || l[wd] != ' ' || l[wd+1] != parityNibble(l[:wd]) {
			return nil, d.fail(CheckDelta, head.name, ch.ix, "base64 line %d of the chunk is damaged (length, space or parity)", k+1)
		}
		if dn, err := base64.StdEncoding.Strict().Decode(raw[:], l[:wd]); err != nil || int64(dn) != r {
			return nil, d.fail(CheckDelta, head.name, ch.ix, "base64 line %d of the chunk does not decode", k+1)
		}
		h.Write(raw[:r])
		rem -= r
		w.Write(l)
		w.WriteByte('\n')
	}
	var sum [32]byte
	h.Sum(sum[:0])
	if sum != ch.sha {
		return nil, d.fail(CheckDelta, head.name, ch.ix, "chunk bytes hash to %x, its ch line says %x", sum, ch.sha)
	}
	l, err := d.next()
	if err != nil {
		return nil, err
	}
	if string(l) != "endch" {
		return nil, d.fail(CheckDelta, head.name, ch.ix, "want endch after %d base64 lines", ch.lines)
	}
	w.WriteString("endch\n")
	return d.next()
}

// chLineText re-renders a parsed ch line (it was checked canonical).
func chLineText(ch *chHead) string {
	return string(chLine(nil, ch.ix, ch.off, ch.n, ch.sha, ch.crc)) + "\n"
}

// isShortArr reports whether line is the seed's `arr name=R`.
func isShortArr(line []byte) (string, bool) {
	s := string(line)
	if !strings.HasPrefix(s, "arr name=") || strings.Contains(s[4:], " ") {
		return "", false
	}
	return s[len("arr name="):], true
}

// maxShortDelta bounds the chunk bytes a short-form delta may carry: they
// are held in memory while the root values are recomputed.
const maxShortDelta = 256 << 20

// applyShort applies the seed's short form: `arr name=R` blocks holding
// replacement chunks for arrays of the base, no header. The result is the
// base with those chunks replaced, each changed array's sha256 recomputed
// (its hmac and salt kept from the base, so that array no longer
// authenticates), sha256_all, fastxor and merkle_this recomputed with the
// base's meta and merkle_prev (prev: from the base's root line, or from
// its WSUM when it is streamed), and no sign line (nothing can re-sign
// it). The result is never streamed: it has a root line. The base's audit
// line is not kept.
func applyShort(ctx context.Context, w io.Writer, base io.ReaderAt, brep *Index, prev [32]byte, d *deltaReader, line []byte, info *DeltaInfo) (*DeltaInfo, error) {
	baseArr := brep.byName()
	repl := map[string]map[int64][]byte{}
	var held int64
	var err error
	for {
		name, ok := isShortArr(line)
		if !ok {
			break
		}
		ba := baseArr[name]
		if ba == nil {
			return nil, d.fail(CheckDelta, name, -1, "short form names an array the base does not have")
		}
		if repl[name] != nil {
			return nil, d.fail(CheckDelta, name, -1, "array appears twice")
		}
		m := map[int64][]byte{}
		repl[name] = m
		info.Short = append(info.Short, name)
		if line, err = d.next(); err != nil {
			return nil, err
		}
		last := int64(-1)
		for bytes.HasPrefix(line, []byte("ch ")) {
			ch, msg := parseCh(line)
			if msg != "" {
				return nil, d.fail(CheckDelta, name, -1, "%s", msg)
			}
			if ch.ix <= last || ch.ix >= ba.head.geo.numChunks() {
				return nil, d.fail(CheckDelta, name, ch.ix, "chunk ix out of order or beyond the base array's %d chunks", ba.head.geo.numChunks())
			}
			last = ch.ix
			if held += ch.n; held > maxShortDelta {
				return nil, d.fail(CheckDelta, name, ch.ix, "short-form delta carries more than %d bytes", maxShortDelta)
			}
			var buf bytes.Buffer
			bw := bufio.NewWriter(&buf)
			if line, err = copyDeltaChunk(bw, d, ba.head, ch); err != nil {
				return nil, err
			}
			bw.Flush()
			raw, err := decodeBlock(buf.Bytes())
			if err != nil {
				return nil, d.fail(CheckDelta, name, ch.ix, "%v", err)
			}
			m[ch.ix] = raw
			info.Changed++
		}
		if string(line) != "endarr" {
			return nil, d.fail(CheckDelta, name, -1, "want ch or endarr")
		}
		if line, err = d.next(); err != nil {
			return nil, err
		}
	}
	if err := d.readEnd(line, "`arr name=...` or enddelta"); err != nil {
		return nil, err
	}
	// chunkOf returns chunk ix of array a: the replacement or the base's.
	chunkOf := func(a *IndexArray, ix int64) ([]byte, error) {
		if r, ok := repl[a.Name][ix]; ok {
			return r, nil
		}
		c := a.Chunks[ix]
		b := make([]byte, c.End-c.Start)
		if _, err := base.ReadAt(b, c.Start); err != nil {
			return nil, err
		}
		return decodeBlock(b)
	}
	lines := make([]string, len(brep.Arrays))
	all := sha256.New()
	var fx uint64
	var stream int64
	for i := range brep.Arrays {
		a := &brep.Arrays[i]
		lines[i] = a.head.line
		if repl[a.head.name] != nil {
			h := sha256.New()
			for ix := range a.head.geo.numChunks() {
				raw, err := chunkOf(a, ix)
				if err != nil {
					return nil, err
				}
				h.Write(raw)
			}
			var sum [32]byte
			h.Sum(sum[:0])
			p := &arrPlan{name: a.head.name, dt: a.head.dt, shape: a.head.shape, nbytes: a.head.nbytes, sha: sum, mac: a.head.mac, salt: a.head.salt}
			lines[i] = arrLine(p)
		}
		io.WriteString(all, lines[i])
		for ix := range a.head.geo.numChunks() {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			raw, err := chunkOf(a, ix)
			if err != nil {
				return nil, err
			}
			all.Write(raw)
			fx ^= fastxorAt(raw, stream)
			stream += int64(len(raw))
		}
		info.Arrays++
		info.Chunks += a.head.geo.numChunks()
	}
	var sum [32]byte
	all.Sum(sum[:0])
	h := brep.Header
	this := Merkle(prev, sum, h.TS, h.Gen, h.Meta.Build)
	bw := bufio.NewWriterSize(w, 256<<10)
	// Header: WTXT 1, meta and cap as in the base, a fresh root line.
	sl := bytes.SplitAfterN(h.Signed, []byte("\n"), 4)
	bw.Write(bytes.Join(sl[:3], nil))
	fmt.Fprintf(bw, "root sha256_all=%x merkle_prev=%x merkle_this=%x fastxor=%016x\n", sum, prev, this, fx)
	for i := range brep.Arrays {
		a := &brep.Arrays[i]
		bw.WriteString(lines[i] + "\n")
		if a.head.geo.blocked {
			fmt.Fprintf(bw, "idx rows_per_chunk=%d row_size=%d row_blocking=on\n", a.head.geo.rowsPerChunk, a.head.geo.rowSize)
		}
		for ix, c := range a.Chunks {
			if r, ok := repl[a.Name][int64(ix)]; ok {
				off, _ := a.head.geo.chunk(int64(ix))
				bw.Write(appendChunk(nil, int64(ix), off, r, nil))
				continue
			}
			if err := copyRange(bw, base, c.Start, c.End); err != nil {
				return nil, err
			}
		}
		bw.WriteString("endarr\n")
	}
	bw.WriteString(endLine + "\n")
	return info, bw.Flush()
}

// byName maps the arrays of x by name.
func (x *Index) byName() map[string]*IndexArray {
	m := make(map[string]*IndexArray, len(x.Arrays))
	for i := range x.Arrays {
		m[x.Arrays[i].Name] = &x.Arrays[i]
	}
	return m
}

// decodeBlock decodes the base64 lines of one chunk block (ch line through
// endch) of an already checked file.
func decodeBlock(b []byte) ([]byte, error) {
	ls := bytes.Split(b, []byte("\n"))
	if len(ls) < 3 {
		return nil, errors.New("short chunk block")
	}
	var out []byte
	var raw [rawPerLine]byte
	for _, l := range ls[1 : len(ls)-2] {
		if len(l) < 3 {
			return nil, errors.New("damaged base64 line")
		}
		n, err := base64.StdEncoding.Decode(raw[:], l[:len(l)-2])
		if err != nil {
			return nil, err
		}
		out = append(out, raw[:n]...)
	}
	return out, nil
}
