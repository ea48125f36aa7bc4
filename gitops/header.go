package gitops

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// ErrHeader reports a WTXT or WSUM whose header values cannot be read.
var ErrHeader = errors.New("gitops: header")

// Header holds the WTXT header values gitops records in commits, tags and
// the summary file: the generation number and its wtxt.Root (read from
// the `meta` and `root` lines or, for a streaming WTXT with `root_pending`,
// from the WSUM line). The Root's text form (Root.Fields) is what the
// trailers and generation.txt carry; gitops converts nothing by hand.
type Header struct {
	Gen  uint64    // meta gen
	Root wtxt.Root // Root.Gen is meta gen exactly as written, e.g. "000123"
	// Pending: the WTXT has root_pending; the root hashes came from a WSUM
	// (zero until ParseWSUM fills them).
	Pending bool
	// Meta is the generation's metadata (the "meta" member of its
	// attributes document), committed as the Snapd-Meta trailer
	// (usermeta.go). ParseHeader leaves it nil.
	Meta snapshot.UserMeta
}

// rootTrailers are the commit trailer keys of a Root's six values, in
// wtxt.Root.Fields order.
var rootTrailers = [6]string{TrailerGen, TrailerTS, TrailerBuild, TrailerSHA256All, TrailerMerklePrev, TrailerMerkleThis}

// RootTrailers returns the commit trailer keys of a wtxt.Root's six
// values, in wtxt.Root.Fields order: a generation commit carries
// RootTrailers()[i] with the value Fields()[i].Value.
func RootTrailers() [6]string { return rootTrailers }

// trailer returns the value h's commit carries under the root trailer key.
func (h *Header) trailer(key string) string {
	f := h.Root.Fields()
	for i, k := range rootTrailers {
		if k == key {
			return f[i].Value
		}
	}
	return ""
}

// headerJSON is Header's JSON form (queue job files persist it): the
// fields of the Header that held the root values as text, unchanged, so
// job files written before and after read alike.
type headerJSON struct {
	Gen        uint64
	GenText    string
	TS         string
	Build      string
	SHA256All  string
	MerklePrev string
	MerkleThis string
	Pending    bool
	Meta       snapshot.UserMeta `json:",omitempty"`
}

// MarshalJSON writes h with the root values as text (wtxt.Root.Fields).
func (h Header) MarshalJSON() ([]byte, error) {
	f := h.Root.Fields()
	return json.Marshal(headerJSON{Gen: h.Gen, GenText: f[0].Value, TS: f[1].Value, Build: f[2].Value,
		SHA256All: f[3].Value, MerklePrev: f[4].Value, MerkleThis: f[5].Value, Pending: h.Pending, Meta: h.Meta})
}

// UnmarshalJSON reads MarshalJSON's form. A hash is 64 lowercase hex
// digits or empty (zero: a job file of a Header without root values).
func (h *Header) UnmarshalJSON(b []byte) error {
	var j headerJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	r := wtxt.Root{Gen: j.GenText, TS: j.TS, Build: j.Build}
	for _, f := range []struct {
		name, hex string
		dst       *[32]byte
	}{{"SHA256All", j.SHA256All, &r.SHA256All}, {"MerklePrev", j.MerklePrev, &r.MerklePrev}, {"MerkleThis", j.MerkleThis, &r.MerkleThis}} {
		if f.hex == "" {
			continue
		}
		if !wtxt.IsHex64(f.hex) {
			return fmt.Errorf("%w: JSON %s: want 64 lowercase hex digits", ErrHeader, f.name)
		}
		hex.Decode(f.dst[:], []byte(f.hex))
	}
	*h = Header{Gen: j.Gen, Root: r, Pending: j.Pending, Meta: j.Meta}
	return nil
}

// maxWSUM bounds the WSUM file ParseWSUM reads (wtxt.ParseWSUM refuses
// more than 1024 bytes).
const maxWSUM = 1024

// ParseHeader reads the header values from the start of a WTXT file with
// wtxt.ReadHeader, the one reading of the WTXT header (so the header's
// grammar is checked as the verifier checks it; the signature and the
// arrays are not). For a streaming WTXT (root_pending) the root hashes are
// left zero and Pending is set; complete them with ParseWSUM. Errors wrap
// ErrHeader and the *wtxt.Error naming the line and check.
func ParseHeader(r io.Reader) (*Header, error) {
	wh, err := wtxt.ReadHeader(r)
	if err != nil {
		return nil, fmt.Errorf("%w: WTXT: %w", ErrHeader, err)
	}
	if wh.Meta.Build == "" {
		return nil, fmt.Errorf("%w: WTXT line 2: meta build is empty", ErrHeader)
	}
	return &Header{Gen: wh.Meta.Gen, Root: wh.Root, Pending: wh.Pending}, nil
}

// ParseWSUM fills h's root hashes from a WSUM file (`WSUM 1 sha256_all=...
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
	h.Root.SHA256All, h.Root.MerklePrev, h.Root.MerkleThis = w.SHA256All, w.MerklePrev, w.MerkleThis
	return nil
}
