package gitops

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	git "github.com/go-git/go-git/v5"

	"github.com/snapd-ml/snapd/formats/wtxt"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/internal/atomicfile"
)

// AssembleRanks writes outDir/rank-R.wtxt for every rank of the
// multi-rank generation at rev (a commit, tag or branch) of the ledger
// repo, under the snapshot path p ("" is DefaultPath): each
// skeleton is checked against the generation's index, then assembled from
// blobs (every chunk hash and blob digest checked) and written
// atomically. It returns the files written, in rank order.
func AssembleRanks(ctx context.Context, repo *git.Repository, rev, p string, blobs wtxt.BlobSource, outDir string) ([]string, error) {
	rc, err := ResolveRanks(repo, rev, p)
	if err != nil {
		return nil, err
	}
	ix := rc.Index
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for r := range ix.WorldSize {
		skel, err := rc.Skeleton(r)
		if err != nil {
			return files, err
		}
		name := fmt.Sprintf("gen-%s:%s/%s", ix.Gen, RanksDir(p), wranks.SkeletonName(r))
		if err := ix.CheckSkeleton(r, skel, name); err != nil {
			return files, err
		}
		out := filepath.Join(outDir, fmt.Sprintf("rank-%d.wtxt", r))
		err = atomicfile.WriteFrom(out, 0o644, func(w io.Writer) error {
			_, err := wtxt.AssembleNamed(ctx, bytes.NewReader(skel), name, blobs, w)
			return err
		})
		if err != nil {
			return files, err
		}
		files = append(files, out)
	}
	return files, nil
}
