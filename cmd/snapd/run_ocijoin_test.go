package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

// Where the daemon's skeleton layout (snapd run --oci-repository) meets
// the readers: verify-repo, checkout, clone and review on a fresh clone of
// the Git remote plus the registry.

// ociJoinDaemon runs a daemon with store.oci into a fresh registry and Git
// remote, publishes generations 1..n and stops it. splitAbove > 0 splits
// the skeleton into current.wtxt.skel.parts/.
type ociJoin struct {
	reg     *registrytest.Registry
	remote  *gittest.HTTPRemote
	state   string
	repoRef string
	signers string // the daemon's allowed_signers
}

func runOCIJoinDaemon(t *testing.T, n uint64, splitAbove int64) *ociJoin {
	t.Helper()
	reg := registrytest.Start(t, "", "")
	remote := newRemote(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	repoRef := reg.Host + "/snapd/model"
	git := fmt.Sprintf("git:\n  remote: %s\n%s", remote.URL, fastGit)
	if splitAbove > 0 {
		git += fmt.Sprintf("  split_above: %d\n  part_limit: 65536\n", splitAbove)
	}
	cfg := writeConfig(t, dir, fmt.Sprintf("%smetrics: {addr: \"off\"}\nstore:\n  oci:\n    repository: %s\n    segment_size: %d\n",
		git, repoRef, ociSegSize))
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	for g := uint64(1); g <= n; g++ {
		requestOCI(t, state, g)
		waitFor(t, fmt.Sprintf("generation %d on the remote", g), pushedAll(t, remote, state, g))
	}
	d.stop(t)
	checkRemote(t, remote, n)
	return &ociJoin{reg: reg, remote: remote, state: state, repoRef: repoRef, signers: filepath.Join(state, "keys", "allowed_signers")}
}

// freshClone clones the remote's snapshots branch and tags.
func (j *ociJoin) freshClone(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "clone")
	gittest.Git(t, filepath.Dir(dir), "clone", "-q", "--branch", "snapshots", j.remote.URL, dir)
	return dir
}

// TestRunOCISplitSkeleton runs the daemon once (3 generations, the
// skeleton split into current.wtxt.skel.parts/) and reads what it
// published with verify-repo (VerifyRepoFreshClone) and with clone and
// checkout (CheckoutClone); neither changes the remote or the registry.
func TestRunOCISplitSkeleton(t *testing.T) {
	t.Parallel()
	j := runOCIJoinDaemon(t, 3, 4096)
	t.Run("VerifyRepoFreshClone", func(t *testing.T) { testRunOCIVerifyRepoFreshClone(t, j) })
	t.Run("CheckoutClone", func(t *testing.T) { testRunOCICheckoutClone(t, j) })
}

// testRunOCIVerifyRepoFreshClone: what the daemon publishes in the
// skeleton layout (here with the skeleton split into
// current.wtxt.skel.parts/) passes `snapd verify-repo --oci-repository`
// on a fresh clone of the remote, in full and sampled; a blob the registry
// answers damaged, and a skeleton commit whose generation.txt names
// another manifest, fail with exit 1 and a located error.
func testRunOCIVerifyRepoFreshClone(t *testing.T, j *ociJoin) {
	ls := gittest.Git(t, j.remote.Dir, "ls-tree", "-r", "--name-only", "gen-000003", "snapshots/")
	if !strings.Contains(ls, "snapshots/current.wtxt.skel.parts/") || strings.Contains(ls, "snapshots/current.wtxt.skel\n") {
		t.Fatalf("the skeleton is not split into parts:\n%s", ls)
	}
	clone := j.freshClone(t)
	env := map[string]string{"HOME": t.TempDir()}

	code, out, errs := snapd(t, env, "verify-repo", clone, "--pubkey", j.signers, "--oci-repository", j.repoRef)
	if code != 0 {
		t.Fatalf("verify-repo: exit %d\n%s%s", code, out, errs)
	}
	for g := 1; g <= 3; g++ {
		if !regexp.MustCompile(fmt.Sprintf(`gen %06d [0-9a-f]{12} skeleton ok +wtxt signature verified`, g)).MatchString(out) {
			t.Fatalf("gen %d not verified:\n%s", g, out)
		}
	}
	if !strings.Contains(out, "summary: 3 generation(s) 000001..000003") || !strings.Contains(out, "all checks passed") ||
		strings.Count(out, "  registry: full, ") != 3 {
		t.Fatalf("verify-repo:\n%s", out)
	}
	code, out, errs = snapd(t, env, "verify-repo", clone, "--pubkey", j.signers, "--oci-repository", j.repoRef, "--sample", "0.25", "--seed", "5")
	if code != 0 || strings.Count(out, "  registry: sampled ") != 3 || !strings.Contains(out, "all checks passed") {
		t.Fatalf("verify-repo --sample: exit %d\n%s%s", code, out, errs)
	}

	// A registry answering damaged the one blob only generation 3 has.
	dg := newSegDigest(t, gitSkeleton(t, j.remote.Dir, "gen-000002"), gitSkeleton(t, j.remote.Dir, "gen-000003"))
	proxy := registrytest.StartProxy(t, j.reg.Host)
	proxy.Damage(dg, registrytest.FlipByte)
	code, out, errs = snapd(t, env, "verify-repo", clone, "--pubkey", j.signers, "--oci-repository", proxy.Host+"/snapd/model")
	if code != 1 || !regexp.MustCompile(`gen 000003 snapshots/current\.wtxt\.skel\.parts:\d+: wtxt/chunk-sha256: array w: chunk \d+: `).MatchString(out) ||
		!strings.Contains(out, "(segment blob "+dg+")") || !strings.Contains(out, "FAILED: 1 check(s) in 1 generation(s)") || !strings.Contains(errs, "verify-repo: ") {
		t.Fatalf("damaged blob: exit %d\n%s%s", code, out, errs)
	}

	// generation.txt binds the commit to the registry's manifest: a
	// commit (signed by the trusted key) naming another manifest fails.
	work := j.freshClone(t)
	sum := filepath.Join(work, "snapshots", "generation.txt")
	b, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`oci_manifest=sha256:[0-9a-f]{64}`).Find(b)
	if m == nil {
		t.Fatalf("generation.txt:\n%s", b)
	}
	other := "oci_manifest=sha256:" + strings.Repeat("ab", 32)
	if err := os.WriteFile(sum, []byte(strings.Replace(string(b), string(m), other, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	signCommit(t, work, filepath.Join(j.state, "keys", "sign_ed25519"), "tampered: generation.txt names another manifest")
	code, out, errs = snapd(t, env, "verify-repo", work, "--pubkey", j.signers, "--oci-repository", j.repoRef)
	if code != 1 || !strings.Contains(out, "generation.txt: registry: oci_manifest=sha256:abab") || !strings.Contains(out, "gen-000003") {
		t.Fatalf("tampered oci_manifest: exit %d\n%s%s", code, out, errs)
	}

	// An oci_tag naming another generation's tag is refused as such.
	work = j.freshClone(t)
	sum = filepath.Join(work, "snapshots", "generation.txt")
	if b, err = os.ReadFile(sum); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sum, append(b, "oci_tag=gen-000002\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	signCommit(t, work, filepath.Join(j.state, "keys", "sign_ed25519"), "tampered: generation.txt names another generation's tag")
	code, out, errs = snapd(t, env, "verify-repo", work, "--pubkey", j.signers, "--oci-repository", j.repoRef)
	if code != 1 || !strings.Contains(out, "oci_tag is not one of generation 000003's tags") {
		t.Fatalf("tampered oci_tag: exit %d\n%s%s", code, out, errs)
	}
}

// gitSkeleton returns the skeleton of rev in the bare repository dir,
// reassembled from its parts when split.
func gitSkeleton(t *testing.T, dir, rev string) string {
	t.Helper()
	if s, err := gittest.GitRun(dir, "show", rev+":snapshots/current.wtxt.skel"); err == nil {
		return s
	}
	names := strings.Fields(gittest.Git(t, dir, "ls-tree", "--name-only", rev, "snapshots/current.wtxt.skel.parts/"))
	var b strings.Builder
	for _, n := range names {
		if strings.HasSuffix(n, "MANIFEST") {
			continue
		}
		b.WriteString(gittest.Git(t, dir, "show", rev+":"+n))
	}
	return b.String()
}

// newSegDigest returns the digest ("sha256:<hex>") of a segment of
// skeleton cur that skeleton prev does not have (the smallest).
func newSegDigest(t *testing.T, prev, cur string) string {
	t.Helper()
	old := skelSegs(t, prev)
	var out []string
	for dg := range skelSegs(t, cur) {
		if _, ok := old[dg]; !ok {
			out = append(out, "sha256:"+dg)
		}
	}
	if len(out) == 0 {
		t.Fatal("no new segment")
	}
	return slices.Min(out)
}

// signCommit commits the work tree's changes in dir, SSH-signed with key.
func signCommit(t *testing.T, dir, key, msg string) {
	t.Helper()
	gittest.Git(t, dir, "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "gpg.format=ssh", "-c", "user.signingkey="+key,
		"commit", "-q", "-S", "-a", "-m", msg)
}

// testRunOCICheckoutClone: `snapd clone` of the daemon's remote and
// `snapd checkout` of skeleton-layout generations (skeleton split into
// parts) rebuild them from the registry named in generation.txt: the
// WTXT byte for byte as the daemon built it, and a safetensors file
// through the conversion. A registry answering a damaged blob (given with
// --oci-repository) fails with exit 1 naming the array and blob, and
// leaves nothing at OUT; credentials flags without an explicit registry
// are refused.
func testRunOCICheckoutClone(t *testing.T, j *ociJoin) {
	env := map[string]string{"HOME": t.TempDir()}
	dir := t.TempDir()

	shallow := filepath.Join(dir, "shallow")
	if code, out, errs := snapd(t, env, "clone", j.remote.URL, shallow); code != 0 {
		t.Fatalf("clone: exit %d\n%s%s", code, out, errs)
	}
	out := filepath.Join(dir, "latest.wtxt")
	code, o, errs := snapd(t, env, "checkout", "latest", out, "--repo", shallow)
	if code != 0 || !strings.Contains(errs, "registry "+j.repoRef+" (from generation.txt; read only)") {
		t.Fatalf("checkout latest: exit %d\n%s%s", code, o, errs)
	}
	if got, _ := os.ReadFile(out); !isRingGen(t, j.state, 3, got) {
		t.Fatal("checked-out WTXT differs from the daemon's generation 3")
	}

	full := filepath.Join(dir, "full")
	if code, o, errs := snapd(t, env, "clone", "--full", j.remote.URL, full); code != 0 {
		t.Fatalf("clone --full: exit %d\n%s%s", code, o, errs)
	}
	st := filepath.Join(dir, "gen2.safetensors")
	if code, o, errs := snapd(t, env, "checkout", "2", st, "--repo", full); code != 0 {
		t.Fatalf("checkout 2 → safetensors: exit %d\n%s%s", code, o, errs)
	}
	var want bytes.Buffer
	if err := safetensors.New().Encode(context.Background(), &want, ociGen(2), formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(st); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("checked-out safetensors (%d bytes) differs from generation 2's model (%d bytes)", len(got), want.Len())
	}

	// A damaged blob, explicit registry: exit 1, located, nothing left.
	dg := newSegDigest(t, gitSkeleton(t, j.remote.Dir, "gen-000002"), gitSkeleton(t, j.remote.Dir, "gen-000003"))
	proxy := registrytest.StartProxy(t, j.reg.Host)
	proxy.Damage(dg, registrytest.FlipByte)
	outDir := t.TempDir()
	code, o, errs = snapd(t, env, "checkout", "3", filepath.Join(outDir, "bad.wtxt"), "--repo", full, "--oci-repository", proxy.Host+"/snapd/model")
	if code != 1 || !strings.Contains(errs, "snapshots/current.wtxt.skel:") || !strings.Contains(errs, "array w") || !strings.Contains(errs, dg) {
		t.Fatalf("damaged blob: exit %d\n%s%s", code, o, errs)
	}
	if ents, _ := os.ReadDir(outDir); len(ents) != 0 {
		t.Fatalf("checkout left %d file(s) behind", len(ents))
	}
	for m := range proxy.Methods() {
		if m != "GET" && m != "HEAD" {
			t.Fatalf("checkout sent %s: %v", m, proxy.Methods())
		}
	}

	// Credentials for a registry the commit chose: refused.
	pw := filepath.Join(dir, "pw")
	os.WriteFile(pw, []byte("secret\n"), 0o600)
	if code, o, errs := snapd(t, env, "checkout", "3", filepath.Join(outDir, "x.wtxt"), "--repo", full, "--oci-username", "u", "--oci-password-file", pw); code != 2 ||
		!strings.Contains(errs, "explicit --oci-repository") {
		t.Fatalf("credentials without --oci-repository: exit %d\n%s%s", code, o, errs)
	}
}

// TestRunOCIReviewSkeleton: `snapd checkout` of a single-file skeleton;
// `snapd review` of two consecutive
// skeleton-layout generations the daemon published. Without a registry it
// reports, from the skeletons' ch lines, exactly the chunks whose bytes
// changed (the new segments' chunks), each as a line comment on its ch
// line with its rows, checks the header (signature, chain) and says the
// numbers need the registry; with --oci-repository the same chunks get
// their numbers (max |Δ|, rel L2) on the same lines; a registry answering
// a damaged blob makes the review request changes (exit 1).
func TestRunOCIReviewSkeleton(t *testing.T) {
	t.Parallel()
	j := runOCIJoinDaemon(t, 3, 0)
	dir := t.TempDir()
	// The single-file skeleton checks out too (clone, registry from
	// generation.txt).
	clone := j.freshClone(t)
	wtxtOut := filepath.Join(dir, "gen1.wtxt")
	if code, o, e := snapd(t, map[string]string{"HOME": t.TempDir()}, "checkout", "1", wtxtOut, "--repo", clone); code != 0 {
		t.Fatalf("checkout 1: exit %d\n%s%s", code, o, e)
	}
	if got, _ := os.ReadFile(wtxtOut); !isRingGen(t, j.state, 1, got) {
		t.Fatal("checked-out WTXT differs from the daemon's generation 1")
	}
	base, head := filepath.Join(dir, "base", "current.wtxt.skel"), filepath.Join(dir, "head", "current.wtxt.skel")
	bs, hs := gitSkeleton(t, j.remote.Dir, "gen-000002"), gitSkeleton(t, j.remote.Dir, "gen-000003")
	for p, s := range map[string]string{base: bs, head: hs} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The ch lines of head that base does not have: the changed chunks.
	baseLines := map[string]bool{}
	for _, l := range strings.Split(bs, "\n") {
		baseLines[l] = true
	}
	want := map[int]bool{}
	for i, l := range strings.Split(hs, "\n") {
		if strings.HasPrefix(l, "ch ") && !baseLines[l] {
			want[i+1] = true
		}
	}
	if len(want) == 0 {
		t.Fatal("no changed ch line between generations 2 and 3")
	}
	env := map[string]string{"HOME": t.TempDir()}
	args := []string{"review", "--dry-run", "--base", base, "--head", head, "--path", "snapshots/current.wtxt.skel", "--pubkey", j.signers}
	commentLines := func(out string) map[int]string {
		got := map[int]string{}
		for _, m := range regexp.MustCompile(`(?m)^snapshots/current\.wtxt\.skel line=(\d+) position=\d+: (.*)$`).FindAllStringSubmatch(out, -1) {
			var n int
			fmt.Sscan(m[1], &n)
			got[n] = m[2]
		}
		return got
	}
	sameLines := func(what string, got map[int]string, out string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: comments on lines %v, want the changed ch lines %v\n%s", what, got, want, out)
		}
		for n := range got {
			if !want[n] {
				t.Fatalf("%s: comment on line %d, not a changed ch line\n%s", what, n, out)
			}
		}
	}

	code, out, errs := snapd(t, env, args...)
	if code != 0 || !strings.Contains(out, "event: COMMENT") || !strings.Contains(out, "signature verified") ||
		!strings.Contains(out, "continues the base") || !strings.Contains(out, "changed chunks per array: `w` ") ||
		!strings.Contains(out, "run snapd review with --oci-repository") {
		t.Fatalf("review without the registry: exit %d\n%s%s", code, out, errs)
	}
	got := commentLines(out)
	sameLines("without the registry", got, out)
	for _, c := range got {
		if !strings.Contains(c, "array `w` chunk ") || !strings.Contains(c, "(rows ") || !strings.Contains(c, "sha256 changed (skeleton layout") {
			t.Fatalf("comment %q", c)
		}
	}

	code, out, errs = snapd(t, env, append(args, "--oci-repository", j.repoRef)...)
	if code != 0 || !strings.Contains(out, "event: COMMENT") || strings.Contains(out, "run snapd review with --oci-repository") {
		t.Fatalf("review with the registry: exit %d\n%s%s", code, out, errs)
	}
	got = commentLines(out)
	sameLines("with the registry", got, out)
	for _, c := range got {
		if !strings.Contains(c, "max |Δ| ") || !strings.Contains(c, "rel L2 ") || !strings.Contains(c, " of 256") && !strings.Contains(c, " elements") {
			t.Fatalf("comment without numbers: %q", c)
		}
	}

	proxy := registrytest.StartProxy(t, j.reg.Host)
	proxy.Damage(newSegDigest(t, bs, hs), registrytest.FlipByte)
	code, out, errs = snapd(t, env, append(args, "--oci-repository", proxy.Host+"/snapd/model")...)
	if code != 1 || !strings.Contains(out, "event: REQUEST_CHANGES") || !strings.Contains(out, "head skeleton does not assemble from the registry") {
		t.Fatalf("review with a damaged blob: exit %d\n%s%s", code, out, errs)
	}
}

// TestRunOCIGitHubReview: the daemon's pull-request review of a
// skeleton-layout generation (store.oci + github): the review of
// generation 2 against 1 covers snapshots/current.wtxt.skel from its ch
// lines (the daemon does not download from the registry for it), with
// line comments on the changed chunks of w.
func TestRunOCIGitHubReview(t *testing.T) {
	t.Parallel()
	const token = "ghs_ocijoin5e1f"
	reg := registrytest.Start(t, "", "")
	remote := newRemote(t)
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, filepath.Dir(work), "init", "-q", "-b", "main", work)
	gittest.WriteFile(t, work, "README.md", []byte("model audit\n"))
	gittest.Git(t, work, "add", "README.md")
	gittest.Git(t, work, "-c", "user.name=o", "-c", "user.email=o@example.com", "commit", "-q", "-m", "init")
	gittest.Git(t, work, "push", "-q", remote.Dir, "main")
	gh := newFakeGitHub(t, remote.Dir, "snapshots", "main")
	gh.Token = token

	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	tokFile := gittest.WriteFile(t, dir, "gh-token", []byte(token+"\n"))
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%s"+
		"github:\n  repo: acme/models\n  base: main\n  api_url: %s\n  token_file: %s\n  retry_max: 200ms\n"+
		"queue: {policy: block}\nmetrics: {addr: \"off\"}\nstore:\n  oci:\n    repository: %s/snapd/model\n    segment_size: %d\n",
		remote.URL, fastGit, gh.api.URL, tokFile, reg.Host, ociSegSize))
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	requestOCI(t, state, 1)
	waitFor(t, "the review of generation 1", func() (bool, string) {
		rs := gh.ReviewList()
		return len(rs) == 1, fmt.Sprintf("%d reviews", len(rs))
	})
	gen1 := strings.TrimSpace(gittest.Git(t, remote.Dir, "rev-parse", "gen-000001^{commit}"))
	gittest.Git(t, remote.Dir, "update-ref", "refs/heads/main", gen1)
	requestOCI(t, state, 2)
	waitFor(t, "the review of generation 2", func() (bool, string) {
		rs := gh.ReviewList()
		return len(rs) == 2, fmt.Sprintf("%d reviews", len(rs))
	})
	d.stop(t)
	gen2 := strings.TrimSpace(gittest.Git(t, remote.Dir, "rev-parse", "gen-000002^{commit}"))
	rv := gh.ReviewList()[1]
	if rv.CommitID != gen2 || !strings.Contains(rv.Body, "snapshots/current.wtxt.skel` — modified") || !strings.Contains(rv.Body, "continues the base") ||
		!strings.Contains(rv.Body, "signature verified") || !strings.Contains(rv.Body, "reviewed from the skeletons' ch lines: changed chunks per array: `w` ") {
		t.Fatalf("review of generation 2 (commit %s):\n%+v", gen2, rv)
	}
	var onCh int
	for _, c := range gh.CommentList() {
		if c.CommitID == gen2 && c.Path == "snapshots/current.wtxt.skel" && strings.Contains(c.Body, "array=w") && strings.Contains(c.Body, "sha256 changed (skeleton layout") {
			onCh++
		}
	}
	if onCh == 0 {
		t.Fatalf("no line comment on the changed chunks of w: %+v", gh.CommentList())
	}
}

// TestCheckoutSkeletonWithoutRepositoryKey: a skeleton-layout generation
// committed by hand (snapd oci push + a commit; generation.txt without
// oci_repository) needs --oci-repository: without it checkout is a usage
// error saying so, with it the WTXT comes back byte for byte.
func TestCheckoutSkeletonWithoutRepositoryKey(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	ref := reg.Host + "/snapd/model"
	repo, err := oci.Open(ref, oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := verifytest.BuildSkeleton(t, repo, []uint64{1, 2}, 8<<10)
	env := map[string]string{"HOME": t.TempDir()}
	out := filepath.Join(t.TempDir(), "g2.wtxt")
	code, o, errs := snapd(t, env, "checkout", "2", out, "--repo", f.Dir)
	if code != 2 || !strings.Contains(errs, "names no oci_repository: give --oci-repository") {
		t.Fatalf("without --oci-repository: exit %d\n%s%s", code, o, errs)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("OUT written")
	}
	if code, o, errs := snapd(t, env, "checkout", "2", out, "--repo", f.Dir, "--oci-repository", ref); code != 0 {
		t.Fatalf("with --oci-repository: exit %d\n%s%s", code, o, errs)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, f.Gens[1].WTXT) {
		t.Fatal("checked-out WTXT differs from generation 2")
	}
}
