package ranks

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/sshsig"
)

// VerifyLedgerOptions configure VerifyLedger.
type VerifyLedgerOptions struct {
	Dir    string // a clone of the ledger (e.g. fresh: git clone --branch B URL DIR)
	Branch string // default: HEAD
	Repo   *oci.Repository
	// AllowedSigners is the allowed-signers file git verify-commit and
	// verify-tag use for the committer's SSH signatures.
	AllowedSigners string
	// Trusted keys sign the indexes (committer) and the rank parts
	// (nodes); a valid signature by one of them is required on both.
	Trusted []ed25519.PublicKey
	// Signers, when set, replaces Trusted with the allowed_signers
	// policy: the index and part signatures of a generation (namespace
	// "file") must come from a key whose line allows namespace "file" at
	// the committer time of the generation's commit, as the commit and
	// tag signatures are checked by git at their committer and tagger
	// time (Signers should be parsed from the AllowedSigners file).
	Signers *sshsig.AllowedSigners
	// Chain, when non-zero, is the job's chain id; zero: the first
	// generation's, and every later one must have the same.
	Chain [32]byte
	// HMACKey checks the parts' per-array HMACs when set.
	HMACKey []byte
	// Since starts at this revision (e.g. the tag gen-NNNNNN of the
	// oldest generation kept after `snapd ranks gc`): its generation is
	// verified, its merkle_prev is the trusted chain anchor.
	Since string
}

// LedgerGen is one verified generation.
type LedgerGen struct {
	Gen        uint64   `json:"gen"`
	Commit     string   `json:"commit"`
	WorldSize  int      `json:"world_size"`
	MerkleThis string   `json:"merkle_this"`
	Skipped    []uint64 `json:"skipped,omitempty"`
	Arrays     int      `json:"arrays"`
	Bytes      int64    `json:"bytes"` // raw tensor bytes over all ranks
}

// VerifyLedger checks every multi-rank generation on the branch, oldest
// first (docs/FORMAT.md section 7): commit and tag SSH signatures, the
// index (grammar, root, signature), the chain across commits, generation
// order and recorded gaps, each skeleton against the index, and each
// rank part assembled from the registry and fully verified as WTXT. It
// stops at the first failure, which it returns located (commit, file,
// rank, check).
func VerifyLedger(ctx context.Context, o VerifyLedgerOptions) ([]LedgerGen, error) {
	git := func(ctx context.Context, env []string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", o.Dir, "-c", "gpg.ssh.allowedSignersFile=" + o.AllowedSigners}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			msg := strings.TrimSpace(errb.String())
			if len(msg) > 300 {
				msg = msg[:300] + "..."
			}
			return out.String(), fmt.Errorf("git %s: %w: %s", args[0], err, msg)
		}
		return out.String(), nil
	}
	branch := o.Branch
	if branch == "" {
		branch = "HEAD"
	}
	list, err := git(ctx, nil, "rev-list", "--first-parent", "--reverse", branch, "--")
	if err != nil {
		return nil, err
	}
	var out []LedgerGen
	var prev [32]byte
	var last uint64
	chain := o.Chain
	commits := strings.Fields(list)
	if o.Since != "" {
		sc, err := git(ctx, nil, "rev-parse", "--verify", o.Since+"^{commit}")
		if err != nil {
			return nil, err
		}
		i := slices.Index(commits, strings.TrimSpace(sc))
		if i < 0 {
			return nil, fail(o.Since, 0, -1, CheckChain, "not a commit of the ledger branch's first-parent history")
		}
		commits = commits[i:]
		anchor, err := readIndex(ctx, git, commits[0])
		if err != nil {
			return nil, err
		}
		prev = anchor.MerklePrev // trusted, as verify-repo --since does
	}
	for _, c := range commits {
		g, err := verifyCommit(ctx, git, o, c, prev, last, &chain)
		if err != nil {
			return out, fmt.Errorf("commit %.12s: %w", c, err)
		}
		out = append(out, *g)
		last = g.Gen
		prev = mustHex32(g.MerkleThis)
	}
	return out, nil
}

func mustHex32(s string) (h [32]byte) { parseHex32(s, &h); return h }

func verifyCommit(ctx context.Context, git func(context.Context, []string, ...string) (string, error), o VerifyLedgerOptions,
	c string, prev [32]byte, last uint64, chain *[32]byte) (*LedgerGen, error) {
	if _, err := git(ctx, nil, "verify-commit", c); err != nil {
		return nil, fail(c, 0, -1, CheckSignature, "commit signature: %v", err)
	}
	ix, err := readIndex(ctx, git, c)
	if err != nil {
		return nil, err
	}
	name := c[:min(12, len(c))] + ":" + IndexPath
	// policy says which allowed_signers lines do not allow namespace
	// "file" at the commit's time (added to a signature failure).
	policy := ""
	withPolicy := func(err error) error {
		if policy == "" {
			return err
		}
		return fmt.Errorf("%w (%s)", err, policy)
	}
	if o.Signers != nil {
		ct, err := git(ctx, nil, "log", "-1", "--format=%ct", c)
		if err != nil {
			return nil, err
		}
		sec, err := strconv.ParseInt(strings.TrimSpace(ct), 10, 64)
		if err != nil {
			return nil, fail(c, 0, -1, CheckSignature, "committer time %q: %v", strings.TrimSpace(ct), err)
		}
		at := time.Unix(sec, 0)
		o.Trusted = o.Signers.Ed25519Keys(sshsig.NamespaceFile, at)
		if ex := o.Signers.Excluded(sshsig.NamespaceFile, at); len(ex) > 0 {
			policy = fmt.Sprintf("allowed_signers at the commit time %s: %s", at.UTC().Format(time.RFC3339), strings.Join(ex, "; "))
		}
		if len(o.Trusted) == 0 {
			return nil, fail(name, 0, -1, CheckSignature, "allowed_signers allows no key for namespace %q at the commit time %s: %s",
				sshsig.NamespaceFile, at.UTC().Format(time.RFC3339), strings.Join(o.Signers.Excluded(sshsig.NamespaceFile, at), "; "))
		}
	}
	if *chain == ([32]byte{}) {
		*chain = ix.Chain
	}
	if err := ix.Verify(name, VerifyOptions{Trusted: o.Trusted, Prev: prev, CheckChain: true, Chain: *chain}); err != nil {
		return nil, withPolicy(err)
	}
	gen := ix.GenNumber()
	msg, err := git(ctx, nil, "log", "-1", "--format=%B", c)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(msg, "\n"+TrailerGen+": "+strconv.FormatUint(gen, 10)+"\n") {
		return nil, fail(name, 0, -1, CheckGen, "commit's %s trailer is not the index's generation %d", TrailerGen, gen)
	}
	skipped, err := ParseSkipped(msg)
	if err != nil {
		return nil, fail(name, 0, -1, CheckGrammar, "%v", err)
	}
	if gen <= last {
		return nil, fail(name, 0, -1, CheckGen, "generation %d does not follow generation %d", gen, last)
	}
	if last > 0 {
		for n := last + 1; n < gen; n++ {
			if !slices.Contains(skipped, n) {
				return nil, fail(name, 0, -1, CheckGen, "generations %d..%d are missing and not recorded as skipped (%s)", n, gen-1, TrailerSkip)
			}
			if n-last > 1<<20 {
				break
			}
		}
	}
	tag := "gen-" + ix.Gen
	if _, err := git(ctx, nil, "verify-tag", tag); err != nil {
		return nil, fail(tag, 0, -1, CheckSignature, "tag signature: %v", err)
	}
	if tc, err := git(ctx, nil, "rev-parse", tag+"^{commit}"); err != nil || strings.TrimSpace(tc) != c {
		return nil, fail(tag, 0, -1, CheckGen, "tag does not point at the generation's commit")
	}
	names, err := git(ctx, nil, "ls-tree", "--name-only", c+":"+LedgerDir)
	if err != nil {
		return nil, err
	}
	want := []string{IndexName}
	for r := range ix.WorldSize {
		want = append(want, SkeletonName(r))
	}
	slices.Sort(want)
	if got := strings.Fields(names); !slices.Equal(got, want) {
		return nil, fail(name, 0, -1, CheckSkeleton, "%s holds %d files, the index names %d", LedgerDir, len(got), len(want))
	}
	lg := &LedgerGen{Gen: gen, Commit: c, WorldSize: ix.WorldSize, MerkleThis: fmt.Sprintf("%x", ix.MerkleThis), Skipped: skipped}
	for r := range ix.WorldSize {
		obj := c + ":" + LedgerDir + "/" + SkeletonName(r)
		sz, err := git(ctx, nil, "cat-file", "-s", obj)
		if err != nil {
			return nil, err
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(sz), 10, 64); err != nil || n > MaxSkeletonBytes {
			return nil, fail(obj, 0, r, CheckSkeleton, "skeleton is %s bytes (limit %d)", strings.TrimSpace(sz), MaxSkeletonBytes)
		}
		skel, err := git(ctx, nil, "cat-file", "blob", obj)
		if err != nil {
			return nil, err
		}
		sname := c[:min(12, len(c))] + ":" + LedgerDir + "/" + SkeletonName(r)
		if err := ix.CheckSkeleton(r, []byte(skel), sname); err != nil {
			return nil, err
		}
		rep, err := verifyPart(ctx, []byte(skel), sname, o, *chain)
		if err != nil {
			return nil, withPolicy(err)
		}
		lg.Arrays += len(rep.Arrays)
		for _, a := range rep.Arrays {
			lg.Bytes += a.Bytes
		}
	}
	return lg, nil
}

// verifyPart assembles a rank part from its skeleton and the registry and
// verifies it as WTXT, streaming (nothing is written to disk).
func verifyPart(ctx context.Context, skel []byte, name string, o VerifyLedgerOptions, chain [32]byte) (*wtxt.Report, error) {
	pr, pw := io.Pipe()
	go func() {
		_, err := wtxt.AssembleNamed(ctx, bytes.NewReader(skel), name, o.Repo, pw)
		pw.CloseWithError(err)
	}()
	rep, err := wtxt.Verify(ctx, pr, wtxt.VerifyOptions{File: name, TrustedKeys: o.Trusted, PrevMerkle: &chain, HMACKey: o.HMACKey, RequireSignature: len(o.Trusted) > 0})
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if !rep.OK() {
		return nil, fmt.Errorf("%s: %w", name, rep.Failures[0])
	}
	return rep, nil
}
