package review

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops/review/reviewtest"
	"github.com/snapd-ml/snapd/snapshot"
)

// These tests run against reviewtest's strict server without canned
// failures: GitHub's refusals come from the server's own rules.

func reviewReq(f *fixture) Request {
	o := f.opts()
	o.Approve = true
	return Request{Owner: "acme", Repo: "weights", Number: 7, Fetch: GitFetcher{Dir: f.repo.Dir}, Options: o}
}

// The token's account opened the pull request: APPROVE is refused with
// GitHub's 422 and posted as COMMENT with a note naming the account.
func TestApproveOwnPullRequest(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	s.Author = "snapd-bot" // the token's account
	c := newTestClient(t, s, newFakeClock(), nil)
	res, err := c.ReviewPullRequest(context.Background(), reviewReq(f))
	if err != nil {
		t.Fatal(err)
	}
	rs := s.ReviewList()
	if res.Review.Event != EventApprove || res.Event != EventComment || len(rs) != 1 || rs[0].State != "COMMENTED" {
		t.Fatalf("%+v, reviews %+v", res, rs)
	}
	if b := rs[0].Body; !strings.Contains(b, "GitHub does not let `snapd-bot` approve on this pull request: the account opened it") ||
		!strings.Contains(b, "reason=own") || strings.Contains(b, "Actions") {
		t.Fatalf("body:\n%s", b)
	}
	// A re-run updates that review instead of posting another.
	res, err = c.ReviewPullRequest(context.Background(), reviewReq(f))
	if err != nil || !res.Updated || len(s.ReviewList()) != 1 {
		t.Fatalf("re-run: %v %+v", err, res)
	}
}

// GitHub Actions' GITHUB_TOKEN may not approve (the repository setting
// is off): COMMENT with a note naming the setting; GET /user is not asked.
func TestActionsMayNotApprove(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	s.TokenLogin = reviewtest.ActionsLogin
	clk := newFakeClock()
	c, err := NewClient(ClientOptions{APIURL: s.URL, Token: StaticToken(testToken), Login: reviewtest.ActionsLogin, Retry: RetryPolicy{Now: clk.Now, Sleep: clk.Sleep}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.ReviewPullRequest(context.Background(), reviewReq(f))
	if err != nil {
		t.Fatal(err)
	}
	rs := s.ReviewList()
	if res.Event != EventComment || len(rs) != 1 || !strings.Contains(rs[0].Body, "GitHub Actions is not permitted to approve pull requests in this repository") ||
		!strings.Contains(rs[0].Body, "reason=actions") {
		t.Fatalf("%+v\n%+v", res, rs)
	}
	for _, r := range s.RequestLog() {
		if r == "GET /user" {
			t.Fatal("asked GET /user although the login was given")
		}
	}
	// A re-run of the same head updates the downgraded review.
	res, err = c.ReviewPullRequest(context.Background(), reviewReq(f))
	if err != nil || !res.Updated || res.Event != EventComment || len(s.ReviewList()) != 1 {
		t.Fatalf("re-run: %v %+v", err, res)
	}
}

// A pending review left by an interrupted run blocks every new review
// (GitHub: one pending review per user); snapd deletes its own empty one.
// Someone's pending review with content is not touched: an error says so.
func TestPendingReview(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	c := newTestClient(t, s, newFakeClock(), nil)
	debris := s.AddReview("snapd-bot", "PENDING", f.headSHA, "")
	res, err := c.ReviewPullRequest(context.Background(), reviewReq(f))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DeletedPending) != 1 || res.DeletedPending[0] != debris || len(s.ReviewList()) != 1 || s.ReviewList()[0].State != "APPROVED" {
		t.Fatalf("%+v %+v", res, s.ReviewList())
	}

	f2 := newFixture(t, nil, nil)
	s2 := newPRServer(t, f2, true)
	c2 := newTestClient(t, s2, newFakeClock(), nil)
	s2.AddReview("snapd-bot", "PENDING", f2.headSHA, "half-written human review")
	_, err = c2.ReviewPullRequest(context.Background(), reviewReq(f2))
	if err == nil || !strings.Contains(err.Error(), "pending (unsubmitted) review") || len(s2.ReviewList()) != 1 {
		t.Fatalf("someone's pending review: %v, %+v", err, s2.ReviewList())
	}
}

// A review by another account that carries snapd's marker (or a copy of
// an earlier one) is never edited, and its comments do not stand for
// snapd's.
func TestOthersReviewsAreNotEdited(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	s.Users = map[string]string{"other-token": "mallory"}
	forged := s.AddReview("mallory", "APPROVED", f.headSHA, ReviewMarker(f.headSHA)+"\nlooks fine")
	c := newTestClient(t, s, newFakeClock(), nil)
	res, err := c.ReviewPullRequest(context.Background(), reviewReq(f))
	if err != nil {
		t.Fatal(err)
	}
	rs := s.ReviewList()
	if res.Updated || len(rs) != 2 || rs[0].ID != forged || rs[0].Body != ReviewMarker(f.headSHA)+"\nlooks fine" || rs[1].User.Login != "snapd-bot" {
		t.Fatalf("%+v\n%+v", res, rs)
	}
}

// A request for changes on an earlier head is dismissed once a later head
// passes; another reviewer's is left alone.
func TestSupersededRequestForChangesIsDismissed(t *testing.T) {
	bad := newFixture(t, func(s *snapshot.Snapshot) *snapshot.Snapshot {
		return reviewtest.SetF32(s, "layer.0/b", 5, float32(math.NaN()))
	}, nil)
	s := newPRServer(t, bad, true)
	c := newTestClient(t, s, newFakeClock(), nil)
	res, err := c.ReviewPullRequest(context.Background(), reviewReq(bad))
	if err != nil || res.Event != EventRequestChanges {
		t.Fatalf("first head: %v %+v", err, res)
	}
	human := s.AddReview("octo-reviewer", "CHANGES_REQUESTED", bad.headSHA, "please look at layer.0/b")

	good := newFixture(t, nil, nil)
	s.HeadSHA, s.BaseSHA = good.headSHA, good.baseSHA
	s.Contents[good.baseSHA+":"+wtxtPath] = good.gen1
	s.Contents[good.headSHA+":"+wtxtPath] = good.gen2
	s.Files[1].Patch = good.patch
	res, err = c.ReviewPullRequest(context.Background(), Request{Owner: "acme", Repo: "weights", Number: 7, Fetch: GitFetcher{Dir: good.repo.Dir},
		Options: func() Options { o := good.opts(); o.Approve = true; return o }()})
	if err != nil || res.Event != EventApprove {
		t.Fatalf("second head: %v %+v", err, res)
	}
	states := map[int64]string{}
	for _, r := range s.ReviewList() {
		states[r.ID] = r.State
	}
	if len(res.Dismissed) != 1 || states[res.Dismissed[0]] != "DISMISSED" || states[human] != "CHANGES_REQUESTED" || states[res.ReviewID] != "APPROVED" {
		t.Fatalf("dismissed %v, states %v", res.Dismissed, states)
	}
}

// A revoked installation token answers 401: the cached token is dropped
// and the request retried once with a new one. A static token is not
// retried.
func TestUnauthorizedDropsCachedToken(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	clk := newFakeClock()
	s.Now = clk.Now
	key, pemBytes := appKey(t)
	s.App = &reviewtest.App{ID: "12345", InstallationID: 678, Key: &key.PublicKey, Token: "ghs_first",
		WantRepositories: []string{"weights"}, WantPermissions: map[string]string{"contents": "read", "pull_requests": "write"}}
	var logs bytes.Buffer
	c, err := NewClient(ClientOptions{APIURL: s.URL, App: &AppConfig{AppID: "12345", InstallationID: 678, PrivateKeyPEM: pemBytes, Repositories: []string{"weights"}},
		Retry: RetryPolicy{Now: clk.Now, Sleep: clk.Sleep}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PullRequest(context.Background(), "acme", "weights", 7); err != nil {
		t.Fatal(err)
	}
	s.RevokeTokens()
	if _, err := c.PullRequest(context.Background(), "acme", "weights", 7); err != nil {
		t.Fatalf("after revocation: %v", err)
	}
	if s.TokenRequests != 2 || !strings.Contains(logs.String(), "401") || strings.Contains(logs.String(), "ghs_first") {
		t.Fatalf("%d token requests; logs:\n%s", s.TokenRequests, logs.String())
	}
	// The App's login comes from GET /app.
	if me, err := c.Login(context.Background()); err != nil || me != "snapd-app[bot]" {
		t.Fatalf("login %q %v", me, err)
	}

	st := newTestClient(t, s, clk, nil) // a static token the server does not know
	n := len(s.RequestLog())
	if _, err := st.PullRequest(context.Background(), "acme", "weights", 7); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("static token: %v", err)
	}
	if got := len(s.RequestLog()) - n; got != 1 {
		t.Fatalf("static token: %d requests, want 1 (no retry)", got)
	}
}

// A server that accepts the connection but never answers does not hang
// the client: the response-header timeout ends the request.
func TestTimeouts(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(stop)
	c, err := NewClient(ClientOptions{APIURL: srv.URL, Token: StaticToken("x"), Timeouts: Timeouts{ResponseHeader: 50 * time.Millisecond},
		Retry: RetryPolicy{MaxRetries: 1, Sleep: func(ctx context.Context, d time.Duration) error { return nil }}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PullRequest(context.Background(), "a", "b", 1)
	if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("response header timeout: %v", err)
	}
	// The per-attempt limit covers a body that never ends, too.
	c, _ = NewClient(ClientOptions{APIURL: srv.URL, Token: StaticToken("x"), HTTPClient: &http.Client{Timeout: 50 * time.Millisecond},
		Retry: RetryPolicy{MaxRetries: 1, Sleep: func(ctx context.Context, d time.Duration) error { return nil }}})
	_, err = c.PullRequest(context.Background(), "a", "b", 1)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("attempt timeout: %v", err)
	}
}

// With more reviews than fit a page (GitHub: at most 100), snapd's own
// review of the head is still found on a later page and updated.
func TestReviewsPaginate(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	for i := 0; i < 150; i++ {
		s.AddReview("octo-reviewer", "COMMENTED", f.baseSHA, "nit")
	}
	c := newTestClient(t, s, newFakeClock(), nil)
	if _, err := c.ReviewPullRequest(context.Background(), reviewReq(f)); err != nil {
		t.Fatal(err)
	}
	res, err := c.ReviewPullRequest(context.Background(), reviewReq(f))
	if err != nil || !res.Updated || len(s.ReviewList()) != 151 {
		t.Fatalf("%v %+v, %d reviews", err, res, len(s.ReviewList()))
	}
	pages := 0
	for _, r := range s.RequestLog() {
		if r == "GET /repos/acme/weights/pulls/7/reviews" {
			pages++
		}
	}
	if pages != 4 { // two pages per run
		t.Fatalf("%d review list requests, want 4", pages)
	}
}
