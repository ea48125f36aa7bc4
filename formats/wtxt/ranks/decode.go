package ranks

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// Decode reads and parses the index file of size bytes at r (Parse). A
// size over MaxIndexBytes is refused before anything is read or
// allocated; a reader that ends early is a truncated file.
func Decode(r io.ReaderAt, size int64, name string) (*Index, error) {
	if size < 0 || size > MaxIndexBytes {
		return nil, fail(name, 0, -1, CheckGrammar, "%d bytes, more than the %d an index may have", size, MaxIndexBytes)
	}
	b := make([]byte, size)
	if n, err := r.ReadAt(b, 0); n < len(b) {
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("%s: read: %w", name, err)
		}
		return nil, fail(name, 0, -1, wtxt.CheckTruncated, "ends after %d of %d bytes", n, size)
	}
	return Parse(b, name)
}

// Parse parses an index file strictly. name locates errors. It checks the
// grammar, the rank order (0..W-1, each once), that sha256_all and
// merkle_this follow from the lines above them, but not the signature or
// the chain (Verify).
func Parse(b []byte, name string) (*Index, error) {
	if len(b) > MaxIndexBytes {
		return nil, fail(name, 0, -1, CheckGrammar, "%d bytes, more than the %d an index may have", len(b), MaxIndexBytes)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return nil, fail(name, 0, -1, CheckGrammar, "does not end with a newline")
	}
	lines := strings.Split(string(b[:len(b)-1]), "\n")
	for i, l := range lines {
		for j := 0; j < len(l); j++ {
			if l[j] < 0x20 || l[j] > 0x7e {
				return nil, fail(name, i+1, -1, CheckGrammar, "byte %d is not printable ASCII", j+1)
			}
		}
	}
	if len(lines) < 5 || lines[0] != IndexMagic {
		return nil, fail(name, 1, -1, CheckGrammar, "not a %s file (or too short)", IndexMagic)
	}
	ix := &Index{}
	f, ok := fieldsOf(lines[1], "gen", "gen", "world_size", "ts", "build", "chain")
	if !ok {
		return nil, fail(name, 2, -1, CheckGrammar, "want: gen gen= world_size= ts= build= chain=")
	}
	ix.Gen, ix.TS, ix.Build = f[0], f[2], f[3]
	if _, ok := genNumber(ix.Gen); !ok {
		return nil, fail(name, 2, -1, CheckGrammar, "gen is not DEC6 in 1..999999999999999999")
	}
	w, err := strconv.Atoi(f[1])
	if err != nil || w < 1 || w > MaxWorldSize || strconv.Itoa(w) != f[1] {
		return nil, fail(name, 2, -1, CheckWorldSize, "world_size is not a canonical decimal in 1..%d", MaxWorldSize)
	}
	ix.WorldSize = w
	if !validTS(ix.TS) || !wtxt.IsToken(ix.Build) || !parseHex32(f[4], &ix.Chain) {
		return nil, fail(name, 2, -1, CheckGrammar, "bad ts, build or chain value")
	}
	nr := 0
	for nr+2 < len(lines) && strings.HasPrefix(lines[nr+2], "rank ") {
		nr++
	}
	if nr != w {
		return nil, fail(name, 2, -1, CheckWorldSize, "world_size is %d, but %d rank lines follow", w, nr)
	}
	// magic, gen, W ranks, root, [sign], endranks
	if n := len(lines); n != w+4 && n != w+5 {
		return nil, fail(name, 0, -1, CheckGrammar, "%d lines, world_size %d needs %d (or %d signed)", n, w, w+4, w+5)
	}
	ix.Ranks = make([]Part, w)
	for r := 0; r < w; r++ {
		ln := r + 3
		f, ok := fieldsOf(lines[ln-1], "rank", "rank", "sha256_all", "merkle_this", "keyid", "skeleton", "skeleton_sha256", "manifest")
		if !ok {
			return nil, fail(name, ln, r, CheckGrammar, "want: rank rank= sha256_all= merkle_this= keyid= skeleton= skeleton_sha256= manifest=")
		}
		if f[0] != strconv.Itoa(r) {
			return nil, fail(name, ln, r, CheckRank, "want rank=%d here; ranks must be listed 0..%d in order, once each", r, w-1)
		}
		p := Part{Rank: r, Gen: ix.Gen, MerklePrev: ix.Chain, Skeleton: f[4], Manifest: f[6]}
		if f[3] != "-" {
			p.KeyID = f[3]
		}
		if !parseHex32(f[1], &p.SHA256All) || !parseHex32(f[2], &p.MerkleThis) || !parseHex32(f[5], &p.SkeletonSHA256) ||
			!validSkeletonName(p.Skeleton) || (p.KeyID != "" && !isHex(p.KeyID, 16)) ||
			!strings.HasPrefix(p.Manifest, "sha256:") || !isHex(p.Manifest[7:], 64) {
			return nil, fail(name, ln, r, CheckGrammar, "bad hex, keyid, skeleton name or manifest digest")
		}
		ix.Ranks[r] = p
	}
	ln := w + 3
	f, ok = fieldsOf(lines[ln-1], "root", "sha256_all", "merkle_prev", "merkle_this")
	if !ok || !parseHex32(f[0], &ix.SHA256All) || !parseHex32(f[1], &ix.MerklePrev) || !parseHex32(f[2], &ix.MerkleThis) {
		return nil, fail(name, ln, -1, CheckGrammar, "want: root sha256_all=<hex64> merkle_prev=<hex64> merkle_this=<hex64>")
	}
	end := w + 4
	if len(lines) == w+5 {
		ln = w + 4
		f, ok := fieldsOf(lines[ln-1], "sign", "ed25519", "keyid")
		if !ok || len(f[0]) != 88 || !isHex(f[1], 16) {
			return nil, fail(name, ln, -1, CheckGrammar, "want: sign ed25519=<base64, 88 chars> keyid=<hex16>")
		}
		sig, err := base64.StdEncoding.Strict().DecodeString(f[0])
		if err != nil || len(sig) != ed25519.SignatureSize {
			return nil, fail(name, ln, -1, CheckGrammar, "signature is not 64 bytes of strict base64")
		}
		ix.Signature, ix.KeyID = sig, f[1]
		end = w + 5
	}
	if lines[end-1] != "endranks" {
		return nil, fail(name, end, -1, CheckGrammar, "want endranks")
	}
	ix.Signed = ix.encodeSigned()
	if !bytes.Equal(ix.Encode(), b) {
		return nil, fail(name, 0, -1, CheckGrammar, "not in canonical form")
	}
	if got := sha256.Sum256(RootText(ix.Gen, w, ix.Ranks)); got != ix.SHA256All {
		return nil, fail(name, w+3, -1, CheckSHA256All, "sha256_all %s does not follow from the rank lines (computed %s)", short(ix.SHA256All), short(got))
	}
	if got := wtxt.Merkle(ix.MerklePrev, ix.SHA256All, ix.TS, ix.Gen, ix.Build); got != ix.MerkleThis {
		return nil, fail(name, w+3, -1, CheckMerkle, "merkle_this %s does not follow from merkle_prev, sha256_all, ts, gen, build (computed %s)", short(ix.MerkleThis), short(got))
	}
	return ix, nil
}

// fieldsOf splits "kind k1=v1 k2=v2 ..." with exactly the given keys in
// order and non-empty values.
func fieldsOf(line, kind string, keys ...string) ([]string, bool) {
	parts := strings.Split(line, " ")
	if len(parts) != len(keys)+1 || parts[0] != kind {
		return nil, false
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		v, ok := strings.CutPrefix(parts[i+1], k+"=")
		if !ok || v == "" {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

func parseHex32(s string, dst *[32]byte) bool {
	if !isHex(s, 64) {
		return false
	}
	_, err := hex.Decode(dst[:], []byte(s))
	return err == nil
}
