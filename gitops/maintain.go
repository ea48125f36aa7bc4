package gitops

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/snapd-ml/snapd/internal/gitexec"
)

// DefaultMaxPacks is Config.MaxPacks's default: git's own gc.autoPackLimit.
const DefaultMaxPacks = 50

// MaintainResult says what Maintain found and did.
type MaintainResult struct {
	PacksBefore, PacksAfter int  // packs in objects/pack
	Repacked                bool // git repack ran (and succeeded)
	Elapsed                 time.Duration
}

// Maintain bounds the number of packs in the repository. A Commit that
// adds many objects writes a pack of its own (packw.go), so a long run
// gathers a pack per generation, and every object lookup for a new
// blob (go-git's, and each Commit's re-read of the pack indexes)
// visits all of them. When objects/pack holds more than Config.MaxPacks
// packs, Maintain runs
//
//	git repack -d -l --geometric=2 --no-write-bitmap-index
//
// which rolls the smaller packs (and loose objects) into one so that the
// pack sizes form a geometric progression: the first generation's big
// pack is not rewritten, and the bytes copied over a run are about the
// run's new bytes times the logarithm of its pack count. The repository's
// pack.window=0 (OpenRepo) means no delta search, and git keeps the
// stored literal deltas (a piece and its base are in the same pack). It
// takes the lock Commit takes, runs git in its own process group with
// none of the caller's GIT_* variables and the push's memory limits, and
// is killed (the whole group) when ctx ends; an interrupted repack leaves
// the old packs in place (git deletes them only after the new one is
// installed). It needs git >= 2.33 (--geometric); an older git fails
// every time, and the caller logs it. MaxPacks < 0 turns it off. Callers run it between
// generations; a failure leaves the repository as it was.
func (r *Repo) Maintain(ctx context.Context) (MaintainResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var res MaintainResult
	objs := objectsDir(r.dir)
	if r.cfg.MaxPacks < 0 || objs == "" {
		return res, nil
	}
	n, err := countPacks(objs)
	if err != nil {
		return res, fmt.Errorf("gitops: maintain: %w", err)
	}
	res.PacksBefore, res.PacksAfter = n, n
	if n <= r.cfg.MaxPacks {
		return res, nil
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return res, fmt.Errorf("gitops: maintain: %w", err)
	}
	args := append([]string{"-C", r.dir}, pushMemoryLimits...)
	args = append(args, "repack", "-d", "-l", "--geometric=2", "--no-write-bitmap-index", "-q")
	start := time.Now()
	err = gitexec.Run(ctx, localGit(git), args...)
	res.Elapsed = time.Since(start)
	// go-git lists packs once: whatever git did, re-read the list.
	if s, ok := r.r.Storer.(interface{ Reindex() }); ok {
		s.Reindex()
	}
	if m, cerr := countPacks(objs); cerr == nil {
		res.PacksAfter = m
	}
	if err != nil {
		cause, stderr := gitexec.Split(err)
		return res, fmt.Errorf("gitops: maintain: git repack: %w: %s", cause, gitexec.LastLine(stderr))
	}
	res.Repacked = true
	return res, nil
}

// countPacks counts the pack-*.pack files of an objects directory.
func countPacks(objs string) (int, error) {
	m, err := filepath.Glob(filepath.Join(objs, "pack", "pack-*.pack"))
	return len(m), err
}

// localGit is how a git child that works on snapd's own repository runs
// (the executable git): the process's environment without any GIT_*
// variable (internal/gitexec's rule: GIT_DIR, GIT_OBJECT_DIRECTORY and
// the like would redirect it), plus extra, without the system git
// config, in the C locale; in its own process group, killed whole when
// ctx ends.
func localGit(git string, extra ...string) gitexec.Options {
	return gitexec.Options{Git: git, Env: append(append([]string{}, extra...), "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C")}
}
