package gitops

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/gitexec"
)

// ErrPruned is returned for a generation older than the history the
// local repository holds: Repo.Retain cut it after it was pushed, so the
// remote has it (read it from a clone of the remote).
var ErrPruned = errors.New("pruned from the local repository after it was pushed (the remote has it)")

// shallowName is git's file of shallow boundary commits in the git
// directory; retainPendingName marks a Retain whose cleanup (tags,
// repack, prune) is not finished yet.
const (
	shallowName       = "shallow"
	retainPendingName = "snapd-retain-pending"
)

// Pending is a push the resend queue has not done yet: Retain keeps its
// commit (and all history above it) and its tag.
type Pending struct {
	Commit plumbing.Hash
	Tag    string // "" = none
}

// RetainResult says what Retain did.
type RetainResult struct {
	// Boundary is the oldest commit of the branch the repository keeps
	// from now on (added to the git directory's shallow file); zero when
	// this call did not move it.
	Boundary    plumbing.Hash
	BoundaryGen uint64
	Cut         bool // the boundary moved in this call
	TagsDeleted int
	// Repacked: git repack -a -d ran (and succeeded); git prune runs
	// every time, the repack only once the packs hold more unreachable
	// bytes than one kept generation's average.
	Repacked bool
	// PacksDropped counts the packs deleted whole because nothing the
	// kept history reaches needed them (a dense generation's pack once
	// the boundary passes it), before the repack rule was applied again.
	PacksDropped int
	// Skipped says why nothing was cut although history is old enough
	// (a pending push outside the kept history); "" otherwise.
	Skipped string
	Elapsed time.Duration
}

// Retain bounds the local repository's history once the remote has it.
// pushed is a commit the remote branch now holds (so the remote has it
// and every ancestor); keep >= 1 is how many generations at or below it,
// counted along the live chain (a resume record continues at the
// generation it resumed from), stay. The keep-th of them becomes the
// shallow boundary B: the repository keeps B's tree and everything above
// it, including every commit not yet pushed (pending: the resend queue's
// jobs; a pending commit below B, or a pending tag on one, means nothing
// is cut this time). Steps, each safe to be interrupted:
//
//  1. write snapd-retain-pending (a cleanup is due);
//  2. add B to the git directory's shallow file (atomically; entries
//     there stay until git prune drops them with their commits): git and
//     this package's history walks stop there; older objects are just
//     unreachable from now on;
//  3. delete the generation tags (Config.TagPrefix) of commits below B,
//     except pending ones (the remote has them all);
//  4. git reflog expire --expire=now --all and git prune --expire=now,
//     which delete the unreachable loose objects, and git repack -a -d
//     once the packs hold more unreachable bytes than one kept
//     generation's average (repackAll);
//  5. remove snapd-retain-pending.
//
// A crash or failure at any step leaves a repository that commits,
// pushes and reads as before (git repack deletes old packs only after the
// new one is installed), and the next call (with any pushed commit)
// finishes the cleanup. It takes the lock Commit takes, so nothing of
// this Repo writes objects meanwhile; callers run it where no push of
// theirs reads the repository (the daemon: after a push, in the resend
// queue's goroutine). keep < 1 does nothing. Git runs as in Maintain.
func (r *Repo) Retain(ctx context.Context, pushed plumbing.Hash, keep int, pending []Pending) (RetainResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := time.Now()
	var res RetainResult
	objs := objectsDir(r.dir)
	if keep < 1 || objs == "" {
		return res, nil
	}
	gitDir := filepath.Dir(objs)
	r.reindex() // git (another Retain, a repack by hand) may have moved objects
	shallow, err := readShallow(gitDir)
	if err != nil {
		return res, fmt.Errorf("gitops: retain: %w", err)
	}
	_, perr := os.Stat(filepath.Join(gitDir, retainPendingName))
	due := perr == nil

	b, bgen, err := r.retainBoundary(ctx, pushed, keep, shallow)
	if err != nil {
		return res, fmt.Errorf("gitops: retain: %w", err)
	}
	cut := b != nil && !shallow[b.Hash] && len(b.ParentHashes) > 0
	if cut {
		if _, isBase := BaseOf(b); isBase {
			cut = false // nothing of ours below it
		}
	}
	if !cut && !due {
		return res, nil
	}
	// The history kept: first parents from the branch tip down to the
	// boundary (the new one, else the current one).
	bound := shallow
	if cut {
		bound = map[plumbing.Hash]bool{b.Hash: true}
	}
	tip, err := r.head()
	if err != nil {
		return res, fmt.Errorf("gitops: retain: %w", err)
	}
	if tip == nil {
		return res, nil
	}
	kept, reached := firstParentsTo(r, tip.commit, bound)
	if cut && !reached {
		res.Skipped = fmt.Sprintf("commit %s (generation %d) is not in the first-parent history of branch %s", b.Hash, bgen, r.cfg.Branch)
		cut = false
		if !due {
			return res, nil
		}
		kept, _ = firstParentsTo(r, tip.commit, shallow)
	}
	keepTag := map[string]bool{}
	for _, p := range pending {
		if p.Tag != "" {
			keepTag[p.Tag] = true
		}
		if cut && !kept[p.Commit] {
			res.Skipped = fmt.Sprintf("commit %s is waiting to be pushed and is not above the boundary %s", p.Commit, b.Hash)
			return res, nil // not due here: nothing changed yet
		}
	}
	if cut {
		res.Boundary, res.BoundaryGen, res.Cut = b.Hash, bgen, true
		if err := r.retainStep("pending", func() error {
			return atomicfile.WriteFile(filepath.Join(gitDir, retainPendingName), []byte(b.Hash.String()+"\n"), 0o644)
		}); err != nil {
			return res, err
		}
		if err := r.retainStep("shallow", func() error {
			// Entries already there stay (a base branch fetched with
			// --depth 1, an older boundary another ref still reaches);
			// git prune drops those whose commits it deletes.
			lines := []string{b.Hash.String()}
			for h := range shallow {
				lines = append(lines, h.String())
			}
			sort.Strings(lines)
			return atomicfile.WriteFile(filepath.Join(gitDir, shallowName), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
		}); err != nil {
			return res, err
		}
	}
	if err := r.retainStep("tags", func() error {
		n, err := r.deleteTagsOutside(kept, keepTag)
		res.TagsDeleted = n
		return err
	}); err != nil {
		return res, err
	}
	if err := r.retainStep("repack", func() error {
		var err error
		res.Repacked, res.PacksDropped, err = r.repackAll(ctx, keep)
		return err
	}); err != nil {
		return res, err
	}
	if err := r.retainStep("done", func() error {
		err := os.Remove(filepath.Join(gitDir, retainPendingName))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// retainStep runs step name of Retain, after the test hook (which may
// fail it, as a crash there would).
func (r *Repo) retainStep(name string, f func() error) error {
	if r.retainHook != nil {
		if err := r.retainHook(name); err != nil {
			return fmt.Errorf("gitops: retain: before step %s: %w", name, err)
		}
	}
	if err := f(); err != nil {
		return fmt.Errorf("gitops: retain: %s: %w", name, err)
	}
	return nil
}

// retainBoundary walks the live chain from pushed and returns the
// keep-th generation commit, or nil when the history (as far as it goes)
// holds fewer.
func (r *Repo) retainBoundary(ctx context.Context, pushed plumbing.Hash, keep int, shallow map[plumbing.Hash]bool) (*object.Commit, uint64, error) {
	c, err := r.r.CommitObject(pushed)
	if err != nil {
		return nil, 0, fmt.Errorf("pushed commit %s: %w", pushed, err)
	}
	n := 0
	seen := map[plumbing.Hash]bool{}
	for c != nil && !seen[c.Hash] {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		seen[c.Hash] = true
		tr := ParseTrailers(c.Message)
		rec, isRec, err := parseResumeTrailers(tr)
		if err != nil {
			return nil, 0, fmt.Errorf("commit %s: %w", c.Hash, err)
		}
		if isRec {
			if c, err = r.r.CommitObject(rec.FromCommit); err != nil {
				return nil, 0, nil // resumed from below the boundary: nothing more to cut
			}
			continue
		}
		gen, err := parseGenTrailer(tr[TrailerGen])
		if err != nil {
			return nil, 0, nil // a base branch's commit
		}
		if n++; n == keep {
			return c, gen, nil
		}
		if c, err = parentOf(r, c, shallow); err != nil || c == nil {
			return nil, 0, nil
		}
		if _, isBase := BaseOf(c); isBase {
			return nil, 0, nil
		}
	}
	return nil, 0, nil
}

// firstParentsTo returns the commits from c down its first parents to
// the first commit in bound (included), and whether one was reached.
func firstParentsTo(r *Repo, c *object.Commit, bound map[plumbing.Hash]bool) (map[plumbing.Hash]bool, bool) {
	m := map[plumbing.Hash]bool{}
	for c != nil && !m[c.Hash] {
		m[c.Hash] = true
		if bound[c.Hash] {
			return m, true
		}
		if len(c.ParentHashes) == 0 {
			break
		}
		p, err := r.r.CommitObject(c.ParentHashes[0])
		if err != nil {
			break
		}
		c = p
	}
	return m, false
}

// deleteTagsOutside deletes the generation tags (Config.TagPrefix) whose
// commit is not in kept, except those in keepTag.
func (r *Repo) deleteTagsOutside(kept map[plumbing.Hash]bool, keepTag map[string]bool) (int, error) {
	refs, err := r.r.Storer.IterReferences()
	if err != nil {
		return 0, err
	}
	var drop []plumbing.ReferenceName
	err = refs.ForEach(func(ref *plumbing.Reference) error {
		n := ref.Name()
		if !n.IsTag() || !strings.HasPrefix(n.Short(), r.cfg.TagPrefix) || keepTag[n.Short()] {
			return nil
		}
		target, ok := r.tagTarget(n.Short())
		if ok && !kept[target] {
			drop = append(drop, n)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for i, n := range drop {
		if err := r.r.Storer.RemoveReference(n); err != nil {
			return i, fmt.Errorf("delete tag %s: %w", n.Short(), err)
		}
	}
	return len(drop), nil
}

// repackAll expires the reflogs and prunes the unreachable loose
// objects (a dense single-file generation's WTXT blob is one), then
// repacks everything reachable into one pack when the packs hold more
// unreachable bytes than one kept generation's average (reachable bytes
// / keep): rewriting the kept generations after every push was most of a
// dense generation's retention cost, and waiting for that much garbage
// keeps the repository within keep + 2 generations. go-git then re-reads
// the pack list.
func (r *Repo) repackAll(ctx context.Context, keep int) (repacked bool, dropped int, err error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return false, 0, err
	}
	defer r.reindex()
	runWith := func(limits []string) func(args ...string) (string, error) {
		base := append([]string{"-C", r.dir}, limits...)
		return func(args ...string) (string, error) {
			out, err := gitexec.Output(ctx, localGit(git), append(append([]string{}, base...), args...)...)
			if err != nil {
				cause, stderr := gitexec.Split(err)
				return "", fmt.Errorf("git %s: %w: %s", args[0], cause, gitexec.LastLine(stderr))
			}
			return string(out), nil
		}
	}
	run := runWith(pushMemoryLimits)
	// The walks of the kept history read trees spread over every pack:
	// they may map the packs whole (pushLimits), as a push maps what it
	// sends; the repack keeps the 128 MiB bound.
	stored, err := objectStoreBytes(objectsDir(r.dir))
	if err != nil {
		return false, 0, err
	}
	walkLimits := pushLimits(stored)
	walk := runWith(walkLimits)
	for _, args := range [][]string{
		{"reflog", "expire", "--expire=now", "--all"},
		{"prune", "--expire=now"},
	} {
		if _, err := run(args...); err != nil {
			return false, 0, err
		}
	}
	garbage, reachable, err := r.packGarbage(walk)
	if err != nil {
		return false, 0, err
	}
	if keep < 1 {
		keep = 1
	}
	if garbage <= reachable/int64(keep) {
		return false, 0, nil
	}
	// A dense generation's pack (packw.go: one per commit) holds nothing
	// the kept history reaches once the boundary passes it: dropping
	// such packs costs a walk of the kept history, where the repack
	// rewrote every kept generation (a 1 GiB model, three kept: about
	// 50 CPU-s, holding the repository's lock).
	dropped, droppedBytes, err := r.dropDeadPacks(ctx, git, walkLimits)
	if err != nil {
		return false, dropped, err
	}
	if garbage-droppedBytes <= reachable/int64(keep) {
		return false, dropped, nil
	}
	_, err = run("repack", "-a", "-d", "-q", "--no-write-bitmap-index")
	return err == nil, dropped, err
}

// dropDeadPacks deletes the packs no reachable object needs and returns
// how many, and the object bytes they held. Reachable is what git rev-list --objects
// --all --indexed-objects lists (the refs, HEAD, the index; the reflogs
// were expired). An object found in several packs needs one of them:
// the newest pack that holds it, unless an older holder is needed
// already. Every local pack is complete (git writes none thin, packw
// deltas only against bases in the same pack), so deleting one breaks
// none of the others. Called with the lock held, after git prune.
func (r *Repo) dropDeadPacks(ctx context.Context, git string, limits []string) (int, int64, error) {
	objs := objectsDir(r.dir)
	x, err := r.objectIndex(objs)
	if err != nil {
		return 0, 0, err
	}
	if x.off || len(x.packs) < 2 {
		return 0, 0, nil // alternates, or nothing to drop that a repack would not
	}
	type pk struct {
		name   string
		idx    *idxfile.MemoryIndex
		mtime  time.Time
		needed bool
	}
	var packs []*pk
	for name, idx := range x.packs {
		st, err := os.Stat(filepath.Join(objs, "pack", strings.TrimSuffix(name, ".idx")+".pack"))
		if err != nil {
			return 0, 0, fmt.Errorf("pack %s: %w", name, err)
		}
		// A .keep pack stays, as git repack leaves it.
		_, kerr := os.Stat(filepath.Join(objs, "pack", strings.TrimSuffix(name, ".idx")+".keep"))
		packs = append(packs, &pk{name: name, idx: idx, mtime: st.ModTime(), needed: kerr == nil})
	}
	// Newest first, so a blob every pack carries (the literal deltas'
	// base) keeps a new pack, not an old one.
	sort.Slice(packs, func(i, j int) bool {
		if !packs[i].mtime.Equal(packs[j].mtime) {
			return packs[i].mtime.After(packs[j].mtime)
		}
		return packs[i].name < packs[j].name
	})
	cmd := gitexec.Command(ctx, localGit(git), append(append([]string{"-C", r.dir}, limits...),
		"rev-list", "--objects", "--all", "--indexed-objects", "--no-object-names")...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(out)
	var scanErr error
	for sc.Scan() {
		line := sc.Text()
		if !plumbing.IsHash(line) {
			scanErr = fmt.Errorf("git rev-list: not an object name (%d bytes)", len(line))
			break
		}
		h := plumbing.NewHash(line)
		var first *pk
		for _, p := range packs {
			in, err := p.idx.Contains(h)
			if err != nil {
				scanErr = fmt.Errorf("pack %s: %w", p.name, err)
				break
			}
			if !in {
				continue
			}
			if p.needed {
				first = nil
				break
			}
			if first == nil {
				first = p
			}
		}
		if scanErr != nil {
			break
		}
		if first != nil {
			first.needed = true
		}
	}
	if scanErr == nil {
		scanErr = sc.Err()
	}
	if scanErr != nil {
		cmd.Kill()
		cmd.Wait()
		return 0, 0, scanErr
	}
	if err := cmd.Wait(); err != nil {
		cause, stderr := gitexec.Split(err)
		return 0, 0, fmt.Errorf("git rev-list: %w: %s", cause, gitexec.LastLine(stderr))
	}
	var n int
	var dropped int64
	for _, p := range packs {
		if p.needed {
			continue
		}
		base := filepath.Join(objs, "pack", strings.TrimSuffix(p.name, ".idx"))
		st, err := os.Stat(base + ".pack")
		if err != nil {
			return n, dropped, fmt.Errorf("pack %s: %w", p.name, err)
		}
		// The .pack first, as git does: an .idx without its .pack is
		// ignored by every reader.
		for _, ext := range []string{".pack", ".idx", ".rev", ".bitmap", ".mtimes", ".promisor"} {
			if err := os.Remove(base + ext); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return n, dropped, fmt.Errorf("drop pack %s: %w", p.name, err)
			}
		}
		n++
		dropped += max(0, st.Size()-packFraming)
	}
	return n, dropped, nil
}

// packGarbage returns the bytes of objects in packs that no ref (nor the
// index, nor HEAD) reaches, and the on-disk bytes of the reachable ones
// (git rev-list --disk-usage: a packed object's bytes in its pack, a
// loose object's file size); called right after git prune, so every
// loose object is reachable and not packed, and the garbage is the
// object bytes the store holds (objectStoreBytes) less the reachable
// ones.
func (r *Repo) packGarbage(run func(args ...string) (string, error)) (garbage, reachable int64, err error) {
	out, err := run("rev-list", "--objects", "--all", "--indexed-objects", "--disk-usage")
	if err != nil {
		return 0, 0, err
	}
	if reachable, err = strconv.ParseInt(strings.TrimSpace(out), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("git rev-list --disk-usage: %q: %w", strings.TrimSpace(out), err)
	}
	stored, err := objectStoreBytes(objectsDir(r.dir))
	if err != nil {
		return 0, 0, err
	}
	return max(0, stored-reachable), reachable, nil
}

// packFraming is the bytes of a pack file that belong to no object: the
// 12-byte header and the 20-byte SHA-1 trailer.
const packFraming = 12 + 20

// objectStoreBytes returns the object bytes an objects directory holds,
// counted as git rev-list --disk-usage counts them: each pack-*.pack file
// less its header and trailer (not the .idx, .rev or bitmap beside it,
// which git count-objects' size-pack includes), and each loose object's
// file size (not the blocks it occupies, which count-objects' size
// counts). So a small repository's index files and block rounding do not
// read as garbage.
func objectStoreBytes(objs string) (int64, error) {
	var n int64
	packs, err := filepath.Glob(filepath.Join(objs, "pack", "pack-*.pack"))
	if err != nil {
		return 0, err
	}
	for _, p := range packs {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a concurrent git repack deleted it
		}
		if err != nil {
			return 0, fmt.Errorf("object store: %w", err)
		}
		n += max(0, fi.Size()-packFraming)
	}
	dirs, err := os.ReadDir(objs)
	if err != nil {
		return 0, fmt.Errorf("object store: %w", err)
	}
	for _, d := range dirs {
		if !d.IsDir() || !isLooseFanout(d.Name()) {
			continue
		}
		files, err := os.ReadDir(filepath.Join(objs, d.Name()))
		if err != nil {
			return 0, fmt.Errorf("object store: %w", err)
		}
		for _, f := range files {
			if !f.Type().IsRegular() || len(f.Name()) != 38 { // not tmp_obj_*
				continue
			}
			fi, err := f.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return 0, fmt.Errorf("object store: %w", err)
			}
			n += fi.Size()
		}
	}
	return n, nil
}

// isLooseFanout says whether name is one of the 256 two-hex-digit
// directories loose objects live in.
func isLooseFanout(name string) bool {
	if len(name) != 2 {
		return false
	}
	for _, c := range name {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// readShallow returns the commits the git directory's shallow file names
// (empty when there is none).
func readShallow(gitDir string) (map[plumbing.Hash]bool, error) {
	b, err := os.ReadFile(filepath.Join(gitDir, shallowName))
	if errors.Is(err, fs.ErrNotExist) {
		return map[plumbing.Hash]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[plumbing.Hash]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" {
			continue
		}
		if !plumbing.IsHash(s) {
			return nil, fmt.Errorf("%s line %d: not a commit hash", filepath.Join(gitDir, shallowName), line)
		}
		m[plumbing.NewHash(s)] = true
	}
	return m, sc.Err()
}

// shallowSet returns the repository's shallow boundary commits; an
// unreadable shallow file reads as none (the walks then stop where an
// object is missing, as before).
func (r *Repo) shallowSet() map[plumbing.Hash]bool {
	objs := objectsDir(r.dir)
	if objs == "" {
		return nil
	}
	m, err := readShallow(filepath.Dir(objs))
	if err != nil {
		return nil
	}
	return m
}

// parentOf returns c's first parent, or nil when c is a root commit or a
// shallow boundary (its parents are not in this repository).
func parentOf(r *Repo, c *object.Commit, shallow map[plumbing.Hash]bool) (*object.Commit, error) {
	if len(c.ParentHashes) == 0 || shallow[c.Hash] {
		return nil, nil
	}
	p, err := r.r.CommitObject(c.ParentHashes[0])
	if err != nil {
		return nil, fmt.Errorf("gitops: parent of %s: %w", c.Hash, err)
	}
	return p, nil
}

// reindex makes go-git re-read the pack list (it lists packs once).
func (r *Repo) reindex() {
	if s, ok := r.r.Storer.(interface{ Reindex() }); ok {
		s.Reindex()
	}
}
