package wtxt

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/snapd-ml/snapd/keys"
)

// VerifyOptions say what a WTXT file is checked against. The zero value
// checks everything that needs no key.
type VerifyOptions struct {
	// File names the input in error messages.
	File string
	// TrustedKeys are the public keys a signature may come from. Giving
	// any makes a valid signature by one of them required (as
	// RequireSignature does) unless AllowUnsigned is set: a caller that
	// trusts keys never accepts a file whose sign line was simply removed.
	TrustedKeys []ed25519.PublicKey
	// AllowUnsigned is the explicit opt-out: with TrustedKeys, an unsigned
	// file (no sign line, or a WSUM without sign=) passes, reported as
	// SigAbsent. A signature that is present is still checked. It does not
	// override RequireSignature.
	AllowUnsigned bool
	// HMACKey enables the per-array HMAC check.
	HMACKey []byte
	// PrevMerkle, when set, must equal the file's merkle_prev (chain
	// continuity with the previous generation).
	PrevMerkle *[32]byte
	// RequireSignature fails files that are unsigned or whose signature
	// could not be checked against TrustedKeys.
	RequireSignature bool
	// WSUM is the content of the WSUM file of a streamed snapshot.
	WSUM []byte
	// MaxFailures stops after that many failures (0 = 100).
	MaxFailures int
	// DeferWSUM lets a streamed file (root_pending) given without its WSUM
	// pass every check the WTXT alone can prove (structure, every chunk
	// and array hash, HMAC); the checks only the WSUM can settle are
	// skipped and named in Report.Deferred. Without it a streamed file
	// without WSUM fails with CheckWSUM.
	DeferWSUM bool

	// allowPending lets a streamed file without WSUM pass (decoding).
	allowPending bool
	// index records chunk positions (decoding).
	index bool
}

// Signature states in a Report.
const (
	SigVerified  = "verified"  // checked against a trusted key
	SigAbsent    = "absent"    // the file carries no signature
	SigUnchecked = "unchecked" // present, but no trusted keys were given
	SigFailed    = "failed"
)

// HMAC states of an array in a Report.
const (
	HMACVerified  = "verified"  // checked with the key
	HMACAbsent    = "absent"    // all zeros: the array is unauthenticated
	HMACUnchecked = "unchecked" // present, no key given
	HMACFailed    = "failed"
)

// ArrayReport describes one verified array.
type ArrayReport struct {
	Name   string  `json:"name"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	Bytes  int64   `json:"bytes"`
	Chunks int64   `json:"chunks"`
	// RowsPerChunk is 0 for arrays without an idx line.
	RowsPerChunk int64  `json:"rows_per_chunk,omitempty"`
	HMAC         string `json:"hmac"`
	SHA256       string `json:"sha256"`
	Line         int    `json:"line"`
}

// Authenticated reports whether the array's HMAC was checked with a key.
func (a ArrayReport) Authenticated() bool { return a.HMAC == HMACVerified }

// Report is the outcome of Verify.
type Report struct {
	File     string        `json:"file,omitempty"`
	Header   *Header       `json:"-"`
	Arrays   []ArrayReport `json:"arrays"`
	Streamed bool          `json:"streamed"`
	// Signature is one of SigVerified, SigAbsent, SigUnchecked, SigFailed.
	Signature string `json:"signature"`
	KeyID     string `json:"keyid,omitempty"`
	// Chain is "continues" (checked against PrevMerkle), "first" (merkle_prev
	// is zero, nothing to check against) or "unchecked".
	Chain string `json:"chain"`
	// Computed root values.
	SHA256All  string `json:"sha256_all"`
	MerklePrev string `json:"merkle_prev"`
	MerkleThis string `json:"merkle_this"`
	Fastxor    string `json:"fastxor,omitempty"`
	// Audit is the audit line, which no hash or signature covers.
	Audit string `json:"audit,omitempty"`
	// Deferred names the checks not run because a streamed file was
	// verified without its WSUM (VerifyOptions.DeferWSUM): they must be
	// run once the WSUM is at hand.
	Deferred []Check  `json:"deferred,omitempty"`
	Failures []*Error `json:"failures"`

	index *Index // with VerifyOptions.index: where everything is
}

// OK reports whether every check passed.
func (r *Report) OK() bool { return len(r.Failures) == 0 }

// Unauthenticated lists arrays whose HMAC was not verified.
func (r *Report) Unauthenticated() []string {
	var out []string
	for _, a := range r.Arrays {
		if a.HMAC != HMACVerified {
			out = append(out, a.Name)
		}
	}
	return out
}

// Verify reads a WTXT file once, streaming, and runs every check of the
// profile. Memory stays bounded by a few chunk buffers. It returns the
// report and, when a check failed, the first failure (an *Error wrapping
// ErrInvalid; the report lists all, up to MaxFailures). Read errors are
// returned as they are.
func Verify(ctx context.Context, r io.Reader, opts VerifyOptions) (*Report, error) {
	v := newVerifier(ctx, opts)
	return v.run(r)
}

// item kinds flowing to the hashing goroutines.
const (
	itArr = iota
	itPiece
	itChunkEnd
	itArrEnd
)

type vArr struct {
	head   *arrHead
	lineNo int
	// computed
	sha  [32]byte
	mac  [32]byte
	hmac string
}

type vChunk struct {
	head   *chHead
	lineNo int
	arr    *vArr
}

type pbuf struct {
	b    []byte
	refs int32
	mu   sync.Mutex
	// own: b was sized for one small chunk (getPiece) and is not
	// returned to piecePool.
	own bool
}

type vItem struct {
	kind  int
	a     *vArr
	c     *vChunk
	data  []byte
	buf   *pbuf
	start int64 // stream offset of data (fastxor)
}

type verifier struct {
	ctx  context.Context
	opts VerifyOptions
	rep  *Report
	mu   sync.Mutex
	fail []*Error
	hdr  *Header
	done chan struct{}
	stop bool
	ctxe error
}

func newVerifier(ctx context.Context, opts VerifyOptions) *verifier {
	if opts.MaxFailures <= 0 {
		opts.MaxFailures = 100
	}
	v := &verifier{ctx: ctx, opts: opts, rep: &Report{File: opts.File}}
	return v
}

// piecePool recycles decode buffers across verifications.
var piecePool = sync.Pool{New: func() any { return &pbuf{b: make([]byte, pieceMax)} }}

// pieceMax is the largest unit handed to the hashers (a multiple of 57).
const pieceMax = rawPerLine * 4096

// ownPieceMax: a chunk whose remaining raw bytes fit in fewer bytes than
// this decodes into a buffer of its own size rather than a pooled
// pieceMax one, so that verifying a small file (or an array of a few
// rows) does not clear and hold pieceMax bytes per chunk whenever the
// pool is empty.
const ownPieceMax = 16 << 10

// getPiece returns a decode buffer for the rem raw bytes of a chunk that
// remain: whole lines, at least one (the decoder writes a line's 57 bytes
// at a time), at most pieceMax.
func getPiece(rem int64) *pbuf {
	if rem < ownPieceMax-rawPerLine {
		lines := max((rem+rawPerLine-1)/rawPerLine, 1)
		return &pbuf{b: make([]byte, lines*rawPerLine), own: true}
	}
	return piecePool.Get().(*pbuf)
}

// putPiece returns a pooled decode buffer to the pool.
func putPiece(b *pbuf) {
	if !b.own {
		piecePool.Put(b)
	}
}

func (v *verifier) add(e *Error) {
	if e.File == "" {
		e.File = v.opts.File
	}
	v.mu.Lock()
	v.fail = append(v.fail, e)
	v.mu.Unlock()
}

func (v *verifier) tooMany() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.fail) >= v.opts.MaxFailures
}

func (v *verifier) release(b *pbuf) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.refs--
	last := b.refs == 0
	b.mu.Unlock()
	if last {
		putPiece(b)
	}
}

// hasher is one sequential consumer of the item stream.
type hasher struct {
	ch chan vItem
	fn func(vItem)
}

func (v *verifier) run(r io.Reader) (*Report, error) {
	var (
		chunkSHA = sha256.New()
		chunkCRC uint32
		arrSHA   = sha256.New()
		fx       uint64
		allSHA   = sha256.New()
		mac      hash.Hash
		macOK    bool
	)
	hs := []*hasher{
		{fn: func(it vItem) { // chunk sha256 + crc32c
			switch it.kind {
			case itPiece:
				chunkSHA.Write(it.data)
				chunkCRC = crc32.Update(chunkCRC, castagnoli, it.data)
			case itChunkEnd:
				var sum [32]byte
				chunkSHA.Sum(sum[:0])
				c := it.c
				if chunkCRC != c.head.crc {
					v.add(&Error{Line: c.lineNo, Array: c.arr.head.name, Chunk: c.head.ix, Check: CheckCRC32C,
						Msg: fmt.Sprintf("crc32c of the decoded bytes is %08x, the ch line says %08x", chunkCRC, c.head.crc)})
				}
				if sum != c.head.sha {
					v.add(&Error{Line: c.lineNo, Array: c.arr.head.name, Chunk: c.head.ix, Check: CheckChunkSHA,
						Msg: fmt.Sprintf("sha256 of the decoded bytes is %x, the ch line says %x", sum, c.head.sha)})
				}
				chunkSHA.Reset()
				chunkCRC = 0
			}
		}},
		{fn: func(it vItem) { // array sha256 + fastxor
			switch it.kind {
			case itPiece:
				arrSHA.Write(it.data)
				fx ^= fastxorAt(it.data, it.start)
			case itArrEnd:
				arrSHA.Sum(it.a.sha[:0])
				arrSHA.Reset()
				if it.a.sha != it.a.head.sha {
					v.add(&Error{Line: it.a.lineNo, Array: it.a.head.name, Chunk: -1, Check: CheckArraySHA,
						Msg: fmt.Sprintf("sha256 of the array's bytes is %x, the arr line says %x", it.a.sha, it.a.head.sha)})
				}
			}
		}},
		{fn: func(it vItem) { // sha256_all
			switch it.kind {
			case itArr:
				io.WriteString(allSHA, it.a.head.line)
			case itPiece:
				allSHA.Write(it.data)
			}
		}},
	}
	if v.opts.HMACKey != nil {
		hs = append(hs, &hasher{fn: func(it vItem) {
			switch it.kind {
			case itArr:
				a := it.a
				macOK = a.head.mac != zero32
				if !macOK {
					return
				}
				mac = hmac.New(sha256.New, v.opts.HMACKey)
				mac.Write(a.head.salt[:])
			case itPiece:
				if macOK {
					mac.Write(it.data)
				}
			case itArrEnd:
				a := it.a
				if !macOK {
					return
				}
				mac.Sum(a.mac[:0])
				want := Salt(v.opts.HMACKey, v.hdr.Gen, a.head.name)
				switch {
				case a.mac != a.head.mac:
					a.hmac = HMACFailed
					v.add(&Error{Line: a.lineNo, Array: a.head.name, Chunk: -1, Check: CheckHMAC,
						Msg: "HMAC-SHA256(key, salt || bytes) does not match the arr line (wrong key, or the array was altered)"})
				case want != a.head.salt:
					a.hmac = HMACFailed
					v.add(&Error{Line: a.lineNo, Array: a.head.name, Chunk: -1, Check: CheckHMAC,
						Msg: fmt.Sprintf("salt %x is not the one the key derives for gen %s (%x)", a.head.salt, v.hdr.Gen, want)})
				default:
					a.hmac = HMACVerified
				}
			}
		}})
	}
	var wg sync.WaitGroup
	for _, h := range hs {
		h.ch = make(chan vItem, 8)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range h.ch {
				h.fn(it)
				v.release(it.buf)
			}
		}()
	}
	send := func(it vItem) {
		if it.buf != nil {
			it.buf.refs = int32(len(hs))
		}
		for _, h := range hs {
			h.ch <- it
		}
	}
	var arrs []*vArr
	ioErr := v.parse(r, send, &arrs)
	for _, h := range hs {
		close(h.ch)
	}
	wg.Wait()
	if ioErr != nil {
		return v.rep, ioErr
	}
	var all [32]byte
	allSHA.Sum(all[:0])
	v.finish(arrs, all, fx)
	return v.rep, v.firstErr()
}

func (v *verifier) firstErr() error {
	sort.SliceStable(v.fail, func(i, j int) bool {
		li, lj := v.fail[i].Line, v.fail[j].Line
		if li == 0 {
			li = 1 << 30
		}
		if lj == 0 {
			lj = 1 << 30
		}
		return li < lj
	})
	v.rep.Failures = v.fail
	if len(v.fail) > 0 {
		return v.fail[0]
	}
	return nil
}

// parse reads the file, checks structure and decodes base64 into pieces
// handed to the hashers. Structural failures are recorded and stop it; the
// returned error is for I/O only.
func (v *verifier) parse(r io.Reader, send func(vItem), arrsOut *[]*vArr) error {
	lr := newLineReader(r, v.opts.File)
	fatal := func(err error) error {
		var e *Error
		if errors.As(err, &e) {
			v.add(e)
			return nil
		}
		return err
	}
	h, line, err := readHeader(lr)
	if err != nil {
		return fatal(err)
	}
	v.hdr = h
	v.rep.Header = h
	if v.opts.index {
		v.rep.index = &Index{Header: h, BodyStart: lr.last}
	}
	v.rep.Streamed = h.Pending
	var prev string
	var stream int64
	needExt := false
	b64 := base64.StdEncoding.Strict()
	for {
		if err := v.ctx.Err(); err != nil {
			return err
		}
		if v.tooMany() {
			return nil
		}
		switch {
		case bytes.HasPrefix(line, []byte("arr ")):
		case bytes.HasPrefix(line, []byte("audit ")) || string(line) == "audit":
			v.trailerAt(lr)
			if msg := checkAudit(line); msg != "" {
				return fatal(lr.errf(CheckGrammar, "%s", msg))
			}
			v.rep.Audit = string(line)
			if v.rep.index != nil {
				v.rep.index.Audit = v.rep.Audit
			}
			if line, err = lr.next(); err != nil {
				return fatal(err)
			}
			if string(line) != endLine {
				return fatal(lr.errf(CheckGrammar, "want %q after the audit line", endLine))
			}
			fallthrough
		case string(line) == endLine:
			v.trailerAt(lr)
			if _, err := lr.raw(); err != io.EOF {
				if err == nil {
					return fatal(lr.errf(CheckGrammar, "data after %q", endLine))
				}
				return fatal(err)
			}
			if needExt && !h.TensorExt {
				v.add(&Error{Line: 3, Chunk: -1, Check: CheckGrammar, Msg: "an array needs tensor_ext (f16/bf16/bool, rank 0, zero size or a name with . : / -) but cap ext lacks it"})
			}
			if !needExt && h.TensorExt {
				v.add(&Error{Line: 3, Chunk: -1, Check: CheckGrammar, Msg: "cap ext lists tensor_ext but no array needs it"})
			}
			return nil
		default:
			return fatal(lr.errf(CheckGrammar, "want an arr, audit or endwtxt line"))
		}
		arrStart := lr.last
		head, msg := parseArr(line)
		if msg != "" {
			return fatal(lr.errf(CheckGrammar, "%s", msg))
		}
		if len(*arrsOut) > 0 && head.name <= prev {
			if head.name == prev {
				return fatal(&Error{Line: lr.n, Array: head.name, Chunk: -1, Check: CheckGrammar, Msg: "duplicate array name"})
			}
			return fatal(&Error{Line: lr.n, Array: head.name, Chunk: -1, Check: CheckGrammar, Msg: fmt.Sprintf("arrays must be in ascending byte order of name; %q comes after %q", head.name, prev)})
		}
		prev = head.name
		needExt = needExt || head.ext
		a := &vArr{head: head, lineNo: lr.n, hmac: HMACAbsent}
		if head.mac != zero32 {
			a.hmac = HMACUnchecked
		}
		*arrsOut = append(*arrsOut, a)
		send(vItem{kind: itArr, a: a})
		aerr := func(check Check, ix int64, format string, args ...any) error {
			return fatal(&Error{Line: lr.n, Array: head.name, Chunk: ix, Check: check, Msg: fmt.Sprintf(format, args...)})
		}
		if line, err = lr.next(); err != nil {
			return fatal(err)
		}
		head.geo = geometry{nbytes: head.nbytes, chunkLen: UnblockedChunk}
		if bytes.HasPrefix(line, []byte("idx ")) {
			if msg := parseIdx(line, head); msg != "" {
				return aerr(CheckGrammar, -1, "%s", msg)
			}
			if line, err = lr.next(); err != nil {
				return fatal(err)
			}
		}
		if msg := idxPresence(head); msg != "" {
			return aerr(CheckGrammar, -1, "%s", msg)
		}
		nch := head.geo.numChunks()
		var lenSum int64
		head.lineNo = a.lineNo
		ai := newIndexArray(head, arrStart)
		for ix := int64(0); ix < nch; ix++ {
			ch, msg := parseCh(line)
			if msg != "" {
				if bytes.Equal(line, []byte("endarr")) {
					return aerr(CheckGeometry, ix, "array ends after %d chunks, its bytes and geometry need %d", ix, nch)
				}
				return aerr(CheckGrammar, ix, "%s", msg)
			}
			off, n := head.geo.chunk(ix)
			switch {
			case ch.ix != ix:
				return aerr(CheckGeometry, ix, "ix=%d, want %d", ch.ix, ix)
			case ch.off != off:
				return aerr(CheckGeometry, ix, "off=%d, want %d (sum of earlier lens)", ch.off, off)
			case ch.n != n:
				return aerr(CheckGeometry, ix, "len=%d, want %d from the array's bytes and chunk geometry", ch.n, n)
			case ch.lines != numLines(n):
				return aerr(CheckGeometry, ix, "lines=%d, want %d for len=%d", ch.lines, numLines(n), n)
			}
			if lenSum > head.nbytes-ch.n {
				return aerr(CheckGeometry, ix, "chunk lens add up to more than the array's bytes=%d", head.nbytes)
			}
			lenSum += ch.n
			c := &vChunk{head: ch, lineNo: lr.n, arr: a}
			if v.opts.index {
				ai.Chunks = append(ai.Chunks, indexChunk(ch, lr.n, lr.last, lr.off))
			}
			// Base64 lines, decoded into pieces.
			var pb *pbuf
			fill := 0
			flush := func() {
				if pb != nil && fill > 0 {
					send(vItem{kind: itPiece, a: a, data: pb.b[:fill], buf: pb, start: stream})
					stream += int64(fill)
				} else if pb != nil {
					putPiece(pb)
				}
				pb, fill = nil, 0
			}
			rem := n
			for k := int64(0); k < ch.lines; k++ {
				// Fast path: a run of well-formed full lines straight
				// from the read buffer. It stops before the first line
				// that is not exactly right, which the code below then
				// reads and reports.
				if full := rem / rawPerLine; full > 0 {
					if pb == nil {
						pb = getPiece(rem)
					}
					if m := lr.fullLines(pb.b[fill:], full); m > 0 {
						fill += int(m) * rawPerLine
						rem -= m * rawPerLine
						k += m - 1
						if fill+rawPerLine > len(pb.b) {
							flush()
						}
						continue
					}
				}
				l, err := lr.raw()
				if err == io.EOF {
					flush()
					return fatal(&Error{Line: lr.n + 1, Array: head.name, Chunk: ix, Check: CheckTruncated, Msg: "file ends inside a chunk"})
				}
				if err != nil {
					flush()
					return fatal(err)
				}
				raw := min(rem, rawPerLine)
				w := base64.StdEncoding.EncodedLen(int(raw))
				if len(l) != w+2 || l[w] != ' ' {
					flush()
					if msg := checkText(l); msg != "" {
						return aerr(CheckText, ix, "%s", msg)
					}
					if bytes.HasPrefix(l, []byte("endch")) || bytes.HasPrefix(l, []byte("ch ")) {
						return aerr(CheckGeometry, ix, "chunk has fewer base64 lines than lines=%d", ch.lines)
					}
					return aerr(CheckBase64, ix, "base64 line %d of the chunk: %d bytes, want %d base64 characters, a space and the parity digit (line re-wrapped or cut?)", k+1, len(l), w)
				}
				if pb == nil {
					pb = getPiece(rem)
				}
				var p byte
				fastOK := false
				if w == B64Width {
					p, fastOK = decodeFullLine(pb.b[fill:fill+rawPerLine], l)
				} else {
					p = parityNibble(l[:w])
				}
				if l[w+1] != p {
					flush()
					if c := l[w+1]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
						return aerr(CheckGrammar, ix, "base64 line %d of the chunk: parity digit is not a lowercase hex digit", k+1)
					}
					return aerr(CheckParity, ix, "base64 line %d of the chunk: parity digit %c, the line's characters give %c", k+1, l[w+1], p)
				}
				dn := int(raw)
				var derr error
				if !fastOK {
					dn, derr = b64.Decode(pb.b[fill:fill+rawPerLine], l[:w])
				}
				if derr != nil || int64(dn) != raw {
					flush()
					if msg := checkText(l); msg != "" {
						return aerr(CheckText, ix, "%s", msg)
					}
					return aerr(CheckBase64, ix, "base64 line %d of the chunk does not decode to %d bytes: %v", k+1, raw, derr)
				}
				fill += dn
				rem -= raw
				if fill+rawPerLine > len(pb.b) {
					flush()
				}
			}
			flush()
			send(vItem{kind: itChunkEnd, c: c})
			if line, err = lr.next(); err != nil {
				return fatal(err)
			}
			if string(line) != "endch" {
				if len(line) == B64Width+2 || bytes.HasSuffix(line[:len(line)-1], []byte(" ")) {
					return aerr(CheckGeometry, ix, "chunk has more base64 lines than lines=%d", ch.lines)
				}
				return aerr(CheckGrammar, ix, "want endch")
			}
			if v.opts.index {
				ai.Chunks[len(ai.Chunks)-1].End = lr.off
			}
			if line, err = lr.next(); err != nil {
				return fatal(err)
			}
		}
		if string(line) != "endarr" {
			if bytes.HasPrefix(line, []byte("ch ")) {
				return aerr(CheckGeometry, -1, "more chunks than the array's bytes and geometry need (%d)", nch)
			}
			return aerr(CheckGrammar, -1, "want endarr")
		}
		if lenSum != head.nbytes {
			return aerr(CheckGeometry, -1, "chunk lens add up to %d, the arr line says bytes=%d", lenSum, head.nbytes)
		}
		send(vItem{kind: itArrEnd, a: a})
		if v.opts.index {
			ai.End = lr.off
			v.rep.index.Arrays = append(v.rep.index.Arrays, ai)
		}
		if line, err = lr.next(); err != nil {
			return fatal(err)
		}
	}
}

// trailerAt records, when indexing, that the trailer starts at lr's last
// line (the first call wins: audit, then endwtxt).
func (v *verifier) trailerAt(lr *lineReader) {
	if x := v.rep.index; x != nil && x.TrailerLine == 0 {
		x.TrailerStart, x.TrailerLine = lr.last, lr.n
	}
}

// checkAudit checks `audit key=value ...` (values plain or quoted).
func checkAudit(line []byte) string {
	s := string(line)
	if !strings.HasPrefix(s, "audit ") {
		return "audit line needs at least one key=value"
	}
	s = s[len("audit "):]
	for field := 1; s != ""; field++ {
		eq := strings.IndexByte(s, '=')
		if eq < 1 {
			return "audit: want key=value fields"
		}
		for _, c := range []byte(s[:eq]) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
				return fmt.Sprintf("audit: field %d: key must be A-Z a-z 0-9 _ . - (got %d bytes)", field, eq)
			}
		}
		s = s[eq+1:]
		var val string
		if strings.HasPrefix(s, `"`) {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				return "audit: unterminated quoted value"
			}
			val, s = s[:end+2], s[end+2:]
		} else {
			end := strings.IndexByte(s, ' ')
			if end < 0 {
				end = len(s)
			}
			val, s = s[:end], s[end:]
			if val == "" || strings.Contains(val, `"`) {
				return "audit: empty value or quote in a plain value"
			}
		}
		_ = val
		if s == "" {
			break
		}
		if s[0] != ' ' || len(s) == 1 {
			return "audit: fields are separated by exactly one space"
		}
		s = s[1:]
	}
	return ""
}

// finish compares the root values, the signature, the chain and the WSUM.
func (v *verifier) finish(arrs []*vArr, all [32]byte, fx uint64) {
	h := v.hdr
	rep := v.rep
	if h == nil {
		return
	}
	for _, a := range arrs {
		ar := ArrayReport{Name: a.head.name, DType: a.head.dt.String(), Shape: a.head.shape, Bytes: a.head.nbytes,
			Chunks: a.head.geo.numChunks(), HMAC: a.hmac, SHA256: hex.EncodeToString(a.head.sha[:]), Line: a.lineNo}
		if a.head.geo.blocked {
			ar.RowsPerChunk = a.head.geo.rowsPerChunk
		}
		if ar.Shape == nil {
			ar.Shape = []int64{}
		}
		rep.Arrays = append(rep.Arrays, ar)
	}
	rep.SHA256All = hex.EncodeToString(all[:])
	structural := false
	for _, f := range v.fail {
		if f.Check == CheckGrammar || f.Check == CheckText || f.Check == CheckTruncated || f.Check == CheckGeometry ||
			f.Check == CheckBase64 || f.Check == CheckParity {
			structural = true
		}
	}
	prev, this, sigMsg, sig := h.MerklePrev, h.MerkleThis, h.Signed, h.Signature
	rep.Signature = SigAbsent
	if h.Pending {
		if v.opts.WSUM == nil {
			if v.opts.DeferWSUM {
				rep.Deferred = deferredWithoutWSUM
			} else if !v.opts.allowPending {
				v.add(&Error{Line: 4, Chunk: -1, Check: CheckWSUM, Msg: "streamed snapshot (root_pending): its WSUM file is needed to verify the root values and signature"})
			}
			rep.Chain = "unchecked"
			return
		}
		w, err := ParseWSUM(v.opts.WSUM)
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				e.File = "WSUM"
				v.add(e)
			}
			return
		}
		if !structural && w.SHA256All != all {
			v.add(&Error{Chunk: -1, File: "WSUM", Line: 1, Check: CheckWSUM, Msg: fmt.Sprintf("sha256_all %x does not match the WTXT's computed %x", w.SHA256All, all)})
		}
		prev, this, sig = w.MerklePrev, w.MerkleThis, w.Signature
		sigMsg = append(append([]byte(nil), h.Signed...), w.Unsigned...)
	} else {
		rep.Fastxor = fmt.Sprintf("%016x", fx)
		if !structural && h.SHA256All != all {
			v.add(&Error{Line: 4, Chunk: -1, Check: CheckSHA256All, Msg: fmt.Sprintf("root sha256_all is %x, the arrays give %x", h.SHA256All, all)})
		}
		if !structural && h.Fastxor != fx {
			v.add(&Error{Line: 4, Chunk: -1, Check: CheckFastxor, Msg: fmt.Sprintf("root fastxor is %016x, the arrays give %016x", h.Fastxor, fx)})
		}
	}
	rep.MerklePrev = hex.EncodeToString(prev[:])
	want := Merkle(prev, all, h.TS, h.Gen, h.Meta.Build)
	rep.MerkleThis = hex.EncodeToString(want[:])
	if !structural && want != this {
		line := 4
		if h.Pending {
			line = 0
		}
		v.add(&Error{Line: line, Chunk: -1, Check: CheckMerkle, Msg: fmt.Sprintf("merkle_this is %x, SHA-256(merkle_prev || sha256_all || ts || gen || build) gives %x", this, want)})
	}
	switch {
	case v.opts.PrevMerkle != nil:
		rep.Chain = "continues"
		if *v.opts.PrevMerkle != prev {
			rep.Chain = "broken"
			v.add(&Error{Line: 4, Chunk: -1, Check: CheckChain, Msg: fmt.Sprintf("merkle_prev is %x, the previous generation's merkle_this is %x", prev, *v.opts.PrevMerkle)})
		}
	case prev == zero32:
		rep.Chain = "first"
	default:
		rep.Chain = "unchecked"
	}
	v.checkSig(sig, sigMsg, h)
}

// deferredWithoutWSUM are the checks a streamed file cannot pass without
// its WSUM: the root values and the signature live there.
var deferredWithoutWSUM = []Check{CheckSHA256All, CheckMerkle, CheckChain, CheckSignature}

// sigRequired reports whether a missing signature fails: RequireSignature,
// or trusted keys given without the AllowUnsigned opt-out.
func (o *VerifyOptions) sigRequired() bool {
	return o.RequireSignature || len(o.TrustedKeys) > 0 && !o.AllowUnsigned
}

func (v *verifier) checkSig(sig, msg []byte, h *Header) {
	rep := v.rep
	line := 5
	if h.Pending {
		line = 0
	}
	if sig == nil {
		rep.Signature = SigAbsent
		switch {
		case v.opts.RequireSignature:
			v.add(&Error{Line: line, Chunk: -1, Check: CheckSignature, Msg: "the snapshot is not signed and a signature is required"})
		case v.opts.sigRequired():
			v.add(&Error{Line: line, Chunk: -1, Check: CheckSignature, Msg: "the snapshot is not signed, and trusted keys were given: a signature by one of them is required (allow unsigned files explicitly to accept it)"})
		}
		return
	}
	if len(v.opts.TrustedKeys) == 0 {
		rep.Signature = SigUnchecked
		rep.KeyID = h.KeyID
		if v.opts.RequireSignature {
			v.add(&Error{Line: line, Chunk: -1, Check: CheckSignature, Msg: "signed, but no trusted public key was given to check it"})
		}
		return
	}
	for _, k := range v.opts.TrustedKeys {
		id := keys.KeyID(k)
		if h.Pending || id == h.KeyID {
			if ed25519.Verify(k, msg, sig) {
				rep.Signature = SigVerified
				rep.KeyID = id
				return
			}
			if !h.Pending {
				rep.Signature = SigFailed
				v.add(&Error{Line: line, Chunk: -1, Check: CheckSignature, Msg: fmt.Sprintf("Ed25519 signature by keyid %s does not verify over the header", id)})
				return
			}
		}
	}
	rep.Signature = SigFailed
	if h.Pending {
		v.add(&Error{Line: line, File: "WSUM", Chunk: -1, Check: CheckSignature, Msg: "WSUM signature does not verify with any trusted key"})
		return
	}
	v.add(&Error{Line: line, Chunk: -1, Check: CheckSignerTrust, Msg: fmt.Sprintf("signed by keyid %s, which is not among the trusted keys", h.KeyID)})
}
