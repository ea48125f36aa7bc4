package review

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
)

// Multi-rank generations (formats/wtxt/ranks, docs/FORMAT.md §7): the
// generation commit holds snapshots/ranks/index.ranks and one skeleton per
// rank, snapshots/ranks/rank-RRRRR.skel. Each rank skeleton is reviewed as
// a skeleton (skeleton.go): changed chunks and rows per array from its ch
// lines, element numbers when Options.Registry is set, line comments on
// its changed ch lines. A rank part's merkle_prev is the job's chain id,
// not the previous generation's merkle_this, so the per-file chain check
// of a rank skeleton is that its merkle_prev equals the base rank part's;
// the generation's chain lives in the index (reviewRanksIndex).

// IsRankSkeleton reports whether a repository path is a rank skeleton of a
// multi-rank generation: a file named rank-NNNNN.skel (five or more
// decimal digits) in a directory named ranks.
func IsRankSkeleton(p string) bool {
	dir, file := path.Split(p)
	if path.Base(strings.TrimSuffix(dir, "/")) != "ranks" {
		return false
	}
	digits, ok := strings.CutPrefix(file, "rank-")
	if !ok {
		return false
	}
	digits, ok = strings.CutSuffix(digits, ".skel")
	if !ok || len(digits) < 5 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isRanksIndex reports whether a repository path is the index of a
// multi-rank generation: a file named index.ranks in a directory named
// ranks (formats/wtxt/ranks DirName, IndexName).
func isRanksIndex(p string) bool {
	dir, file := path.Split(p)
	return file == wranks.IndexName && path.Base(strings.TrimSuffix(dir, "/")) == wranks.DirName
}

// readBounded reads at most max bytes of a local file; a larger file is an
// error naming the limit (nothing of its content).
func readBounded(local, name string, max int64) ([]byte, error) {
	f, err := os.Open(local)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: more than %d bytes", name, max)
	}
	return b, nil
}

// reviewRanksIndex reviews a changed snapshots/ranks/index.ranks as
// `snapd verify-repo` checks it (gitops/verify): grammar and
// root, the signature by a trusted key, the chain when the base has an
// index (the same chain id; merkle_prev is the base index's merkle_this
// when the head is the next generation), and
// every rank skeleton the pull request changes against its index line
// (SHA-256 and header). A rank skeleton the index names but the pull
// request does not change is a note (a generation commit changes all).
func reviewRanksIndex(_ context.Context, in FileInput, all []FileInput, opts Options) (*FileResult, error) {
	fr, err := newFileResult(in)
	if err != nil {
		return nil, err
	}
	if fr.Status == StatusRemoved {
		fr.Notes = append(fr.Notes, "the multi-rank generation index is removed")
		return fr, nil
	}
	var base *wranks.Index
	if in.Base != "" {
		b, err := readBounded(in.Base, in.Path+"@base", wranks.MaxIndexBytes)
		if err == nil {
			base, err = wranks.Parse(b, in.Path+"@base")
		}
		if err != nil {
			fr.Notes = append(fr.Notes, "base index does not parse, so the chain is not checked: "+err.Error())
			base = nil
		} else {
			fr.BaseGen = base.Gen
			fr.BaseMerkle = hex.EncodeToString(base.MerkleThis[:])
		}
	}
	b, err := readBounded(in.Head, in.Path, wranks.MaxIndexBytes)
	var ix *wranks.Index
	if err == nil {
		ix, err = wranks.Parse(b, in.Path)
	}
	if err != nil {
		fr.Problems = append(fr.Problems, "head index does not parse: "+err.Error())
		return fr, nil
	}
	fr.HeadGen = ix.Gen
	vo := wranks.VerifyOptions{Trusted: opts.TrustedKeys}
	if base != nil {
		vo.Chain = base.Chain
		switch {
		case ix.GenNumber() <= base.GenNumber():
			fr.Problems = append(fr.Problems, fmt.Sprintf("%s: generation does not increase: base %s, head %s", in.Path, base.Gen, ix.Gen))
		case ix.GenNumber() == base.GenNumber()+1:
			vo.CheckChain, vo.Prev = true, base.MerkleThis
		default:
			// Several commits or a recorded gap (commit trailer) between
			// them: the two files do not prove the link.
			fr.Notes = append(fr.Notes, fmt.Sprintf("head is generation %s, base %s: the chain between them is checked commit by commit by `snapd ranks verify-repo`, not from these two indexes (the chain id is)", ix.Gen, base.Gen))
		}
	}
	if ix.Signature == nil && opts.RequireSignature && len(opts.TrustedKeys) == 0 {
		fr.Problems = append(fr.Problems, in.Path+": the index is not signed and a signature is required")
	}
	if err := ix.Verify(in.Path, vo); err != nil {
		fr.Problems = append(fr.Problems, "verification failed: "+err.Error())
	}
	dir := path.Dir(in.Path)
	byPath := map[string]FileInput{}
	for _, f := range all {
		byPath[f.Path] = f
	}
	var unchanged []string
	for r := 0; r < ix.WorldSize; r++ {
		p := path.Join(dir, wranks.SkeletonName(r))
		f, ok := byPath[p]
		if !ok || f.Head == "" {
			unchanged = append(unchanged, wranks.SkeletonName(r))
			continue
		}
		skel, err := readBounded(f.Head, p, maxRankSkeleton)
		if err == nil {
			err = ix.CheckSkeleton(r, skel, p)
		}
		if err != nil {
			fr.Problems = append(fr.Problems, fmt.Sprintf("rank %d: %v", r, err))
		}
	}
	chain := "first generation of the branch (no base index)"
	if vo.CheckChain {
		chain = "chain continues from base " + base.Gen
	} else if base != nil {
		chain = "same chain id as base " + base.Gen
	}
	note := fmt.Sprintf("multi-rank generation %s, world size %d, %s; each rank skeleton is reviewed below", ix.Gen, ix.WorldSize, chain)
	if len(unchanged) > 0 {
		note += fmt.Sprintf("; %d rank skeleton(s) not changed by this pull request, so not checked against the index: %s", len(unchanged), strings.Join(unchanged, ", "))
	}
	fr.Notes = append(fr.Notes, note)
	return fr, nil
}

// maxRankSkeleton bounds the rank skeleton read whole for its SHA-256
// check (a skeleton holds ch lines, not tensor bytes).
const maxRankSkeleton = 1 << 30
