package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/gitexec"
	"github.com/snapd-ml/snapd/internal/progress"
)

type cloneOptions struct {
	url, dir        string
	branch, tagPrfx string
	gen             uint64
	depth           int
	full, partial   bool
	worktree        bool
	fsync           bool
	// progress passes --progress to git (stderr is a terminal); quiet
	// passes --quiet (--quiet given): git prints only errors.
	progress, quiet bool
	// genTag is the tag --gen resolved to on the remote.
	genTag string
}

func newCloneCommand(e *env) *cobra.Command {
	var o cloneOptions
	cmd := &cobra.Command{
		Use:   "clone URL DIR",
		Short: "Clone the latest generation (or one generation) of a snapshot repository, fast",
		Long: `Clone the snapshot branch of URL into DIR with only what one generation
needs: git clone --depth 1 --single-branch --no-tags --no-checkout (the
generation's objects and nothing of the history; --worktree also writes
its files). --gen N clones the tree of tag
gen-NNNNNN instead (when a resumed run re-used the number, the newest of
its tags, gen-NNNNNN-rK, named with the others); --depth D keeps D generations; --full clones the whole
history (what snapd verify-repo needs); --partial clones the whole history
of commits and trees but fetches file contents only when checked out
(--filter=blob:none; the server must allow filters, as GitHub does;
snapd checkout then reads only the generation git checked out).
The fetched pack is not fsynced (git -c core.fsync=none): a clone is a
cache of the remote, made again if a crash damages it (and snapd checkout
checks every chunk's SHA-256 as it reads); git-lfs does not fsync its
object store either. At 1 GiB the fsync of the 1 GiB pack was ~3 s of a
~13 s clone here. --fsync keeps git's default.
Credentials are git's own (credential helpers, ssh-agent).
Progress: git's own counters when stderr is a terminal (--progress), and
a line per phase in any case (fetching; objects fetched and their size;
files checked out); --quiet prints neither.
Then: snapd checkout latest OUT --repo DIR.`,
		Example: `  snapd clone https://github.com/org/weights.git w
  snapd checkout latest model.safetensors --repo w`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.url, o.dir = args[0], args[1]
			return runClone(cmd.Context(), e, &o)
		},
	}
	f := cmd.Flags()
	registerBranch(f, &o.branch)
	registerTagPrefix(f, &o.tagPrfx)
	f.Uint64Var(&o.gen, "gen", 0, "clone this generation's tag instead of the branch head")
	f.IntVar(&o.depth, "depth", 1, "generations of history to fetch")
	f.BoolVar(&o.full, "full", false, "the whole history")
	f.BoolVar(&o.partial, "partial", false, "the whole history, file contents on demand (--filter=blob:none)")
	f.BoolVar(&o.fsync, "fsync", false, "fsync the fetched objects as git does by default (default: not; a clone is a re-creatable cache)")
	f.BoolVar(&o.worktree, "worktree", false, "also check the generation's files out into DIR (default: objects only; snapd checkout reads them)")
	return cmd
}

// ref is what the clone fetches: the branch, or with --gen its tag (the
// newest, once resolveGenTag has run).
func (o *cloneOptions) ref() string {
	if o.genTag != "" {
		return o.genTag
	}
	if o.gen > 0 {
		return fmt.Sprintf("%s%06d", o.tagPrfx, o.gen)
	}
	return o.branch
}

// resolveGenTag asks the remote for generation o.gen's tags (git
// ls-remote) and picks the newest: a number re-used after a resume
// carries gen-NNNNNN, gen-NNNNNN-r1, ... (gitops.GenTags), the last being
// the run that continued. It returns the other tags of the number. A
// remote without any of them is an error naming the tag.
func (o *cloneOptions) resolveGenTag(ctx context.Context, opts gitexec.Options) (others []string, err error) {
	text := fmt.Sprintf("%06d", o.gen)
	base := o.tagPrfx + text
	opts.Stdout, opts.Stderr = nil, nil
	out, err := gitexec.Output(ctx, opts, "ls-remote", "--tags", "--", o.url, "refs/tags/"+base, "refs/tags/"+base+"-r*")
	if err != nil {
		cause, _ := gitexec.Split(err)
		return nil, ioError{fmt.Errorf("git ls-remote %s: %w", publicURL(o.url), cause)}
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		_, ref, ok := strings.Cut(l, "\t")
		if name, found := strings.CutPrefix(ref, "refs/tags/"); ok && found && !strings.HasSuffix(name, "^{}") {
			have[name] = true
		}
	}
	tags := gitops.GenTags(func(n string) bool { return have[n] }, o.tagPrfx, text)
	if !have[tags[len(tags)-1]] {
		return nil, ioError{fmt.Errorf("generation %s: %s has no tag %s", text, publicURL(o.url), base)}
	}
	o.genTag = tags[len(tags)-1]
	return tags[:len(tags)-1], nil
}

// cloneArgs returns the git command line (after "git"): global options,
// then clone and its arguments.
func (o *cloneOptions) cloneArgs() ([]string, error) {
	if strings.HasPrefix(o.url, "-") || strings.HasPrefix(o.dir, "-") {
		return nil, fmt.Errorf("URL and DIR must not start with '-'")
	}
	if o.full && o.partial {
		return nil, errors.New("--full and --partial are exclusive")
	}
	if o.depth < 1 {
		return nil, fmt.Errorf("--depth %d: must be >= 1", o.depth)
	}
	args := []string{"clone"}
	switch {
	case o.quiet:
		args = append(args, "--quiet")
	case o.progress:
		args = append(args, "--progress")
	}
	args = append(args, "--single-branch", "--branch", o.ref())
	if !o.fsync {
		args = append([]string{"-c", "core.fsync=none"}, args...)
	}
	// A partial clone fetches blobs only for what git checks out, and
	// snapd checkout (go-git) cannot fetch missing ones: it keeps its
	// work tree.
	if !o.worktree && !o.partial {
		// snapd checkout reads the objects: writing the parts out as
		// files too would double the clone's disk writes.
		args = append(args, "--no-checkout")
	}
	switch {
	case o.partial:
		args = append(args, "--filter=blob:none")
	case !o.full:
		args = append(args, "--depth", fmt.Sprint(o.depth), "--no-tags")
	}
	return append(args, "--", o.url, o.dir), nil
}

func runClone(ctx context.Context, e *env, o *cloneOptions) error {
	o.quiet, o.progress = e.global.quiet, e.progressOut() != nil
	args, err := o.cloneArgs()
	if err != nil {
		return usageError{err}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	phase := func(format string, a ...any) {
		if !e.global.quiet {
			fmt.Fprintf(e.stderr, "snapd: "+format+"\n", a...)
		}
	}
	// The user's own transport settings (GIT_SSH_COMMAND, certificates,
	// proxy) reach git; nothing that would point it at another
	// repository does.
	opts := gitexec.Options{Env: []string{"GIT_TERMINAL_PROMPT=0"}, Inherit: gitexec.UserTransport(), Stdout: e.stderr, Stderr: e.stderr}
	if o.gen > 0 {
		others, err := o.resolveGenTag(ctx, opts)
		if err != nil {
			return err
		}
		if len(others) > 0 {
			phase("generation %06d was re-used after a resume: cloning %s, the newest (also tagged: %s; snapd verify-repo tells which are abandoned)", o.gen, o.genTag, strings.Join(others, ", "))
		}
		if args, err = o.cloneArgs(); err != nil {
			return usageError{err}
		}
	}
	phase("fetching %s from %s into %s", o.ref(), publicURL(o.url), o.dir)
	if err := gitexec.Run(ctx, opts, args...); err != nil {
		cause, _ := gitexec.Split(err)
		return ioError{fmt.Errorf("git clone %s: %w", o.url, cause)}
	}
	if !e.global.quiet {
		if n, size, ok := packedObjects(ctx, o.dir); ok {
			phase("fetched %d objects (%s)", n, progress.Bytes(size))
		}
		if o.worktree || o.partial {
			if n, ok := trackedFiles(ctx, o.dir); ok {
				phase("checked out %d files", n)
			}
		} else {
			phase("no checkout (snapd checkout reads the objects)")
		}
	}
	fmt.Fprintf(e.stdout, "%s: cloned %s; restore with: snapd checkout latest OUT --repo %s\n", o.dir, o.ref(), o.dir)
	return nil
}

// gitOutput runs git in dir and returns its stdout.
func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	out, err := gitexec.Output(ctx, gitexec.Options{Env: []string{"GIT_TERMINAL_PROMPT=0"}}, append([]string{"-C", dir}, args...)...)
	return string(out), err
}

// packedObjects counts the objects of the repository in dir and their
// size on disk (git count-objects -v: loose plus packed); ok is false
// when git cannot say.
func packedObjects(ctx context.Context, dir string) (n, size int64, ok bool) {
	out, err := gitOutput(ctx, dir, "count-objects", "-v")
	if err != nil {
		return 0, 0, false
	}
	for _, l := range strings.Split(out, "\n") {
		k, v, found := strings.Cut(l, ": ")
		if !found {
			continue
		}
		x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "count", "in-pack":
			n += x
		case "size", "size-pack":
			size += x << 10 // KiB
		}
	}
	return n, size, true
}

// trackedFiles counts the files checked out in dir's work tree.
func trackedFiles(ctx context.Context, dir string) (int, bool) {
	out, err := gitOutput(ctx, dir, "ls-files", "-z")
	if err != nil {
		return 0, false
	}
	return strings.Count(out, "\x00"), true
}
