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
	"regexp"
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
	// Dismissed lists earlier snapd reviews of this account that
	// requested changes and were dismissed because this one does not.
	Dismissed []int64
	// DeletedPending lists pending reviews of this account deleted so
	// that GitHub accepts a new review.
	DeletedPending []int64
}

// IsWTXT reports whether a repository path is a WTXT snapshot the review
// covers.
func IsWTXT(p string) bool { return strings.HasSuffix(p, ".wtxt") }

// reviewed reports whether a changed path is reviewed: a WTXT or a WTXT
// skeleton (skeleton.go), or a rank skeleton (ranks.go).
func reviewed(p string) bool {
	return IsWTXT(p) || IsSkeleton(p) || IsRankSkeleton(p) || isRanksIndex(p)
}

// ReviewPullRequest reads a pull request, fetches the base and head
// version of every changed *.wtxt (and *.wtxt.skel) file, builds the review and (unless
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
		if !reviewed(name) && !reviewed(old) {
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
	if rf, ok := fetch.(ResumeFinder); ok {
		// Without history (or with a record verify-repo would fail) the
		// review says what the two files show, as before.
		rs, err := rf.Resumes(ctx, pr.BaseSHA, pr.HeadSHA)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil && opts.Logger != nil {
			opts.Logger.Debug("review: resume records not read", "error", err)
		}
		opts.Resumes = rs
	}
	opts.Pictures = append(opts.Pictures, c.pictureRefs(req.Owner, req.Repo, pr.HeadSHA, files)...)
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
	if !reviewed(name) {
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
	if status != "added" && reviewed(basePath) {
		if in.Base, err = get(pr.BaseSHA, basePath, filepath.Join(dir, fmt.Sprintf("%d.base.wtxt", i))); err != nil {
			return in, err
		}
		if in.Base != "" && pending(in.Base) {
			if in.BaseWSUM, err = get(pr.BaseSHA, wsumPath(basePath), filepath.Join(dir, fmt.Sprintf("%d.base.wsum", i))); err != nil {
				return in, err
			}
		}
	}
	if status != "removed" && reviewed(name) {
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

// Post publishes rv on the pull request as the client's account (Login).
// Only that account's reviews and comments are considered: a review
// whose body starts with the marker for rv.HeadSHA is updated in place
// when its state matches rv.Event (GitHub cannot change a submitted
// review's state); otherwise a new review is created and the old one's
// body replaced by a short "superseded" note. Line comments whose marker
// is already on the pull request are not posted again.
//
// A 422 from creating the review is classified by GitHub's message:
//
//   - "Can not approve your own pull request" / "Can not request changes
//     on your own pull request": posted as COMMENT with a note saying so;
//   - "GitHub Actions is not permitted to approve pull requests": posted
//     as COMMENT with a note naming the repository setting;
//   - "User can only have one pending review per pull request": the
//     account's pending review is deleted when it is snapd's (its marker)
//     or empty, and the review created again; another pending review is
//     an error naming it;
//   - a line comment GitHub cannot place (thread line not part of the
//     diff, path or line not resolved): the review is created without
//     line comments, which are then posted singly; only those GitHub
//     refuses are folded into the body;
//   - anything else is returned.
//
// When the verdict is not REQUEST_CHANGES, the account's earlier snapd
// reviews that request changes (an older head, or this head before) are
// dismissed, so they no longer block the pull request. res (may be nil)
// receives what was done.
func (c *Client) Post(ctx context.Context, owner, repo string, number int, rv *Review, res *Result) error {
	if res == nil {
		res = &Result{}
	}
	me, err := c.Login(ctx)
	if err != nil {
		return err
	}
	p := &poster{c: c, owner: owner, repo: repo, number: number, rv: rv, res: res, me: me}
	if err := p.list(ctx); err != nil {
		return err
	}
	var fresh []Comment
	for _, cm := range rv.Comments {
		if p.have[cm.Marker] {
			res.CommentsKept++
			continue
		}
		fresh = append(fresh, cm)
	}
	ex := p.existing
	downgraded := ex != nil && ex.GetState() == reviewState(EventComment) && strings.Contains(ex.GetBody(), downgradedPrefix) &&
		(downgradeReason(ex.GetBody()) != reasonActions || rv.Event == EventApprove)
	if ex != nil && (ex.GetState() == reviewState(rv.Event) || downgraded) {
		res.Event = rv.Event
		reason := ""
		if ex.GetState() != reviewState(rv.Event) {
			res.Event, reason = EventComment, downgradeReason(ex.GetBody())
		}
		if err := p.updateBody(ctx, ex.GetID(), reason); err != nil {
			return err
		}
		res.ReviewID, res.Updated = ex.GetID(), true
		c.log.Debug("review updated", "review", ex.GetID(), "new_comments", len(fresh))
		if err := p.postSingly(ctx, ex.GetID(), fresh, reason); err != nil {
			return err
		}
		return p.dismissSuperseded(ctx)
	}

	r, err := p.create(ctx, fresh)
	if err != nil {
		return err
	}
	res.ReviewID = r.GetID()
	c.log.Debug("review created", "review", r.GetID(), "event", res.Event, "verdict", rv.Event, "comments", res.CommentsPosted)
	if ex != nil {
		note := fmt.Sprintf("<!-- snapd-review superseded head=%s -->\nSuperseded by a newer snapd review of the same commit (%s).", rv.HeadSHA, strings.ToLower(reviewState(rv.Event)))
		if _, _, err := c.gh.PullRequests.UpdateReview(ctx, owner, repo, number, ex.GetID(), note); err != nil {
			return fmt.Errorf("github: mark review %d superseded: %w", ex.GetID(), err)
		}
	}
	return p.dismissSuperseded(ctx)
}

// poster is one Post call's state.
type poster struct {
	c                  *Client
	owner, repo        string
	number             int
	rv                 *Review
	res                *Result
	me                 string
	existing           *github.PullRequestReview   // mine, for this head
	pending            []*github.PullRequestReview // mine (GitHub shows pending reviews to their author only)
	mine               []*github.PullRequestReview
	have               map[string]bool // comment markers already posted by me
	pendingHasComments map[int64]bool
}

func (p *poster) isMine(login string) bool {
	return p.me != "" && strings.EqualFold(login, p.me)
}

// list reads the pull request's reviews and review comments (all pages).
func (p *poster) list(ctx context.Context) error {
	c, rv := p.c, p.rv
	marker := ReviewMarker(rv.HeadSHA)
	p.existing, p.pending, p.mine = nil, nil, nil
	opt := &github.ListOptions{PerPage: 100}
	for {
		rs, resp, err := c.gh.PullRequests.ListReviews(ctx, p.owner, p.repo, p.number, opt)
		if err != nil {
			return fmt.Errorf("github: list reviews of #%d: %w", p.number, err)
		}
		for _, r := range rs {
			if r.GetState() == "PENDING" {
				p.pending = append(p.pending, r)
				continue
			}
			if !p.isMine(r.GetUser().GetLogin()) {
				continue
			}
			p.mine = append(p.mine, r)
			if strings.HasPrefix(strings.TrimSpace(r.GetBody()), marker) {
				p.existing = r // the latest one wins
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opt.Page = resp.NextPage
	}
	p.have, p.pendingHasComments = map[string]bool{}, map[int64]bool{}
	copt := &github.PullRequestListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		cs, resp, err := c.gh.PullRequests.ListComments(ctx, p.owner, p.repo, p.number, copt)
		if err != nil {
			return fmt.Errorf("github: list review comments of #%d: %w", p.number, err)
		}
		for _, cm := range cs {
			p.pendingHasComments[cm.GetPullRequestReviewID()] = true
			if p.me != "" && !p.isMine(cm.GetUser().GetLogin()) {
				continue // another account's comment cannot stand for ours
			}
			first, _, _ := strings.Cut(strings.TrimSpace(cm.GetBody()), "\n")
			if strings.HasPrefix(first, "<!-- snapd-review-comment ") {
				p.have[first] = true
			}
		}
		if resp.NextPage == 0 {
			break
		}
		copt.Page = resp.NextPage
	}
	return nil
}

// updateBody sets a review's body to the review (or its downgraded form).
func (p *poster) updateBody(ctx context.Context, id int64, reason string) error {
	body := p.rv.Body
	if reason != "" {
		body = downgradeNote(p.rv, reason, p.me)
	}
	if _, _, err := p.c.gh.PullRequests.UpdateReview(ctx, p.owner, p.repo, p.number, id, body); err != nil {
		return fmt.Errorf("github: update review %d on #%d: %w", id, p.number, err)
	}
	return nil
}

// postSingly posts line comments one by one (POST /pulls/N/comments);
// those GitHub refuses are folded into the body of review id.
func (p *poster) postSingly(ctx context.Context, id int64, cs []Comment, reason string) error {
	c, rv := p.c, p.rv
	var rejected []Comment
	for i, cm := range cs {
		if i > 0 {
			// GitHub asks for a pause between content-creating requests
			// (secondary rate limits).
			if err := c.policy.Sleep(ctx, commentPause); err != nil {
				return err
			}
		}
		_, _, err := c.gh.PullRequests.CreateComment(ctx, p.owner, p.repo, p.number, &github.PullRequestComment{
			CommitID: github.String(rv.HeadSHA), Path: github.String(cm.Path), Line: github.Int(cm.Line),
			Side: github.String("RIGHT"), Body: github.String(cm.Body)})
		if is422(err) {
			c.log.Warn("github rejected a line comment; folding it into the review body", "path", cm.Path, "line", cm.Line, "err", err.Error())
			rejected = append(rejected, cm)
			continue
		}
		if err != nil {
			return fmt.Errorf("github: comment on %s line %d of #%d: %w", cm.Path, cm.Line, p.number, err)
		}
		p.res.CommentsPosted++
	}
	if len(rejected) == 0 {
		return nil
	}
	rv.unanchor(rejected)
	return p.updateBody(ctx, id, reason)
}

// create creates the review, reacting to each kind of 422 (see Post);
// res.Event says which event was posted.
func (p *poster) create(ctx context.Context, fresh []Comment) (*github.PullRequestReview, error) {
	c, rv := p.c, p.rv
	event, reason := rv.Event, ""
	single := false // line comments go singly after the review
	retriedPending := false
	if err := p.clearPending(ctx); err != nil {
		return nil, err
	}
	for {
		body := rv.Body
		if reason != "" {
			body = downgradeNote(rv, reason, p.me)
		}
		req := &github.PullRequestReviewRequest{CommitID: github.String(rv.HeadSHA), Body: github.String(body), Event: github.String(event)}
		if !single {
			for _, cm := range fresh {
				req.Comments = append(req.Comments, &github.DraftReviewComment{Path: github.String(cm.Path),
					Line: github.Int(cm.Line), Side: github.String("RIGHT"), Body: github.String(cm.Body)})
			}
		}
		r, _, err := c.gh.PullRequests.CreateReview(ctx, p.owner, p.repo, p.number, req)
		if err == nil {
			p.res.Event = event
			if single {
				if err := p.postSingly(ctx, r.GetID(), fresh, reason); err != nil {
					return nil, err
				}
			} else {
				p.res.CommentsPosted += len(fresh)
			}
			return r, nil
		}
		kind, msg := classify422(err)
		switch {
		case kind == rejectOwnPR && event != EventComment:
			c.log.Warn("github refuses this event on the account's own pull request; posting it as COMMENT", "event", event, "github", msg)
			event, reason = EventComment, reasonOwn
		case kind == rejectActions && event == EventApprove:
			c.log.Warn("github refuses approvals by GitHub Actions in this repository; posting the approval as COMMENT", "github", msg)
			event, reason = EventComment, reasonActions
		case kind == rejectPending && !retriedPending:
			retriedPending = true
			if err := p.list(ctx); err != nil {
				return nil, err
			}
			if err := p.clearPending(ctx); err != nil {
				return nil, err
			}
		case kind == rejectComments && !single && len(req.Comments) > 0:
			c.log.Warn("github could not place a line comment; creating the review without them and posting them singly", "github", msg)
			single = true
		default:
			return nil, fmt.Errorf("github: create review on #%d: %w", p.number, err)
		}
	}
}

// clearPending deletes the account's pending reviews that are snapd's
// (the review marker) or empty: GitHub refuses every new review while
// one exists. Any other pending review holds someone's unsent work and is
// an error.
func (p *poster) clearPending(ctx context.Context) error {
	for _, r := range p.pending {
		body := strings.TrimSpace(r.GetBody())
		if !strings.HasPrefix(body, "<!-- snapd-review ") && (body != "" || p.pendingHasComments[r.GetID()]) {
			return fmt.Errorf("github: this account has a pending (unsubmitted) review %d on #%d that snapd did not write; "+
				"GitHub allows one per account, so submit or delete it", r.GetID(), p.number)
		}
		if _, _, err := p.c.gh.PullRequests.DeletePendingReview(ctx, p.owner, p.repo, p.number, r.GetID()); err != nil {
			return fmt.Errorf("github: delete pending review %d on #%d: %w", r.GetID(), p.number, err)
		}
		p.c.log.Warn("github: deleted a pending review left by an interrupted run", "review", r.GetID(), "pull", p.number)
		p.res.DeletedPending = append(p.res.DeletedPending, r.GetID())
	}
	p.pending = nil
	return nil
}

// dismissSuperseded dismisses the account's earlier snapd reviews that
// request changes once the verdict for the head no longer does.
func (p *poster) dismissSuperseded(ctx context.Context) error {
	if p.rv.Event == EventRequestChanges {
		return nil
	}
	msg := fmt.Sprintf("snapd: superseded by the review of head %s, which does not request changes.", short(p.rv.HeadSHA))
	for _, r := range p.mine {
		if r.GetState() != "CHANGES_REQUESTED" || r.GetID() == p.res.ReviewID || !strings.HasPrefix(strings.TrimSpace(r.GetBody()), "<!-- snapd-review ") {
			continue
		}
		if _, _, err := p.c.gh.PullRequests.DismissReview(ctx, p.owner, p.repo, p.number, r.GetID(),
			&github.PullRequestReviewDismissalRequest{Message: github.String(msg)}); err != nil {
			return fmt.Errorf("github: dismiss superseded review %d on #%d: %w", r.GetID(), p.number, err)
		}
		p.c.log.Info("github: dismissed a superseded request for changes", "review", r.GetID(), "commit", r.GetCommitID())
		p.res.Dismissed = append(p.res.Dismissed, r.GetID())
	}
	return nil
}

// Kinds of 422 from creating a review.
const (
	rejectOther = iota
	rejectOwnPR
	rejectActions
	rejectPending
	rejectComments
)

func is422(err error) bool {
	var er *github.ErrorResponse
	return errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusUnprocessableEntity
}

// classify422 tells what GitHub refused from its messages (the top-level
// message and each entry of "errors", which GitHub sends as strings or
// objects).
func classify422(err error) (int, string) {
	var er *github.ErrorResponse
	if !errors.As(err, &er) || er.Response == nil || er.Response.StatusCode != http.StatusUnprocessableEntity {
		return rejectOther, ""
	}
	msgs := []string{er.Message}
	for _, e := range er.Errors {
		msgs = append(msgs, e.Message, e.Field)
	}
	all := strings.ToLower(strings.Join(msgs, " | "))
	switch {
	case strings.Contains(all, "your own pull request"):
		return rejectOwnPR, all
	case strings.Contains(all, "github actions is not permitted to approve"):
		return rejectActions, all
	case strings.Contains(all, "one pending review"):
		return rejectPending, all
	case strings.Contains(all, "review thread") || strings.Contains(all, "review_thread") || strings.Contains(all, "part of the diff") ||
		strings.Contains(all, "could not be resolved") || strings.Contains(all, "diff hunk"):
		return rejectComments, all
	}
	return rejectOther, all
}

// commentPause separates single comment POSTs.
const commentPause = time.Second

// downgradedPrefix tags a review whose event GitHub refused; the full
// marker names the reason: <!-- snapd-review downgraded reason=R -->.
const downgradedPrefix = "<!-- snapd-review downgraded"

// Reasons a verdict is posted as COMMENT.
const (
	reasonOwn     = "own"     // the account opened the pull request
	reasonActions = "actions" // GitHub Actions may not approve here
)

var reReason = regexp.MustCompile(`<!-- snapd-review downgraded(?: reason=([a-z]+))? -->`)

// downgradeReason reads the reason from a downgraded review's body.
func downgradeReason(body string) string {
	m := reReason.FindStringSubmatch(body)
	if m == nil || m[1] == "" {
		return reasonOwn
	}
	return m[1]
}

// downgradeNote is rv's body for a review that had to be posted as
// COMMENT, saying truthfully why: the marker line stays first.
func downgradeNote(rv *Review, reason, login string) string {
	marker := ReviewMarker(rv.HeadSHA)
	rest := strings.TrimPrefix(rv.Body, marker+"\n")
	verb := strings.ToLower(strings.ReplaceAll(rv.Event, "_", " "))
	who := "this account"
	if login != "" {
		who = "`" + login + "`"
	}
	var why string
	switch reason {
	case reasonActions:
		why = "GitHub Actions is not permitted to approve pull requests in this repository (Settings → Actions → General → " +
			"\"Allow GitHub Actions to create and approve pull requests\")"
	default:
		why = "GitHub does not let " + who + " " + verb + " on this pull request: the account opened it"
	}
	return marker + "\n" + downgradedPrefix + " reason=" + reason + " -->\n> " + why +
		", so the verdict **" + rv.Event + "** is posted as a comment.\n\n" + rest
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
