package pickle

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/snapd-ml/snapd/formats"
)

// ErrRefused is wrapped by the error for a global outside the allowlist
// (in strict mode) and for opcodes that build arbitrary objects (INST,
// OBJ, EXT*, out-of-band buffers). It matches formats.ErrUnsupported.
var ErrRefused = formats.Kind("refused: not plain data", formats.ErrUnsupported)

// Error is a located unpickling failure. Err is the class: one of
// formats.ErrCorrupt (the bytes are not a valid pickle or build
// something inconsistent), formats.ErrLimit (a bound of Options or the
// Budget), formats.ErrUnsupported, ErrRefused (matches ErrUnsupported),
// or a class a resolver callable or the persistent loader reported.
// Check never quotes the pickle's content beyond names made printable
// with PrintableName.
type Error struct {
	// Offset is the file offset (Options.Base + position in the pickle)
	// of the opcode that failed; -1 when none applies.
	Offset int64
	// Path is the key path (see Walk) of the value concerned, when it is
	// knowable: for a global outside the allowlist, where the result holds
	// it ("optimizer.state.lr_lambda"); "" otherwise. The root is ".".
	Path string
	// Global is module.name of the refused global, when the error is one.
	Global string
	// Check says which check failed.
	Check string
	// Err is the class (see above).
	Err error
}

// Describe is the error without its offset: `key path "p": check`.
func (e *Error) Describe() string {
	if e.Path != "" {
		return "key path " + strconv.QuoteToASCII(truncate(e.Path, 200)) + ": " + e.Check
	}
	return e.Check
}

func (e *Error) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("offset %d: %s", e.Offset, e.Describe())
	}
	return e.Describe()
}

// Unwrap returns the class.
func (e *Error) Unwrap() error { return e.Err }

// Fail is how a Global's Call or a PersistentLoader reports a failure of
// a given class (formats.ErrCorrupt, formats.ErrUnsupported, ...): the
// machine adds the offset. check must not quote file content.
func Fail(class error, format string, args ...any) error {
	return &Error{Offset: -1, Check: fmt.Sprintf(format, args...), Err: class}
}

// classOf is the formats sentinel err wraps (ErrRefused first), or
// ErrCorrupt when it wraps none.
func classOf(err error) error {
	for _, s := range []error{ErrRefused, formats.ErrLimit, formats.ErrUnsupported, formats.ErrTruncated, formats.ErrChecksum, formats.ErrCorrupt} {
		if errors.Is(err, s) {
			return s
		}
	}
	return formats.ErrCorrupt
}

func isContext(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
