package ranks

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/internal/atomicfile"
)

// AssembleGeneration writes outDir/rank-R.wtxt for every rank of the
// multi-rank generation at rev (a commit, tag or branch) of the ledger
// clone dir: each skeleton is checked against the generation's index,
// then assembled from the registry (every chunk hash and blob digest
// checked) and written atomically. It returns the files written, in rank
// order.
func AssembleGeneration(ctx context.Context, dir, rev string, repo *oci.Repository, outDir string) ([]string, error) {
	git := func(ctx context.Context, _ []string, args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...).Output()
		if err != nil {
			return "", fmt.Errorf("git %s %s: %w", args[0], strings.Join(args[1:], " "), err)
		}
		return string(out), nil
	}
	c, err := git(ctx, nil, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return nil, err
	}
	c = strings.TrimSpace(c)
	ix, err := readIndex(ctx, git, c)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for r := range ix.WorldSize {
		obj := c + ":" + LedgerDir + "/" + SkeletonName(r)
		sz, err := git(ctx, nil, "cat-file", "-s", obj)
		if err != nil {
			return files, err
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(sz), 10, 64); err != nil || n > MaxSkeletonBytes {
			return files, fail(obj, 0, r, CheckSkeleton, "skeleton is %s bytes (limit %d)", strings.TrimSpace(sz), MaxSkeletonBytes)
		}
		skel, err := git(ctx, nil, "cat-file", "blob", obj)
		if err != nil {
			return files, err
		}
		name := fmt.Sprintf("gen-%s:%s/%s", ix.Gen, LedgerDir, SkeletonName(r))
		if err := ix.CheckSkeleton(r, []byte(skel), name); err != nil {
			return files, err
		}
		out := filepath.Join(outDir, fmt.Sprintf("rank-%d.wtxt", r))
		err = atomicfile.WriteFrom(out, 0o644, func(w io.Writer) error {
			_, err := wtxt.AssembleNamed(ctx, strings.NewReader(skel), name, repo, w)
			return err
		})
		if err != nil {
			return files, err
		}
		files = append(files, out)
	}
	return files, nil
}
