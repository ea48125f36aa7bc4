package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v60/github"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/review"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/backoff"
)

// PullRequestFile is the pull-request step's state file in the state
// directory (JSON, atomic): the newest successful push and the newest
// published review.
const PullRequestFile = "pull-request"

// reviewTmpDir holds the versions a review fetches (emptied at start).
const reviewTmpDir = "review-tmp"

// PullRequest configures the pull-request step (Deps.PullRequest): after
// every successful push of the generations branch, open or update the pull
// request from that branch (Deps.Repo's) to Base and post a review of its
// head, the newest pushed generation.
type PullRequest struct {
	// Client talks to the GitHub API (token or App credentials).
	Client *review.Client
	// Pushes must be the Pusher of Deps.Queue: it records every successful
	// push, which is what starts a review.
	Pushes *PushTracker
	// Owner/Repo is the GitHub repository the remote is; Base the branch
	// the pull request targets (not the generations branch).
	Owner, Repo, Base string
	// Title and Body of the pull request; they do not change with each
	// generation (each review names its own), so an open pull request is
	// edited only when the configuration changes them.
	Title, Body string
	// Options build the review (trusted keys, HMAC key, thresholds,
	// Approve, MaxComments); HeadSHA is set per review.
	Options review.Options
	// Fetch reads the base and head versions; nil: the local repository
	// (git CLI), else the contents API.
	Fetch review.Fetcher
	// RetryBase and RetryMax bound the backoff after a failed attempt
	// (default 2s and 5m). An attempt fails too when GitHub does not yet
	// show the pushed commit as the pull request's head (it updates pull
	// requests asynchronously after a push).
	RetryBase, RetryMax time.Duration
}

// PullRequestState is the content of STATE_DIR/pull-request; `snapd
// status --json` shows it.
type PullRequestState struct {
	// Pushed is the newest commit the resend queue pushed.
	Pushed *PushedCommit `json:"pushed,omitempty"`
	// Published is the newest review posted.
	Published *PublishedReview `json:"published,omitempty"`
	// LastError is the last failed attempt to publish (cleared on success).
	LastError     string    `json:"last_error,omitempty"`
	LastErrorTime time.Time `json:"last_error_time,omitzero"`
	Attempts      int       `json:"attempts,omitempty"`
}

// PushedCommit is one successful push.
type PushedCommit struct {
	Branch string    `json:"branch"`
	Commit string    `json:"commit"`
	Tag    string    `json:"tag,omitempty"`
	Time   time.Time `json:"time"`
}

// PublishedReview is one posted review.
type PublishedReview struct {
	Commit   string `json:"commit"` // the pull request head reviewed
	Tag      string `json:"tag,omitempty"`
	Number   int    `json:"number"`
	URL      string `json:"url,omitempty"`
	Created  bool   `json:"created,omitempty"` // the pull request was opened by this attempt
	ReviewID int64  `json:"review_id"`
	Event    string `json:"event"`   // posted: APPROVE, REQUEST_CHANGES or COMMENT
	Verdict  string `json:"verdict"` // the review's own event (GitHub may refuse it on one's own PR)
	// Dismissed lists earlier requests for changes of this account that
	// this review superseded (GitHub would keep the pull request blocked).
	Dismissed []int64 `json:"dismissed,omitempty"`
	// Skipped says why nothing was posted (no pull request can be opened
	// because the base already contains the commit).
	Skipped string    `json:"skipped,omitempty"`
	Time    time.Time `json:"time"`
}

// noCommits reports GitHub's refusal to open a pull request whose head
// the base already contains (422 "No commits between BASE and HEAD").
func noCommits(err error) bool {
	var er *github.ErrorResponse
	if !errors.As(err, &er) || er.Response == nil || er.Response.StatusCode != http.StatusUnprocessableEntity {
		return false
	}
	if strings.Contains(er.Message, "No commits between") {
		return true
	}
	for _, e := range er.Errors {
		if strings.Contains(e.Message, "No commits between") {
			return true
		}
	}
	return false
}

// PushTracker is a gitops.Pusher that passes pushes to another Pusher and
// records every success in STATE_DIR/pull-request before returning, so
// a crash between a push and its review cannot lose the review: the state
// says a pushed commit is not yet published, and the next start publishes
// it. Safe for concurrent use.
type PushTracker struct {
	inner gitops.Pusher
	path  string
	now   func() time.Time

	mu      sync.Mutex
	st      PullRequestState
	changed chan struct{} // closed and replaced when Pushed changes
}

// TrackPushes wraps p; stateDir is the daemon's state directory.
func TrackPushes(p gitops.Pusher, stateDir string) (*PushTracker, error) {
	if p == nil {
		return nil, errors.New("pipeline: TrackPushes: nil Pusher")
	}
	t := &PushTracker{inner: p, path: filepath.Join(stateDir, PullRequestFile), now: time.Now, changed: make(chan struct{})}
	st, err := ReadPullRequestState(stateDir)
	if err != nil {
		return nil, err
	}
	if st != nil {
		t.st = *st
	}
	return t, nil
}

// Push implements gitops.Pusher.
func (t *PushTracker) Push(ctx context.Context, req gitops.PushRequest) error {
	if err := t.inner.Push(ctx, req); err != nil {
		return err
	}
	return t.update(func(st *PullRequestState) bool {
		c := req.Commit.String()
		if st.Pushed != nil && st.Pushed.Commit == c && st.Pushed.Branch == req.Branch {
			return false
		}
		st.Pushed = &PushedCommit{Branch: req.Branch, Commit: c, Tag: req.Tag, Time: t.now().UTC()}
		return true
	})
}

// State returns the tracked state and a channel closed at the next change
// of Pushed.
func (t *PushTracker) State() (PullRequestState, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st, t.changed
}

// update applies fn and persists the state when fn reports a change; a
// change of Pushed wakes State's waiters.
func (t *PushTracker) update(fn func(*PullRequestState) bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	next := t.st
	if !fn(&next) {
		return nil
	}
	b, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(t.path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("pipeline: %s: %w", PullRequestFile, err)
	}
	pushedChanged := next.Pushed != t.st.Pushed
	t.st = next
	if pushedChanged {
		close(t.changed)
		t.changed = make(chan struct{})
	}
	return nil
}

// ReadPullRequestState reads STATE_DIR/pull-request (nil when absent).
func ReadPullRequestState(stateDir string) (*PullRequestState, error) {
	b, err := readStateFile(filepath.Join(stateDir, PullRequestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	var st PullRequestState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("pipeline: %s: %v", PullRequestFile, err)
	}
	return &st, nil
}

func (p *PullRequest) check(deps *Deps) error {
	switch {
	case p.Client == nil:
		return errors.New("pipeline: PullRequest.Client is required")
	case p.Pushes == nil:
		return errors.New("pipeline: PullRequest.Pushes is required (the resend queue's Pusher)")
	case deps.Repo == nil || deps.Queue == nil:
		return errors.New("pipeline: a pull request needs Deps.Repo and Deps.Queue")
	case p.Owner == "" || p.Repo == "" || p.Base == "":
		return errors.New("pipeline: PullRequest needs Owner, Repo and Base")
	case p.Base == deps.Repo.Config().Branch:
		return fmt.Errorf("pipeline: pull request base %q is the generations branch", p.Base)
	}
	if p.RetryBase <= 0 {
		p.RetryBase = DefaultPRRetryBase
	}
	if p.RetryMax <= 0 {
		p.RetryMax = DefaultPRRetryMax
	}
	p.RetryMax = max(p.RetryMax, p.RetryBase)
	if p.Title == "" {
		p.Title = "snapd: generations from " + deps.Repo.Config().Branch
	}
	return nil
}

// tagGen returns the generation of a tag like gen-000123 (0 if none).
func tagGen(tag string) uint64 {
	i := strings.LastIndexFunc(tag, func(r rune) bool { return r < '0' || r > '9' })
	g, _ := strconv.ParseUint(tag[i+1:], 10, 64)
	return g
}

// pullRequestStage publishes the newest pushed commit whenever it is not
// the newest published one: at start (a crash after a push) and after
// every push. Failures are retried with capped exponential backoff
// (backoff.Retry; a streak ends at a success); each is kept in
// STATE_DIR/pull-request and last_error, and logged by the one rule
// (backoff.LogLimiter: the first, a new error, else at most one a minute).
func (d *Daemon) pullRequestStage(ctx context.Context) {
	pr := d.deps.PullRequest
	tmp := filepath.Join(d.config().StateDir, reviewTmpDir)
	if err := os.RemoveAll(tmp); err != nil {
		d.log.Warn("pull request: clear temp dir", "dir", tmp, "error", err)
	}
	var pushed PushedCommit // the one the attempt under way publishes
	policy := backoff.Policy{Base: pr.RetryBase, Max: pr.RetryMax, Now: d.now, Limiter: &backoff.LogLimiter{},
		OnRetry: func(f backoff.Failure) {
			d.fail("github", tagGen(pushed.Tag), f.Err)
			if werr := pr.Pushes.update(func(s *PullRequestState) bool {
				s.LastError, s.LastErrorTime, s.Attempts = f.Err.Error(), d.now().UTC(), f.Attempt
				return true
			}); werr != nil {
				d.log.Error("pull request: record failure", "error", werr)
			}
			if f.Log {
				d.log.Warn("pull request: publish failed; will retry", "commit", pushed.Commit, "tag", pushed.Tag, "attempt", f.Attempt,
					"retry_in", f.Delay, "suppressed", f.Suppressed, "error", f.Err)
			}
		}}
	// attempt publishes the newest pushed commit if it is not published
	// yet (nil when there is nothing to do).
	attempt := func() error {
		st, _ := pr.Pushes.State()
		if st.Pushed == nil || (st.Published != nil && st.Published.Commit == st.Pushed.Commit) {
			return nil
		}
		pushed = *st.Pushed
		t := d.now()
		pub, err := d.publish(ctx, pr, &pushed, tmp)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.m.stage.WithLabelValues("github").Observe(d.now().Sub(t).Seconds())
		if err != nil {
			return err
		}
		if pub.Event != "" {
			d.m.reviews.WithLabelValues(pub.Event).Inc()
			d.log.Info("pull request reviewed", "number", pub.Number, "url", pub.URL, "created", pub.Created, "commit", pub.Commit,
				"tag", pub.Tag, "event", pub.Event, "verdict", pub.Verdict, "review_id", pub.ReviewID, "dismissed", pub.Dismissed)
		}
		// Not recorded (disk trouble): retried with backoff; the review
		// is posted idempotently again.
		return pr.Pushes.update(func(s *PullRequestState) bool {
			s.Published, s.LastError, s.LastErrorTime, s.Attempts = pub, "", time.Time{}, 0
			return true
		})
	}
	for {
		st, changed := pr.Pushes.State()
		if st.Pushed == nil || (st.Published != nil && st.Published.Commit == st.Pushed.Commit) {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				continue
			}
		}
		// Every failure is retried: Retry returns on success or when ctx
		// ends.
		backoff.Retry(ctx, policy, attempt)
		if ctx.Err() != nil {
			return
		}
	}
}

// publish opens or updates the pull request and reviews its head, which
// must be the pushed commit (else GitHub has not caught up yet: an error,
// retried).
func (d *Daemon) publish(ctx context.Context, pr *PullRequest, pushed *PushedCommit, tmp string) (*PublishedReview, error) {
	head := d.deps.Repo.Config().Branch
	info, created, err := pr.Client.EnsurePullRequest(ctx, pr.Owner, pr.Repo, head, pr.Base, pr.Title, pr.Body)
	if noCommits(err) {
		// The base already holds the pushed generation (merged while the
		// daemon was away): there is nothing to review.
		d.log.Info("pull request: base already contains the pushed generation; nothing to review", "base", pr.Base, "commit", pushed.Commit, "tag", pushed.Tag)
		return &PublishedReview{Commit: pushed.Commit, Tag: pushed.Tag, Skipped: "base " + pr.Base + " already contains it", Time: d.now().UTC()}, nil
	}
	if err != nil {
		return nil, err
	}
	if info.HeadSHA != pushed.Commit {
		return nil, fmt.Errorf("github: pull request #%d (%s -> %s) shows head %s, not yet the pushed %s (%s)",
			info.Number, head, pr.Base, info.HeadSHA, pushed.Commit, pushed.Tag)
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	fetch := pr.Fetch
	if fetch == nil {
		fetch = review.Fallback{review.GitFetcher{Dir: d.deps.Repo.Dir()}, review.ContentsFetcher{Client: pr.Client, Owner: pr.Owner, Repo: pr.Repo}}
	}
	opts := pr.Options
	if opts.Logger == nil {
		opts.Logger = d.log
	}
	res, err := pr.Client.ReviewPullRequest(ctx, review.Request{Owner: pr.Owner, Repo: pr.Repo, Number: info.Number, Fetch: fetch,
		Options: opts, TempDir: tmp})
	if err != nil {
		return nil, err
	}
	pub := &PublishedReview{Commit: res.PullRequest.HeadSHA, Number: info.Number, URL: info.URL, Created: created,
		ReviewID: res.ReviewID, Event: res.Event, Verdict: res.Review.Event, Dismissed: res.Dismissed, Time: d.now().UTC()}
	if pub.Commit == pushed.Commit {
		pub.Tag = pushed.Tag
	}
	return pub, nil
}
