package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/review"
)

// pushFunc is a gitops.Pusher made of a function.
type pushFunc func(context.Context, gitops.PushRequest) error

func (f pushFunc) Push(ctx context.Context, r gitops.PushRequest) error { return f(ctx, r) }

func TestPushTrackerRecordsSuccessBeforeReturning(t *testing.T) {
	dir := t.TempDir()
	fail := errors.New("503")
	var next error
	tr, err := TrackPushes(pushFunc(func(context.Context, gitops.PushRequest) error { return next }), dir)
	if err != nil {
		t.Fatal(err)
	}
	st, changed := tr.State()
	if st.Pushed != nil {
		t.Fatalf("fresh tracker: %+v", st)
	}
	c1 := plumbing.NewHash(strings.Repeat("ab", 20))
	next = fail
	if err := tr.Push(context.Background(), gitops.PushRequest{Branch: "snapshots", Commit: c1, Tag: "gen-000001"}); err != fail {
		t.Fatalf("push error %v, want the inner error unchanged", err)
	}
	if s, _ := ReadPullRequestState(dir); s != nil {
		t.Fatalf("a failed push was recorded: %+v", s)
	}
	select {
	case <-changed:
		t.Fatal("woken by a failed push")
	default:
	}
	next = nil
	if err := tr.Push(context.Background(), gitops.PushRequest{Branch: "snapshots", Commit: c1, Tag: "gen-000001"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("a successful push did not wake the pull-request step")
	}
	// Persisted when Push returned: another process (a restart) sees it.
	s, err := ReadPullRequestState(dir)
	if err != nil || s.Pushed == nil || s.Pushed.Commit != c1.String() || s.Pushed.Tag != "gen-000001" || s.Pushed.Branch != "snapshots" {
		t.Fatalf("state %+v %v", s, err)
	}
	tr2, err := TrackPushes(pushFunc(func(context.Context, gitops.PushRequest) error { return nil }), dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := tr2.State(); st.Pushed == nil || st.Pushed.Commit != c1.String() {
		t.Fatalf("reopened tracker: %+v", st)
	}
	// Publishing does not wake waiters for pushes.
	_, changed = tr2.State()
	if err := tr2.update(func(s *PullRequestState) bool { s.Published = &PublishedReview{Commit: c1.String()}; return true }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
		t.Fatal("woken by a published review")
	default:
	}
	if tagGen("gen-000123") != 123 || tagGen("") != 0 || tagGen("v") != 0 {
		t.Fatal("tagGen")
	}
}

func TestPullRequestStateCorrupt(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, PullRequestFile), []byte("{"), 0o644)
	if _, err := ReadPullRequestState(dir); err == nil || !strings.Contains(err.Error(), PullRequestFile) {
		t.Fatalf("got %v", err)
	}
	if _, err := TrackPushes(pushFunc(func(context.Context, gitops.PushRequest) error { return nil }), dir); err == nil {
		t.Fatal("TrackPushes accepted a corrupt state file")
	}
	st, err := ReadStatus(dir)
	if err != nil || len(st.Warnings) == 0 || !strings.Contains(strings.Join(st.Warnings, "\n"), PullRequestFile) {
		t.Fatalf("status %+v %v", st, err)
	}
}

func TestNewRejectsIncompletePullRequest(t *testing.T) {
	f := newFixture(t)
	c, err := review.NewClient(review.ClientOptions{APIURL: "http://127.0.0.1:1/", Token: review.StaticToken("x")})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(f.dir, f.keys)
	for _, pr := range []*PullRequest{
		{Owner: "a", Repo: "b", Base: "main"},
		{Client: c, Owner: "a", Repo: "b", Base: "main"},
	} {
		_, err := New(cfg, Deps{Registry: testRegistry(), PullRequest: pr})
		if err == nil || !strings.Contains(err.Error(), "PullRequest") && !strings.Contains(err.Error(), "pull request") {
			t.Fatalf("New accepted %+v: %v", pr, err)
		}
	}
}
