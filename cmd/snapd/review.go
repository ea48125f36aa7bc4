package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/gitops/review"
	"github.com/snapd-ml/snapd/keys"
)

type reviewOptions struct {
	repo           string
	pr             int
	workdir        string
	apiURL         string
	tokenFile      string
	tokenEnv       string
	appID          string
	appKey         string
	installationID int64
	trustFlags
	maxRelL2       []string // NUMBER or PATTERN=NUMBER, repeatable
	maxAbsDelta    []string
	allowNonFinite []string // "*" (bare flag) or patterns
	include        []string
	exclude        []string
	approve        bool
	maxComments    int
	dryRun         bool
	base, head     string
	path           string
	debug          bool
	timeout        time.Duration
	oci            ociReadFlags

	// retry is the rate-limit policy (tests inject a clock).
	retry review.RetryPolicy
	// httpClient overrides the transport (tests).
	httpClient *http.Client
}

func newReviewCommand(e *env) *cobra.Command {
	var o reviewOptions
	cmd := &cobra.Command{
		Use:   "review --repo OWNER/NAME --pr N",
		Short: "Post a GitHub pull-request review saying which rows of which arrays changed",
		Long: `Review a pull request that changes WTXT snapshots. For every changed *.wtxt file,
the base version (at the pull request's base commit) and the head version are
read from the local git checkout (--workdir; git cat-file) or, when the
checkout lacks the commits, through the GitHub contents API. The head version
is verified (wtxt.Verify with --pubkey, --hmac-key, and the chain against the
base version's merkle_this) and compared with the base (snapshot.Diff).

The review has a summary body (verification, chain, per-array table) and line
comments on the ` + "`ch`" + ` lines of changed chunks in the pull request's diff
(row ranges, changed elements, max/mean |Δ|, rel L2, new NaN/Inf). Changes
that cannot be anchored (diff too large for GitHub, or over --max-comments)
are listed in the body. Event: REQUEST_CHANGES when a check fails or a
threshold trips, APPROVE with --approve when everything passes, otherwise
COMMENT.

Scope of the thresholds (--max-rel-l2, --max-abs-delta, the NaN/Inf rule):
a bare number is the default limit for every array; PATTERN=NUMBER sets the
limit of the arrays PATTERN matches (repeatable; 0 lifts it). --exclude
PATTERN leaves arrays out (they are listed as excluded, never judged);
--include PATTERN judges only the arrays some include matches. Patterns are
path.Match globs over whole array names: a dot is a plain character, '*'
matches anything but '/', ? one character, [a-z] a class. Where several
patterns match an array, the longest (most specific) wins; on equal length
the later one, and an exclude over an include. Counters (integer and bool
dtypes, rank-0 arrays such as torch's optimizer step) and RNG state (names
containing "rng" or "random_state", u8 arrays named cpu or cuda*) are shown
with their numbers but not judged, unless an include or limit pattern names
them: it matches and its last dot-separated part has no '*'
('optimizer.state.*.step' does, 'model.*' does not). The review says what was
not thresholded ("Not thresholded: 3 counters, 1 RNG state, 12 excluded").

Re-running on the same head commit updates the earlier review and
does not repeat its line comments.

Credentials: a GitHub App (--app-id, --app-key, --installation-id; the
installation token is requested with contents:read and pull_requests:write
for --repo only), else --token-file, else the environment variable
--token-env (GITHUB_TOKEN). Tokens are never printed or logged.

--dry-run prints the review (Markdown, then the line comments with path,
line and diff position) and posts nothing. With --base FILE --head FILE it
needs no pull request and no network: positions come from
` + "`git diff --no-index`" + ` of the two files.

Skeleton layout (*.wtxt.skel; tensor bytes in an OCI registry, docs/FORMAT.md
§6): without --oci-repository a skeleton is reviewed from its lines: the
changed chunks (every ch line carries its chunk's sha256) with their rows,
per array, and the header (signature by a trusted key, merkle_this, chain);
a note says that the element numbers and thresholds need the registry. With
--oci-repository (read only) both versions are assembled from the registry,
every chunk hash and blob digest checked, and reviewed in full; comments
stay on the skeleton's ch lines. A version whose content retention
collected (snapd gc --remote, then the registry's garbage collection: a
blob and its generation's manifest are gone) is reviewed from the
skeletons, the head verified in full when its content is there, the
metadata compared where its document survives; the review says per
array that that generation's rows cannot be compared and is a COMMENT.

Multi-rank generations (snapshots/ranks/, docs/FORMAT.md §7): index.ranks is
checked as ` + "`snapd ranks verify-repo`" + ` checks it (grammar and root, signature
by a trusted key, merkle_prev = the base index's merkle_this, same chain id,
each changed rank-NNNNN.skel against its index line); each rank skeleton is
reviewed like a skeleton (its merkle_prev must be the base rank part's, the
job's chain id), with comments on its changed ch lines.

Exit status: 0 review posted (or printed) and not requesting changes,
1 the review requests changes, 2 usage, I/O or GitHub API error.`,
		Example: `  snapd review --repo acme/weights --pr 42 --pubkey keys/sign_ed25519.pub --max-rel-l2 0.05
  snapd review --repo acme/weights --pr 42 --max-rel-l2 'model.*=0.05' --exclude 'optimizer.*'
  snapd review --repo acme/weights --pr 42 --app-id 12345 --app-key app.pem --installation-id 678
  snapd review --dry-run --base old/current.wtxt --head new/current.wtxt --pubkey keys/sign_ed25519.pub`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usageError{fmt.Errorf("review takes no arguments, got %q", args)}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReview(cmd.Context(), e, &o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", "", "repository OWNER/NAME (default $GITHUB_REPOSITORY)")
	f.IntVar(&o.pr, "pr", 0, "pull request number")
	f.StringVar(&o.workdir, "workdir", ".", "local git checkout to read the base and head versions from")
	f.StringVar(&o.apiURL, "api-url", "", "GitHub REST API root, e.g. https://ghe.example.com/api/v3 (default $GITHUB_API_URL or "+review.DefaultAPIURL+")")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding a GitHub token")
	f.StringVar(&o.tokenEnv, "token-env", "GITHUB_TOKEN", "environment variable holding a GitHub token")
	f.StringVar(&o.appID, "app-id", "", "GitHub App ID (or client ID): authenticate as the App installation")
	f.StringVar(&o.appKey, "app-key", "", "GitHub App private key (PEM file)")
	f.Int64Var(&o.installationID, "installation-id", 0, "GitHub App installation ID")
	o.trustFlags.register(f)
	f.StringArrayVar(&o.maxRelL2, "max-rel-l2", nil, "request changes when an array's relative L2 change exceeds this: `NUMBER` for every array, or PATTERN=NUMBER for the arrays PATTERN matches (repeatable; 0 = no limit)")
	f.StringArrayVar(&o.maxAbsDelta, "max-abs-delta", nil, "request changes when an array's max |Δ| exceeds this: `NUMBER`, or PATTERN=NUMBER (repeatable; 0 = no limit)")
	f.StringArrayVar(&o.allowNonFinite, "allow-nonfinite", nil, "do not request changes for newly introduced NaN/Inf; =`PATTERN` only in the arrays it matches (repeatable)")
	f.Lookup("allow-nonfinite").NoOptDefVal = "*"
	f.StringArrayVar(&o.include, "include", nil, "judge only the arrays this glob matches by the thresholds (repeatable)")
	f.StringArrayVar(&o.exclude, "exclude", nil, "never judge the arrays this glob matches by the thresholds; they are listed as excluded (repeatable)")
	f.BoolVar(&o.approve, "approve", false, "APPROVE when every check passes (default: COMMENT)")
	f.IntVar(&o.maxComments, "max-comments", review.DefaultMaxComments, "most line comments per review; the rest go into the body (0 = none)")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the review instead of posting it")
	f.StringVar(&o.base, "base", "", "with --dry-run: local base version (instead of --repo/--pr)")
	f.StringVar(&o.head, "head", "", "with --dry-run: local head version (instead of --repo/--pr)")
	f.StringVar(&o.path, "path", "", "with --base/--head: the path shown in the review (default: --head)")
	f.BoolVar(&o.debug, "debug", false, "log every API request (method, path, status; never credentials) to stderr")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "HTTP timeout of one API request attempt, body included (connect, TLS and response headers have their own shorter limits)")
	o.oci.register(f)
	cmd.MarkFlagsRequiredTogether("base", "head")
	cmd.MarkFlagsRequiredTogether("app-id", "app-key", "installation-id")
	cmd.MarkFlagsMutuallyExclusive("app-id", "token-file")
	return cmd
}

// errReviewRequestsChanges makes `snapd review` exit 1 after a review that
// requests changes was posted or printed.
type errReviewRequestsChanges struct{}

func (errReviewRequestsChanges) Error() string { return "the review requests changes" }

func runReview(ctx context.Context, e *env, o *reviewOptions) error {
	local := o.base != "" || o.head != ""
	switch {
	case local && !o.dryRun:
		return usageError{errors.New("--base/--head need --dry-run (a local review is never posted)")}
	case local && (o.repo != "" || o.pr != 0):
		return usageError{errors.New("--base/--head exclude --repo/--pr")}
	case !local && o.pr <= 0:
		return usageError{errors.New("--pr N is required (or --dry-run --base FILE --head FILE)")}
	}
	th, err := o.thresholds()
	if err != nil {
		return err
	}
	logger := e.logger
	if o.debug {
		logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	opts := review.Options{RequireSignature: o.requireSig, AllowUnsigned: o.allowUnsigned, Approve: o.approve, MaxComments: o.maxComments, Logger: logger,
		Thresholds: th}
	if o.maxComments == 0 {
		opts.MaxComments = -1
	}
	if opts.TrustedKeys, err = loadFileSigners(o.pubkeys, o.head); err != nil {
		return err
	}
	if o.hmacKey != "" {
		if opts.HMACKey, err = keys.LoadHMACKey(o.hmacKey); err != nil {
			return keyError(err)
		}
	}
	if o.oci.repository != "" {
		reg, err := o.oci.open(e)
		if err != nil {
			return err
		}
		opts.Registry = reg
	}
	if local {
		return reviewLocal(ctx, e, o, opts)
	}

	if o.repo == "" {
		o.repo = e.getenv("GITHUB_REPOSITORY")
	}
	owner, name, ok := strings.Cut(o.repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return usageError{fmt.Errorf("--repo %q: want OWNER/NAME", o.repo)}
	}
	copts := review.ClientOptions{APIURL: o.apiURL, Retry: o.retry, Logger: logger, UserAgent: "snapd/" + version,
		HTTPClient: o.httpClient}
	if copts.APIURL == "" {
		copts.APIURL = e.getenv("GITHUB_API_URL")
	}
	copts.Timeouts.Attempt = o.timeout
	if o.tokenFile == "" && o.appID == "" && o.tokenEnv == "GITHUB_TOKEN" && e.getenv("GITHUB_ACTIONS") == "true" {
		// Actions' GITHUB_TOKEN acts as github-actions[bot] and may not
		// ask GET /user who it is.
		copts.Login = "github-actions[bot]"
	}
	switch {
	case o.appID != "":
		pem, err := review.LoadAppKey(o.appKey)
		if err != nil {
			return ioError{err}
		}
		copts.App = &review.AppConfig{AppID: o.appID, InstallationID: o.installationID, PrivateKeyPEM: pem, Repositories: []string{name}}
	case o.tokenFile != "":
		t, err := review.TokenFromFile(o.tokenFile)
		if err != nil {
			return ioError{err}
		}
		copts.Token = t
	default:
		t, err := review.TokenFromEnv(e.getenv, o.tokenEnv)
		switch {
		case err == nil:
			copts.Token = t
		case o.dryRun:
			// Read-only: a public repository needs no token.
		default:
			return withHint(usageError{err}, "set "+o.tokenEnv+", or pass --token-file or --app-id/--app-key/--installation-id")
		}
	}
	client, err := review.NewClient(copts)
	if err != nil {
		return usageError{err}
	}
	fetch := review.Fallback{review.GitFetcher{Dir: o.workdir}, review.ContentsFetcher{Client: client, Owner: owner, Repo: name}}
	res, err := client.ReviewPullRequest(ctx, review.Request{Owner: owner, Repo: name, Number: o.pr, Fetch: fetch, Options: opts, DryRun: o.dryRun})
	if err != nil {
		return ioError{err}
	}
	rv := res.Review
	if o.dryRun {
		if err := rv.WriteDryRun(e.stdout); err != nil {
			return ioError{err}
		}
	} else {
		verb := "created"
		if res.Updated {
			verb = "updated"
		}
		ev := rv.Event
		if res.Event != rv.Event {
			ev = fmt.Sprintf("%s (posted as %s: GitHub refused the event)", rv.Event, res.Event)
		}
		fmt.Fprintf(e.stdout, "review %d %s on %s#%d: %s, %d line comment(s) posted, %d already present, %d file(s)\n",
			res.ReviewID, verb, o.repo, o.pr, ev, res.CommentsPosted, res.CommentsKept, len(rv.Files))
		if len(res.Dismissed) > 0 {
			fmt.Fprintf(e.stdout, "dismissed %d earlier snapd request(s) for changes it supersedes: %v\n", len(res.Dismissed), res.Dismissed)
		}
		if len(res.DeletedPending) > 0 {
			fmt.Fprintf(e.stdout, "deleted %d pending review(s) an interrupted run left: %v\n", len(res.DeletedPending), res.DeletedPending)
		}
	}
	if rv.Event == review.EventRequestChanges {
		return errReviewRequestsChanges{}
	}
	return nil
}

// reviewLocal builds the review of two local files, with positions from
// `git diff --no-index`, and prints it.
func reviewLocal(ctx context.Context, e *env, o *reviewOptions, opts review.Options) error {
	for _, p := range []string{o.base, o.head} {
		if _, err := readHead(p, 1); err != nil {
			return ioError{err}
		}
	}
	patch, err := review.LocalPatch(ctx, "", o.base, o.head)
	if err != nil {
		return ioError{err}
	}
	path := o.path
	if path == "" {
		path = filepath.ToSlash(o.head)
	}
	in := review.FileInput{Path: path, Base: o.base, Head: o.head, HasPatch: true, Parsed: patch}
	if w := strings.TrimSuffix(o.head, filepath.Ext(o.head)) + ".wsum"; fileExists(w) {
		in.HeadWSUM = w
	}
	if w := strings.TrimSuffix(o.base, filepath.Ext(o.base)) + ".wsum"; fileExists(w) {
		in.BaseWSUM = w
	}
	opts.HeadSHA = "local"
	rv, err := review.Build(ctx, []review.FileInput{in}, opts)
	if err != nil {
		return ioError{err}
	}
	if err := rv.WriteDryRun(e.stdout); err != nil {
		return ioError{err}
	}
	if rv.Event == review.EventRequestChanges {
		return errReviewRequestsChanges{}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := readHead(p, 0)
	return err == nil
}

// thresholds turns the threshold flags into review.Thresholds (a usage
// error names the flag).
func (o *reviewOptions) thresholds() (review.Thresholds, error) {
	th := review.Thresholds{Include: o.include, Exclude: o.exclude}
	for _, fl := range []struct {
		name   string
		values []string
		def    *float64
		limits *[]review.Limit
	}{{"--max-rel-l2", o.maxRelL2, &th.MaxRelL2, &th.RelL2Limits}, {"--max-abs-delta", o.maxAbsDelta, &th.MaxAbsDelta, &th.AbsDeltaLimits}} {
		bare := false
		for _, v := range fl.values {
			l, err := review.ParseLimit(v)
			if err != nil {
				return th, usageError{fmt.Errorf("%s: %w", fl.name, err)}
			}
			switch {
			case l.Pattern != "":
				*fl.limits = append(*fl.limits, l)
			case bare:
				return th, usageError{fmt.Errorf("%s: two bare numbers; give one default and PATTERN=NUMBER for the rest", fl.name)}
			default:
				*fl.def, bare = l.Value, true
			}
		}
	}
	for _, p := range o.allowNonFinite {
		switch p {
		case "*", "true":
			th.AllowNonFinite = true
		case "false":
		default:
			th.AllowNonFiniteIn = append(th.AllowNonFiniteIn, p)
		}
	}
	if err := th.Validate(); err != nil {
		return th, usageError{fmt.Errorf("--include/--exclude/--allow-nonfinite: %w", err)}
	}
	return th, nil
}
