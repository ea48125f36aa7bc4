package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/snapd-ml/snapd/gitops/review"
	"github.com/snapd-ml/snapd/gitops/review/reviewtest"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/pipeline"
)

// fakeGitHub is reviewtest's fake GitHub API whose pull request follows a
// real Git remote, as GitHub's does: before each request, the pull
// request's head and base SHAs are the remote's branches, its files and
// patches come from `git diff base head`, and the contents API serves the
// remote's blobs. Requests are serialized, so the fake's fields are only
// written between requests.
type fakeGitHub struct {
	*reviewtest.Server
	api        *httptest.Server
	remote     string // bare repository
	head, base string
	// stale is how many more requests still see the previous head after
	// the branch moved (GitHub updates pull requests asynchronously).
	stale int

	mu sync.Mutex
}

func newFakeGitHub(t *testing.T, remoteDir, head, base string) *fakeGitHub {
	f := &fakeGitHub{Server: reviewtest.New(t, "acme", "models", 7), remote: remoteDir, head: head, base: base}
	f.api = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.sync(); err != nil {
			t.Errorf("fake github: %v", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		f.Server.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(f.api.Close)
	return f
}

func (f *fakeGitHub) git(args ...string) (string, error) {
	out, err := gittest.GitRun(f.remote, args...)
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

func (f *fakeGitHub) sync() error {
	head, err := f.git("rev-parse", "--verify", "-q", "refs/heads/"+f.head)
	if err != nil {
		return nil // nothing pushed yet: nothing to show
	}
	base, err := f.git("rev-parse", "--verify", "refs/heads/"+f.base)
	if err != nil {
		return err
	}
	if h := strings.TrimSpace(head); h != f.HeadSHA && f.HeadSHA != "" && f.stale > 0 {
		f.stale--
		return nil
	}
	f.HeadSHA, f.BaseSHA = strings.TrimSpace(head), strings.TrimSpace(base)
	names, err := f.git("diff", "--no-renames", "--name-status", f.BaseSHA, f.HeadSHA)
	if err != nil {
		return err
	}
	f.Files = nil
	for _, l := range strings.Split(strings.TrimSpace(names), "\n") {
		st, p, ok := strings.Cut(l, "\t")
		if !ok {
			continue
		}
		status := map[string]string{"A": "added", "M": "modified", "D": "removed"}[st]
		diff, err := f.git("diff", "--no-color", "--no-ext-diff", "--unified=3", f.BaseSHA, f.HeadSHA, "--", p)
		if err != nil {
			return err
		}
		patch := ""
		if i := strings.Index(diff, "@@"); i >= 0 {
			patch = strings.TrimSuffix(diff[i:], "\n")
		}
		f.Files = append(f.Files, reviewtest.File{Filename: p, Status: status, Patch: patch})
		for _, sha := range []string{f.BaseSHA, f.HeadSHA} {
			if b, err := f.git("cat-file", "blob", sha+":"+p); err == nil {
				f.Contents[sha+":"+p] = []byte(b)
			}
		}
	}
	return nil
}

// TestRunGitHubPullRequest: with a github section, every push of the
// generations branch to a real Git remote is followed by opening (once)
// and updating a pull request against the base branch and reviewing its
// head. A refused token is retried (the token file is read again), a push
// whose review was not yet posted when the daemon stopped is reviewed at
// the next start, a failed API call is retried, and no token is printed.
func TestRunGitHubPullRequest(t *testing.T) {
	t.Parallel()
	const good, wrong = "ghs_good1c2a9e", "ghs_wrong77b1f0"
	remote := newRemote(t)
	// The repository's main branch exists before snapd pushes anything.
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, filepath.Dir(work), "init", "-q", "-b", "main", work)
	gittest.WriteFile(t, work, "README.md", []byte("model audit\n"))
	gittest.Git(t, work, "add", "README.md")
	gittest.Git(t, work, "-c", "user.name=o", "-c", "user.email=o@example.com", "commit", "-q", "-m", "init")
	gittest.Git(t, work, "push", "-q", remote.Dir, "main")
	gh := newFakeGitHub(t, remote.Dir, "snapshots", "main")
	gh.Token = good

	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	tokFile := gittest.WriteFile(t, dir, "gh-token", []byte(wrong+"\n"))
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%s"+
		"github:\n  repo: acme/models\n  base: main\n  api_url: %s\n  token_file: %s\n  approve: true\n  retry_max: 200ms\n"+
		"queue: {policy: block}\nmetrics: {addr: \"off\"}\n", remote.URL, fastGit, gh.api.URL, tokFile))

	// 1. Generation 1 is pushed; GitHub refuses the token, so the pull
	// request step keeps failing, visibly.
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	requestTiny(t, state, 1)
	waitFor(t, "generation 1 pushed, review failing", func() (bool, string) {
		st, err := pipeline.ReadStatus(state)
		if err != nil || st.PullRequest == nil {
			return false, fmt.Sprint(err)
		}
		b, _ := json.Marshal(st.PullRequest)
		return st.PullRequest.Pushed != nil && st.PullRequest.Attempts >= 2 && strings.Contains(st.PullRequest.LastError, "401"), string(b)
	})
	gen1 := strings.TrimSpace(gittest.Git(t, remote.Dir, "rev-parse", "gen-000001^{commit}"))
	st, _ := pipeline.ReadStatus(state)
	if st.PullRequest.Pushed.Commit != gen1 || st.PullRequest.Published != nil || st.LastError == nil || st.LastError.Stage != "github" {
		t.Fatalf("status: pull request %+v, last error %+v", st.PullRequest, st.LastError)
	}
	if len(gh.ReviewList()) != 0 || len(gh.PRs) != 0 {
		t.Fatal("something was posted with a refused token")
	}
	// 2. Stopped before the review was posted; the token is fixed; the
	// next start reviews the pushed generation without a new request.
	d.stop(t)
	logs := d.stderr.String()
	gittest.WriteFile(t, dir, "gh-token", []byte(good+"\n"))
	d = startDaemon(t, "--state-dir", state, "--config", cfg)
	waitFor(t, "the review of generation 1", func() (bool, string) {
		rs := gh.ReviewList()
		return len(rs) == 1, fmt.Sprintf("%d reviews", len(rs))
	})
	gh.mu.Lock()
	prs := gh.PRs
	gh.mu.Unlock()
	if len(prs) != 1 || prs[0]["title"] != "snapd: generations from snapshots" {
		t.Fatalf("pull requests: %v", prs)
	}
	if h, b := prs[0]["head"].(map[string]any), prs[0]["base"].(map[string]any); h["ref"] != "snapshots" || b["ref"] != "main" {
		t.Fatalf("pull request %v -> %v", h, b)
	}
	rv := gh.ReviewList()[0]
	if rv.CommitID != gen1 || !strings.HasPrefix(rv.Body, review.ReviewMarker(gen1)) || !strings.Contains(rv.Body, "snapshots/current.wtxt` — added") {
		t.Fatalf("review of generation 1 (commit %s):\n%+v", gen1, rv)
	}

	// 3. main is merged up to generation 1; generation 2 is pushed; the
	// first attempt meets a 500, the next ones a pull request that GitHub
	// has not moved to the new commit yet; all are retried. The second review
	// compares generation 1 with 2: chain continues, the changed rows get
	// line comments, every check passes: the verdict is APPROVE, but the
	// daemon's own account opened the pull request and GitHub refuses an
	// approval of one's own pull request (422), so it is posted as a
	// COMMENT that says so.
	gittest.Git(t, remote.Dir, "update-ref", "refs/heads/main", gen1)
	gh.AddFailure(reviewtest.Failure{Method: http.MethodGet, PathSuffix: "/pulls", Status: http.StatusInternalServerError, Body: `{"message":"boom"}`})
	gh.mu.Lock()
	gh.stale = 4 // two attempts see the pull request still at generation 1
	gh.mu.Unlock()
	requestTiny(t, state, 2)
	waitFor(t, "the review of generation 2", func() (bool, string) {
		rs := gh.ReviewList()
		return len(rs) == 2, fmt.Sprintf("%d reviews", len(rs))
	})
	waitFor(t, "the review recorded", func() (bool, string) {
		st, _ := pipeline.ReadStatus(state)
		return st.PullRequest != nil && st.PullRequest.Published != nil && st.PullRequest.Published.Tag == "gen-000002", fmt.Sprintf("%+v", st.PullRequest)
	})
	d.stop(t)
	logs += d.stderr.String()
	gen2 := strings.TrimSpace(gittest.Git(t, remote.Dir, "rev-parse", "gen-000002^{commit}"))
	rv = gh.ReviewList()[1]
	if rv.CommitID != gen2 || rv.State != "COMMENTED" || !strings.Contains(rv.Body, "continues the base") ||
		!strings.Contains(rv.Body, "gen 000001 → 000002") || rv.User.Login != "snapd-bot" ||
		!strings.Contains(rv.Body, "GitHub does not let `snapd-bot` approve on this pull request: the account opened it, so the verdict **APPROVE** is posted as a comment") {
		t.Fatalf("review of generation 2 (commit %s):\n%+v", gen2, rv)
	}
	var onCh int
	for _, c := range gh.CommentList() {
		if c.CommitID == gen2 && c.Path == "snapshots/current.wtxt" && strings.Contains(c.Body, "array=w") {
			onCh++
		}
	}
	if onCh == 0 {
		t.Fatalf("no line comment on the changed chunk of w: %+v", gh.CommentList())
	}
	gh.mu.Lock()
	nPR := len(gh.PRs)
	gh.mu.Unlock()
	if nPR != 1 {
		t.Fatalf("%d pull requests, want the one updated", nPR)
	}
	var js pipeline.Status
	if err := json.Unmarshal([]byte(mustRun(t, "status", "--state-dir", state, "--json")), &js); err != nil {
		t.Fatal(err)
	}
	p := js.PullRequest
	if p == nil || p.Published == nil || p.Published.Commit != gen2 || p.Published.Number != 7 || p.Published.Event != "COMMENT" ||
		p.Published.Verdict != "APPROVE" || p.LastError != "" || p.Attempts != 0 {
		t.Fatalf("status pull_request: %+v", p)
	}
	if out := mustRun(t, "status", "--state-dir", state); !strings.Contains(out, "pull request: #7") || !strings.Contains(out, ": COMMENT (verdict APPROVE)") {
		t.Fatalf("status does not show the pull request:\n%s", out)
	}
	if !strings.Contains(logs, "pull request reviewed") || !strings.Contains(logs, "publish failed; will retry") || !strings.Contains(logs, "not yet the pushed "+gen2) {
		t.Fatalf("logs:\n%s", logs)
	}
	for _, s := range []string{logs, mustRun(t, "status", "--state-dir", state), mustRun(t, "status", "--state-dir", state, "--json")} {
		if strings.Contains(s, good) || strings.Contains(s, wrong) {
			t.Fatalf("a token was printed:\n%s", s)
		}
	}
	// The pushes themselves were not disturbed.
	checkRemoteGens(t, remote, 2)
}

// checkRemoteGens asserts the remote branch holds generations 1..n.
func checkRemoteGens(t *testing.T, r *gittest.HTTPRemote, n uint64) {
	t.Helper()
	if got := remoteGens(t, r.Dir); fmt.Sprint(got) != fmt.Sprint(genList(n)) {
		t.Fatalf("remote branch holds generations %v, want 1..%d", got, n)
	}
	r.Fsck(t)
}

// TestRunGitHubAppAndMergedBase: the pull-request step authenticates as a
// GitHub App (installation token for this repository only, contents:read
// and pull_requests:write). When GitHub refuses to open the pull request
// because the base already contains the pushed generation, nothing is
// posted and nothing is retried; the next generation opens it.
func TestRunGitHubAppAndMergedBase(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, filepath.Dir(work), "init", "-q", "-b", "main", work)
	gittest.Git(t, work, "-c", "user.name=o", "-c", "user.email=o@example.com", "commit", "-q", "--allow-empty", "-m", "init")
	gittest.Git(t, work, "push", "-q", remote.Dir, "main")
	gh := newFakeGitHub(t, remote.Dir, "snapshots", "main")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	gh.App = &reviewtest.App{ID: "4242", InstallationID: 99, Key: &key.PublicKey, Token: "ghs_installation_e5f1",
		WantRepositories: []string{"models"}, WantPermissions: map[string]string{"contents": "read", "pull_requests": "write"}}
	gh.AddFailure(reviewtest.Failure{Method: http.MethodPost, PathSuffix: "/pulls", Status: http.StatusUnprocessableEntity,
		Body: `{"message":"Validation Failed","errors":[{"resource":"PullRequest","code":"custom","message":"No commits between main and snapshots"}]}`})
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	keyFile := gittest.WriteFile(t, dir, "app.pem", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: %s\n%s"+
		"github:\n  repo: acme/models\n  api_url: %s\n  app_id: \"4242\"\n  app_key: %s\n  installation_id: 99\n  retry_max: 200ms\n"+
		"queue: {policy: block}\nmetrics: {addr: \"off\"}\n", remote.URL, fastGit, gh.api.URL, keyFile))
	d := startDaemon(t, "--state-dir", state, "--config", cfg)
	requestTiny(t, state, 1)
	waitFor(t, "generation 1 handled", func() (bool, string) {
		st, _ := pipeline.ReadStatus(state)
		return st != nil && st.PullRequest != nil && st.PullRequest.Published != nil, fmt.Sprintf("%+v", st)
	})
	st, _ := pipeline.ReadStatus(state)
	if p := st.PullRequest.Published; p.Tag != "gen-000001" || !strings.Contains(p.Skipped, "already contains") || p.ReviewID != 0 {
		t.Fatalf("published %+v", p)
	}
	if n := len(gh.ReviewList()); n != 0 {
		t.Fatalf("%d reviews posted without a pull request", n)
	}
	requestTiny(t, state, 2)
	waitFor(t, "the review of generation 2", func() (bool, string) {
		rs := gh.ReviewList()
		return len(rs) == 1, fmt.Sprintf("%d reviews", len(rs))
	})
	d.stop(t)
	gen2 := strings.TrimSpace(gittest.Git(t, remote.Dir, "rev-parse", "gen-000002^{commit}"))
	if rv := gh.ReviewList()[0]; rv.CommitID != gen2 {
		t.Fatalf("review of %s, want generation 2 %s", rv.CommitID, gen2)
	}
	tokens := 0
	for _, r := range gh.RequestLog() {
		if r == "POST /app/installations/99/access_tokens" {
			tokens++
		}
	}
	if tokens != 1 {
		t.Fatalf("%d installation token requests, want 1 (cached):\n%v", tokens, gh.RequestLog())
	}
	if logs := d.stderr.String(); strings.Contains(logs, "ghs_installation_e5f1") || !strings.Contains(logs, "nothing to review") {
		t.Fatalf("logs:\n%s", logs)
	}
	checkRemoteGens(t, remote, 2)
}

// TestRunGitHubConfigErrors: a github section that cannot work stops
// `snapd run` before anything starts, naming the field.
func TestRunGitHubConfigErrors(t *testing.T) {
	dir := t.TempDir()
	base := "git: {remote: http://127.0.0.1:1/r.git}\nmetrics: {addr: \"off\"}\n"
	empty := gittest.WriteFile(t, dir, "empty-token", nil)
	for i, c := range []struct {
		yaml string
		env  map[string]string
		code int
		want string
	}{
		{base + "github: {repo: acme/models, token_env: SNAPD_TEST_GH_TOKEN}\n", nil, exitUsage, "github.token_env: github: no token: environment variable SNAPD_TEST_GH_TOKEN is empty or unset"},
		{base + "github: {repo: acme/models, token_file: " + empty + "}\n", nil, exitUsage, "github.token_file: github: no token"},
		{base + "github: {repo: acme/models, token_file: " + filepath.Join(dir, "missing") + "}\n", nil, exitUsage, "github.token_file"},
		{base + "github: {repo: acme/models, app_id: '1', installation_id: 2, app_key: " + filepath.Join(dir, "missing.pem") + "}\n", nil, exitUsage, "github.app_key"},
		{base + "github: {repo: acme/models, app_id: '1', installation_id: 2, app_key: " + empty + "}\n", nil, exitUsage, "github"},
		{"github: {repo: acme/models, token_env: T}\nmetrics: {addr: \"off\"}\n", nil, exitUsage, "github.repo: needs git.remote"},
	} {
		cfg := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i))
		gittest.WriteFile(t, dir, filepath.Base(cfg), []byte(c.yaml))
		code, _, errs := snapd(t, c.env, "run", "--state-dir", filepath.Join(dir, fmt.Sprintf("s%d", i)), "--config", cfg)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("case %d: exit %d, want %d with %q:\n%s", i, code, c.code, c.want, errs)
		}
	}
}
