package gitops

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// ErrHeader reports a WTXT or WSUM whose header values cannot be read.
var ErrHeader = errors.New("gitops: header")

// Header holds the WTXT header values gitops records in commits, tags and
// the summary file. It is read from the `meta` and `root` lines (or, for a
// streaming WTXT with `root_pending`, from the WSUM line).
type Header struct {
	Gen        uint64 // meta gen
	GenText    string // meta gen exactly as written, e.g. "000123"
	TS         string // meta ts
	Build      string // meta build
	SHA256All  string // root sha256_all (hex64)
	MerklePrev string // root merkle_prev (hex64)
	MerkleThis string // root merkle_this (hex64)
	Pending    bool   // the WTXT has root_pending; root values came from a WSUM
}

// maxWSUM bounds the WSUM file ParseWSUM reads (wtxt.ParseWSUM refuses
// more than 1024 bytes).
const maxWSUM = 1024

// ParseHeader reads the header values from the start of a WTXT file with
// wtxt.ReadHeader, the one reading of the WTXT header (so the header's
// grammar is checked as the verifier checks it; the signature and the
// arrays are not). For a streaming WTXT (root_pending) the root values are
// left empty and Pending is set; complete them with ParseWSUM. Errors wrap
// ErrHeader and the *wtxt.Error naming the line and check.
func ParseHeader(r io.Reader) (*Header, error) {
	wh, err := wtxt.ReadHeader(r)
	if err != nil {
		return nil, fmt.Errorf("%w: WTXT: %w", ErrHeader, err)
	}
	if wh.Meta.Build == "" {
		return nil, fmt.Errorf("%w: WTXT line 2: meta build is empty", ErrHeader)
	}
	h := &Header{Gen: wh.Meta.Gen, GenText: wh.Gen, TS: wh.TS, Build: wh.Meta.Build, Pending: wh.Pending}
	if !wh.Pending {
		h.SHA256All = hex.EncodeToString(wh.SHA256All[:])
		h.MerklePrev = hex.EncodeToString(wh.MerklePrev[:])
		h.MerkleThis = hex.EncodeToString(wh.MerkleThis[:])
	}
	return h, nil
}

// ParseWSUM fills h's root values from a WSUM file (`WSUM 1 sha256_all=...
// merkle_prev=... merkle_this=... [sign=...]`), parsed by wtxt.ParseWSUM.
// The signature is not checked here.
func ParseWSUM(r io.Reader, h *Header) error {
	b, err := io.ReadAll(io.LimitReader(r, maxWSUM+1))
	if err != nil {
		return fmt.Errorf("%w: WSUM: read: %w", ErrHeader, err)
	}
	w, err := wtxt.ParseWSUM(b)
	if err != nil {
		return fmt.Errorf("%w: WSUM: %w", ErrHeader, err)
	}
	h.SHA256All = hex.EncodeToString(w.SHA256All[:])
	h.MerklePrev = hex.EncodeToString(w.MerklePrev[:])
	h.MerkleThis = hex.EncodeToString(w.MerkleThis[:])
	return nil
}
