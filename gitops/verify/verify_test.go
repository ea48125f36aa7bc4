package verify

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	git "github.com/go-git/go-git/v5"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/internal/gittest"
)

func run(t *testing.T, dir string, o Options, keys ...ed25519.PublicKey) *Report {
	t.Helper()
	r, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	o.TrustedKeys = keys
	o.TempDir = t.TempDir()
	rep, err := Verify(context.Background(), r, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func dump(rep *Report) string {
	var b strings.Builder
	for _, g := range rep.Generations {
		fmt.Fprintf(&b, "gen %s %s chain=%s delta=%s sig=%s commit=%s tag=%s notes=%q\n", g.Gen, g.Commit[:8], g.Chain, g.Delta, g.Signature, g.CommitSignature, g.TagSignature, g.Notes)
		for _, f := range g.Failures {
			fmt.Fprintf(&b, "  FAIL %v\n", f)
		}
	}
	return b.String()
}

// wantOnly asserts the report's failures are exactly the given checks
// (in order) and returns them.
func wantOnly(t *testing.T, rep *Report, checks ...string) []Failure {
	t.Helper()
	fs := rep.AllFailures()
	var got []string
	for _, f := range fs {
		got = append(got, f.Check)
	}
	if rep.OK || strings.Join(got, ",") != strings.Join(checks, ",") {
		t.Fatalf("failures %v, want %v\n%s", got, checks, dump(rep))
	}
	return fs
}

func TestCleanHistoryPasses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout gitops.Layout
	}{{"single", gitops.LayoutSingle}, {"split", gitops.LayoutSplit}} {
		t.Run(tc.name, func(t *testing.T) {
			f := verifytest.Build(t, verifytest.Options{Layout: tc.layout, PartLimit: gitops.MinPartLimit})
			if tc.layout == gitops.LayoutSplit {
				out := verifytest.Git(t, f.Dir, "ls-tree", "--name-only", "snapshots:snapshots/current.wtxt.parts")
				if n := len(strings.Fields(out)); n < 3 {
					t.Fatalf("split layout has %d entries, want MANIFEST + several parts: %s", n, out)
				}
			}
			rep := run(t, f.Dir, Options{}, f.Key.Pub)
			if !rep.OK || len(rep.Generations) != 5 || len(rep.Gaps) != 0 {
				t.Fatalf("report not OK:\n%s", dump(rep))
			}
			for i, g := range rep.Generations {
				want := f.Gens[i]
				if g.Commit != want.Commit || g.Gen != want.Header.Root.Gen || g.Tag != want.Tag || g.Layout != string(tc.layout) {
					t.Fatalf("gen %d: %+v", i, g)
				}
				if g.Signature != "verified" || g.CommitSignature != SigVerified || g.TagSignature != SigVerified || g.MerkleThis != want.Header.Root.Fields()[5].Value {
					t.Fatalf("gen %d: %+v", i, g)
				}
				wantChain, wantDelta := ChainContinues, "applied"
				if i == 0 {
					wantChain, wantDelta = ChainFirst, "none"
				}
				if g.Chain != wantChain || g.Delta != wantDelta {
					t.Fatalf("gen %d: chain %s delta %s", i, g.Chain, g.Delta)
				}
			}
			if rep.Head != f.Gens[4].Commit {
				t.Fatalf("head %s", rep.Head)
			}
		})
	}
}

func TestUntrustedKeyFailsEverySignature(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Gens: []uint64{1, 2}})
	other := verifytest.NewKey(t)
	rep := run(t, f.Dir, Options{}, other.Pub)
	// The content of an untrusted commit is not read:
	// the commit and tag signatures fail, the WTXT is not opened.
	fs := wantOnly(t, rep, "commit-signature", "tag-signature", "commit-signature", "tag-signature")
	if !strings.Contains(fs[0].Message, "not among the 1 trusted key(s)") {
		t.Fatalf("%v", fs[0])
	}
	if g := rep.Generations[0]; !slices.Contains(g.Notes, "content not read: the commit is not signed by a trusted key") {
		t.Fatalf("notes %q", g.Notes)
	}
	if _, err := Verify(context.Background(), nil, Options{}); err != ErrNoKeys {
		t.Fatalf("no keys: %v", err)
	}
}

func TestEncryptedGenerationThroughSeal(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Encrypt: []uint64{3}})
	rep := run(t, f.Dir, Options{}, f.Key.Pub)
	if !rep.OK {
		t.Fatalf("%s", dump(rep))
	}
	g3, g4 := rep.Generations[2], rep.Generations[3]
	if !g3.Encrypted || g3.Signature != "verified" || g3.Chain != ChainContinues || g3.Delta != "skipped" || g4.Chain != ChainContinues || g4.Delta != "skipped" {
		t.Fatalf("%s", dump(rep))
	}
	if rep.Generations[4].Delta != "applied" {
		t.Fatalf("%s", dump(rep))
	}
}

// TestTamperedWTXTInSignedCommit rewrites generation 5 with one base64
// character changed, committed and signed by hand with the git CLI and the
// real key: only the content checks can catch it.
func TestTamperedWTXTInSignedCommit(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{})
	repo := f.Copy(t)
	g5 := f.Gens[4]
	lines := strings.SplitAfter(string(g5.WTXT), "\n")
	target := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "ch ") && i > 40 {
			target = i + 1 // first base64 line of that chunk
			break
		}
	}
	l := []byte(lines[target])
	if l[0] == 'A' {
		l[0] = 'B'
	} else {
		l[0] = 'A'
	}
	lines[target] = string(l)
	bad := verifytest.WriteFile(t, filepath.Join(t.TempDir(), "bad.wtxt"), []byte(strings.Join(lines, "")))
	files := g5.Files
	files.WTXT = bad
	commit := verifytest.HandCommit(t, repo, f.Gens[3].Commit, files, f.Key.PrivFile, f.Key.PrivFile)
	rep := run(t, repo, Options{}, f.Key.Pub)
	fs := rep.AllFailures()
	if rep.OK || len(fs) < 2 {
		t.Fatalf("%s", dump(rep))
	}
	for _, x := range fs {
		if x.Commit != commit || x.Gen != "000005" {
			t.Fatalf("failure not at the rewritten commit: %v\n%s", x, dump(rep))
		}
	}
	if fs[0].File != "snapshots/current.wtxt" || fs[0].Line != target+1 || !strings.HasPrefix(fs[0].Check, "wtxt/") {
		t.Fatalf("first failure %v, want snapshots/current.wtxt:%d wtxt/...\n%s", fs[0], target+1, dump(rep))
	}
	last := fs[len(fs)-1]
	if last.Check != CheckDelta || last.File != "snapshots/current.wtxtdelta" || !strings.Contains(last.Message, "differs from snapshots/current.wtxt at byte") {
		t.Fatalf("last failure %v\n%s", last, dump(rep))
	}
	t.Logf("%s", dump(rep))
}

func TestBrokenChain(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{})
	repo := f.Copy(t)
	var wrong [32]byte
	rand.Read(wrong[:])
	g6 := f.MakeWith(t, verifytest.Snapshot(6), wrong, f.Gens[4], false)
	commit := verifytest.HandCommit(t, repo, f.Gens[4].Commit, g6.Files, f.Key.PrivFile, f.Key.PrivFile)
	rep := run(t, repo, Options{}, f.Key.Pub)
	fs := wantOnly(t, rep, CheckChain)
	want := fmt.Sprintf("merkle_prev %x is not merkle_this %x of the previous generation 000005", wrong, f.Gens[4].Header.Root.MerkleThis)
	if fs[0].Commit != commit || fs[0].Gen != "000006" || fs[0].Message != want || rep.Generations[5].Chain != ChainBroken {
		t.Fatalf("%v\nwant message %s", fs[0], want)
	}
	// The delta still applies: it was made from generation 5.
	if rep.Generations[5].Delta != "applied" {
		t.Fatalf("%s", dump(rep))
	}
	// --since the broken generation: it is the anchor, its merkle_prev trusted.
	rep = run(t, repo, Options{Since: "gen-000006"}, f.Key.Pub)
	if !rep.OK || len(rep.Generations) != 1 || rep.Generations[0].Chain != ChainAnchor || rep.Generations[0].Delta != "skipped" {
		t.Fatalf("%s", dump(rep))
	}
	rep = run(t, repo, Options{Since: f.Gens[2].Commit}, f.Key.Pub)
	if len(rep.Generations) != 4 || rep.Generations[0].Gen != "000003" {
		t.Fatalf("%s", dump(rep))
	}
	wantOnly(t, rep, CheckChain)
}

func TestUnsignedAndWronglySignedCommits(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{})
	g6 := f.Make(t, 6, f.Gens[4], false)
	other := verifytest.NewKey(t)

	t.Run("unsigned", func(t *testing.T) {
		repo := f.Copy(t)
		commit := verifytest.HandCommit(t, repo, f.Gens[4].Commit, g6.Files, "", f.Key.PrivFile)
		fs := wantOnly(t, run(t, repo, Options{}, f.Key.Pub), CheckCommitSig)
		if fs[0].Commit != commit || fs[0].Gen != "000006" || fs[0].Message != "the commit is not signed" {
			t.Fatalf("%v", fs[0])
		}
		assertGitAgrees(t, repo, f.Key, commit, "gen-000006", false, true)
	})
	t.Run("unsigned-tag", func(t *testing.T) {
		repo := f.Copy(t)
		commit := verifytest.HandCommit(t, repo, f.Gens[4].Commit, g6.Files, f.Key.PrivFile, "")
		fs := wantOnly(t, run(t, repo, Options{}, f.Key.Pub), CheckTagSig)
		if fs[0].Message != "the tag gen-000006 is not signed" {
			t.Fatalf("%v", fs[0])
		}
		assertGitAgrees(t, repo, f.Key, commit, "gen-000006", true, false)
	})
	t.Run("other-key", func(t *testing.T) {
		repo := f.Copy(t)
		commit := verifytest.HandCommit(t, repo, f.Gens[4].Commit, g6.Files, other.PrivFile, other.PrivFile)
		fs := wantOnly(t, run(t, repo, Options{}, f.Key.Pub), CheckCommitSig, CheckTagSig)
		if !strings.Contains(fs[0].Message, "commit signature: signed by ssh-ed25519 key SHA256:") || !strings.Contains(fs[0].Message, "not among the 1 trusted key(s)") {
			t.Fatalf("%v", fs[0])
		}
		assertGitAgrees(t, repo, f.Key, commit, "gen-000006", false, false)
	})
	t.Run("forged", func(t *testing.T) {
		// A signed commit whose author line was edited afterwards.
		repo := f.Copy(t)
		head := f.Gens[4].Commit
		raw := verifytest.Git(t, repo, "cat-file", "commit", head)
		forged := strings.Replace(raw, "author snapd <", "author mallory <", 1)
		p := verifytest.WriteFile(t, filepath.Join(t.TempDir(), "c"), []byte(forged))
		commit := strings.TrimSpace(verifytest.Git(t, repo, "hash-object", "-t", "commit", "-w", p))
		verifytest.Git(t, repo, "update-ref", "refs/heads/snapshots", commit)
		msg := verifytest.WriteFile(t, filepath.Join(t.TempDir(), "m"), []byte(strings.SplitN(raw, "\n\n", 2)[1]))
		verifytest.Git(t, repo, "-c", "gpg.format=ssh", "-c", "user.signingkey="+f.Key.PrivFile, "tag", "-f", "-s", "--cleanup=verbatim", "-F", msg, "gen-000005", commit)
		fs := wantOnly(t, run(t, repo, Options{}, f.Key.Pub), CheckCommitSig)
		if fs[0].Commit != commit || !strings.Contains(fs[0].Message, "signature does not verify") {
			t.Fatalf("%v", fs[0])
		}
		assertGitAgrees(t, repo, f.Key, commit, "gen-000005", false, true)
	})
}

// assertGitAgrees checks `git verify-commit` / `git verify-tag` give the
// same verdicts as this package.
func assertGitAgrees(t *testing.T, repo string, key *verifytest.Key, commit, tag string, commitOK, tagOK bool) {
	t.Helper()
	cfg := []string{"-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile=" + key.AllowedSigners}
	_, err := verifytest.GitRun(repo, nil, append(cfg, "verify-commit", commit)...)
	if (err == nil) != commitOK {
		t.Fatalf("git verify-commit %s: %v, verify says ok=%v", commit, err, commitOK)
	}
	_, err = verifytest.GitRun(repo, nil, append(cfg, "verify-tag", tag)...)
	if (err == nil) != tagOK {
		t.Fatalf("git verify-tag %s: %v, verify says ok=%v", tag, err, tagOK)
	}
}

func TestSignaturesAgreeWithGitCLI(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Gens: []uint64{1, 2, 3}})
	rep := run(t, f.Dir, Options{}, f.Key.Pub)
	if !rep.OK {
		t.Fatalf("%s", dump(rep))
	}
	for _, g := range f.Gens {
		assertGitAgrees(t, f.Dir, f.Key, g.Commit, g.Tag, true, true)
	}
	// The payload split matches what git signs: re-verify with the
	// payload git itself extracts (`git cat-file` minus gpgsig).
	raw := verifytest.Git(t, f.Dir, "cat-file", "commit", f.Gens[1].Commit)
	payload, sig, err := splitCommitSignature([]byte(raw))
	if err != nil || bytes.Contains(payload, []byte("gpgsig")) || !bytes.HasPrefix(sig, []byte("-----BEGIN SSH SIGNATURE-----\n")) {
		t.Fatalf("split: %v\n%s", err, payload)
	}
}

func TestDeltaNotProducingNextGeneration(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{})
	repo := f.Copy(t)
	g6 := f.Make(t, 6, f.Gens[4], false)
	// A delta from generation 5 to a different generation 6.
	alt := verifytest.Snapshot(6)
	alt.Meta.Build = "other-build"
	altWTXT, _ := verifytest.Encode(t, alt, f.Key.Priv, f.Gens[4].Result.MerkleThis)
	g6.Files.Delta = verifytest.WriteFile(t, filepath.Join(t.TempDir(), "bad.wtxtdelta"), verifytest.Delta(t, f.Gens[4].WTXT, altWTXT))
	r, err := gitops.OpenRepo(repo, gitops.Config{SigningKey: f.Key.Priv})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Commit(context.Background(), g6.Files)
	if err != nil {
		t.Fatal(err)
	}
	fs := wantOnly(t, run(t, repo, Options{}, f.Key.Pub), CheckDelta)
	if fs[0].Commit != res.Commit.String() || fs[0].Gen != "000006" || fs[0].File != "snapshots/current.wtxtdelta" ||
		!strings.HasPrefix(fs[0].Message, "applied to generation 000005 it differs from snapshots/current.wtxt at byte ") {
		t.Fatalf("%v", fs[0])
	}
	// A delta against the wrong base.
	repo2 := f.Copy(t)
	g6b := f.Make(t, 6, f.Gens[4], false)
	g6b.Files.Delta = verifytest.WriteFile(t, filepath.Join(t.TempDir(), "wrongbase.wtxtdelta"), verifytest.Delta(t, f.Gens[3].WTXT, g6b.WTXT))
	r2, _ := gitops.OpenRepo(repo2, gitops.Config{SigningKey: f.Key.Priv})
	if _, err := r2.Commit(context.Background(), g6b.Files); err != nil {
		t.Fatal(err)
	}
	fs = wantOnly(t, run(t, repo2, Options{}, f.Key.Pub), CheckDelta)
	if !strings.Contains(fs[0].Message, "delta does not apply to this base") || fs[0].Line != 1 {
		t.Fatalf("%v", fs[0])
	}
}

func TestEncryptedSealMismatch(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{})
	repo := f.Copy(t)
	g6 := f.Make(t, 6, f.Gens[4], true)
	// The seal of another encryption of the same plaintext.
	other := f.Armor(t, g6.WTXT)
	g6.Files.Seal = verifytest.WriteFile(t, filepath.Join(t.TempDir(), "other.wseal"), f.Seal(t, g6, other))
	r, err := gitops.OpenRepo(repo, gitops.Config{SigningKey: f.Key.Priv})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Commit(context.Background(), g6.Files); err != nil {
		t.Fatal(err)
	}
	rep := run(t, repo, Options{}, f.Key.Pub)
	fs := rep.AllFailures()
	if len(fs) != 1 || (fs[0].Check != "seal/sha256" && fs[0].Check != "seal/bytes") || fs[0].File != "snapshots/current.wtxt" || fs[0].Gen != "000006" {
		t.Fatalf("%s", dump(rep))
	}
	if !strings.Contains(fs[0].Message, "seal says") {
		t.Fatalf("%v", fs[0])
	}
	// A seal that was edited (signature no longer verifies).
	repo2 := f.Copy(t)
	g6b := f.Make(t, 6, f.Gens[4], true)
	sb, _ := os.ReadFile(g6b.Files.Seal)
	sb = bytes.Replace(sb, []byte("build=verifytest"), []byte("build=verifytesX"), 1)
	os.WriteFile(g6b.Files.Seal, sb, 0o644)
	r2, _ := gitops.OpenRepo(repo2, gitops.Config{SigningKey: f.Key.Priv})
	if _, err := r2.Commit(context.Background(), g6b.Files); err != nil {
		t.Fatal(err)
	}
	rep = run(t, repo2, Options{}, f.Key.Pub)
	var checks []string
	for _, x := range rep.AllFailures() {
		checks = append(checks, x.Check)
	}
	if len(checks) == 0 || checks[0] != "seal/signature" {
		t.Fatalf("%s", dump(rep))
	}
}

func TestGapIsReportedNotFailed(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Gens: []uint64{1, 2, 4}})
	rep := run(t, f.Dir, Options{}, f.Key.Pub)
	if !rep.OK || len(rep.Gaps) != 1 || rep.Gaps[0] != (Gap{After: "000002", Before: "000004", Missing: 1}) {
		t.Fatalf("%+v\n%s", rep.Gaps, dump(rep))
	}
}

func TestSummaryAndTagChecks(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Gens: []uint64{1, 2}})
	repo := f.Copy(t)
	// Move tag gen-000001 to generation 2's commit.
	verifytest.Git(t, repo, "-c", "gpg.format=ssh", "-c", "user.signingkey="+f.Key.PrivFile, "tag", "-f", "-s", "-m", "moved", "gen-000001", f.Gens[1].Commit)
	fs := wantOnly(t, run(t, repo, Options{}, f.Key.Pub), CheckTag)
	if fs[0].Gen != "000001" || !strings.Contains(fs[0].Message, "points at commit "+f.Gens[1].Commit) {
		t.Fatalf("%v", fs[0])
	}
	verifytest.Git(t, repo, "tag", "-d", "gen-000001")
	fs = wantOnly(t, run(t, repo, Options{}, f.Key.Pub), CheckTag)
	if !strings.Contains(fs[0].Message, "tag gen-000001 not found") {
		t.Fatalf("%v", fs[0])
	}
}

func TestUnknownBranchAndSince(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Gens: []uint64{1}})
	r, _ := git.PlainOpen(f.Dir)
	_, err := Verify(context.Background(), r, Options{Branch: "nope", TrustedKeys: []ed25519.PublicKey{f.Key.Pub}})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("%v", err)
	}
	_, err = Verify(context.Background(), r, Options{Since: "deadbeef", TrustedKeys: []ed25519.PublicKey{f.Key.Pub}})
	if err == nil {
		t.Fatal("bad --since accepted")
	}
}

func TestOpenURLs(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Gens: []uint64{1, 2, 3}, Layout: gitops.LayoutSplit, PartLimit: gitops.MinPartLimit})
	check := func(t *testing.T, target string, o OpenOptions) {
		r, cleanup, err := Open(context.Background(), target, o)
		if err != nil {
			t.Fatal(err)
		}
		defer cleanup()
		rep, err := Verify(context.Background(), r, Options{TrustedKeys: []ed25519.PublicKey{f.Key.Pub}, TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK || len(rep.Generations) != 3 {
			t.Fatalf("%s", dump(rep))
		}
	}
	t.Run("bare", func(t *testing.T) { check(t, f.Dir, OpenOptions{}) })
	t.Run("file", func(t *testing.T) { check(t, "file://"+f.Dir, OpenOptions{TempDir: t.TempDir()}) })
	t.Run("worktree", func(t *testing.T) {
		wt := filepath.Join(t.TempDir(), "wt")
		verifytest.Git(t, filepath.Dir(wt), "clone", "-q", "-b", "snapshots", f.Dir, wt)
		check(t, filepath.Join(wt, "snapshots"), OpenOptions{})
	})
	t.Run("http", func(t *testing.T) {
		remote := gittest.NewHTTPRemote(t)
		verifytest.Git(t, f.Dir, "push", "-q", remote.Dir, "refs/heads/*:refs/heads/*", "refs/tags/*:refs/tags/*")
		remote.RequireToken("s3cret")
		check(t, remote.URL, OpenOptions{Token: "s3cret"})
		if _, _, err := Open(context.Background(), remote.URL, OpenOptions{}); err == nil {
			t.Fatal("clone without token succeeded")
		}
	})
	if _, _, err := Open(context.Background(), filepath.Join(t.TempDir(), "missing"), OpenOptions{}); err == nil {
		t.Fatal("missing dir opened")
	}
}

func TestGenerationOrder(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{})
	repo := f.Copy(t)
	// A correctly chained generation numbered 4 on top of generation 5.
	s := verifytest.Snapshot(6)
	s.Meta.Gen = 4
	g := f.MakeWith(t, s, f.Gens[4].Result.MerkleThis, f.Gens[4], false)
	commit := verifytest.HandCommit(t, repo, f.Gens[4].Commit, g.Files, f.Key.PrivFile, f.Key.PrivFile)
	// HandCommit moved tag gen-000004 to the new commit: the old
	// generation 4 loses its tag.
	fs := wantOnly(t, run(t, repo, Options{}, f.Key.Pub), CheckTag, CheckGenOrder)
	if fs[0].Commit != f.Gens[3].Commit || fs[1].Commit != commit || fs[1].File != "snapshots/current.wtxt" ||
		fs[1].Message != "generation 000004 does not follow the previous commit's generation 000005 (must be strictly greater)" {
		t.Fatalf("%v\n%v", fs[0], fs[1])
	}
}

// TestMalformedSummary: a signed generation whose generation.txt repeats
// a key, or has a line that is not key=value, fails the summary check at
// that file (read by gitops.ParseSummary, the one reader of the file),
// and the failure does not quote the file.
func TestMalformedSummary(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{Gens: []uint64{1, 2}})
	head := f.Gens[1]
	for name, extra := range map[string]string{"repeated key": "SECRET_x=1\nSECRET_x=2\n", "not key=value": "SECRET-LINE\n"} {
		t.Run(name, func(t *testing.T) {
			repo := f.Copy(t)
			sum := verifytest.Git(t, repo, "show", head.Commit+":snapshots/generation.txt") + extra
			blob := strings.TrimSpace(verifytest.Git(t, repo, "hash-object", "-w", verifytest.WriteFile(t, filepath.Join(t.TempDir(), "s"), []byte(sum))))
			idx := []string{"GIT_INDEX_FILE=" + filepath.Join(t.TempDir(), "index")}
			for _, args := range [][]string{{"read-tree", head.Commit}, {"update-index", "--cacheinfo", "100644," + blob + ",snapshots/generation.txt"}} {
				if out, err := verifytest.GitRun(repo, idx, args...); err != nil {
					t.Fatalf("git %v: %v\n%s", args, err, out)
				}
			}
			tree, err := verifytest.GitRun(repo, idx, "write-tree")
			if err != nil {
				t.Fatal(err)
			}
			_, text, _ := strings.Cut(verifytest.Git(t, repo, "cat-file", "commit", head.Commit), "\n\n")
			msg := verifytest.WriteFile(t, filepath.Join(t.TempDir(), "msg"), []byte(text))
			sign := []string{"-c", "gpg.format=ssh", "-c", "user.signingkey=" + f.Key.PrivFile}
			commit := strings.TrimSpace(verifytest.Git(t, repo, append(sign, "commit-tree", "-S", strings.TrimSpace(tree), "-p", f.Gens[0].Commit, "-F", msg)...))
			verifytest.Git(t, repo, "update-ref", "refs/heads/"+gitops.DefaultBranch, commit)
			verifytest.Git(t, repo, append(sign, "tag", "-f", "-s", "--cleanup=verbatim", "-F", msg, "gen-000002", commit)...)
			fs := wantOnly(t, run(t, repo, Options{}, f.Key.Pub), CheckSummary)
			if fs[0].File != "snapshots/generation.txt" || fs[0].Commit != commit || strings.Contains(fs[0].Message, "SECRET") {
				t.Fatalf("%+v", fs[0])
			}
		})
	}
}
