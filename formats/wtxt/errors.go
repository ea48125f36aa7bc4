package wtxt

import (
	"errors"
	"fmt"
	"strings"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/where"
)

// Check names the rule a WTXT file broke. Values are stable (they appear
// in --json output).
type Check string

// The checks a verifier runs (profile section 11).
const (
	CheckText        Check = "text"     // bytes, line endings, blanks
	CheckGrammar     Check = "grammar"  // line kinds, fields, order, values
	CheckGeometry    Check = "geometry" // chunk ix/off/len/lines vs the array
	CheckParity      Check = "parity"   // a base64 line's parity nibble
	CheckBase64      Check = "base64"   // base64 alphabet, padding, length
	CheckCRC32C      Check = "crc32c"   // chunk crc32c
	CheckChunkSHA    Check = "chunk-sha256"
	CheckArraySHA    Check = "array-sha256"
	CheckHMAC        Check = "hmac"
	CheckSHA256All   Check = "sha256_all"
	CheckMerkle      Check = "merkle"    // merkle_this vs its inputs
	CheckChain       Check = "chain"     // merkle_prev vs the previous generation
	CheckFastxor     Check = "fastxor"   // root fastxor
	CheckSignature   Check = "signature" // Ed25519 over the header / WSUM
	CheckWSUM        Check = "wsum"      // WTXT and WSUM disagree
	CheckTruncated   Check = "truncated" // the file ends early
	CheckDelta       Check = "delta"     // DELTA v2 structure and base
	CheckSignerTrust Check = "signer"    // signed by a key not trusted
	CheckLimit       Check = "limit"     // a reader's memory cap (ReadIndexWith)
)

// ErrInvalid is wrapped by every *Error: callers that only need "the file
// is bad" test errors.Is(err, ErrInvalid).
var ErrInvalid = errors.New("invalid WTXT")

// ErrChain is the one "chain" check of the project: a generation's
// merkle_prev is not the previous generation's merkle_this (or, for a
// rank part, not its job's chain id). Every error reporting that check
// matches it under errors.Is: a *Error with CheckChain, a seal's chain
// check (armor), a verify-repo failure of check "chain" (gitops/verify).
// It matches formats.ErrChecksum: a chain value is a digest that
// disagrees with the bytes it covers.
var ErrChain = formats.Kind("chain broken", formats.ErrChecksum)

// Error is a failed check at a place in a WTXT (or WSUM, or delta) file.
type Error struct {
	File  string `json:"file,omitempty"`  // file name when known
	Line  int    `json:"line,omitempty"`  // 1-based line number; 0 when the check is not about one line
	Array string `json:"array,omitempty"` // array name, when inside an array
	Chunk int64  `json:"chunk"`           // chunk ix, or -1
	// Rank is the rank of a multi-rank generation the check concerns
	// (formats/wtxt/ranks); nil when the check is not about one rank.
	Rank  *int   `json:"rank,omitempty"`
	Check Check  `json:"check"`
	Msg   string `json:"message"`
	Err   error  `json:"-"` // underlying cause, if any
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:", e.Line)
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Rank != nil {
		fmt.Fprintf(&b, "rank %d: ", *e.Rank)
	}
	if e.Array != "" {
		fmt.Fprintf(&b, "array %s: ", e.Array)
	}
	if e.Chunk >= 0 {
		fmt.Fprintf(&b, "chunk %d: ", e.Chunk)
	}
	fmt.Fprintf(&b, "%s: %s", e.Check, e.Msg)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap returns ErrInvalid, the codec-independent kind of the check
// (formats.ErrTruncated, ErrChecksum or ErrCorrupt, see Check.Kind; for
// CheckChain, or a sub-format's chain check such as "ranks/chain",
// ErrChain, which matches ErrChecksum) and the cause, if any.
func (e *Error) Unwrap() []error {
	kind := e.Check.Kind()
	if e.Check.name() == CheckChain {
		kind = ErrChain
	}
	if e.Err != nil {
		return []error{ErrInvalid, kind, e.Err}
	}
	return []error{ErrInvalid, kind}
}

// Where locates the failure (internal/where): the file, line, array and
// chunk, the rank as the part ("rank 3"), and the check as "wtxt/<check>"
// or, for a sub-format's namespaced check ("ranks/chain"), as it is. A
// cause that knows more (a codec error inside a chunk) fills what e
// leaves unknown.
func (e *Error) Where() where.Where {
	w := where.None()
	w.File, w.Line, w.Array, w.Chunk = e.File, e.Line, e.Array, e.Chunk
	if e.Rank != nil {
		w.Part = fmt.Sprintf("rank %d", *e.Rank)
	}
	w.Check = string(e.Check)
	if !strings.Contains(w.Check, "/") {
		w.Check = where.Check(where.WTXT, w.Check)
	}
	if e.Err != nil {
		w = w.Under(where.Cause(e.Err))
	}
	return w
}

// Kind maps a check to the sentinel of formats that a codec's Decode
// error matches (the contract of formats.Codec.Decode): the file ending
// early is formats.ErrTruncated, a reader's memory cap formats.ErrLimit, a digest, MAC, chain value or signature
// that disagrees with the bytes is formats.ErrChecksum, everything else
// formats.ErrCorrupt. A namespaced check ("ranks/signature", a
// sub-format's) is the kind of its last element.
func (c Check) Kind() error {
	switch c.name() {
	case CheckTruncated:
		return formats.ErrTruncated
	case CheckLimit:
		return formats.ErrLimit
	case CheckCRC32C, CheckChunkSHA, CheckArraySHA, CheckHMAC, CheckSHA256All, CheckMerkle, CheckChain, CheckFastxor, CheckSignature, CheckWSUM:
		return formats.ErrChecksum
	}
	return formats.ErrCorrupt
}

// name is the check without a sub-format's namespace: "chain" for
// "ranks/chain".
func (c Check) name() Check {
	if i := strings.LastIndexByte(string(c), '/'); i >= 0 {
		return c[i+1:]
	}
	return c
}
