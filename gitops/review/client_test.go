package review

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops/review/reviewtest"
	"github.com/snapd-ml/snapd/snapshot"
)

const testToken = "ghp_TEST_secret_token_0123456789"

type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now().Truncate(time.Second)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// newPRServer serves the fixture as pull request acme/weights#7.
func newPRServer(t *testing.T, f *fixture, withPatch bool) *reviewtest.Server {
	s := reviewtest.New(t, "acme", "weights", 7)
	s.Token = testToken
	s.HeadSHA, s.BaseSHA = f.headSHA, f.baseSHA
	patch := ""
	if withPatch {
		patch = f.patch
	}
	s.Files = []reviewtest.File{
		{Filename: "README", Status: "modified", Patch: "@@ -1 +1 @@\n-weights\n+weights, gen 2"},
		{Filename: wtxtPath, Status: "modified", Patch: patch},
	}
	s.Contents[f.baseSHA+":"+wtxtPath] = f.gen1
	s.Contents[f.headSHA+":"+wtxtPath] = f.gen2
	return s
}

func newTestClient(t *testing.T, s *reviewtest.Server, clk *fakeClock, log *bytes.Buffer) *Client {
	t.Helper()
	opts := ClientOptions{APIURL: s.URL, Token: StaticToken(testToken), Retry: RetryPolicy{MaxRetries: 3, Now: clk.Now, Sleep: clk.Sleep}}
	if log != nil {
		opts.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c, err := NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestReviewPullRequestPostsAndUpdates(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	clk := newFakeClock()
	var logs bytes.Buffer
	c := newTestClient(t, s, clk, &logs)
	req := Request{Owner: "acme", Repo: "weights", Number: 7, Fetch: GitFetcher{Dir: f.repo.Dir}, Options: f.opts(), TempDir: t.TempDir()}
	req.Options.HeadSHA = ""

	res, err := c.ReviewPullRequest(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Updated || res.CommentsPosted != 4 || res.ReviewID == 0 {
		t.Fatalf("first run: %+v", res)
	}
	rs, cs := s.ReviewList(), s.CommentList()
	if len(rs) != 1 || rs[0].State != "COMMENTED" || !strings.HasPrefix(rs[0].Body, ReviewMarker(f.headSHA)) || rs[0].CommitID != f.headSHA {
		t.Fatalf("reviews: %+v", rs)
	}
	if len(cs) != 4 {
		t.Fatalf("%d comments, want 4", len(cs))
	}
	for _, cm := range cs {
		if cm.Path != wtxtPath || cm.Side != "RIGHT" || !strings.HasPrefix(cm.Body, "<!-- snapd-review-comment head="+f.headSHA) {
			t.Errorf("comment %+v", cm)
		}
	}

	// Same head again: the review is updated, no comment repeated.
	res, err = c.ReviewPullRequest(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Updated || res.CommentsPosted != 0 || res.CommentsKept != 4 {
		t.Fatalf("second run: %+v", res)
	}
	if len(s.ReviewList()) != 1 || len(s.CommentList()) != 4 {
		t.Fatalf("second run duplicated: %d reviews, %d comments", len(s.ReviewList()), len(s.CommentList()))
	}
	if !containsReq(s.RequestLog(), fmt.Sprintf("PUT /repos/acme/weights/pulls/7/reviews/%d", rs[0].ID)) {
		t.Fatalf("no PUT of the review: %v", s.RequestLog())
	}

	// A comment that went missing (e.g. deleted) is posted again, alone.
	s.Comments = s.Comments[:3]
	res, err = c.ReviewPullRequest(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.CommentsPosted != 1 || res.CommentsKept != 3 || len(s.CommentList()) != 4 {
		t.Fatalf("third run: %+v, %d comments", res, len(s.CommentList()))
	}

	// Another event for the same head (approval configured): a new review,
	// the old one marked superseded.
	req.Options.Approve = true
	res, err = c.ReviewPullRequest(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	rs = s.ReviewList()
	if res.Updated || len(rs) != 2 || rs[1].State != "APPROVED" || !strings.HasPrefix(rs[0].Body, "<!-- snapd-review superseded") {
		t.Fatalf("event change: %+v, reviews %+v", res, rs)
	}
	if len(s.CommentList()) != 4 {
		t.Fatalf("event change re-posted comments: %d", len(s.CommentList()))
	}
	if len(clk.Sleeps()) != 0 {
		t.Fatalf("slept without a rate limit: %v", clk.Sleeps())
	}
	if strings.Contains(logs.String(), testToken) {
		t.Fatal("the token appears in the debug log")
	}
	if !strings.Contains(logs.String(), "github request") {
		t.Fatalf("debug log has no request lines:\n%s", logs.String())
	}
}

func containsReq(log []string, want string) bool {
	for _, l := range log {
		if l == want {
			return true
		}
	}
	return false
}

func TestReviewPullRequestContentsAPIAndLargeDiff(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, false) // GitHub omitted the patch
	c := newTestClient(t, s, newFakeClock(), nil)
	// The local "checkout" lacks the commits: fall back to the contents API.
	fetch := Fallback{GitFetcher{Dir: t.TempDir()}, ContentsFetcher{Client: c, Owner: "acme", Repo: "weights"}}
	res, err := c.ReviewPullRequest(context.Background(), Request{Owner: "acme", Repo: "weights", Number: 7, Fetch: fetch, Options: f.opts()})
	if err != nil {
		t.Fatal(err)
	}
	if res.CommentsPosted != 0 || len(s.CommentList()) != 0 {
		t.Fatalf("comments posted without a diff: %+v", res)
	}
	body := s.ReviewList()[0].Body
	for _, want := range []string{"GitHub shows no diff", "4 changed chunk(s) without a line comment", "`layer.0/w`", "`tok.counts`", "`step`", "1 unchanged"} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %q:\n%s", want, body)
		}
	}
	if !containsReq(s.RequestLog(), "GET /repos/acme/weights/contents/"+wtxtPath) {
		t.Fatalf("contents API not used: %v", s.RequestLog())
	}
	// A path missing at a commit is ErrNotFound.
	err = ContentsFetcher{Client: c, Owner: "acme", Repo: "weights"}.Fetch(context.Background(), f.baseSHA, "nope.wtxt", &bytes.Buffer{})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing path: %v", err)
	}
	err = GitFetcher{Dir: f.repo.Dir}.Fetch(context.Background(), f.baseSHA, "nope.wtxt", &bytes.Buffer{})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("git, missing path: %v", err)
	}
	var buf bytes.Buffer
	if err := (GitFetcher{Dir: f.repo.Dir}).Fetch(context.Background(), f.baseSHA, wtxtPath, &buf); err != nil || !bytes.Equal(buf.Bytes(), f.gen1) {
		t.Fatalf("git fetch: %v, %d bytes", err, buf.Len())
	}
}

// GitHub refusing one line comment of a new review (422 "must be part of
// the diff", which does not say which) still yields a complete review:
// the review is created without line comments, they are posted singly,
// and only the refused one is folded into the body.
func TestRejectedCommentsAreFolded(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	c := newTestClient(t, s, newFakeClock(), nil)
	req := Request{Owner: "acme", Repo: "weights", Number: 7, Fetch: GitFetcher{Dir: f.repo.Dir}, Options: f.opts(), DryRun: true}
	dry, err := c.ReviewPullRequest(context.Background(), req)
	if err != nil || len(dry.Review.Comments) != 4 {
		t.Fatalf("dry run: %v, %+v", err, dry)
	}
	bad := dry.Review.Comments[1]
	s.Unplaceable = map[string]bool{fmt.Sprintf("%s:%d", bad.Path, bad.Line): true}
	req.DryRun = false
	res, err := c.ReviewPullRequest(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.CommentsPosted != 3 || len(s.CommentList()) != 3 || len(s.ReviewList()) != 1 || res.Event != EventComment {
		t.Fatalf("%+v, %d comments", res, len(s.CommentList()))
	}
	for _, cm := range s.CommentList() {
		if cm.Line == bad.Line {
			t.Fatalf("the refused comment was posted: %+v", cm)
		}
	}
	if b := s.ReviewList()[0].Body; !strings.Contains(b, "1 changed chunk(s) without a line comment") || !strings.Contains(b, "3 line comment(s)") {
		t.Fatalf("folded body:\n%s", b)
	}
}

func TestRateLimits(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	clk := newFakeClock()
	reset := func(d time.Duration) string { return strconv.FormatInt(clk.Now().Add(d).Unix(), 10) }
	js := map[string]string{"Content-Type": "application/json"}
	with := func(h map[string]string) map[string]string {
		for k, v := range js {
			h[k] = v
		}
		return h
	}
	// Primary limit on the PR fetch: wait until X-RateLimit-Reset (+1 s).
	s.AddFailure(reviewtest.Failure{Method: "GET", PathSuffix: "/pulls/7", Status: 403,
		Header: with(map[string]string{"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset(30 * time.Second)}),
		Body:   `{"message":"API rate limit exceeded for installation"}`})
	// Secondary limit without headers: at least a minute.
	s.AddFailure(reviewtest.Failure{Method: "GET", PathSuffix: "/pulls/7/files", Status: 403, Header: js,
		Body: `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`})
	// A successful response that exhausts the primary limit: the next
	// request waits for the reset (go-github must not refuse it locally).
	s.AddFailure(reviewtest.Failure{Method: "GET", PathSuffix: "/pulls/7/reviews", Status: 200,
		Header: with(map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset(2 * time.Hour)}), Body: `[]`})
	// 429 with Retry-After on the POST: the body is sent again.
	s.AddFailure(reviewtest.Failure{Method: "POST", PathSuffix: "/pulls/7/reviews", Status: 429,
		Header: with(map[string]string{"Retry-After": "7"}), Body: `{"message":"secondary rate limit"}`})

	var logs bytes.Buffer
	// MaxWait must cover the 2 h reset for this test.
	c2opts := ClientOptions{APIURL: s.URL, Token: StaticToken(testToken),
		Retry:  RetryPolicy{MaxRetries: 3, MaxWait: 3 * time.Hour, Now: clk.Now, Sleep: clk.Sleep},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	c, err := NewClient(c2opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.ReviewPullRequest(context.Background(), Request{Owner: "acme", Repo: "weights", Number: 7, Fetch: GitFetcher{Dir: f.repo.Dir}, Options: f.opts()})
	if err != nil {
		t.Fatal(err)
	}
	if res.CommentsPosted != 4 || len(s.ReviewList()) != 1 {
		t.Fatalf("%+v, %d reviews", res, len(s.ReviewList()))
	}
	got := clk.Sleeps()
	// The third reset was set before the first two waits (91 s) passed.
	want := []time.Duration{31 * time.Second, time.Minute, 2*time.Hour + time.Second - 91*time.Second, 7 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
	if strings.Contains(logs.String(), testToken) {
		t.Fatal("token in log")
	}
}

func TestRateLimitBounds(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	clk := newFakeClock()
	c := newTestClient(t, s, clk, nil) // MaxRetries 3
	for i := 0; i < 10; i++ {
		s.AddFailure(reviewtest.Failure{Method: "GET", PathSuffix: "/pulls/7", Status: 429, Header: map[string]string{"Retry-After": "1"}, Body: `{"message":"slow down"}`})
	}
	_, err := c.PullRequest(context.Background(), "acme", "weights", 7)
	if err == nil || len(clk.Sleeps()) != 3 {
		t.Fatalf("err %v after %d waits, want an error after 3", err, len(clk.Sleeps()))
	}
	// A wait longer than MaxWait is not slept.
	s.Failures = nil
	clk.sleeps = nil
	s.AddFailure(reviewtest.Failure{Method: "GET", PathSuffix: "/pulls/7", Status: 429, Header: map[string]string{"Retry-After": "86400"}, Body: `{"message":"slow down"}`})
	if _, err := c.PullRequest(context.Background(), "acme", "weights", 7); err == nil || len(clk.Sleeps()) != 0 {
		t.Fatalf("long Retry-After: err %v, waits %v", err, clk.Sleeps())
	}
	// A permission 403 is not retried.
	s.AddFailure(reviewtest.Failure{Method: "GET", PathSuffix: "/pulls/7", Status: 403, Header: map[string]string{"Content-Type": "application/json"}, Body: `{"message":"Resource not accessible by integration"}`})
	if _, err := c.PullRequest(context.Background(), "acme", "weights", 7); err == nil || !strings.Contains(err.Error(), "not accessible") || len(clk.Sleeps()) != 0 {
		t.Fatalf("permission error: %v, waits %v", err, clk.Sleeps())
	}
	// Wrong token: 401, no retry.
	bad, _ := NewClient(ClientOptions{APIURL: s.URL, Token: StaticToken("wrong"), Retry: RetryPolicy{Now: clk.Now, Sleep: clk.Sleep}})
	if _, err := bad.PullRequest(context.Background(), "acme", "weights", 7); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("bad token: %v", err)
	}
}

func appKey(t *testing.T) (*rsa.PrivateKey, []byte) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
}

func TestAppAuth(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	clk := newFakeClock()
	s.Now = clk.Now
	key, pemBytes := appKey(t)
	s.App = &reviewtest.App{ID: "12345", InstallationID: 678, Key: &key.PublicKey, Token: "ghs_INSTALLATION_secret_42",
		WantRepositories: []string{"weights"}, WantPermissions: map[string]string{"contents": "read", "pull_requests": "write"}}
	var logs bytes.Buffer
	c, err := NewClient(ClientOptions{APIURL: s.URL, App: &AppConfig{AppID: "12345", InstallationID: 678, PrivateKeyPEM: pemBytes, Repositories: []string{"weights"}},
		Retry:  RetryPolicy{Now: clk.Now, Sleep: clk.Sleep},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReviewPullRequest(context.Background(), Request{Owner: "acme", Repo: "weights", Number: 7, Fetch: GitFetcher{Dir: f.repo.Dir}, Options: f.opts()}); err != nil {
		t.Fatal(err)
	}
	if s.TokenRequests != 1 || len(s.ReviewList()) != 1 {
		t.Fatalf("%d token requests (want 1, cached), %d reviews", s.TokenRequests, len(s.ReviewList()))
	}
	// An hour later the token has expired: a new one is minted.
	clk.mu.Lock()
	clk.now = clk.now.Add(2 * time.Hour)
	clk.mu.Unlock()
	if _, err := c.PullRequest(context.Background(), "acme", "weights", 7); err != nil {
		t.Fatal(err)
	}
	if s.TokenRequests != 2 {
		t.Fatalf("%d token requests after expiry, want 2", s.TokenRequests)
	}
	l := logs.String()
	if strings.Contains(l, "ghs_INSTALLATION_secret_42") || strings.Contains(l, "eyJ") {
		t.Fatalf("a token or JWT is in the log:\n%s", l)
	}
	// A wrong App ID is refused by the server's JWT check.
	bad, _ := NewClient(ClientOptions{APIURL: s.URL, App: &AppConfig{AppID: "999", InstallationID: 678, PrivateKeyPEM: pemBytes, Repositories: []string{"weights"}},
		Retry: RetryPolicy{Now: clk.Now, Sleep: clk.Sleep}})
	if _, err := bad.PullRequest(context.Background(), "acme", "weights", 7); err == nil || !strings.Contains(err.Error(), "installation token") {
		t.Fatalf("wrong app id: %v", err)
	}
	if _, err := NewClient(ClientOptions{App: &AppConfig{AppID: "1", InstallationID: 1, PrivateKeyPEM: []byte("junk")}}); err == nil {
		t.Fatal("junk key accepted")
	}
}

func TestPublish(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	c := newTestClient(t, s, newFakeClock(), nil)
	p := PublishRequest{Owner: "acme", Repo: "weights", Head: "snapshots-gen2", Base: "snapshots", Title: "gen 000002", Body: "snapd generation 2",
		Fetch: GitFetcher{Dir: f.repo.Dir}, Options: f.opts()}
	res, err := c.Publish(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.PRs) != 1 || res.PullRequest.Number != 7 || res.CommentsPosted != 4 {
		t.Fatalf("publish: %+v, PRs %v", res, s.PRs)
	}
	res, err = c.Publish(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.PRs) != 1 || !res.Updated || len(s.ReviewList()) != 1 || len(s.CommentList()) != 4 {
		t.Fatalf("second publish duplicated: PRs %d, %+v", len(s.PRs), res)
	}
	// A new title edits the open pull request (PATCH), it opens no other.
	p.Title = "gen 000002 (renamed)"
	if _, err := c.Publish(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	patched := false
	for _, r := range s.RequestLog() {
		patched = patched || r == "PATCH /repos/acme/weights/pulls/7"
	}
	if !patched || len(s.PRs) != 1 || s.PRs[0]["title"] != p.Title {
		t.Fatalf("title not updated: PATCH %v, %v", patched, s.PRs)
	}
}

func TestTokenSources(t *testing.T) {
	env := map[string]string{"T": "  abc  ", "BAD": "a b"}
	get := func(k string) string { return env[k] }
	if tok, err := TokenFromEnv(get, "T"); err != nil || tok != "abc" {
		t.Fatalf("%q %v", tok, err)
	}
	if _, err := TokenFromEnv(get, "NONE"); !errors.Is(err, ErrNoToken) {
		t.Fatal(err)
	}
	if _, err := TokenFromEnv(get, "BAD"); err == nil || strings.Contains(err.Error(), "a b") {
		t.Fatalf("bad token: %v", err)
	}
	if s := fmt.Sprint(StaticToken("secret")); strings.Contains(s, "secret") {
		t.Fatal("StaticToken prints itself")
	}
	dir := t.TempDir()
	p := dir + "/tok"
	if err := writeFile(p, "tok123\n"); err != nil {
		t.Fatal(err)
	}
	if tok, err := TokenFromFile(p); err != nil || tok != "tok123" {
		t.Fatalf("%q %v", tok, err)
	}
	writeFile(p, "\n")
	if _, err := TokenFromFile(p); !errors.Is(err, ErrNoToken) {
		t.Fatal(err)
	}
	if _, err := NewClient(ClientOptions{APIURL: "ftp://x"}); err == nil {
		t.Fatal("ftp API URL accepted")
	}
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o600) }

// GitHub refuses REQUEST_CHANGES on one's own pull request (the daemon's
// App opened it): the verdict is posted as a marked COMMENT, and re-runs
// update that review.
func TestOwnPullRequestDowngrade(t *testing.T) {
	f := newFixture(t, func(s *snapshot.Snapshot) *snapshot.Snapshot {
		return reviewtest.SetF32(s, "layer.0/b", 5, float32(math.Inf(1)))
	}, nil)
	s := newPRServer(t, f, true)
	s.AddFailure(reviewtest.Failure{Method: "POST", PathSuffix: "/pulls/7/reviews", Status: 422, Header: map[string]string{"Content-Type": "application/json"},
		Body: `{"message":"Unprocessable Entity","errors":["Can not request changes on your own pull request"]}`})
	c := newTestClient(t, s, newFakeClock(), nil)
	req := Request{Owner: "acme", Repo: "weights", Number: 7, Fetch: GitFetcher{Dir: f.repo.Dir}, Options: f.opts()}
	res, err := c.ReviewPullRequest(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	rs := s.ReviewList()
	if res.Review.Event != EventRequestChanges || res.Event != EventComment || len(rs) != 1 || rs[0].State != "COMMENTED" {
		t.Fatalf("downgrade: %+v, reviews %+v", res, rs)
	}
	if !strings.Contains(rs[0].Body, "the verdict **REQUEST_CHANGES** is posted as a comment") || !strings.HasPrefix(rs[0].Body, ReviewMarker(f.headSHA)) {
		t.Fatalf("body:\n%s", rs[0].Body)
	}
	if res.CommentsPosted != 5 || len(s.CommentList()) != 5 {
		t.Fatalf("comments: %+v", res)
	}
	res, err = c.ReviewPullRequest(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Updated || len(s.ReviewList()) != 1 || len(s.CommentList()) != 5 || res.Event != EventComment {
		t.Fatalf("re-run: %+v, %d reviews", res, len(s.ReviewList()))
	}
}
