package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/review/reviewtest"
	"github.com/snapd-ml/snapd/keys"
)

const cliToken = "ghp_CLI_secret_token_abcdef987654"

// reviewFixture: a key set, two chained generations committed to a git
// repository, and a fake GitHub serving them as acme/weights#7.
type reviewFixture struct {
	keys             *keys.Generated
	repo             *reviewtest.Repo
	srv              *reviewtest.Server
	base, head       string // local files
	baseSHA, headSHA string
	gen2             []byte
	patch            string
}

func newReviewFixture(t *testing.T) *reviewFixture {
	t.Helper()
	dir := t.TempDir()
	g, err := keys.Generate(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	priv, err := keys.LoadSigner(g.SignKey)
	if err != nil {
		t.Fatal(err)
	}
	hk, err := keys.LoadHMACKey(g.HMACKey)
	if err != nil {
		t.Fatal(err)
	}
	s1 := reviewtest.Snapshot(1)
	gen1, r1 := reviewtest.Encode(t, s1, wtxt.EncodeOptions{SignKey: priv, HMACKey: hk})
	s2 := reviewtest.SetF32(s1, "layer.0/w", 3*8+1, 0.75)
	s2 = reviewtest.SetF32(s2, "layer.0/w", 41*8, 0.125)
	s2 = reviewtest.SetI32(s2, "tok.counts", 10*4+2, 99)
	s2.Meta.Gen = 2
	s2.Meta.TS = s2.Meta.TS.Add(time.Hour)
	gen2, _ := reviewtest.Encode(t, s2, wtxt.EncodeOptions{SignKey: priv, HMACKey: hk, PrevMerkle: r1.MerkleThis})
	f := &reviewFixture{keys: g, repo: reviewtest.NewRepo(t), gen2: gen2}
	f.base, f.head = filepath.Join(dir, "gen1.wtxt"), filepath.Join(dir, "gen2.wtxt")
	os.WriteFile(f.base, gen1, 0o644)
	os.WriteFile(f.head, gen2, 0o644)
	const p = "snapshots/current.wtxt"
	f.baseSHA = f.repo.Commit(map[string][]byte{p: gen1}, "gen 1")
	f.headSHA = f.repo.Commit(map[string][]byte{p: gen2}, "gen 2")
	f.patch = f.repo.Patch(f.baseSHA, f.headSHA, p)
	f.srv = reviewtest.New(t, "acme", "weights", 7)
	f.srv.Token = cliToken
	f.srv.HeadSHA, f.srv.BaseSHA = f.headSHA, f.baseSHA
	f.srv.Files = []reviewtest.File{{Filename: p, Status: "modified", Patch: f.patch}}
	return f
}

// runReviewCLI runs `snapd review args...` with getenv as the environment
// and returns the exit code the real binary would have.
func runReviewCLI(t *testing.T, getenv func(string) string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := newEnv(&out, &errb)
	e.getenv = getenv
	root := newRootCommand(e)
	root.SetArgs(append([]string{"review"}, args...))
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.ExecuteContext(context.Background())
	if err != nil {
		fmt.Fprintf(&errb, "snapd: error: %v\n", err)
	}
	return exitCode(err), out.String(), errb.String()
}

func noEnv(string) string { return "" }

var dryLineRE = regexp.MustCompile(`(?m)^(\S+) line=(\d+) position=(\d+): (.*)$`)

func TestReviewDryRunLocal(t *testing.T) {
	f := newReviewFixture(t)
	code, out, errs := runReviewCLI(t, noEnv, "--dry-run", "--base", f.base, "--head", f.head,
		"--path", "snapshots/current.wtxt", "--pubkey", f.keys.SignPub, "--hmac-key", f.keys.HMACKey, "--require-signature")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"event: COMMENT", "<!-- snapd-review head=local -->", "signature verified", "continues the base",
		"| `layer.0/w` | modified | f32 | (64×8) | 2 / 512 | 3,41 | 0,5 |", "--- 3 line comment(s) (side RIGHT) ---"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Every printed position points, in the real `git diff` of the two
	// generations, at the added ch line the comment is about.
	head := strings.Split(string(f.gen2), "\n")
	plines := strings.Split(f.patch, "\n")
	ms := dryLineRE.FindAllStringSubmatch(out, -1)
	if len(ms) != 3 {
		t.Fatalf("%d comment lines:\n%s", len(ms), out)
	}
	for _, m := range ms {
		line, _ := strconv.Atoi(m[2])
		pos, _ := strconv.Atoi(m[3])
		if m[1] != "snapshots/current.wtxt" || !strings.HasPrefix(head[line-1], "ch ix=") || plines[pos] != "+"+head[line-1] {
			t.Errorf("comment %q: head line %q, patch line %q", m[0], head[line-1], plines[pos])
		}
		if !strings.Contains(m[4], "rows ") || !strings.Contains(m[4], "max |Δ|") {
			t.Errorf("comment without rows and numbers: %s", m[4])
		}
	}

	// A threshold trips: exit 1, REQUEST_CHANGES.
	code, out, _ = runReviewCLI(t, noEnv, "--dry-run", "--base", f.base, "--head", f.head, "--max-rel-l2", "1e-9")
	if code != exitInvalid || !strings.Contains(out, "event: REQUEST_CHANGES") {
		t.Fatalf("threshold: exit %d\n%s", code, out)
	}

	// Scoped: the limit for layer.* only, lifted for layer.0/w by a more
	// specific pattern; the counters are reported, not judged.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-rel-l2", "layer.*=1e-9", "--max-rel-l2", "layer.0/w=0"}, "Not thresholded:** 2 counters ("},
		{[]string{"--max-rel-l2", "1e-9", "--exclude", "layer.0/*"}, "Not thresholded:** 2 counters, 2 excluded ("},
		{[]string{"--max-rel-l2", "1e-9", "--include", "layer.0/b", "--max-abs-delta", "1e-9", "--allow-nonfinite"}, "Not thresholded:** 3 not included ("},
	} {
		code, out, errs := runReviewCLI(t, noEnv, append([]string{"--dry-run", "--base", f.base, "--head", f.head}, tc.args...)...)
		if code != 0 || strings.Contains(out, "REQUEST_CHANGES") || !strings.Contains(out, tc.want) {
			t.Fatalf("%q: exit %d, want 0 and %q\n%s%s", tc.args, code, tc.want, out, errs)
		}
	}
	// A limit pattern naming the counter judges it.
	code, out, _ = runReviewCLI(t, noEnv, "--dry-run", "--base", f.base, "--head", f.head, "--max-abs-delta", "tok.counts=1")
	if code != exitInvalid || !strings.Contains(out, "array `tok.counts`: max |Δ| 91 exceeds the limit 1") {
		t.Fatalf("naming a counter: exit %d\n%s", code, out)
	}
}

func TestReviewUsageErrors(t *testing.T) {
	f := newReviewFixture(t)
	for _, args := range [][]string{
		{"--repo", "acme/weights"},                                  // no --pr
		{"--base", f.base, "--head", f.head},                        // local needs --dry-run
		{"--dry-run", "--base", f.base},                             // --head missing
		{"--pr", "7", "--repo", "nonsense"},                         // bad repo
		{"--pr", "7", "--repo", "acme/weights"},                     // no token
		{"--pr", "7", "--repo", "a/b", "--app-id", "1"},             // incomplete App flags
		{"--dry-run", "--base", f.base, "--head", "/nonexistent/x"}, // missing file
		{"--dry-run", "--base", f.base, "--head", f.head, "--max-rel-l2", "-1"},
		{"--dry-run", "--base", f.base, "--head", f.head, "--max-rel-l2", "0.1", "--max-rel-l2", "0.2"},
		{"--dry-run", "--base", f.base, "--head", f.head, "--max-abs-delta", "model.*=x"},
		{"--dry-run", "--base", f.base, "--head", f.head, "--exclude", "[a"},
	} {
		code, _, errs := runReviewCLI(t, noEnv, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d; %s", args, code, exitUsage, errs)
		}
	}
}

func TestReviewPostsWithTokenAndNeverLogsIt(t *testing.T) {
	f := newReviewFixture(t)
	env := func(k string) string {
		switch k {
		case "GITHUB_TOKEN":
			return cliToken
		case "GITHUB_REPOSITORY":
			return "acme/weights"
		}
		return ""
	}
	args := []string{"--pr", "7", "--api-url", f.srv.URL, "--workdir", f.repo.Dir, "--pubkey", f.keys.SignPub, "--debug"}
	code, out, errs := runReviewCLI(t, env, args...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "created on acme/weights#7: COMMENT, 3 line comment(s) posted") {
		t.Fatalf("stdout: %s", out)
	}
	if !strings.Contains(errs, "github request") || strings.Contains(errs, cliToken) {
		t.Fatalf("debug log lacks requests or holds the token:\n%s", errs)
	}
	// The local checkout served both versions: no contents API call.
	for _, r := range f.srv.RequestLog() {
		if strings.Contains(r, "/contents/") {
			t.Fatalf("contents API used despite --workdir: %v", f.srv.RequestLog())
		}
	}
	code, out, errs = runReviewCLI(t, env, args...)
	if code != exitOK || !strings.Contains(out, "updated on acme/weights#7: COMMENT, 0 line comment(s) posted, 3 already present") {
		t.Fatalf("re-run: exit %d\n%s\n%s", code, out, errs)
	}
	if len(f.srv.ReviewList()) != 1 || len(f.srv.CommentList()) != 3 {
		t.Fatalf("re-run duplicated: %d reviews, %d comments", len(f.srv.ReviewList()), len(f.srv.CommentList()))
	}

	// Token from a file; dry run against the PR posts nothing.
	tf := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tf, []byte(cliToken+"\n"), 0o600)
	before := len(f.srv.RequestLog())
	code, out, errs = runReviewCLI(t, noEnv, "--repo", "acme/weights", "--pr", "7", "--api-url", f.srv.URL, "--workdir", f.repo.Dir,
		"--token-file", tf, "--dry-run", "--debug")
	if code != exitOK || !strings.Contains(out, "event: COMMENT") || strings.Contains(errs, cliToken) {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
	}
	for _, r := range f.srv.RequestLog()[before:] {
		if !strings.HasPrefix(r, "GET ") {
			t.Fatalf("dry run wrote to GitHub: %s", r)
		}
	}
}

func TestReviewAppAuth(t *testing.T) {
	f := newReviewFixture(t)
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemFile := filepath.Join(t.TempDir(), "app.pem")
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	os.WriteFile(pemFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	f.srv.App = &reviewtest.App{ID: "4242", InstallationID: 99, Key: &k.PublicKey, Token: "ghs_APP_install_token_xyz",
		WantRepositories: []string{"weights"}, WantPermissions: map[string]string{"contents": "read", "pull_requests": "write"}}
	code, out, errs := runReviewCLI(t, noEnv, "--repo", "acme/weights", "--pr", "7", "--api-url", f.srv.URL, "--workdir", f.repo.Dir,
		"--app-id", "4242", "--app-key", pemFile, "--installation-id", "99", "--debug", "--approve")
	if code != exitOK || !strings.Contains(out, ": APPROVE, 3 line comment(s) posted") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if f.srv.TokenRequests != 1 {
		t.Fatalf("%d installation token requests", f.srv.TokenRequests)
	}
	if strings.Contains(errs, "ghs_APP_install_token_xyz") || strings.Contains(errs, "eyJ") {
		t.Fatalf("credentials in the debug log:\n%s", errs)
	}
}

// `snapd diff` on WTXT inputs names the chunks the file really has (its
// idx rows_per_chunk, here 8), not the profile default.
func TestDiffWTXTNamesFileChunks(t *testing.T) {
	f := newReviewFixture(t)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"diff", "--json", f.base, f.head}, &out, &errb)
	if code != exitInvalid {
		t.Fatalf("diff exit %d (want 1: differ)\n%s", code, errb.String())
	}
	var doc struct {
		Arrays []struct {
			Name   string  `json:"name"`
			Change string  `json:"change"`
			Chunks []int64 `json:"changed_chunks"`
			RPC    int64   `json:"rows_per_chunk"`
		} `json:"arrays"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range doc.Arrays {
		got[a.Name] = fmt.Sprintf("%s %v rpc=%d", a.Change, a.Chunks, a.RPC)
	}
	want := map[string]string{"layer.0/b": "unchanged [] rpc=8", "layer.0/w": "modified [0 5] rpc=8",
		"step": "unchanged [] rpc=4096", "tok.counts": "modified [1] rpc=8"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("diff --json chunks:\n got %v\nwant %v", got, want)
	}
}
