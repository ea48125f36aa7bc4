package ranks

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
)

// encodeSigned returns the text from the magic through the root line.
func (ix *Index) encodeSigned() []byte {
	var b bytes.Buffer
	b.WriteString(IndexMagic + "\n")
	fmt.Fprintf(&b, "gen gen=%s world_size=%d ts=%s build=%s chain=%x\n", ix.Gen, ix.WorldSize, ix.TS, ix.Build, ix.Chain)
	for _, p := range ix.Ranks {
		kid := p.KeyID
		if kid == "" {
			kid = "-"
		}
		fmt.Fprintf(&b, "rank rank=%d sha256_all=%x merkle_this=%x keyid=%s skeleton=%s skeleton_sha256=%x manifest=%s\n",
			p.Rank, p.SHA256All, p.MerkleThis, kid, p.Skeleton, p.SkeletonSHA256, p.Manifest)
	}
	fmt.Fprintf(&b, "root sha256_all=%x merkle_prev=%x merkle_this=%x\n", ix.SHA256All, ix.MerklePrev, ix.MerkleThis)
	return b.Bytes()
}

// WriteTo writes the index file's bytes (Encode) to w.
func (ix *Index) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(ix.Encode())
	return int64(n), err
}

// Encode returns the index file's bytes.
func (ix *Index) Encode() []byte {
	b := append([]byte(nil), ix.encodeSigned()...)
	if ix.Signature != nil {
		b = fmt.Appendf(b, "sign ed25519=%s keyid=%s\n", base64.StdEncoding.EncodeToString(ix.Signature), ix.KeyID)
	}
	return append(b, "endranks\n"...)
}
