package ranks

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// PartOptions configure EncodePart.
type PartOptions struct {
	Gen     uint64   // the generation N (1..snapshot.MaxGen)
	Chain   [32]byte // the job's chain id (ChainID), written as merkle_prev
	SignKey ed25519.PrivateKey
	HMACKey []byte
	Workers int
}

// EncodePart writes rank part of generation opts.Gen: the ordinary WTXT of
// the shard s (arrays named as in the shard), with meta gen = opts.Gen and
// merkle_prev = the chain id. s.Meta.Gen is overwritten; the rest of
// s.Meta (ts, build, ...) is written as given.
func EncodePart(ctx context.Context, w io.Writer, s *snapshot.Snapshot, opts PartOptions) (*wtxt.Result, error) {
	if err := snapshot.CheckGen(opts.Gen); err != nil {
		return nil, fmt.Errorf("rank part: %w", err)
	}
	s.Meta.Gen = opts.Gen
	return wtxt.Encode(ctx, w, s, wtxt.EncodeOptions{SignKey: opts.SignKey, HMACKey: opts.HMACKey, PrevMerkle: opts.Chain, Workers: opts.Workers})
}
