package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/snapd-ml/snapd/configs"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/gitops/sshsig"
	"github.com/snapd-ml/snapd/gitops/verify"
	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/pipeline"
)

// ranksStatusFile is the committer's state file (snapd ranks status).
func ranksStatusFile(stateDir string) string { return pipeline.RankStatusFile(stateDir) }

// ranksDeps wires a node of a sharded job (`snapd run` with a ranks
// section) into deps: the daemon's Publisher pushes each request's rank
// part to ranks.repository; with ranks.committer the committer
// (deps.RankCommitter) commits complete generations to the ledger
// (git.repo, default STATE_DIR/repo) and pushes them through gp
// (git.remote; nil: made here when git.remote is set), observed by
// deps.Pushes (the daemon's push metrics and log).
func ranksDeps(e *env, c *configs.Config, pc *pipeline.Config, gp *gitops.GitPusher, repoDir string, log *slog.Logger, deps *pipeline.Deps) error {
	node, com, pushes, q, err := ranksParts(e, c, pc, gp, repoDir, log)
	if err != nil {
		return err
	}
	deps.Publisher, deps.RankCommitter, deps.Pushes, deps.Queue = node, com, pushes, q
	return nil
}

// ranksParts builds ranksDeps' parts: the node's publisher and, on the
// committer node, the committer, its observed pusher and (with a remote)
// the resend queue the committer's commits are pushed through.
func ranksParts(e *env, c *configs.Config, pc *pipeline.Config, gp *gitops.GitPusher, repoDir string, log *slog.Logger) (*pipeline.RankPublisher, *pipeline.RankCommitter, *pipeline.PushObserver, *queue.Queue, error) {
	rc := c.Ranks.WithDefaults()
	of := ociWriteFlags{ociReadFlags: ociReadFlags{ociTargetFlags: ociTargetFlags{repository: rc.Repository, insecure: rc.Insecure},
		timeout: time.Duration(c.Store.OCI.Timeout), stall: time.Duration(c.Store.OCI.StallTimeout)}, jobs: 4}
	repo, err := of.open(e)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	chain := wranks.ChainID(rc.Job)
	node, err := pipeline.NewRankPublisher(pipeline.RankOptions{Repo: repo, Chain: chain, SignKey: pc.SignKey, HMACKey: pc.HMACKey,
		Dir: pipeline.RankPartsDir(c.StateDir), SegmentSize: rc.SegmentSize, Build: c.Snapshot.Build, Log: log})
	if err != nil {
		return nil, nil, nil, nil, ioError{err}
	}
	if !rc.Committer {
		return node, nil, nil, nil, nil
	}
	email := c.Git.AuthorEmail
	if email == "" {
		email = c.Keys.Principal
		if email == "" {
			email = defaultPrincipal()
		}
	}
	ledger, err := gitops.OpenRepo(repoDir, gitops.Config{Branch: c.Git.Branch, Path: c.Git.Path,
		AuthorName: c.Git.AuthorName, AuthorEmail: email, SigningKey: pc.SignKey})
	if err != nil {
		return nil, nil, nil, nil, usageError{err}
	}
	var pusher gitops.Pusher
	var pushes *pipeline.PushObserver
	if gp == nil && c.Git.Remote != "" {
		if gp, err = newGitPusher(c, repoDir, log); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	var q *queue.Queue
	if gp != nil {
		pushes = pipeline.ObservePushes(gp)
		pusher = pushes
		if q, err = queue.Open(filepath.Join(c.StateDir, pipeline.QueueDir), queue.Options{Pusher: pushes, Logger: log,
			BaseDelay: time.Duration(c.Git.RetryBase), MaxDelay: time.Duration(c.Git.RetryMax),
			AuthRecheck: time.Duration(c.Git.AuthRecheck), MaxTimeouts: c.Git.PushMaxTimeouts,
			AfterPush: pushes.AfterPush}); err != nil {
			return nil, nil, nil, nil, ioError{err}
		}
	}
	opts := pipeline.RankCommitterOptions{Repo: repo, Chain: chain, WorldSize: rc.WorldSize,
		Timeout: time.Duration(rc.Timeout), OnTimeout: rc.OnTimeout, IndexKey: pc.SignKey, Build: c.Snapshot.Build, Poll: time.Duration(rc.PollInterval),
		Ledger: ledger, Pusher: pusher, StateFile: ranksStatusFile(c.StateDir), Log: log}
	if q != nil {
		opts.Queue = q
	}
	com, err := pipeline.NewRankCommitter(opts)
	if err != nil {
		return nil, nil, nil, nil, usageError{err}
	}
	return node, com, pushes, q, nil
}

// logRanksNode logs what a started ranks node does.
func logRanksNode(c *configs.Config, pc *pipeline.Config, log *slog.Logger) {
	rc := c.Ranks
	log.Info("ranks node running", "job", rc.Job, "world_size", rc.WorldSize, "repository", rc.Repository, "committer", rc.Committer,
		"chain", fmt.Sprintf("%x", wranks.ChainID(rc.Job)), "keyid", keys.KeyID(pc.SignKey.Public().(ed25519.PublicKey)))
}

func newRanksCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ranks",
		Short: "Sharded training jobs: status, verify, assemble and diff of multi-rank generations",
		Long: `A sharded job runs one "snapd run" per node with a ranks: section in its
config (world_size, job, repository; one node with committer: true). Each
node turns its rank's shard (request-snapshot --rank R --world-size W) into
a rank manifest gen-NNNNNN.rank-R in the OCI registry; the committer makes
one signed, chained Git commit per generation when all W are in, through
the same Git ledger code as a single-node daemon (repository git.repo,
default STATE_DIR/repo; pushed to git.remote), under --path/ranks/
(docs/FORMAT.md section 7). snapd verify-repo verifies such a ledger
(with --oci-repository); snapd ranks verify-repo is the same check.`,
	}
	cmd.AddCommand(newRanksStatusCommand(e), newRanksVerifyRepoCommand(e), newRanksAssembleCommand(e), newRanksDiffCommand(e), newRanksGCCommand(e))
	return cmd
}

func newRanksStatusCommand(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "The committer's view: last committed generation, the pending one and its missing or refused ranks, skipped generations",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			sd, err := e.resolveStateDir(cmd)
			if err != nil {
				return err
			}
			st, err := pipeline.ReadRankStatus(ranksStatusFile(sd))
			if errors.Is(err, fs.ErrNotExist) {
				return withHint(ioError{err}, "only the committer node (ranks.committer: true) keeps this status; on other nodes see snapd wal list")
			}
			if err != nil {
				return ioError{err}
			}
			if asJSON {
				b, _ := json.MarshalIndent(st, "", "  ")
				fmt.Fprintf(e.stdout, "%s\n", b)
				return nil
			}
			writeRanksStatus(e.stdout, st, "")
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, usageJSON)
	return cmd
}

type ranksRepoOptions struct {
	oci     ociReadFlags
	pubkeys []string
	branch  string
	path    string
	job     string
	since   string
	json    bool
}

// openLedger opens the registry of o and the ledger at target (a local
// repository, or a URL cloned into a temporary directory that done
// removes).
func (o *ranksRepoOptions) openLedger(ctx context.Context, e *env, target string) (*oci.Repository, *git.Repository, func(), error) {
	repo, err := o.oci.open(e)
	if err != nil {
		return nil, nil, nil, err
	}
	r, done, err := verify.Open(ctx, target, verify.OpenOptions{Branch: o.branch})
	if err != nil {
		return nil, nil, nil, ioError{err}
	}
	return repo, r, done, nil
}

// addRanksLedgerFlags registers where the ledger's generations are.
func addRanksLedgerFlags(f *pflag.FlagSet, o *ranksRepoOptions) {
	registerBranch(f, &o.branch)
	registerPath(f, &o.path)
}

func newRanksVerifyRepoCommand(e *env) *cobra.Command {
	var o ranksRepoOptions
	cmd := &cobra.Command{
		Use:   "verify-repo [PATH|URL] --oci-repository R --pubkey ALLOWED_SIGNERS",
		Short: "Verify every multi-rank generation of a ledger with public keys only",
		Long: `The same check as snapd verify-repo on a multi-rank ledger, with --job to
require the job's chain id. Walk the ledger branch oldest first and check
each generation's commit and tag SSH signatures (in Go, with the
allowed_signers options at the committer and tagger time, as git
verify-commit / verify-tag do), its index (grammar, root over the ranks,
signature by a trusted key), the chain (merkle_prev = the previous
commit's merkle_this), generation order and recorded gaps (Snapd-Skipped),
each rank skeleton against the index, and each rank part assembled from
the registry and fully verified (every chunk, array, sha256_all, merkle,
signature by a trusted key). --pubkey is an allowed_signers file listing
the committer's and every node's key. A URL is cloned first. Exit 1 on the
first failed check (named: commit, file, rank, check).`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target := "."
			if len(args) == 1 {
				target = args[0]
			}
			return runRanksVerifyRepo(cmd.Context(), e, target, &o)
		},
	}
	o.oci.register(cmd.Flags())
	f := cmd.Flags()
	registerPubkeys(f, &o.pubkeys)
	addRanksLedgerFlags(f, &o)
	f.StringVar(&o.job, "job", "", "the job name (ranks.job); when given every generation must carry its chain id")
	f.StringVar(&o.since, "since", "", usageSince)
	f.BoolVar(&o.json, "json", false, usageJSON)
	return cmd
}

func runRanksVerifyRepo(ctx context.Context, e *env, target string, o *ranksRepoOptions) error {
	if len(o.pubkeys) == 0 {
		return usageError{errors.New("--pubkey ALLOWED_SIGNERS is required")}
	}
	policy, err := loadSigners(o.pubkeys)
	if err != nil {
		return err
	}
	repo, r, done, err := o.openLedger(ctx, e, target)
	if err != nil {
		return err
	}
	defer done()
	return verifyRanksLedger(ctx, e, r, repo, policy, o)
}

// verifyRanksLedger verifies the multi-rank generations of r (verify-repo
// and its alias snapd ranks verify-repo) and prints the result.
func verifyRanksLedger(ctx context.Context, e *env, r *git.Repository, blobs *oci.Repository, policy *sshsig.AllowedSigners, o *ranksRepoOptions) error {
	vo := verify.RanksOptions{Branch: o.branch, Path: o.path, Blobs: blobs, Signers: policy, Since: o.since}
	if o.job != "" {
		vo.Chain = wranks.ChainID(o.job)
	}
	gens, verr := verify.VerifyRanks(ctx, r, vo)
	if errors.Is(verr, verify.ErrBranch) || errors.Is(verr, verify.ErrSince) {
		return usageError{verr}
	}
	if o.json {
		// "failure", not "error": "error" is the error object of every
		// --json command (docs/JSON.md), one type per field.
		doc := map[string]any{"ok": verr == nil, "generations": gens}
		if verr != nil {
			doc["failure"] = verr.Error()
		}
		b, _ := json.MarshalIndent(doc, "", "  ")
		fmt.Fprintf(e.stdout, "%s\n", b)
	} else {
		for _, g := range gens {
			fmt.Fprintf(e.stdout, "ok gen %d commit %.12s world_size %d arrays %d bytes %d merkle_this %.16s skipped %v\n", g.Gen, g.Commit, g.WorldSize, g.Arrays, g.Bytes, g.MerkleThis, g.Skipped)
		}
	}
	if verr != nil {
		return registryErr(verr)
	}
	if !o.json {
		fmt.Fprintf(e.stdout, "verified %d multi-rank generations: chain continuous, every rank part verified\n", len(gens))
	}
	return nil
}

func newRanksAssembleCommand(e *env) *cobra.Command {
	var o ranksRepoOptions
	var gen string
	cmd := &cobra.Command{
		Use:   "assemble [PATH|URL] OUTDIR --gen N --oci-repository R",
		Short: "Rebuild every rank part of a multi-rank generation (rank-R.wtxt) from the ledger and the registry",
		Long: `Write OUTDIR/rank-R.wtxt for R = 0..W-1: each rank's WTXT byte for byte,
assembled from its skeleton in the ledger (generation --gen, or the newest)
and the registry, every chunk hash and blob digest checked; the skeletons
are first checked against the generation's index. Files are written
atomically; nothing is left for a rank that fails. Compare two generations
rank by rank with snapd diff OUTDIR_A/rank-R.wtxt OUTDIR_B/rank-R.wtxt.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageError{errors.New("want [PATH|URL] OUTDIR")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			target, out := ".", args[0]
			if len(args) == 2 {
				target, out = args[0], args[1]
			}
			repo, r, done, err := o.openLedger(cmd.Context(), e, target)
			if err != nil {
				return err
			}
			defer done()
			rev := o.branch
			if gen != "" {
				rev = gitops.DefaultTagPrefix + gen
			}
			files, err := gitops.AssembleRanks(cmd.Context(), r, rev, o.path, repo, out)
			if err != nil {
				return registryErr(err)
			}
			for _, f := range files {
				fmt.Fprintln(e.stdout, f)
			}
			return nil
		},
	}
	o.oci.register(cmd.Flags())
	cmd.Flags().StringVar(&gen, "gen", "", "generation as DEC6 (e.g. 000003); default the newest on --branch")
	addRanksLedgerFlags(cmd.Flags(), &o)
	return cmd
}

func newRanksDiffCommand(e *env) *cobra.Command {
	var o ranksRepoOptions
	var from, to string
	var md bool
	cmd := &cobra.Command{
		Use:   "diff [PATH|URL] --from N --to M --oci-repository R",
		Short: "Per-array changes between two multi-rank generations, rank by rank",
		Long: `Assemble every rank part of generations --from and --to (DEC6, e.g. 000003)
from the ledger and the registry (as snapd ranks assemble does, every hash
checked) into a temporary directory and print snapd diff's per-array
report for each rank under a "rank R" heading. Exit 1 when any rank
differs, 0 when none does. Both generations must have the same world size.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" || to == "" {
				return usageError{errors.New("--from and --to are required")}
			}
			target := "."
			if len(args) == 1 {
				target = args[0]
			}
			ctx := cmd.Context()
			repo, r, done, err := o.openLedger(ctx, e, target)
			if err != nil {
				return err
			}
			defer done()
			tmp, err := os.MkdirTemp("", "snapd-ranks-diff-")
			if err != nil {
				return ioError{err}
			}
			defer os.RemoveAll(tmp)
			fa, err := gitops.AssembleRanks(ctx, r, gitops.DefaultTagPrefix+from, o.path, repo, filepath.Join(tmp, "a"))
			if err != nil {
				return registryErr(err)
			}
			fb, err := gitops.AssembleRanks(ctx, r, gitops.DefaultTagPrefix+to, o.path, repo, filepath.Join(tmp, "b"))
			if err != nil {
				return registryErr(err)
			}
			if len(fa) != len(fb) {
				return fmt.Errorf("generation %s has %d ranks, generation %s has %d", from, len(fa), to, len(fb))
			}
			differ := false
			for r := range fa {
				fmt.Fprintf(e.stdout, "rank %d:\n", r)
				err := runDiff(ctx, e, &diffOptions{a: fa[r], b: fb[r], md: md})
				var d errDiffer
				switch {
				case errors.As(err, &d):
					differ = true
				case err != nil:
					return fmt.Errorf("rank %d: %w", r, err)
				}
			}
			if differ {
				return errDiffer{}
			}
			return nil
		},
	}
	o.oci.register(cmd.Flags())
	cmd.Flags().StringVar(&from, "from", "", "older generation, DEC6 (e.g. 000003)")
	cmd.Flags().StringVar(&to, "to", "", "newer generation, DEC6")
	cmd.Flags().BoolVar(&md, "markdown", false, usageMarkdown)
	addRanksLedgerFlags(cmd.Flags(), &o)
	return cmd
}

func newRanksGCCommand(e *env) *cobra.Command {
	var o ranksRepoOptions
	var keep int
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "gc [PATH|URL] --keep K --oci-repository R",
		Short: "Delete the rank manifests of all but the newest K committed multi-rank generations",
		Long: `Read the committed generations from the ledger (Snapd-Gen trailers of the
branch) and delete, through the registry API, every rank manifest
(gen-NNNNNN.rank-R) of a generation older than the oldest of the newest K:
committed, skipped or abandoned ones. Newer rank manifests (kept, pending)
are never touched. Then run the registry's garbage collection (e.g.
docker-registry garbage-collect CONFIG) to free the blobs; afterwards verify
with snapd ranks verify-repo --since gen-NNNNNN (the oldest kept).`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keep < 1 {
				return usageError{errors.New("--keep must be >= 1")}
			}
			target := "."
			if len(args) == 1 {
				target = args[0]
			}
			ctx := cmd.Context()
			repo, r, done, err := o.openLedger(ctx, e, target)
			if err != nil {
				return err
			}
			defer done()
			committed, err := gitops.RanksGenerations(r, o.branch)
			if err != nil {
				return ioError{err}
			}
			removed, err := oci.GCRanks(ctx, repo, committed, keep, dryRun)
			for _, t := range removed {
				verb := "deleted"
				if dryRun {
					verb = "would delete"
				}
				fmt.Fprintf(e.stdout, "%s %s\n", verb, t)
			}
			return registryErr(err)
		},
	}
	o.oci.register(cmd.Flags())
	cmd.Flags().IntVar(&keep, "keep", 0, "committed generations whose rank manifests are kept (>= 1)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, usageDryRunGC)
	addRanksLedgerFlags(cmd.Flags(), &o)
	return cmd
}

// writeRanksStatus prints the committer's status, each line after indent
// (snapd ranks status, and snapd status on the committer node).
func writeRanksStatus(w io.Writer, st *pipeline.RankStatus, indent string) {
	fmt.Fprintf(w, "%slast committed generation: %d\n", indent, st.LastCommitted)
	if st.Pending != 0 {
		state := "waiting"
		if st.TimedOut {
			state = "TIMED OUT"
		}
		fmt.Fprintf(w, "%spending generation %d (%s since %s): missing ranks %v\n", indent, st.Pending, state, st.PendingSince.Format(time.RFC3339), st.Missing)
		for r, msg := range st.Invalid {
			fmt.Fprintf(w, "%s  rank %s refused: %s\n", indent, r, msg)
		}
	}
	if len(st.SkippedTotal) > 0 {
		fmt.Fprintf(w, "%sskipped generations (recorded in the ledger): %v\n", indent, st.SkippedTotal)
	}
	if st.LastError != "" {
		fmt.Fprintf(w, "%slast error: %s\n", indent, st.LastError)
	}
}
