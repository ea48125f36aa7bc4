package formats

import (
	"fmt"

	"github.com/snapd-ml/snapd/snapshot"
)

// Loss is one thing an encoder dropped or altered because the target
// format cannot hold it, reported through EncodeOptions.Lost when
// EncodeOptions.Lossy allowed it. Its text names structure (arrays,
// dtypes, attribute keys), never array data.
type Loss struct {
	// Format is the target codec's name ("stb").
	Format string
	// Array is the array concerned; empty for the snapshot itself.
	Array string
	// What says what was dropped or altered: "array dropped (dtype
	// f8e4m3)", `attribute "numpy.header" dropped`.
	What string
	// Why says what the target lacks: "STB has no fp8 dtype".
	Why string
}

// String renders l as `<format>: array "<name>": <what>: <why>`.
func (l Loss) String() string {
	s := l.Format + ": "
	if l.Array != "" {
		s += fmt.Sprintf("array %q: ", l.Array)
	}
	s += l.What
	if l.Why != "" {
		s += ": " + l.Why
	}
	return s
}

// Drop reports l to o.Lost when it is set. Encoders call it for every
// array, attribute or property they drop or alter under Lossy, so that
// a lossy conversion says exactly what it lost.
func (o EncodeOptions) Drop(l Loss) {
	if o.Lost != nil {
		o.Lost(l)
	}
}

// DTypeError is an encoder's refusal of an array whose dtype the target
// format has no counterpart for (fp8 or complex in a format that predates
// them, bf16 in STB): it names the target format, the array and the
// dtype. It matches both ErrLossy (Lossy would drop the array) and
// ErrUnsupported under errors.Is.
type DTypeError struct {
	Format string
	Array  string
	DType  snapshot.DType
	// Why optionally says what the format holds instead ("zTensor 1.0
	// dtypes are float16/32/64, bfloat16, (u)int8-64 and bool").
	Why string
}

func (e *DTypeError) Error() string {
	s := fmt.Sprintf("%s: array %q: dtype %s has no %s counterpart", e.Format, e.Array, e.DType, e.Format)
	if e.Why != "" {
		s += " (" + e.Why + ")"
	}
	return s + ": " + ErrLossy.Error() + " (lossy conversion drops the array)"
}

// Unwrap returns ErrLossy and ErrUnsupported.
func (e *DTypeError) Unwrap() []error { return []error{ErrLossy, ErrUnsupported} }

// DroppedDType is the Loss of an array dropped because of its dtype.
func DroppedDType(format, array string, dt snapshot.DType, why string) Loss {
	return Loss{Format: format, Array: array, What: fmt.Sprintf("array dropped (dtype %s)", dt), Why: why}
}
