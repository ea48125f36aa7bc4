package formats

import "errors"

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
