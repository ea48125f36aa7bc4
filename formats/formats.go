// Package formats defines the codec interface every checkpoint format
// implements and an explicit registry (no init-time registration) that
// finds a codec by name, file extension or magic bytes.
//
// Format packages live under formats/<name> and import only snapshot, keys
// and libraries; the registry is assembled by the caller (cmd/snapd), see
// cmd/snapd/registry.go.
package formats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/snapd-ml/snapd/snapshot"
)

// ErrUnknownFormat is returned when no registered codec matches.
var ErrUnknownFormat = errors.New("unknown format")

// ErrLossy is wrapped by encoders that cannot represent something of the
// snapshot (a dtype, a name, an attribute) and were not given Lossy.
var ErrLossy = errors.New("target format cannot represent this losslessly")

// DecodeOptions tune decoding.
type DecodeOptions struct {
	// Name is used in error messages (usually the file path).
	Name string
	// MaxDecoded bounds the bytes one Decode call may decompress or
	// materialise (copy out of the file into new memory); see Budget.
	// 0 selects DefaultMaxDecoded(size); a negative value is invalid and
	// treated as 0.
	MaxDecoded int64
	// SharedBudget, when set, is the budget Decode charges instead of a
	// new one of MaxDecoded bytes (MaxDecoded is then ignored): for a
	// caller that bounds several files with one cap, or that inspects
	// what a decode materialised (Budget.Peak). Lazily read array data
	// keeps charging it after Decode returns.
	SharedBudget *Budget
	// Diagnostic, when set, receives what a reader noticed without it
	// being an error (an ECC block corrected, parity inconsistent with
	// intact data). Diagnostics are never stored in the snapshot, so
	// X -> WTXT -> X stays a fixed point. nil drops them.
	Diagnostic func(Diagnostic)
	// Strict refuses input a codec would otherwise carry without
	// interpreting it: a pickle (torch) that names globals outside the
	// allowlist fails with an error naming the first one and its key
	// path, instead of being kept verbatim (see formats/torch).
	Strict bool
}

// Diagnostic is a reader's note about a file that decoded successfully.
// Its text describes the file's structure, never its content.
type Diagnostic struct {
	// Where names the part of the file (chunk, tensor, TOC entry).
	Where string
	// Message says what was noticed.
	Message string
}

func (d Diagnostic) String() string {
	if d.Where == "" {
		return d.Message
	}
	return d.Where + ": " + d.Message
}

// Report hands d to o.Diagnostic when it is set.
func (o DecodeOptions) Report(where, format string, args ...any) {
	if o.Diagnostic != nil {
		o.Diagnostic(Diagnostic{Where: where, Message: fmt.Sprintf(format, args...)})
	}
}

// Budget returns the decode budget of one Decode call on a file of size
// bytes: opts.SharedBudget when set, else a new budget of opts.MaxDecoded,
// or DefaultMaxDecoded(size) when it is not set.
func (o DecodeOptions) Budget(size int64) *Budget {
	if o.SharedBudget != nil {
		return o.SharedBudget
	}
	limit := o.MaxDecoded
	if limit <= 0 {
		limit = DefaultMaxDecoded(size)
	}
	return NewBudget(limit)
}

// EncodeOptions tune encoding.
type EncodeOptions struct {
	// Lossy allows dropping what the target format cannot hold (e.g. STB
	// has no bf16); without it such input fails with ErrLossy naming the
	// tensor and the reason.
	Lossy bool
	// Lost, when set, receives each thing Lossy dropped or altered (see
	// EncodeOptions.Drop), so that a caller can say exactly what a lossy
	// conversion lost. nil discards the reports.
	Lost func(Loss)
}

// Codec reads and writes one container format.
type Codec interface {
	// Name is the short format name used by --from/--to ("ztensor").
	Name() string
	// Extensions lists file extensions with the dot (".zt").
	Extensions() []string
	// Sniff reports whether head (the first bytes of a file, at most
	// SniffLen) starts like this format.
	Sniff(head []byte) bool
	// Decode reads a file of the given size. Array data may alias r (when r
	// is memory-backed, see snapshot.Section), so r must stay valid while
	// the snapshot is used. Every size is checked before allocation.
	//
	// A failure to read the format is a *Error (possibly inside a list
	// such as aero.CorruptError) naming the file, the place and the check,
	// that matches one of ErrCorrupt, ErrTruncated, ErrLimit, ErrChecksum
	// or ErrUnsupported under errors.Is; its message never quotes the
	// file's content. Other errors are the reader's or ctx's, wrapped with
	// %w.
	Decode(ctx context.Context, r io.ReaderAt, size int64, opts DecodeOptions) (*snapshot.Snapshot, error)
	// Encode writes s to w.
	Encode(ctx context.Context, w io.Writer, s *snapshot.Snapshot, opts EncodeOptions) error
}

// SniffLen is how many leading bytes Sniff is given (fewer for short files).
const SniffLen = 64

// Registry is an ordered set of codecs.
type Registry struct {
	codecs []Codec
}

// NewRegistry returns a registry holding the given codecs. Sniffing tries
// them in this order.
func NewRegistry(codecs ...Codec) *Registry {
	return &Registry{codecs: append([]Codec(nil), codecs...)}
}

// Codecs returns the registered codecs in registration order.
func (r *Registry) Codecs() []Codec { return append([]Codec(nil), r.codecs...) }

// Names returns the sorted codec names.
func (r *Registry) Names() []string {
	var out []string
	for _, c := range r.codecs {
		out = append(out, c.Name())
	}
	sort.Strings(out)
	return out
}

// ByName returns the codec called name.
func (r *Registry) ByName(name string) (Codec, error) {
	for _, c := range r.codecs {
		if c.Name() == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownFormat, name, strings.Join(r.Names(), ", "))
}

// ByExtension returns the codec whose extensions include that of path.
func (r *Registry) ByExtension(path string) (Codec, error) {
	ext := strings.ToLower(filepath.Ext(path))
	for _, c := range r.codecs {
		for _, e := range c.Extensions() {
			if e == ext {
				return c, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: no codec for extension %q of %s", ErrUnknownFormat, ext, path)
}

// Sniff returns the first codec whose Sniff accepts head.
func (r *Registry) Sniff(head []byte) (Codec, error) {
	if len(head) > SniffLen {
		head = head[:SniffLen]
	}
	for _, c := range r.codecs {
		if c.Sniff(head) {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w: the first %d bytes match no codec's magic (not a known format)", ErrUnknownFormat, len(head))
}

// Detect picks the codec for reading a file: by magic first, then by
// extension.
func (r *Registry) Detect(path string, ra io.ReaderAt, size int64) (Codec, error) {
	n := int64(SniffLen)
	if size < n {
		n = size
	}
	head := make([]byte, n)
	if _, err := ra.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if c, err := r.Sniff(head); err == nil {
		return c, nil
	}
	return r.ByExtension(path)
}
