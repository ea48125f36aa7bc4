package review

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-github/v60/github"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// Request is one review of a pull request.
type Request struct {
	Owner, Repo string
	Number      int
	// Fetch reads the base and head versions (nil = the contents API).
	Fetch   Fetcher
	Options Options
	// DryRun builds the review but posts nothing (the pull request and its
	// files are still read).
	DryRun bool
	// TempDir holds the fetched versions while the review is built
	// ("" = os.TempDir()); they are removed afterwards.
	TempDir string
}

// Result is the outcome of ReviewPullRequest.
type Result struct {
	PullRequest *PullRequestInfo
	Review      *Review
	// ReviewID is the review created or updated (0 in a dry run).
	ReviewID int64
	// Event is the event actually posted (COMMENT when GitHub refused
	// Review.Event, see Post); "" in a dry run.
	Event string
	// Updated is set when an existing review for the same head was
	// updated instead of a new one created.
	Updated bool
	// CommentsPosted counts new line comments; CommentsKept counts those
	// already on the pull request from an earlier run.
	CommentsPosted, CommentsKept int
}

// IsWTXT reports whether a repository path is a WTXT snapshot the review
// covers.
func IsWTXT(p string) bool { return strings.HasSuffix(p, ".wtxt") }

// ReviewPullRequest reads a pull request, fetches the base and head
// version of every changed *.wtxt file, builds the review and (unless
// DryRun) posts it, updating the review an earlier run left for the same
// head.
func (c *Client) ReviewPullRequest(ctx context.Context, req Request) (*Result, error) {
	pr, err := c.PullRequest(ctx, req.Owner, req.Repo, req.Number)
	if err != nil {
		return nil, err
	}
	files, err := c.PullRequestFiles(ctx, req.Owner, req.Repo, req.Number)
	if err != nil {
		return nil, err
	}
	fetch := req.Fetch
	if fetch == nil {
		fetch = ContentsFetcher{Client: c, Owner: req.Owner, Repo: req.Repo}
	}
	dir, err := os.MkdirTemp(req.TempDir, "snapd-review-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var inputs []FileInput
	for i, f := range files {
		name, old := f.GetFilename(), f.GetPreviousFilename()
		if !IsWTXT(name) && !IsWTXT(old) {
			continue
		}
		in, err := fetchInput(ctx, fetch, dir, i, pr, f)
		if err != nil {
			return nil, err
		}
		inputs = append(inputs, in)
	}
	opts := req.Options
	opts.HeadSHA = pr.HeadSHA
	rv, err := Build(ctx, inputs, opts)
	if err != nil {
		return nil, err
	}
	res := &Result{PullRequest: pr, Review: rv}
	if req.DryRun {
		return res, nil
	}
	if err := c.Post(ctx, req.Owner, req.Repo, req.Number, rv, res); err != nil {
		return res, err
	}
	return res, nil
}

func fetchInput(ctx context.Context, fetch Fetcher, dir string, i int, pr *PullRequestInfo, f *github.CommitFile) (FileInput, error) {
	name, old := f.GetFilename(), f.GetPreviousFilename()
	basePath := name
	if old != "" {
		basePath = old
	}
	in := FileInput{Path: name, Patch: f.GetPatch(), HasPatch: f.GetPatch() != ""}
	if old != "" && old != name {
		in.OldPath = old
	}
	if !IsWTXT(name) {
		// Renamed away from .wtxt: review it as removed.
		in.Path, in.OldPath, in.HasPatch = old, "", false
	}
	get := func(sha, p, local string) (string, error) {
		err := fetchTo(ctx, fetch, sha, p, local)
		if errors.Is(err, ErrNotFound) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return local, nil
	}
	var err error
	status := f.GetStatus()
	if status != "added" && IsWTXT(basePath) {
		if in.Base, err = get(pr.BaseSHA, basePath, filepath.Join(dir, fmt.Sprintf("%d.base.wtxt", i))); err != nil {
			return in, err
		}
		if in.Base != "" && pending(in.Base) {
			if in.BaseWSUM, err = get(pr.BaseSHA, wsumPath(basePath), filepath.Join(dir, fmt.Sprintf("%d.base.wsum", i))); err != nil {
				return in, err
			}
		}
	}
	if status != "removed" && IsWTXT(name) {
		if in.Head, err = get(pr.HeadSHA, name, filepath.Join(dir, fmt.Sprintf("%d.head.wtxt", i))); err != nil {
			return in, err
		}
		if in.Head != "" && pending(in.Head) {
			if in.HeadWSUM, err = get(pr.HeadSHA, wsumPath(name), filepath.Join(dir, fmt.Sprintf("%d.head.wsum", i))); err != nil {
				return in, err
			}
		}
	}
	if in.Base == "" && in.Head == "" {
		return in, fmt.Errorf("review: %s: found at neither the base %s nor the head %s", name, pr.BaseSHA, pr.HeadSHA)
	}
	return in, nil
}

// wsumPath is the WSUM beside a streamed WTXT (x.wtxt → x.wsum).
func wsumPath(p string) string { return strings.TrimSuffix(p, path.Ext(p)) + ".wsum" }

func pending(local string) bool {
	f, err := os.Open(local)
	if err != nil {
		return false
	}
	defer f.Close()
	h, err := wtxt.ReadHeader(f)
	return err == nil && h.Pending
}

func fetchTo(ctx context.Context, fetch Fetcher, sha, p, local string) error {
	out, err := os.Create(local)
	if err != nil {
		return err
	}
	ferr := fetch.Fetch(ctx, sha, p, out)
	cerr := out.Close()
	if ferr != nil {
		os.Remove(local)
		return ferr
	}
	return cerr
}

// reviewState maps an event to the state GitHub reports for it.
func reviewState(event string) string {
	switch event {
	case EventApprove:
		return "APPROVED"
	case EventRequestChanges:
		return "CHANGES_REQUESTED"
	}
	return "COMMENTED"
}

// Post publishes rv on the pull request. A review whose body starts with
// the marker for rv.HeadSHA is updated in place when its state matches
// rv.Event (GitHub cannot change a submitted review's state); otherwise a
// new review is created and the old one's body replaced by a short
// "superseded" note. Line comments whose marker is already on the pull
// request are not posted again. If GitHub rejects the comments of a new
// review (422: a line outside the diff), the review is posted again with
// every comment folded into the body. res (may be nil) receives counts.
func (c *Client) Post(ctx context.Context, owner, repo string, number int, rv *Review, res *Result) error {
	if res == nil {
		res = &Result{}
	}
	marker := ReviewMarker(rv.HeadSHA)
	var existing *github.PullRequestReview
	opt := &github.ListOptions{PerPage: 100}
	for {
		rs, resp, err := c.gh.PullRequests.ListReviews(ctx, owner, repo, number, opt)
		if err != nil {
			return fmt.Errorf("github: list reviews of #%d: %w", number, err)
		}
		for _, r := range rs {
			if strings.HasPrefix(strings.TrimSpace(r.GetBody()), marker) {
				existing = r // the latest one wins
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opt.Page = resp.NextPage
	}
	have := map[string]bool{}
	copt := &github.PullRequestListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		cs, resp, err := c.gh.PullRequests.ListComments(ctx, owner, repo, number, copt)
		if err != nil {
			return fmt.Errorf("github: list review comments of #%d: %w", number, err)
		}
		for _, cm := range cs {
			first, _, _ := strings.Cut(strings.TrimSpace(cm.GetBody()), "\n")
			if strings.HasPrefix(first, "<!-- snapd-review-comment ") {
				have[first] = true
			}
		}
		if resp.NextPage == 0 {
			break
		}
		copt.Page = resp.NextPage
	}
	var fresh []Comment
	for _, cm := range rv.Comments {
		if have[cm.Marker] {
			res.CommentsKept++
			continue
		}
		fresh = append(fresh, cm)
	}

	if existing != nil && (existing.GetState() == reviewState(rv.Event) ||
		existing.GetState() == reviewState(EventComment) && strings.Contains(existing.GetBody(), downgradedMarker)) {
		body := rv.Body
		res.Event = rv.Event
		if existing.GetState() != reviewState(rv.Event) {
			body, res.Event = downgradeNote(rv), EventComment
		}
		r, _, err := c.gh.PullRequests.UpdateReview(ctx, owner, repo, number, existing.GetID(), body)
		if err != nil {
			return fmt.Errorf("github: update review %d on #%d: %w", existing.GetID(), number, err)
		}
		res.ReviewID, res.Updated = r.GetID(), true
		c.log.Debug("review updated", "review", r.GetID(), "new_comments", len(fresh))
		var rejected []Comment
		for i, cm := range fresh {
			if i > 0 {
				// GitHub asks for a pause between content-creating requests
				// (secondary rate limits).
				if err := c.policy.Sleep(ctx, commentPause); err != nil {
					return err
				}
			}
			_, _, err := c.gh.PullRequests.CreateComment(ctx, owner, repo, number, &github.PullRequestComment{
				CommitID: github.String(rv.HeadSHA), Path: github.String(cm.Path), Line: github.Int(cm.Line),
				Side: github.String("RIGHT"), Body: github.String(cm.Body)})
			var er *github.ErrorResponse
			if errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusUnprocessableEntity {
				c.log.Warn("github rejected a line comment; folding it into the review body", "path", cm.Path, "line", cm.Line, "err", err.Error())
				rejected = append(rejected, cm)
				continue
			}
			if err != nil {
				return fmt.Errorf("github: comment on %s line %d of #%d: %w", cm.Path, cm.Line, number, err)
			}
			res.CommentsPosted++
		}
		if len(rejected) > 0 {
			rv.unanchor(rejected)
			body := rv.Body
			if res.Event != rv.Event {
				body = downgradeNote(rv)
			}
			if _, _, err := c.gh.PullRequests.UpdateReview(ctx, owner, repo, number, existing.GetID(), body); err != nil {
				return fmt.Errorf("github: update review %d on #%d: %w", existing.GetID(), number, err)
			}
		}
		return nil
	}

	event, body := rv.Event, rv.Body
	req := &github.PullRequestReviewRequest{CommitID: github.String(rv.HeadSHA), Body: github.String(body), Event: github.String(event)}
	for _, cm := range fresh {
		req.Comments = append(req.Comments, &github.DraftReviewComment{Path: github.String(cm.Path),
			Line: github.Int(cm.Line), Side: github.String("RIGHT"), Body: github.String(cm.Body)})
	}
	var r *github.PullRequestReview
	for {
		var err error
		r, _, err = c.gh.PullRequests.CreateReview(ctx, owner, repo, number, req)
		var er *github.ErrorResponse
		if err == nil || !errors.As(err, &er) || er.Response == nil || er.Response.StatusCode != http.StatusUnprocessableEntity {
			if err != nil {
				return fmt.Errorf("github: create review on #%d: %w", number, err)
			}
			break
		}
		own := strings.Contains(strings.ToLower(err.Error()), "own pull request")
		switch {
		case len(req.Comments) > 0 && !(own && event != EventComment):
			// A line GitHub does not accept: fold every comment.
			c.log.Warn("github rejected the line comments; folding them into the review body", "err", err.Error())
			rv.foldAll()
			req.Body, req.Comments, fresh = github.String(rv.Body), nil, nil
		case event != EventComment:
			// GitHub refuses approving or requesting changes on one's own
			// pull request (the daemon's App opened it): post the verdict
			// as a comment, marked so re-runs find and update it.
			c.log.Warn("github refused the review event; posting it as COMMENT", "event", event, "err", err.Error())
			event = EventComment
			req.Event = github.String(event)
			req.Body = github.String(downgradeNote(rv))
		default:
			return fmt.Errorf("github: create review on #%d: %w", number, err)
		}
	}
	res.Event = event
	res.ReviewID, res.CommentsPosted = r.GetID(), len(fresh)
	c.log.Debug("review created", "review", r.GetID(), "event", rv.Event, "comments", len(fresh))
	if existing != nil {
		note := fmt.Sprintf("<!-- snapd-review superseded head=%s -->\nSuperseded by a newer snapd review of the same commit (%s).", rv.HeadSHA, strings.ToLower(reviewState(rv.Event)))
		if _, _, err := c.gh.PullRequests.UpdateReview(ctx, owner, repo, number, existing.GetID(), note); err != nil {
			return fmt.Errorf("github: mark review %d superseded: %w", existing.GetID(), err)
		}
	}
	return nil
}

// commentPause separates single comment POSTs.
const commentPause = time.Second

// downgradedMarker tags a review whose event GitHub refused.
const downgradedMarker = "<!-- snapd-review downgraded -->"

// downgradeNote is rv's body for a review that had to be posted as
// COMMENT: the marker line stays first.
func downgradeNote(rv *Review) string {
	marker := ReviewMarker(rv.HeadSHA)
	rest := strings.TrimPrefix(rv.Body, marker+"\n")
	return marker + "\n" + downgradedMarker + "\n> GitHub does not let this account " + strings.ToLower(strings.ReplaceAll(rv.Event, "_", " ")) +
		" on this pull request (it is its own), so the verdict **" + rv.Event + "** is posted as a comment.\n\n" + rest
}

// unanchor folds the given comments into the body.
func (rv *Review) unanchor(cs []Comment) {
	drop := map[string]bool{}
	for _, cm := range cs {
		drop[cm.Marker] = true
	}
	for _, f := range rv.Files {
		for i := range f.Chunks {
			c := &f.Chunks[i]
			if c.Anchored && drop[commentMarker(rv.HeadSHA, f.Path, c.Array, c.Chunk)] {
				c.Anchored = false
			}
		}
	}
	kept := rv.Comments[:0:0]
	for _, cm := range rv.Comments {
		if !drop[cm.Marker] {
			kept = append(kept, cm)
		}
	}
	rv.Comments = kept
	rv.Body = renderBody(rv, rv.opts)
}

// foldAll moves every line comment into the body.
func (rv *Review) foldAll() {
	for _, f := range rv.Files {
		for i := range f.Chunks {
			f.Chunks[i].Anchored = false
		}
	}
	rv.Comments = nil
	rv.Body = renderBody(rv, rv.opts)
}

// PublishRequest opens (or updates) a pull request from a branch and
// reviews it: the daemon's entry point after pushing a generation.
type PublishRequest struct {
	Owner, Repo string
	// Head is the branch holding the new generation; Base the branch it
	// should be merged into.
	Head, Base  string
	Title, Body string
	Fetch       Fetcher // nil = the contents API
	Options     Options
	TempDir     string
}

// Publish ensures the pull request Head → Base exists (creating it or
// updating its title and body) and posts the review of its head commit.
func (c *Client) Publish(ctx context.Context, p PublishRequest) (*Result, error) {
	pr, created, err := c.EnsurePullRequest(ctx, p.Owner, p.Repo, p.Head, p.Base, p.Title, p.Body)
	if err != nil {
		return nil, err
	}
	c.log.Debug("publish", "pull", pr.Number, "created", created)
	return c.ReviewPullRequest(ctx, Request{Owner: p.Owner, Repo: p.Repo, Number: pr.Number, Fetch: p.Fetch, Options: p.Options, TempDir: p.TempDir})
}

// WriteDryRun prints a review as `snapd review --dry-run` does: the event,
// the Markdown body, then one line per comment with path, line, legacy
// position and body.
func (rv *Review) WriteDryRun(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "event: %s\n\n%s\n", rv.Event, rv.Body)
	fmt.Fprintf(&b, "--- %d line comment(s) (side RIGHT) ---\n", len(rv.Comments))
	for _, cm := range rv.Comments {
		body := strings.TrimPrefix(cm.Body, cm.Marker+"\n")
		fmt.Fprintf(&b, "%s line=%d position=%d: %s\n", cm.Path, cm.Line, cm.Position, body)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
