package review

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/google/go-github/v60/github"
)

// DefaultAPIURL is GitHub.com's REST API root.
const DefaultAPIURL = "https://api.github.com/"

// ClientOptions configure a Client. Exactly one of Token and App is set
// (neither is allowed for read-only use against public repositories).
type ClientOptions struct {
	// APIURL is the REST API root ("" = DefaultAPIURL); for GitHub
	// Enterprise Server it is https://HOST/api/v3/ (what Actions exports as
	// GITHUB_API_URL). It is used as given, no path is appended.
	APIURL string
	Token  TokenSource
	App    *AppConfig
	// HTTPClient supplies the underlying transport (nil: one with
	// Timeouts' dial, TLS and response-header limits) and, through its
	// Timeout, the per-attempt overall limit (0: Timeouts.Attempt).
	HTTPClient *http.Client
	// Timeouts bound every request (zero fields take the defaults).
	Timeouts Timeouts
	Retry    RetryPolicy
	// Logger receives debug/warn messages; tokens and headers are never
	// logged (nil = discard).
	Logger    *slog.Logger
	UserAgent string
	// Login is the account the credentials act as, when the caller knows
	// it better than GitHub says (GitHub Actions' GITHUB_TOKEN is
	// "github-actions[bot]" and may not call GET /user). "" = ask GitHub
	// (GET /user for a token, GET /app for an App: "<slug>[bot]").
	Login string
}

// Client talks to the GitHub REST API through go-github with
// authorization, rate-limit handling and logging in its transport.
type Client struct {
	gh     *github.Client
	appGH  *github.Client // authorized with the App's JWT (nil for a token)
	log    *slog.Logger
	policy RetryPolicy

	mu         sync.Mutex
	login      string
	loginKnown bool
}

// NewClient builds a Client. With App set, installation tokens are minted
// on first use (and renewed before they expire).
func NewClient(opts ClientOptions) (*Client, error) {
	if opts.Token != nil && opts.App != nil {
		return nil, errors.New("github: both a token and an App configured")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	api := opts.APIURL
	if api == "" {
		api = DefaultAPIURL
	}
	if !strings.HasSuffix(api, "/") {
		api += "/"
	}
	u, err := url.Parse(api)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("github: API URL %q: want an absolute http(s) URL", opts.APIURL)
	}
	to := opts.Timeouts.withDefaults()
	var base http.RoundTripper
	if opts.HTTPClient != nil {
		if opts.HTTPClient.Timeout > 0 {
			to.Attempt = opts.HTTPClient.Timeout
		}
		base = opts.HTTPClient.Transport
	}
	if base == nil {
		base = to.transport()
	}
	base = attemptTimeout{base: base, d: to.Attempt}
	policy := opts.Retry.withDefaults()
	newGH := func(auth TokenSource) *github.Client {
		t := &transport{base: base, host: u.Host, policy: policy, log: log}
		if auth != nil {
			t.authorize = auth.Authorization
			if inv, ok := auth.(Invalidator); ok {
				t.invalidate = inv.Invalidate
			}
		}
		// No http.Client.Timeout: it would also cut the transport's
		// rate-limit waits; attemptTimeout bounds each attempt instead.
		hc := &http.Client{Transport: t}
		c := github.NewClient(hc)
		c.BaseURL = u
		c.UploadURL = u
		if opts.UserAgent != "" {
			c.UserAgent = opts.UserAgent
		}
		return c
	}
	auth := opts.Token
	if opts.App != nil {
		if opts.App.AppID == "" || opts.App.InstallationID <= 0 {
			return nil, errors.New("github app: an App ID and an installation ID are required")
		}
		key, err := parseAppKey(opts.App.PrivateKeyPEM)
		if err != nil {
			return nil, err
		}
		a := &appTokenSource{cfg: *opts.App, key: key, now: policy.Now}
		a.gh = newGH(jwtAuth{a})
		auth = a
		c := &Client{gh: newGH(auth), appGH: a.gh, log: log, policy: policy}
		c.login, c.loginKnown = opts.Login, opts.Login != ""
		return c, nil
	}
	c := &Client{gh: newGH(auth), log: log, policy: policy}
	c.login, c.loginKnown = opts.Login, opts.Login != ""
	return c, nil
}

// Login returns the account the client acts as (see ClientOptions.Login):
// the App's "<slug>[bot]", or the token's user. It is "" when GitHub does
// not say (GET /user answers 403 to integration tokens); such a client
// edits, dismisses and deletes no review, it only creates them. The
// answer is cached.
func (c *Client) Login(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loginKnown {
		return c.login, nil
	}
	if c.appGH != nil {
		app, _, err := c.appGH.Apps.Get(ctx, "")
		if err != nil {
			return "", fmt.Errorf("github app: who am I (GET /app): %w", err)
		}
		if app.GetSlug() == "" {
			return "", errors.New("github app: GET /app names no slug")
		}
		c.login, c.loginKnown = app.GetSlug()+"[bot]", true
		return c.login, nil
	}
	u, resp, err := c.gh.Users.Get(ctx, "")
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusForbidden {
			c.log.Warn("github: GET /user refused (an integration token?); reviews of earlier runs cannot be recognised as this account's and will not be edited or dismissed")
			c.loginKnown = true
			return "", nil
		}
		return "", fmt.Errorf("github: who am I (GET /user): %w", err)
	}
	c.login, c.loginKnown = u.GetLogin(), true
	return c.login, nil
}

// GitHub returns the underlying go-github client (authorized, rate-limit
// aware) for callers that need other endpoints.
func (c *Client) GitHub() *github.Client { return c.gh }

// PullRequestInfo is what a review needs to know about a pull request.
type PullRequestInfo struct {
	Number           int
	HeadSHA, BaseSHA string
	HeadRef, BaseRef string
	URL              string
}

// PullRequest fetches a pull request's head and base commits.
func (c *Client) PullRequest(ctx context.Context, owner, repo string, number int) (*PullRequestInfo, error) {
	pr, _, err := c.gh.PullRequests.Get(ctx, owner, repo, number)
	if err != nil {
		return nil, fmt.Errorf("github: get pull request %s/%s#%d: %w", owner, repo, number, err)
	}
	info := &PullRequestInfo{Number: pr.GetNumber(), HeadSHA: pr.GetHead().GetSHA(), BaseSHA: pr.GetBase().GetSHA(),
		HeadRef: pr.GetHead().GetRef(), BaseRef: pr.GetBase().GetRef(), URL: pr.GetHTMLURL()}
	if info.HeadSHA == "" || info.BaseSHA == "" {
		return nil, fmt.Errorf("github: pull request %s/%s#%d: response lacks head or base sha", owner, repo, number)
	}
	return info, nil
}

// maxPRFiles is GitHub's cap on the files endpoint (3000 files).
const maxPRFiles = 3000

// PullRequestFiles lists a pull request's changed files (all pages).
func (c *Client) PullRequestFiles(ctx context.Context, owner, repo string, number int) ([]*github.CommitFile, error) {
	var all []*github.CommitFile
	opt := &github.ListOptions{PerPage: 100}
	for {
		fs, resp, err := c.gh.PullRequests.ListFiles(ctx, owner, repo, number, opt)
		if err != nil {
			return nil, fmt.Errorf("github: list files of %s/%s#%d: %w", owner, repo, number, err)
		}
		all = append(all, fs...)
		if resp.NextPage == 0 || len(all) >= maxPRFiles {
			return all, nil
		}
		opt.Page = resp.NextPage
	}
}

// EnsurePullRequest finds the open pull request from head to base (head
// is a branch of owner/repo) and updates its title and body when they
// differ, or creates it. It returns the pull request and whether it was
// created.
func (c *Client) EnsurePullRequest(ctx context.Context, owner, repo, head, base, title, body string) (*PullRequestInfo, bool, error) {
	prs, _, err := c.gh.PullRequests.List(ctx, owner, repo, &github.PullRequestListOptions{
		State: "open", Head: owner + ":" + head, Base: base, ListOptions: github.ListOptions{PerPage: 10}})
	if err != nil {
		return nil, false, fmt.Errorf("github: list pull requests %s -> %s: %w", head, base, err)
	}
	for _, pr := range prs {
		if pr.GetHead().GetRef() != head || pr.GetBase().GetRef() != base {
			continue
		}
		if pr.GetTitle() != title || pr.GetBody() != body {
			pr, _, err = c.gh.PullRequests.Edit(ctx, owner, repo, pr.GetNumber(), &github.PullRequest{Title: &title, Body: &body})
			if err != nil {
				return nil, false, fmt.Errorf("github: update pull request #%d: %w", pr.GetNumber(), err)
			}
		}
		c.log.Debug("pull request exists", "number", pr.GetNumber())
		info, err := c.PullRequest(ctx, owner, repo, pr.GetNumber())
		return info, false, err
	}
	pr, _, err := c.gh.PullRequests.Create(ctx, owner, repo, &github.NewPullRequest{Title: &title, Head: &head, Base: &base, Body: &body})
	if err != nil {
		return nil, false, fmt.Errorf("github: create pull request %s -> %s: %w", head, base, err)
	}
	c.log.Debug("pull request created", "number", pr.GetNumber())
	info, err := c.PullRequest(ctx, owner, repo, pr.GetNumber())
	return info, true, err
}
