package torch

import (
	"bytes"
	"errors"

	"github.com/snapd-ml/snapd/formats"
)

// Attribute keys this codec reads and writes (see the package
// documentation).
const (
	// AttrTree (snapshot) is the checkpoint's object tree as canonical
	// JSON, tensors replaced by references to array names.
	AttrTree = "torch.tree"
	// AttrStorage (array) numbers the storage a tensor views (0, 1, ... in
	// order of first use); arrays with the same number are tied.
	AttrStorage = "torch.storage"
	// AttrStorageNumel (array) is that storage's element count.
	AttrStorageNumel = "torch.storage_numel"
	// AttrOffset (array) is the view's storage offset in elements.
	AttrOffset = "torch.offset"
	// AttrStride (array) is the view's strides in elements (JSON array).
	AttrStride = "torch.stride"
)

// Sentinel errors. Decode's format errors are *Error values wrapping one.
var (
	// ErrCorrupt: the file violates the layout (zip, pickle, storages).
	ErrCorrupt = formats.Kind("malformed torch checkpoint", formats.ErrCorrupt)
	// ErrRefused: the pickle names a global outside the allowlist (it is
	// never resolved, let alone called) or an opcode that builds objects.
	ErrRefused = formats.Kind("refused: not plain checkpoint data", formats.ErrUnsupported)
	// ErrLimit: a bound (pickle size, memo, nesting, expanded bytes) was hit.
	ErrLimit = formats.Kind("limit exceeded", formats.ErrLimit)
	// ErrUnsupported: valid torch data this codec does not read (sparse,
	// quantized, complex tensors, compressed storages, big-endian
	// legacy tar files).
	ErrUnsupported = formats.Kind("unsupported torch feature", formats.ErrUnsupported)
	// ErrInvalidSnapshot: Encode was given a snapshot it cannot write.
	ErrInvalidSnapshot = errors.New("invalid snapshot for torch")
)

// Error is a Decode failure (Format "torch"): the file, the Part of it
// (zip member, pickle stream, tensor), the file offset when one applies,
// and the check that failed. It never quotes file content beyond names it
// validated.
type Error = formats.Error

// Default limits (see Codec).
const (
	DefaultMaxPickle    = 64 << 20
	DefaultExpandFactor = 4
	DefaultExpandSlack  = 64 << 20
)

// Codec reads and writes PyTorch checkpoints. The zero value uses the
// default limits.
type Codec struct {
	// MaxPickle bounds data.pkl (and each legacy pickle); default
	// DefaultMaxPickle.
	MaxPickle int64
	// The arrays' total size may reach ExpandFactor × the file size +
	// ExpandSlack bytes (views, ties and stride-0 expansions can make a
	// small file describe huge arrays); defaults DefaultExpandFactor and
	// DefaultExpandSlack.
	ExpandFactor int64
	ExpandSlack  int64
}

// New returns the torch codec with default limits.
func New() formats.Codec { return &Codec{} }

// Name implements formats.Codec.
func (*Codec) Name() string { return "torch" }

// Extensions implements formats.Codec: .pt and .pth. A `.bin` file is
// read as torch only when its magic bytes say so (see Sniff).
func (*Codec) Extensions() []string { return []string{".pt", ".pth"} }

var (
	zipMagic = []byte("PK\x03\x04")
	// legacyMagic is pickle protocol 2 of torch's MAGIC_NUMBER
	// 0x1950a86a20f9469cfc6c (PROTO 2, LONG1 of 10 bytes).
	legacyMagic = []byte{0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}
)

// Sniff implements formats.Codec: a zip whose first member is named
// <dir>/data.pkl (as torch writes it; a name longer than head is
// accepted), or a pickle of torch's legacy magic number.
func (*Codec) Sniff(head []byte) bool {
	if bytes.HasPrefix(head, legacyMagic) {
		return true
	}
	if !bytes.HasPrefix(head, zipMagic) || len(head) < 30 {
		return false
	}
	n := int(head[26]) | int(head[27])<<8
	name := head[30:]
	if n <= len(name) {
		name = name[:n]
		return bytes.HasSuffix(name, []byte("/data.pkl")) || string(name) == "data.pkl"
	}
	return true
}

func (c *Codec) maxPickle() int64 {
	if c.MaxPickle > 0 {
		return c.MaxPickle
	}
	return DefaultMaxPickle
}

func (c *Codec) expandBudget(size int64) int64 {
	f, s := int64(DefaultExpandFactor), int64(DefaultExpandSlack)
	if c.ExpandFactor > 0 {
		f = c.ExpandFactor
	}
	if c.ExpandSlack > 0 {
		s = c.ExpandSlack
	}
	if size > (1<<62)/f {
		return 1 << 62
	}
	return size*f + s
}
