package formats

import (
	"errors"
	"fmt"
	"strings"

	"github.com/snapd-ml/snapd/internal/where"
)

// Sentinel errors shared by every codec. A decoder's error wraps one of
// them (usually through the codec's own sentinel, see Kind) so that callers
// can branch without knowing the format:
//
//	if errors.Is(err, formats.ErrLimit) { ... }
//
// Decoder errors name where (file, offset, chunk, tensor) and which check
// failed; they never quote the file's bytes.
var (
	// ErrCorrupt: the bytes violate the format (a structure that
	// disagrees with the rest of the file, a bad field, a bad encoding).
	ErrCorrupt = errors.New("corrupt file")
	// ErrTruncated: a declared range runs past the end of the file.
	ErrTruncated = errors.New("truncated file")
	// ErrLimit: a declared or decoded size exceeds a limit or the decode
	// budget (see Budget).
	ErrLimit = errors.New("limit exceeded")
	// ErrChecksum: a digest, CRC or signature stored in the file does not
	// match the bytes it covers.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrUnsupported: a well-formed file uses a version or feature this
	// codec does not read.
	ErrUnsupported = errors.New("unsupported format feature")
)

// Kind returns a new sentinel error with its own message that also
// matches kind under errors.Is. Codecs define their sentinels with it:
//
//	var ErrCorrupt = formats.Kind("malformed zTensor file", formats.ErrCorrupt)
//
// so errors.Is(err, ztensor.ErrCorrupt) and errors.Is(err,
// formats.ErrCorrupt) both hold, and the message is unchanged.
func Kind(msg string, kind error) error { return &kindError{msg: msg, kind: kind} }

type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// Error is the error type of every codec's Decode: where the problem is
// (file, part of the file, tensor, byte offset) and which check failed. It
// wraps a sentinel (usually a codec's own, made with Kind). It never holds
// the file's content: Part and Tensor are names the decoder validated or
// quoted with %q, Check and Detail describe the structure.
//
// The message is
//
//	<Format>: <File>: <Part>: tensor "<Tensor>": offset <Offset>: <Check>: <Detail> (<Err>)
//
// where every empty part (and a negative Offset) is left out together with
// its separator. With neither Check nor Detail the wrapped error's message
// stands in their place, unparenthesised, so a codec can attach the file
// name to an error built deeper down without repeating its text.
type Error struct {
	Format string // codec name, the message's prefix ("stb"); may be empty
	File   string // DecodeOptions.Name, may be empty
	Part   string // the part of the file: zip member, table or TOC entry, component; may be empty
	Tensor string // tensor name as the file states it, may be empty
	Offset int64  // file offset the check concerns, -1 when none
	Check  string // which check failed
	Detail string // what the check found, may be empty
	Err    error  // the sentinel or the underlying error
}

func (e *Error) Error() string {
	var b strings.Builder
	part := func(s string) {
		if s != "" {
			b.WriteString(s)
			b.WriteString(": ")
		}
	}
	part(e.Format)
	part(e.File)
	part(e.Part)
	if e.Tensor != "" {
		fmt.Fprintf(&b, "tensor %q: ", e.Tensor)
	}
	if e.Offset >= 0 {
		fmt.Fprintf(&b, "offset %d: ", e.Offset)
	}
	if e.Check == "" && e.Detail == "" {
		if e.Err != nil {
			b.WriteString(e.Err.Error())
		}
		return strings.TrimSuffix(b.String(), ": ")
	}
	b.WriteString(e.Check)
	if e.Detail != "" {
		if e.Check != "" {
			b.WriteString(": ")
		}
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(" (")
		b.WriteString(e.Err.Error())
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the wrapped sentinel or error.
func (e *Error) Unwrap() error { return e.Err }

// Where locates the failure (internal/where): File, Part, Offset, the
// tensor as the array and Check as "format/<Check>". A wrapped error that
// knows more (a WTXT check inside a codec) fills what e leaves unknown;
// with no Check of its own, the cause's check stands.
func (e *Error) Where() where.Where {
	w := where.None()
	w.File, w.Part, w.Array, w.Offset = e.File, e.Part, e.Tensor, e.Offset
	w.Check = where.Check(where.Format, e.Check)
	return w.Under(where.Cause(e.Err))
}
