package layout

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// The segments layout (Segments, DirWTXTSegs; docs/FORMAT.md §5): the
// WTXT's structure as text pieces and its tensor bytes as raw segment
// blobs, seg/<hh>/<hex64>.seg, each one blob or a directory of pieces.

const (
	// SegDir is the subdirectory of segment blobs, fanned out by the
	// first two hex digits of their SHA-256: seg/<hh>/<hex64>.seg.
	SegDir = "seg"
	// DefaultSegmentSize is the skeleton layout's default target segment
	// size (raw bytes): a chunk at least this large is a segment of its
	// own, smaller chunks of one array are grouped up to it.
	DefaultSegmentSize = 64 << 10
	// DefaultSegmentPiece is the default Config.SegmentPiece: a segment
	// larger than this is stored as a tree of raw pieces of this size.
	DefaultSegmentPiece = 16 << 10
	// SegPieceFmt names the pieces of a segment stored as a tree.
	SegPieceFmt = "p%06d"
	// SegBaseFmt names the small blob beside each piece (PieceBase):
	// the base of the piece's literal delta in a pack (packw.go).
	// Readers ignore it.
	SegBaseFmt = "b%06d"
	// segsPerPiece is the number of segments per skeleton piece.
	segsPerPiece = 64
	// MaxSkeleton bounds the skeleton text Commit holds in memory (about
	// 230 bytes per chunk: 256 MiB is over a million chunks).
	MaxSkeleton = 256 << 20
)

// ErrSkeleton reports a skeleton layout that cannot be written or read.
var ErrSkeleton = errors.New("gitops: skeleton layout")

// SegName returns the path of a segment blob inside DirWTXTSegs.
func SegName(d [32]byte) (dir, name string) {
	h := hex.EncodeToString(d[:])
	return path.Join(SegDir, h[:2]), h + ".seg"
}

// PieceBase is the content of the base blob of the piece whose blob ID
// is h: "blob <hex40>\n".
func PieceBase(h plumbing.Hash) []byte { return []byte("blob " + h.String() + "\n") }

// PieceOfBase returns, for the path of a piece's base blob inside
// DirWTXTSegs (seg/<hh>/<hex64>.seg/b000003), the path of its piece
// (seg/<hh>/<hex64>.seg/p000003); ok is false for any other path.
func PieceOfBase(name string) (piece string, ok bool) {
	dir, file := path.Split(name)
	// SegBaseFmt: "b" and six digits (verify-repo asks this of every
	// file of a generation, so no Sscanf).
	if len(file) != 7 || file[0] != 'b' || strings.Trim(file[1:], "0123456789") != "" ||
		!strings.HasPrefix(dir, SegDir+"/") || !strings.HasSuffix(dir, ".seg/") {
		return "", false
	}
	return dir + "p" + file[1:], true
}

// IsPieceBase reports whether h is the base blob the writer stores
// beside the piece whose blob ID is piece: verify-repo accepts it without
// reading it (its content follows from its ID).
func IsPieceBase(h, piece plumbing.Hash) bool {
	return h == plumbing.ComputeHash(plumbing.BlobObject, PieceBase(piece))
}

// CutSkeleton cuts a skeleton into pieces and calls emit for each, in
// order (concatenated, they are the skeleton): 0000-header.part (every
// line before the first arr line), <A>.head.part (arr and idx lines),
// <A>.s<ix6>.part (segsPerPiece seg blocks from the segment whose first
// chunk is ix; the array's last piece ends with endarr), and
// 9999-trailer.part (audit and endwtxt). <A> is ArrayPartPrefix of the
// array name. The cuts are where wtxt.ReadSkeletonIndex finds the arr and
// seg lines and the trailer (the skeleton's grammar is checked there);
// the i-th array must be x.Arrays[i] and the k-th seg line segs[k], both
// from the same WTXT as the skeleton.
func CutSkeleton(skel []byte, x *wtxt.Index, segs []wtxt.Segment, emit func(Part, []byte) error) (*Manifest, error) {
	sx, err := wtxt.ReadSkeletonIndex(context.Background(), "skeleton", bytes.NewReader(skel), wtxt.IndexOptions{NoChunks: true})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSkeleton, err)
	}
	if len(sx.Arrays) != len(x.Arrays) || len(sx.Segs) != len(segs) {
		return nil, fmt.Errorf("%w: skeleton does not match the WTXT (%d of %d arrays, %d of %d segments)", ErrSkeleton, len(sx.Arrays), len(x.Arrays), len(sx.Segs), len(segs))
	}
	var m Manifest
	all := sha256.New()
	names := map[string]bool{}
	name, start := "", int64(0)
	flush := func(end int64) error {
		if name == "" {
			return nil
		}
		data := skel[start:end]
		sum := sha256.Sum256(data)
		all.Write(data)
		p := Part{Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
		m.Parts = append(m.Parts, p)
		m.Bytes += p.Size
		name = ""
		return emit(p, data)
	}
	begin := func(n string, at int64) error {
		if err := flush(at); err != nil {
			return err
		}
		if names[n] {
			return fmt.Errorf("%w: skeleton offset %d: piece name %s produced twice (array names collide after sanitizing)", ErrSkeleton, at, n)
		}
		names[n] = true
		name, start = n, at
		return nil
	}
	if err := begin("0000-header.part", 0); err != nil {
		return nil, err
	}
	si := 0
	for ai, a := range sx.Arrays {
		if a.Name != x.Arrays[ai].Name {
			return nil, fmt.Errorf("%w: skeleton line %d: array %d is not the WTXT index's", ErrSkeleton, a.Line, ai)
		}
		prefix := ArrayPartPrefix(a.Name)
		if err := begin(prefix+".head.part", a.Start); err != nil {
			return nil, err
		}
		for segInArr := 0; si < len(sx.Segs) && sx.Segs[si].Array == ai; segInArr++ {
			if segs[si].Array != a.Name || segs[si].FirstChunk != sx.Segs[si].Chunk {
				return nil, fmt.Errorf("%w: skeleton line %d: seg line does not match segment %d of the split", ErrSkeleton, sx.Segs[si].Line, si)
			}
			if segInArr%segsPerPiece == 0 {
				if err := begin(fmt.Sprintf("%s.s%06d.part", prefix, segs[si].FirstChunk), sx.Segs[si].Start); err != nil {
					return nil, err
				}
			}
			si++
		}
	}
	if err := begin("9999-trailer.part", sx.TrailerStart); err != nil {
		return nil, err
	}
	if err := flush(int64(len(skel))); err != nil {
		return nil, err
	}
	m.SHA256 = hex.EncodeToString(all.Sum(nil))
	return &m, nil
}

// AssembleSkeletonFS writes the WTXT stored in the segments-layout
// directory dir of fsys to w (ReadSegments: every piece's size and
// SHA-256 and the whole skeleton's checked against the MANIFEST, then
// wtxt.Assemble with the segment blobs, every chunk's sha256 and crc32c
// and every blob's length and digest checked). On error what was written
// to w must be discarded.
func AssembleSkeletonFS(ctx context.Context, fsys fs.FS, dir string, w io.Writer) error {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSkeleton, err)
	}
	_, err = ReadSegments(ctx, sub, w)
	return err
}
