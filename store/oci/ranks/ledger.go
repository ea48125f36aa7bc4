package ranks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Paths of a multi-rank generation in the ledger's tree.
const (
	LedgerDir   = "snapshots/ranks"
	IndexName   = "index.ranks"
	IndexPath   = LedgerDir + "/" + IndexName
	TrailerGen  = "Snapd-Gen"
	TrailerW    = "Snapd-World-Size"
	TrailerMT   = "Snapd-Merkle-This"
	TrailerSkip = "Snapd-Skipped"
)

// Ledger is the Git side of the committer: a local repository (Dir) whose
// branch is pushed to Remote. It runs the git CLI (ssh-keygen for SSH
// signatures): commits and tags are signed with the OpenSSH private key
// file SignKeyFile (gpg.format=ssh), as the single-node daemon's are.
type Ledger struct {
	Dir, Remote, Branch string
	SignKeyFile         string
	Name, Email         string
}

func (l *Ledger) git(ctx context.Context, env []string, args ...string) (string, error) {
	base := []string{"-C", l.Dir, "-c", "user.name=" + l.Name, "-c", "user.email=" + l.Email,
		"-c", "gpg.format=ssh", "-c", "user.signingkey=" + l.SignKeyFile, "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false",
		"-c", "init.defaultBranch=" + l.Branch}
	cmd := exec.CommandContext(ctx, "git", append(base, args...)...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if len(msg) > 400 {
			msg = msg[:400] + "..."
		}
		return out.String(), fmt.Errorf("git %s: %w: %s", args[0], err, msg)
	}
	return out.String(), nil
}

func (l *Ledger) init(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(l.Dir, ".git")); err == nil {
		return nil
	}
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		return err
	}
	if _, err := l.git(ctx, nil, "init", "-q"); err != nil {
		return err
	}
	_, err := l.git(ctx, nil, "remote", "add", "origin", l.Remote)
	return err
}

// Head fetches the remote branch and returns its newest generation index
// (nil when the branch does not exist yet).
func (l *Ledger) Head(ctx context.Context) (*Index, error) {
	if err := l.init(ctx); err != nil {
		return nil, err
	}
	ls, err := l.git(ctx, nil, "ls-remote", "origin", "refs/heads/"+l.Branch)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(ls) == "" {
		return nil, nil
	}
	if _, err := l.git(ctx, nil, "fetch", "-q", "--no-tags", "origin", "+refs/heads/"+l.Branch+":refs/remotes/origin/"+l.Branch); err != nil {
		return nil, err
	}
	return readIndex(ctx, l.git, "refs/remotes/origin/"+l.Branch)
}

// readIndex reads and parses the index of rev (size checked first).
func readIndex(ctx context.Context, git func(context.Context, []string, ...string) (string, error), rev string) (*Index, error) {
	obj := rev + ":" + IndexPath
	sz, err := git(ctx, nil, "cat-file", "-s", obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", obj, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(sz), 10, 64)
	if err != nil || n > MaxIndexBytes {
		return nil, fail(obj, 0, -1, CheckGrammar, "index is %s bytes (limit %d)", strings.TrimSpace(sz), MaxIndexBytes)
	}
	b, err := git(ctx, nil, "cat-file", "blob", obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", obj, err)
	}
	return Parse([]byte(b), obj)
}

// Commit makes generation ix's one commit on top of the remote branch
// (index + W skeletons, replacing the previous generation's files),
// signs it and a tag gen-NNNNNN, and pushes both atomically (never
// forced). skipped lists the generations skipped since the previous
// commit (Snapd-Skipped trailers).
func (l *Ledger) Commit(ctx context.Context, ix *Index, skels [][]byte, skipped []uint64, hasParent bool) error {
	if err := l.init(ctx); err != nil {
		return err
	}
	if hasParent {
		if _, err := l.git(ctx, nil, "checkout", "-q", "-f", "-B", l.Branch, "refs/remotes/origin/"+l.Branch); err != nil {
			return err
		}
	} else {
		// First generation: an orphan branch with nothing in it.
		if _, err := l.git(ctx, nil, "checkout", "-q", "-f", "--orphan", "snapd-ranks-tmp"); err != nil {
			return err
		}
		l.git(ctx, nil, "branch", "-q", "-D", l.Branch) // a failed earlier attempt
		if _, err := l.git(ctx, nil, "checkout", "-q", "-f", "--orphan", l.Branch); err != nil {
			return err
		}
		l.git(ctx, nil, "rm", "-r", "-q", "-f", "--cached", ".")
	}
	dir := filepath.Join(l.Dir, filepath.FromSlash(LedgerDir))
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for r, s := range skels {
		if err := os.WriteFile(filepath.Join(dir, SkeletonName(r)), s, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, IndexName), ix.Encode(), 0o644); err != nil {
		return err
	}
	if _, err := l.git(ctx, nil, "add", "-A", "--", LedgerDir); err != nil {
		return err
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "snapd: generation %s (%d ranks)\n\n%s: %d\n%s: %d\n%s: %x\n", ix.Gen, ix.WorldSize,
		TrailerGen, ix.GenNumber(), TrailerW, ix.WorldSize, TrailerMT, ix.MerkleThis)
	for _, s := range skipped {
		fmt.Fprintf(&msg, "%s: %d\n", TrailerSkip, s)
	}
	date := []string{"GIT_COMMITTER_DATE=" + ix.TS, "GIT_AUTHOR_DATE=" + ix.TS}
	if _, err := l.git(ctx, date, "commit", "-q", "-S", "--allow-empty", "-m", msg.String()); err != nil {
		return err
	}
	tag := "gen-" + ix.Gen
	if _, err := l.git(ctx, date, "tag", "-f", "-s", tag, "-m", "snapd: generation "+ix.Gen); err != nil {
		return err
	}
	_, err := l.git(ctx, nil, "push", "-q", "--atomic", "origin", "refs/heads/"+l.Branch+":refs/heads/"+l.Branch, "refs/tags/"+tag+":refs/tags/"+tag)
	return err
}

// ParseSkipped returns the Snapd-Skipped trailers of a commit message.
func ParseSkipped(msg string) ([]uint64, error) {
	var out []uint64
	for _, line := range strings.Split(msg, "\n") {
		v, ok := strings.CutPrefix(line, TrailerSkip+": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, errors.New("bad " + TrailerSkip + " trailer")
		}
		out = append(out, n)
	}
	return out, nil
}
