package wtxt

import (
	"bytes"
	"context"
)

// SkeletonKeys reads a skeleton (Split's or SplitIndexed's output) and
// returns each of its segments by SegmentKey: the key SplitIndexed computes
// from the ch lines the segment covers (array name and each chunk's off,
// len, sha256, crc32c), so a later generation's segment with the same key
// holds the same bytes as this one's blob, whose digest and size the
// Segment gives. The skeleton's structure is checked (ReadSkeletonIndex
// and SkeletonSegments: every seg line against its ch lines); name labels
// it in errors. It trusts the skeleton's ch lines to describe its blobs,
// which holds for a skeleton that Split wrote (it checked every chunk
// against the bytes it put in the blob): give it the previous skeleton of
// the same repository, not one from elsewhere. Nothing here can make a
// push store wrong bytes, only a skeleton whose blobs do not match its ch
// lines, which Assemble and verify-repo reject.
func SkeletonKeys(ctx context.Context, skeleton []byte, name string) (map[SegmentKey]Segment, error) {
	p, err := ParsePrevSkeleton(ctx, skeleton, name)
	if err != nil {
		return nil, err
	}
	return p.Keys(), nil
}

// PrevSkeleton is a previous generation's skeleton read once for what a
// push needs of it: its segments by key (Keys), its header (Header) and,
// for a SegmentCache, each segment's chunk sums.
type PrevSkeleton struct {
	Header  *Header
	index   *Index
	segs    []Segment
	segKeys []SegmentKey // segs[i]'s key
	keys    map[SegmentKey]Segment
}

// ParsePrevSkeleton reads and checks a skeleton as SkeletonKeys does
// (every seg line against its ch lines, the seg lines covering every
// array's chunks in order); name labels it in errors.
func ParsePrevSkeleton(ctx context.Context, skeleton []byte, name string) (*PrevSkeleton, error) {
	x, err := ReadSkeletonIndex(ctx, name, bytes.NewReader(skeleton), IndexOptions{})
	if err != nil {
		return nil, err
	}
	segs, err := SkeletonSegments(ctx, bytes.NewReader(skeleton), name)
	if err != nil {
		return nil, err
	}
	out := make(map[SegmentKey]Segment, len(segs))
	segKeys := make([]SegmentKey, len(segs))
	bad := func(a string, ix int64) error {
		return &Error{File: name, Array: a, Chunk: ix, Check: CheckSkeleton, Msg: "the seg lines do not cover the arrays' chunks in order"}
	}
	k := 0
	for ai := range x.Arrays {
		a := &x.Arrays[ai]
		for covered := int64(0); covered < int64(len(a.Chunks)); {
			if k == len(segs) {
				return nil, bad(a.Name, covered)
			}
			s := segs[k]
			if s.Array != a.Name || s.FirstChunk != covered || s.Chunks < 1 || s.Chunks > int64(len(a.Chunks))-covered {
				return nil, bad(a.Name, covered)
			}
			segKeys[k] = segmentKey(a.Name, a.Chunks[covered:covered+s.Chunks])
			out[segKeys[k]] = s
			covered += s.Chunks
			k++
		}
	}
	if k != len(segs) {
		return nil, bad("", -1)
	}
	return &PrevSkeleton{Header: x.Header, index: x, segs: segs, segKeys: segKeys, keys: out}, nil
}

// Keys returns the skeleton's segments by SegmentKey (see SkeletonKeys).
func (p *PrevSkeleton) Keys() map[SegmentKey]Segment { return p.keys }

// ChangedChunks compares cur with p, a generation before it, chunk by
// chunk: changed counts cur's chunks whose sha256 p does not have at the
// same place (array name and ix; an array p lacks, or whose chunk count
// differs, counts whole), total all of cur's chunks. The measure does
// not depend on how either was cut into segments.
func (p *PrevSkeleton) ChangedChunks(cur *PrevSkeleton) (changed, total int64) {
	prev := make(map[string][]IndexChunk, len(p.index.Arrays))
	for _, a := range p.index.Arrays {
		prev[a.Name] = a.Chunks
	}
	for _, a := range cur.index.Arrays {
		total += int64(len(a.Chunks))
		pc, ok := prev[a.Name]
		if !ok || len(pc) != len(a.Chunks) {
			changed += int64(len(a.Chunks))
			continue
		}
		for i, c := range a.Chunks {
			if pc[i].SHA256 != c.SHA256 || pc[i].Len != c.Len {
				changed++
			}
		}
	}
	return changed, total
}
