package wtxt

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// Root is a generation's place in the Merkle chain: the values merkle_this
// is computed from and merkle_this itself. It is the one declaration of
// them: Header, Result (encode), WSUM, armor.Seal and the daemon's chain
// state carry a Root instead of copies of its fields.
//
// Gen, TS and Build are the meta values exactly as written (they enter
// the Merkle hash as text): Gen is the zero-padded DEC6 ("000123"), TS
// "YYYY-MM-DDTHH:MM:SSZ". A WSUM line carries only the three hashes; its
// Root's text values are empty (see Header.Complete).
type Root struct {
	Gen, TS, Build string
	SHA256All      [32]byte
	MerklePrev     [32]byte
	MerkleThis     [32]byte
}

// RootField is one of a Root's six values in text form: Key as the WTXT
// header, the WSEAL line and generation.txt spell it (gen, ts, build,
// sha256_all, merkle_prev, merkle_this), Value as written there.
type RootField struct{ Key, Value string }

// Fields returns r's six values in text form, in String's order, the
// hashes as 64 lowercase hex digits. It is the one conversion of a Root to
// text: String, gitops's commit trailers and generation.txt, and
// verify-repo's comparisons with them are built on it. The keys do not
// depend on r (Root{}.Fields() lists them).
func (r Root) Fields() [6]RootField {
	return [6]RootField{{"gen", r.Gen}, {"ts", r.TS}, {"build", r.Build},
		{"sha256_all", hex.EncodeToString(r.SHA256All[:])},
		{"merkle_prev", hex.EncodeToString(r.MerklePrev[:])},
		{"merkle_this", hex.EncodeToString(r.MerkleThis[:])}}
}

// String is the text form ParseRoot reads: "gen=000123 ts=... build=...
// sha256_all=<hex64> merkle_prev=<hex64> merkle_this=<hex64>", the order
// and spelling of the WSEAL line's and the WTXT header's fields.
func (r Root) String() string {
	var b strings.Builder
	for i, f := range r.Fields() {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f.Key + "=" + f.Value)
	}
	return b.String()
}

// ParseRoot reads Root's text form strictly: the six fields in order, one
// space apart, gen a DEC6 of at most 18 digits, ts the profile's form,
// build a token, the hashes 64 lowercase hex digits. It does not check
// that merkle_this follows from the others (Check does). Errors name the
// field, never quote the input.
func ParseRoot(s string) (Root, error) {
	var r Root
	if len(s) > 1024 {
		return r, fmt.Errorf("wtxt: root: %d bytes is too long", len(s))
	}
	keys := Root{}.Fields()
	f := strings.Split(s, " ")
	if len(f) != len(keys) {
		return r, fmt.Errorf("wtxt: root: %d fields, want %d (gen ts build sha256_all merkle_prev merkle_this)", len(f), len(keys))
	}
	v := make([]string, len(f))
	for i, kv := range f {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k != keys[i].Key {
			return r, fmt.Errorf("wtxt: root: field %d must be %s=", i+1, keys[i].Key)
		}
		v[i] = val
	}
	if _, ok := parseDec(v[0], 6); !ok || len(v[0]) > 18 {
		return r, fmt.Errorf("wtxt: root: gen: want a zero-padded decimal of 6 to 18 digits")
	}
	if _, err := ParseTS(v[1]); err != nil {
		return r, fmt.Errorf("wtxt: root: ts: want YYYY-MM-DDTHH:MM:SSZ")
	}
	if !IsToken(v[2]) {
		return r, fmt.Errorf("wtxt: root: build: want a non-empty token")
	}
	r.Gen, r.TS, r.Build = v[0], v[1], v[2]
	for i, dst := range []*[32]byte{&r.SHA256All, &r.MerklePrev, &r.MerkleThis} {
		h, ok := parseHex32(v[3+i])
		if !ok {
			return Root{}, fmt.Errorf("wtxt: root: %s: want 64 lowercase hex digits", keys[3+i].Key)
		}
		*dst = h
	}
	return r, nil
}

// Merkle is the merkle_this that follows from r's other values.
func (r Root) Merkle() [32]byte { return Merkle(r.MerklePrev, r.SHA256All, r.TS, r.Gen, r.Build) }

// Check reports an error when r.MerkleThis does not follow from r's other
// values.
func (r Root) Check() error {
	if m := r.Merkle(); m != r.MerkleThis {
		return fmt.Errorf("wtxt: root: merkle_this %x does not follow from gen, ts, build, sha256_all and merkle_prev (want %x)", r.MerkleThis, m)
	}
	return nil
}
