package gitops

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/snapd-ml/snapd/gitops/layout"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"
)

// testKey returns a fresh Ed25519 key and an allowed-signers file for it.
func testKey(t testing.TB) (ed25519.PrivateKey, string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	line := fmt.Sprintf("%s namespaces=\"git\" %s", DefaultAuthorEmail, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))))
	return priv, writeFile(t, t.TempDir(), "allowed_signers", []byte(line+"\n"))
}

// genChain produces WTXT files for generations 1..n in dir; mutate(g, arrays)
// edits the arrays of generation g before rendering.
type genFiles struct {
	paths []string
	data  [][]byte
}

func genChain(t testing.TB, dir string, n int, base []testArray, mutate func(g int, a []testArray)) genFiles {
	t.Helper()
	var out genFiles
	prev := ""
	for g := 1; g <= n; g++ {
		arrays := make([]testArray, len(base))
		for i, a := range base {
			arrays[i] = testArray{name: a.name, data: bytes.Clone(a.data), chunk: a.chunk}
		}
		if mutate != nil {
			mutate(g, arrays)
		}
		base = arrays
		data, mt := genWTXT(uint64(g), prev, arrays)
		prev = mt
		out.paths = append(out.paths, writeFile(t, dir, fmt.Sprintf("g%06d.wtxt", g), data))
		out.data = append(out.data, data)
	}
	return out
}

func TestCommitSingleSignedAndGitCLI(t *testing.T) {
	key, allowed := testKey(t)
	dir := t.TempDir()
	repoDir := filepath.Join(dir, "repo.git")
	r, err := OpenRepo(repoDir, Config{SigningKey: key})
	if err != nil {
		t.Fatal(err)
	}
	base := []testArray{{name: "layer0.w", data: pseudo(1, 20_000), chunk: 1024}, {name: "layer1.w", data: pseudo(2, 5000), chunk: 1024}}
	chain := genChain(t, dir, 3, base, func(g int, a []testArray) {
		if g > 1 {
			a[0].data[3000+g] ^= 0x5a // row block 2 of layer0 changes
		}
	})
	ctx := context.Background()
	var results []*Result
	for i, p := range chain.paths {
		g := Generation{WTXT: p}
		if i > 0 {
			g.Delta = writeFile(t, dir, fmt.Sprintf("d%d.wtxtdelta", i), []byte("WTXT-DELTA 2 base_sha256_all=...\nenddelta\n"))
		}
		if i == 2 {
			g.Seal = writeFile(t, dir, "s.wseal", []byte("seal\n"))
		}
		res, err := r.Commit(ctx, g)
		if err != nil {
			t.Fatalf("gen %d: %v", i+1, err)
		}
		if res.Layout != LayoutSingle || res.Tag != fmt.Sprintf("gen-%06d", i+1) {
			t.Fatalf("result %+v", res)
		}
		results = append(results, res)
	}
	git := func(args ...string) string {
		return gitCmd(t, repoDir, append([]string{"-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile=" + allowed}, args...)...)
	}
	git("fsck", "--strict", "--no-dangling")
	for _, res := range results {
		out := git("verify-commit", "-v", res.Commit.String())
		if !strings.Contains(out, `Good "git" signature for snapd@localhost`) {
			t.Fatalf("verify-commit: %s", out)
		}
		out = git("verify-tag", "-v", res.Tag)
		if !strings.Contains(out, `Good "git" signature for snapd@localhost`) {
			t.Fatalf("verify-tag: %s", out)
		}
		if got := strings.TrimSpace(git("rev-parse", res.Tag+"^{commit}")); got != res.Commit.String() {
			t.Fatalf("tag %s → %s, want %s", res.Tag, got, res.Commit)
		}
	}
	// go-git's own commit path with CommitOptions.Signer = Signer gives a
	// signature git verifies too.
	wtDir := filepath.Join(dir, "worktree")
	gr, err := gogit.PlainInit(wtDir, false)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, wtDir, "f.txt", []byte("x\n"))
	wtree, _ := gr.Worktree()
	if _, err := wtree.Add("f.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := wtree.Commit("signed by go-git\n", &gogit.CommitOptions{
		Author: &object.Signature{Name: "x", Email: "x@example.com"}, Signer: Signer{Key: key}}); err != nil {
		t.Fatal(err)
	}
	gitCmd(t, wtDir, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", "HEAD")
	// A key not in allowed signers is rejected by git.
	other, _ := testKey(t)
	_, allowedOther := testKey(t)
	_ = other
	if out, err := gitRun(repoDir, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowedOther, "verify-commit", results[0].Commit.String()); err == nil {
		t.Fatalf("verify-commit with a foreign allowed-signers file passed: %s", out)
	}
	// History: one commit per generation, in order, trailers readable by git.
	log := git("log", "--format=%(trailers:key=Snapd-Gen,valueonly)%(trailers:key=Snapd-Merkle-This,valueonly)", "snapshots")
	lines := strings.Fields(log)
	if len(lines) != 6 || lines[0] != "000003" || lines[2] != "000002" || lines[4] != "000001" {
		t.Fatalf("log trailers: %q", log)
	}
	for i := range 3 {
		h, _ := ParseHeader(bytes.NewReader(chain.data[2-i]))
		if want := h.Root.Fields()[5].Value; lines[2*i+1] != want {
			t.Fatalf("merkle trailer %s, want %s", lines[2*i+1], want)
		}
	}
	// Files at the stable paths are the inputs byte for byte.
	for i, res := range results {
		if got := git("cat-file", "blob", res.Commit.String()+":snapshots/current.wtxt"); got != string(chain.data[i]) {
			t.Fatalf("gen %d: current.wtxt differs", i+1)
		}
	}
	summary := git("cat-file", "blob", "gen-000003:snapshots/generation.txt")
	for _, want := range []string{"gen=000003\n", "layout=single\n", "wseal_bytes=5\n", "wtxtdelta_bytes="} {
		if !strings.Contains(summary, want) {
			t.Fatalf("summary lacks %q:\n%s", want, summary)
		}
	}
	// Optional files of older generations are not carried forward.
	if out, err := gitRun(repoDir, "cat-file", "-e", "gen-000002:snapshots/current.wseal"); err == nil {
		t.Fatalf("gen 2 has a seal: %s", out)
	}
	if out, err := gitRun(repoDir, "cat-file", "-e", "gen-000001:snapshots/current.wtxtdelta"); err == nil {
		t.Fatalf("gen 1 has a delta: %s", out)
	}
	// git diff between generations is the row-blocked diff: one chunk's
	// ch line and its changed base64 line(s), plus header/arr lines.
	diff := git("diff", "--unified=0", "gen-000001", "gen-000002", "--", "snapshots/current.wtxt")
	var minus []string
	for _, l := range strings.Split(diff, "\n") {
		if strings.HasPrefix(l, "-") && !strings.HasPrefix(l, "---") {
			minus = append(minus, l)
		}
	}
	var chLines int
	for _, l := range minus {
		if strings.HasPrefix(l, "-ch ") {
			chLines++
			if !strings.Contains(l, "ix=000002 ") {
				t.Errorf("unexpected chunk in diff: %s", l)
			}
		}
	}
	if chLines != 1 || len(minus) > 6 {
		t.Fatalf("diff is not row-blocked (%d ch lines, %d removed lines):\n%s", chLines, len(minus), diff)
	}
	// .gitattributes is honoured by git; a checkout is byte-identical even
	// with core.autocrlf=true.
	wt := filepath.Join(dir, "clone")
	gitCmd(t, dir, "clone", "-q", "-c", "core.autocrlf=true", "-b", "snapshots", repoDir, wt)
	if got, _ := os.ReadFile(filepath.Join(wt, "snapshots", FileWTXT)); !bytes.Equal(got, chain.data[2]) {
		t.Fatal("checkout with core.autocrlf=true differs from the WTXT")
	}
	attrs := gitCmd(t, wt, "check-attr", "text", "eol", "diff", "--", "snapshots/current.wtxt")
	if !strings.Contains(attrs, "text: set") || !strings.Contains(attrs, "eol: lf") || !strings.Contains(attrs, "diff: set") {
		t.Fatalf("check-attr: %s", attrs)
	}
}

func TestCommitRulesAndIdempotence(t *testing.T) {
	dir := t.TempDir()
	r, err := OpenRepo(filepath.Join(dir, "r.git"), Config{Branch: "ml/snaps", Path: "models/m1"})
	if err != nil {
		t.Fatal(err)
	}
	chain := genChain(t, dir, 3, []testArray{{name: "w", data: pseudo(1, 3000)}}, func(g int, a []testArray) { a[0].data[0] = byte(g) })
	ctx := context.Background()
	r1, err := r.Commit(ctx, Generation{WTXT: chain.paths[0]})
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.Commit(ctx, Generation{WTXT: chain.paths[0]})
	if err != nil || !again.Existing || again.Commit != r1.Commit || again.TagObject != r1.TagObject {
		t.Fatalf("recommit: %+v %v", again, err)
	}
	// Skipping gen 2: gen 3's merkle_prev is gen 2's merkle_this → chain break.
	if _, err := r.Commit(ctx, Generation{WTXT: chain.paths[2]}); !errors.Is(err, ErrChainBreak) {
		t.Fatalf("chain break: %v", err)
	}
	if _, err := r.Commit(ctx, Generation{WTXT: chain.paths[1]}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Commit(ctx, Generation{WTXT: chain.paths[0]}); !errors.Is(err, ErrGenOrder) {
		t.Fatalf("old generation: %v", err)
	}
	verr := errors.New("verification failed")
	rv, _ := OpenRepo(filepath.Join(dir, "r.git"), Config{Branch: "ml/snaps", Path: "models/m1", Verify: func(context.Context, Generation, *Header) error { return verr }})
	if _, err := rv.Commit(ctx, Generation{WTXT: chain.paths[2]}); !errors.Is(err, verr) {
		t.Fatalf("verify hook: %v", err)
	}
	// Files outside Path are kept; nested Path works.
	out := gitCmd(t, r.Dir(), "ls-tree", "-r", "--name-only", "ml/snaps")
	if out != ".gitattributes\nmodels/m1/current.wtxt\nmodels/m1/generation.txt\n" {
		t.Fatalf("tree:\n%s", out)
	}
	gitCmd(t, r.Dir(), "fsck", "--strict")
	// Streaming WTXT: root values come from the WSUM.
	// (the root line replaced whole, so the file stays well-formed).
	pending := regexp.MustCompile(`(?m)^root [^\n]*$`).ReplaceAll(chain.data[2], []byte("root_pending sha256_all="+strings.Repeat("0", 64)+" note=\"finalize with WSUM\""))
	pp := writeFile(t, dir, "pending.wtxt", pending)
	if _, err := r.Commit(ctx, Generation{WTXT: pp}); !errors.Is(err, ErrHeader) {
		t.Fatalf("root_pending without WSUM: %v", err)
	}
	h3, _ := ParseHeader(bytes.NewReader(chain.data[2]))
	f3 := h3.Root.Fields()
	ws := writeFile(t, dir, "g3.wsum", []byte(fmt.Sprintf("WSUM 1 sha256_all=%s merkle_prev=%s merkle_this=%s\n", f3[3].Value, f3[4].Value, f3[5].Value)))
	res, err := r.Commit(ctx, Generation{WTXT: pp, WSUM: ws})
	if err != nil {
		t.Fatal(err)
	}
	msg := gitCmd(t, r.Dir(), "log", "-1", "--format=%B", res.Commit.String())
	if !strings.Contains(msg, "Snapd-Merkle-This: "+f3[5].Value) {
		t.Fatalf("message:\n%s", msg)
	}
	for _, bad := range []Config{{Layout: "huge"}, {Branch: "a..b"}, {Path: "../x"}, {Path: "/abs"}, {PartLimit: 10}, {SplitThreshold: MaxPartLimit + 1}, {AuthorName: "a<b"}} {
		if _, err := OpenRepo(filepath.Join(dir, "bad.git"), bad); !errors.Is(err, ErrConfig) {
			t.Errorf("config %+v: %v", bad, err)
		}
	}
}

func TestCommitSplitLayout(t *testing.T) {
	key, allowed := testKey(t)
	dir := t.TempDir()
	repoDir := filepath.Join(dir, "repo.git")
	r, err := OpenRepo(repoDir, Config{SigningKey: key, Layout: LayoutSplit, PartLimit: MinPartLimit, SplitThreshold: 200_000})
	if err != nil {
		t.Fatal(err)
	}
	base := []testArray{
		{name: "emb", data: pseudo(1, 400_000), chunk: 4096},
		{name: "head.w", data: pseudo(2, 30_000), chunk: 4096},
		{name: "tiny", data: pseudo(3, 10)},
	}
	// gen 1: small (split all the same: the layout is explicit); then
	// arrays grow; later only one chunk changes per generation. (auto,
	// which picks segments above the threshold: TestAutoLayout.)
	chain := genChain(t, dir, 4, base, func(g int, a []testArray) {
		switch g {
		case 1:
			a[0].data = a[0].data[:50_000]
		case 2:
			a[0].data = pseudo(1, 400_000)
		default:
			a[0].data[4096*(10*g)+1] ^= byte(g)
		}
	})
	ctx := context.Background()
	var results []*Result
	for i, p := range chain.paths {
		res, err := r.Commit(ctx, Generation{WTXT: p})
		if err != nil {
			t.Fatalf("gen %d: %v", i+1, err)
		}
		results = append(results, res)
	}
	if results[0].Layout != LayoutSplit || results[1].Layout != LayoutSplit {
		t.Fatalf("layouts %s %s", results[0].Layout, results[1].Layout)
	}
	total := int64(len(chain.data[3]))
	for i := 2; i < 4; i++ {
		// New blobs: header part, emb head part, one chunk-run part,
		// MANIFEST, generation.txt (the rest is reused).
		if res := results[i]; res.BlobsWritten != 5 || res.BytesWritten > total/4 {
			t.Fatalf("gen %d wrote %d blobs, %d bytes (file %d bytes)", i+1, res.BlobsWritten, res.BytesWritten, total)
		}
	}
	git := func(args ...string) string {
		return gitCmd(t, repoDir, append([]string{"-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile=" + allowed}, args...)...)
	}
	git("fsck", "--strict", "--no-dangling")
	git("verify-commit", "gen-000004^{commit}")
	git("verify-tag", "gen-000004")
	// Unchanged parts are the same blobs across generations (git's view).
	lsTree := func(rev string) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(git("ls-tree", rev+":snapshots/current.wtxt.parts")), "\n") {
			f := strings.Fields(l)
			m[f[3]] = f[2]
		}
		return m
	}
	t3, t4 := lsTree("gen-000003"), lsTree("gen-000004")
	var changed []string
	for n, h := range t4 {
		if t3[n] != h {
			changed = append(changed, n)
		}
	}
	if len(changed) != 4 || len(t3) != len(t4) || len(t4) < 10 {
		t.Fatalf("changed parts %v of %d", changed, len(t4))
	}
	// A clone's checkout reassembles to the exact WTXT; single file gone.
	wt := filepath.Join(dir, "clone")
	gitCmd(t, dir, "clone", "-q", "-b", "snapshots", repoDir, wt)
	var out bytes.Buffer
	if err := layout.Assemble(filepath.Join(wt, "snapshots", DirWTXTParts), &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), chain.data[3]) {
		t.Fatal("assembled checkout differs from the WTXT")
	}
	// The same from the repository objects, for every generation.
	for i, want := range chain.data {
		var buf bytes.Buffer
		if err := r.WriteWTXT(fmt.Sprintf("gen-%06d", i+1), &buf); err != nil || !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("WriteWTXT gen %d: %v (equal %v)", i+1, err, bytes.Equal(buf.Bytes(), want))
		}
	}
	if err := r.WriteWTXT("nonexistent", &bytes.Buffer{}); err == nil {
		t.Fatal("WriteWTXT of a bad revision succeeded")
	}
	if _, err := os.Stat(filepath.Join(wt, "snapshots", FileWTXT)); !os.IsNotExist(err) {
		t.Fatalf("current.wtxt still present in split layout: %v", err)
	}
	for _, e := range mustReadDir(t, filepath.Join(wt, "snapshots", DirWTXTParts)) {
		if info, _ := e.Info(); info.Size() > MinPartLimit {
			t.Fatalf("part %s has %d bytes", e.Name(), info.Size())
		}
	}
	// A small WTXT stays split: the layout is explicit.
	small, _ := genWTXT(5, ParseTrailers(git("log", "-1", "--format=%B", "snapshots"))[TrailerMerkleThis], base[2:])
	res, err := r.Commit(ctx, Generation{WTXT: writeFile(t, dir, "g5.wtxt", small)})
	if err != nil || res.Layout != LayoutSplit {
		t.Fatalf("gen 5: %+v %v", res, err)
	}
	if got := git("ls-tree", "--name-only", "snapshots:snapshots"); got != "current.wtxt.parts\ngeneration.txt\n" {
		t.Fatalf("gen 5 tree: %q", got)
	}
	// Forced split for a small file, forced single for a large one.
	for _, c := range []struct {
		layout Layout
		want   Layout
		file   []byte
	}{{LayoutSplit, LayoutSplit, chain.data[0]}, {LayoutSingle, LayoutSingle, chain.data[1]}} {
		rr, err := OpenRepo(filepath.Join(t.TempDir(), "x.git"), Config{Layout: c.layout, PartLimit: MinPartLimit})
		if err != nil {
			t.Fatal(err)
		}
		res, err := rr.Commit(ctx, Generation{WTXT: writeFile(t, dir, "f.wtxt", c.file)})
		if err != nil || res.Layout != c.want {
			t.Fatalf("layout %s: %+v %v", c.layout, res, err)
		}
		gitCmd(t, rr.Dir(), "fsck", "--strict")
	}
}

func mustReadDir(t testing.TB, dir string) []os.DirEntry {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

var _ = plumbing.ZeroHash
