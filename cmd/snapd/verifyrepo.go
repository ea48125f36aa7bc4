package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/verify"
)

type verifyRepoOptions struct {
	target  string
	pubkeys []string
	ledgerFlags
	since          string
	tokenEnv       string
	json           bool
	maxObjectBytes int64
	oci            ociReadFlags
	sample         float64
	seed           uint64
	seedSet        bool
	requireContent bool
}

func newVerifyRepoCommand(e *env) *cobra.Command {
	var o verifyRepoOptions
	cmd := &cobra.Command{
		Use:   "verify-repo [PATH|URL] --pubkey FILE",
		Short: "Verify a snapshot repository's whole history with public keys only (CI)",
		Long: `Walk the first-parent chain of the snapshot branch (--branch, default "` + gitops.DefaultBranch + `") of a
Git repository and check, with public keys only and without decrypting:

  - every generation's WTXT fully (every profile check, Ed25519 signature by a
    trusted key); an age-armored generation through its seal current.wseal
    (signature, size and SHA-256 of the armored bytes, armor form, Merkle);
    the split layout is reassembled with every part's size and SHA-256 checked;
    the segments layout (current.wtxt.segs/: skeleton pieces and raw
    segments) is rebuilt as snapd checkout does, every piece's and
    segment's size and SHA-256 and every chunk's hashes checked, a failure
    naming the piece or segment file (--sample does not apply to it);
  - the Merkle chain: merkle_prev of each generation equals merkle_this of the
    previous commit's generation; generation numbers strictly increase (a gap
    in the numbers is reported, not a failure: the chain decides);
  - the SSHSIG signatures (namespace "git") of every commit and of its
    annotated tag (TAG-PREFIX + gen), by a trusted key, as git verify-commit /
    verify-tag check them; the tag must point at the commit;
  - that current.wtxtdelta applied to the previous generation gives this
    generation's WTXT byte for byte (age-armored deltas are skipped with a note);
  - that the commit trailers and generation.txt agree with the content;
  - the skeleton layout (current.wtxt.skel; tensor bytes in an OCI registry,
    docs/FORMAT.md §6) with --oci-repository, read only (pull; never pushes):
    the gen-NNNNNN manifest, its annotations and config against the
    skeleton, every referenced blob present, and the WTXT assembled from the
    skeleton and the blobs streamed into the full verifier (every chunk
    hash, blob digest, array hash, sha256_all, Merkle, signature) without
    writing it to disk. --sample F checks only a random fraction F of each
    generation's segments (reproducible with --seed; the report lists the
    segment indexes checked) plus every skeleton line, the manifest, every
    blob's presence, the header's Merkle value and signature; array hashes
    and sha256_all need every byte and are then not recomputed;
  - after retention (snapd gc --remote --keep K, then the registry's garbage
    collection), a skeleton-layout generation whose gen-NNNNNN manifest the
    registry answers 404 for, while a later generation's content is there,
    is "content collected": its signed skeleton is checked alone (every
    line, every ch hash present and well-formed, the header's Merkle value
    and signature) with the commit, tag, trailers, generation.txt and the
    chain, and it passes; the summary counts present and collected
    generations. A 404 with no later generation's content present, a blob
    missing under a manifest that is there, and any other registry answer
    are failures. --require-content makes collected a failure too.

A multi-rank ledger (a sharded job's: ranks/index.ranks under --path at the branch
tip) is verified as snapd ranks verify-repo does, and needs
--oci-repository (the registry holding its rank parts).

PATH is a local repository (bare or with a work tree; default "."); a URL
(file://, http(s)://, ssh://) is cloned into a temporary directory with the
branch and all tags. --since REV starts at that commit: its generation is the
chain anchor (verified itself; its merkle_prev is trusted, not checked).

Exit status: 0 every check passed, 1 any check failed (each failure names the
commit, generation, file and check; for a blob also the skeleton line, array,
chunk and segment digest), 2 usage or I/O error (a registry that cannot be
reached at all is one).`,
		Example: `  snapd verify-repo . --pubkey .snapd/allowed_signers
  snapd verify-repo https://github.com/org/model-snapshots.git --pubkey keys/sign_ed25519.pub --json
  snapd verify-repo /srv/snapshots.git --pubkey allowed_signers --since gen-000120
  snapd verify-repo . --pubkey allowed_signers --oci-repository ghcr.io/org/model --sample 0.05 --seed 7`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.MaximumNArgs(1)(cmd, args); err != nil {
				return usageError{err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.target = "."
			if len(args) == 1 {
				o.target = args[0]
			}
			o.seedSet = cmd.Flags().Changed("seed")
			return runVerifyRepo(cmd.Context(), e, &o)
		},
	}
	f := cmd.Flags()
	registerPubkeys(f, &o.pubkeys)
	o.ledgerFlags.register(f)
	f.StringVar(&o.since, "since", "", usageSince)
	f.StringVar(&o.tokenEnv, "token-env", "", "environment variable holding an HTTP(S) token for cloning a URL")
	f.BoolVar(&o.json, "json", false, usageJSON)
	f.Int64Var(&o.maxObjectBytes, "max-object-bytes", verify.DefaultMaxObjectBytes, "size budget of each file read from a generation (checked before reading it)")
	o.oci.register(f)
	f.Float64Var(&o.sample, "sample", 0, "skeleton layout: check only this fraction (0 < F < 1) of each generation's segment blobs, plus every header and skeleton line (default: all)")
	f.Uint64Var(&o.seed, "seed", 0, "seed of the --sample choice (default: random, printed for reproduction)")
	f.BoolVar(&o.requireContent, "require-content", false, "skeleton layout: a generation whose tensor bytes retention removed from the registry (content collected) fails instead of passing on its signed skeleton")
	return cmd
}

// errRepoFailed makes verify-repo exit 1 after printing its report.
type errRepoFailed struct {
	n, gens int
	first   verify.Failure
}

func (e errRepoFailed) Error() string {
	return fmt.Sprintf("verify-repo: %d failed check(s) in %d generation(s); first: %v", e.n, e.gens, e.first)
}

func runVerifyRepo(ctx context.Context, e *env, o *verifyRepoOptions) error {
	if len(o.pubkeys) == 0 {
		return usageError{errors.New("--pubkey is required (the trusted signers: a .pub or allowed_signers file)")}
	}
	signers, err := loadSigners(o.pubkeys)
	if err != nil {
		return err
	}
	oo := verify.OpenOptions{Branch: o.branch}
	if o.tokenEnv != "" {
		if oo.Token = e.getenv(o.tokenEnv); oo.Token == "" {
			return usageError{fmt.Errorf("--token-env %s: the variable is empty or unset", o.tokenEnv)}
		}
	}
	repo, cleanup, err := verify.Open(ctx, o.target, oo)
	if err != nil {
		return ioError{err}
	}
	defer cleanup()
	if o.sample < 0 || o.sample > 1 || o.sample != o.sample {
		return usageError{fmt.Errorf("--sample %v: want a fraction 0 < F <= 1", o.sample)}
	}
	if o.seedSet && (o.sample == 0 || o.sample == 1) {
		return usageError{errors.New("--seed needs --sample F with 0 < F < 1")}
	}
	if gitops.IsRanks(repo, o.branch, o.path) { // a sharded job's ledger
		if o.oci.repository == "" {
			return withHint(usageError{fmt.Errorf("%s: branch %s holds multi-rank generations (%s): their rank parts are in a registry", o.target, o.branch, gitops.RanksIndexPath(o.path))},
				"add --oci-repository HOST/NAME (the job's ranks.repository); snapd ranks verify-repo is the same check")
		}
		reg, err := o.oci.open(e)
		if err != nil {
			return err
		}
		return verifyRanksLedger(ctx, e, repo, reg, signers, &ranksRepoOptions{branch: o.branch, path: o.path, since: o.since, json: o.json})
	}
	vo := verify.Options{Branch: o.branch, Path: o.path, TagPrefix: o.tagPrefix, Since: o.since, AllowedSigners: signers, MaxObjectBytes: o.maxObjectBytes, RequireContent: o.requireContent}
	if o.oci.repository != "" {
		reg, err := o.oci.open(e)
		if err != nil {
			return err
		}
		vo.Registry = reg
	} else if o.sample > 0 {
		return usageError{errors.New("--sample needs --oci-repository (it samples the skeleton layout's segment blobs)")}
	}
	if o.sample > 0 && o.sample < 1 {
		vo.Sample, vo.Seed = o.sample, o.seed
		if !o.seedSet {
			var b [8]byte
			if _, err := rand.Read(b[:]); err != nil {
				return ioError{err}
			}
			vo.Seed = binary.LittleEndian.Uint64(b[:]) >> 11 // fits a float64 exactly (JSON)
		}
	}
	if !o.json {
		fmt.Fprintf(e.stdout, "%s: branch %s, path %s\n", o.target, o.branch, o.path)
		if vo.Registry != nil {
			mode := "full"
			if vo.Sample > 0 {
				mode = fmt.Sprintf("sample %g, seed %d", vo.Sample, vo.Seed)
			}
			fmt.Fprintf(e.stdout, "registry %s (read only): %s\n", o.oci.repository, mode)
		}
		vo.OnGeneration = func(g *verify.Generation) { printGeneration(e.stdout, g) }
	}
	m := repoProgress(e, &vo, o.target)
	rep, err := verify.Verify(ctx, repo, vo)
	endMeter(m, err)
	if err != nil {
		if errors.Is(err, verify.ErrBranch) || errors.Is(err, verify.ErrSince) {
			return usageError{err}
		}
		if ctx.Err() != nil {
			return err
		}
		return ioError{err}
	}
	if o.json {
		out := struct {
			Repo     string  `json:"repo"`
			Registry string  `json:"oci_repository,omitempty"`
			Sample   float64 `json:"sample,omitempty"`
			Seed     *uint64 `json:"seed,omitempty"`
			*verify.Report
		}{Repo: o.target, Registry: o.oci.repository, Report: rep}
		if vo.Sample > 0 {
			out.Sample, out.Seed = vo.Sample, &vo.Seed
		}
		if err := writeJSON(e.stdout, out); err != nil {
			return ioError{err}
		}
	} else {
		printRepoSummary(e.stdout, rep)
	}
	if !rep.OK {
		bad := 0
		for _, g := range rep.Generations {
			if !g.OK() {
				bad++
			}
		}
		return errRepoFailed{n: rep.Failures, gens: bad, first: rep.AllFailures()[0]}
	}
	return nil
}

func printGeneration(w io.Writer, g *verify.Generation) {
	c := g.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	gen := g.Gen
	if gen == "" {
		gen = "?"
	}
	status := "ok"
	if !g.OK() {
		status = fmt.Sprintf("FAIL(%d)", len(g.Failures))
	}
	content := "wtxt signature " + g.Signature
	if g.Encrypted {
		content = "sealed (age-armored) signature " + g.Signature
	}
	if g.KeyID != "" {
		content += " keyid " + g.KeyID
	}
	fmt.Fprintf(w, "gen %-6s %s %-6s %-8s %s; commit %s, tag %s; chain %s; delta %s\n",
		gen, c, g.Layout, status, content, g.CommitSignature, g.TagSignature, g.Chain, g.Delta)
	switch g.Verification {
	case verify.VerifyFull:
		fmt.Fprintf(w, "  registry: full, %d of %d segment blob(s) read, %d bytes\n", g.SegmentsRead, g.Segments, g.BlobBytes)
	case verify.VerifySample:
		fmt.Fprintf(w, "  registry: sampled %d of %d segment(s): %v\n", len(g.SampledSegments), g.Segments, g.SampledSegments)
	case verify.VerifySkeleton:
		what := "collected (retention removed its tensor bytes: manifest gen-" + g.Gen + " not in the registry)"
		if g.Content == verify.ContentMissing {
			what = "MISSING (manifest gen-" + g.Gen + " not in the registry, and no later generation's content is)"
		}
		fmt.Fprintf(w, "  registry: content %s; skeleton checked alone: %d segment(s), no tensor byte read\n", what, g.Segments)
	}
	for _, f := range g.Failures {
		fmt.Fprintf(w, "  FAIL %v\n", f)
	}
	for _, n := range g.Notes {
		// The registry line above says what a collected generation's note does.
		if !strings.HasPrefix(n, "delta applied") && !strings.HasPrefix(n, "content collected") {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
	}
}

func printRepoSummary(w io.Writer, rep *verify.Report) {
	n := len(rep.Generations)
	if n == 0 {
		fmt.Fprintf(w, "summary: no generations\n")
		return
	}
	first, last := rep.Generations[0], rep.Generations[n-1]
	var applied, skipped, sealed, bad int
	for _, g := range rep.Generations {
		switch g.Delta {
		case "applied":
			applied++
		case "skipped":
			skipped++
		}
		if g.Encrypted {
			sealed++
		}
		if !g.OK() {
			bad++
		}
	}
	result := "all checks passed"
	if !rep.OK {
		result = fmt.Sprintf("FAILED: %d check(s) in %d generation(s)", rep.Failures, bad)
	}
	fmt.Fprintf(w, "summary: %d generation(s) %s..%s (head %.12s): %s\n", n, first.Gen, last.Gen, rep.Head, result)
	fmt.Fprintf(w, "  chain: %s at %s, %d link(s) checked; deltas: %d applied, %d skipped; sealed (encrypted): %d\n",
		first.Chain, first.Gen, n-1, applied, skipped, sealed)
	if missing := missingGens(rep); rep.ContentCollected > 0 || len(missing) > 0 {
		fmt.Fprintf(w, "  content: %d present, %d collected (retention removed their tensor bytes from the registry; their signed skeletons, chain and tags were checked)", rep.ContentPresent, rep.ContentCollected)
		if len(missing) > 0 {
			fmt.Fprintf(w, ", missing (a failure) in %s", strings.Join(missing, ", "))
		}
		fmt.Fprintln(w)
	}
	for _, gp := range rep.Gaps {
		fmt.Fprintf(w, "  gap: %d generation number(s) missing between %s and %s (reported, not a failure: the chain check decides whether a committed generation was removed)\n", gp.Missing, gp.After, gp.Before)
	}
}

// missingGens lists the generations whose content is ContentMissing.
func missingGens(rep *verify.Report) []string {
	var out []string
	for _, g := range rep.Generations {
		if g.Content == verify.ContentMissing {
			out = append(out, g.Gen)
		}
	}
	return out
}
