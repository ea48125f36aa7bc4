package gitops

import (
	"context"
	"fmt"
	"os"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// TrailerMeta is the commit trailer of a generation's metadata
// (snapshot.UserMeta): one line of KEY=VALUE pairs in key order, each
// VALUE its canonical JSON text (UserMeta.String), bounded by the
// metadata's limits (at most 64 keys, 2048 bytes of canonical JSON).
// It is absent when the generation has no metadata and for an
// age-armored generation, whose metadata stays encrypted inside its WTXT.
// verify-repo checks it against the metadata inside the generation.
const TrailerMeta = "Snapd-Meta"

// settleMeta decides h.Meta, the metadata g's commit carries: none for an
// age-armored generation (Generation.Seal); the caller's Header.Meta when
// it gave a Header (the daemon, which encoded the WTXT, or the skeleton
// layout, whose attributes are in the registry); otherwise what the
// plaintext WTXT carries (wtxt.ReadUserMeta).
func settleMeta(ctx context.Context, g Generation, h *Header) error {
	switch {
	case g.Seal != "":
		h.Meta = nil
		return nil
	case g.Header != nil || g.Skeleton != "":
		return nil
	}
	f, err := os.Open(g.WTXT)
	if err != nil {
		return fmt.Errorf("gitops: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("gitops: %w", err)
	}
	m, err := wtxt.ReadUserMeta(ctx, g.WTXT, f, st.Size())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrHeader, err)
	}
	h.Meta = m
	return nil
}

// MetaOfTrailers returns the metadata a generation commit's trailers
// carry (ParseTrailers' map): nil without a Snapd-Meta trailer. A
// malformed trailer is an error wrapping snapshot.ErrUserMeta.
func MetaOfTrailers(tr map[string]string) (snapshot.UserMeta, error) {
	v, ok := tr[TrailerMeta]
	if !ok {
		return nil, nil
	}
	m, err := snapshot.ParseUserMetaLine(v)
	if err != nil {
		return nil, fmt.Errorf("trailer %s: %w", TrailerMeta, err)
	}
	return m, nil
}
