// Package review posts GitHub pull-request reviews of WTXT snapshot
// changes: which rows of which arrays changed, by how much, and whether
// the new generation verifies, so that reviewers never decode base64 and
// the review stands on its own when GitHub does not render the diff
// (over about 1 MB or 20,000 lines).
//
// # Pieces
//
//	Build(ctx, []FileInput, Options) → *Review      offline: verify, compare, render
//	Client.ReviewPullRequest(ctx, Request)          PR → fetch versions → Build → Post
//	Client.Post(ctx, owner, repo, n, *Review, *Result)  idempotent publishing
//	Client.EnsurePullRequest / Client.Publish       the daemon: open-or-update PR head→base, review it
//	GitFetcher, ContentsFetcher, Fallback           where base/head versions come from
//	StaticToken, TokenFromEnv, TokenFromFile, AppConfig   credentials
//	LocalPatch                                       `git diff --no-index` for dry runs
//
// # What is reviewed
//
// Every changed file whose name (or previous name) ends in ".wtxt". The
// base version is the file at the pull request's base SHA (at its
// previous name when renamed), the head version the file at the head SHA.
// A streamed file (root_pending) is verified with its sibling WSUM
// (x.wtxt → x.wsum at the same commit). The split layout's *.part files
// are not WTXT files and are not reviewed.
//
// The head version is checked with wtxt.Verify: every integrity rule, the
// signature against Options.TrustedKeys (RequireSignature fails unsigned
// or untrusted files), HMACs with Options.HMACKey, and the chain:
// merkle_prev must equal the base version's merkle_this (from its root
// line, or its WSUM when the base is streamed). Both versions are decoded
// (wtxt.Codec, arrays read on demand) and compared with snapshot.Diff;
// snapshot.Diff is also run on the rows of every changed chunk alone to
// get per-chunk numbers.
//
// # Event
//
//	REQUEST_CHANGES  any head verification failure (text, parity, crc,
//	                 sha, HMAC, signature, chain, ...) or a threshold:
//	                 NaN/Inf newly introduced into a float array (unless
//	                 Thresholds.AllowNonFinite), relative L2 change above
//	                 Thresholds.MaxRelL2, max |Δ| above Thresholds.MaxAbsDelta
//	                 (each for the arrays in scope, with their own limits:
//	                 see Scope below)
//	APPROVE          only with Options.Approve, at least one file reviewed,
//	                 no problem and no note (a base that does not decode, a
//	                 chain that could not be checked, a generation number
//	                 that does not increase, an unparsable diff, a
//	                 version whose content retention collected)
//	COMMENT          otherwise; a review of a collected version
//	                 (collected.go) says so under the verdict
//
// # Scope
//
// Thresholds.Scope resolves, per array, whether the thresholds judge it
// and with which limits. Patterns are path.Match globs over array names
// (a dot is a plain character; '*' does not cross '/'):
//
//	Exclude           matching arrays are listed as excluded, never judged
//	Include           when given, only matching arrays are judged
//	RelL2Limits,      PATTERN=NUMBER limits replacing the default
//	AbsDeltaLimits    (MaxRelL2, MaxAbsDelta) for matching arrays; 0 lifts it
//	AllowNonFiniteIn  NaN/Inf accepted in matching arrays
//
// Where several patterns match, the longest wins (on equal length the
// later one, and an exclude over an include). Counters — integer and bool
// dtypes, and rank-0 arrays such as torch 2.x's optimizer `step` — and RNG
// state — names containing "rng" or "random_state", and u8 arrays named
// "cpu" or "cuda…" — are shown in the table with their numbers but not
// judged, unless an include or limit pattern names them explicitly: it
// matches and its last dot-separated part has no '*' ("*.step" does,
// "model.*" does not). The body says what was not judged ("Not
// thresholded: 3 counters, 1 RNG state, 12 excluded") and the table marks
// each such array ("modified (not thresholded: counter)", "modified
// (excluded: `optimizer.*`)").
//
// GitHub answers 422 for several reasons; Post tells them apart by
// GitHub's message and reacts to each:
//
//	"Can not approve your own pull request" /      posted as COMMENT, a note says the account
//	"Can not request changes on your own …"        opened the pull request (the daemon's does)
//	"GitHub Actions is not permitted to approve    posted as COMMENT, a note names the repository
//	pull requests."                                setting that allows it
//	"User can only have one pending review per     the account's pending review is deleted when it
//	pull request"                                  is snapd's or empty, then created again; another
//	                                               pending review is an error naming it
//	"Pull request review thread line must be part  created without line comments, which are then
//	of the diff" (or path/line not resolved)       posted singly: only those GitHub refuses are folded
//
// A downgraded review carries "<!-- snapd-review downgraded reason=own|actions -->"
// so re-runs update it; Result.Event says what was posted, Review.Event
// stays the verdict.
//
// # Review layout
//
// The body (at most MaxBodyBytes; GitHub's limit is 65536):
//
//	<!-- snapd-review head=SHA -->                 hidden marker, always first
//	## snapd review: ✅ / ❌ / ℹ️ verdict
//	Head `sha12`, N WTXT file(s), M line comment(s).
//	A comment, neither an approval nor …           when retention collected a version's content
//	### Which rows moved                           when the PR adds/changes *.diff.svg files (the
//	![…](…/blob/HEAD/path?raw=true) + page link    daemon's pictures, snapshot/diffsvg): each as an
//	                                               image from the head commit (review bodies
//	                                               cannot hold SVG markup), at most 10
//	### `path` — added|modified|removed            one section per file, by path
//	- Verification: passed / K failure(s); signature state (keyid); HMAC state; audit line
//	- Chain: gen BASE → HEAD; continues the base (merkle …) | first | unchecked; merkle_this
//	- ❌ problems (each failed check with line/array/chunk, each tripped threshold)
//	- ⚠️ notes (and "GitHub shows no diff" when the patch is missing)
//	- Not thresholded: counts of counters, RNG state, excluded arrays
//	counts: modified, added, removed, reshaped, retyped, unchanged
//	| array | change | dtype | shape | changed elements | rows | chunks | max |Δ| | mean |Δ| | rel L2 | new NaN/Inf |
//	<details> changed chunks without a line comment: line, rows, numbers </details>
//
// Every array of every file is counted; changed arrays get a table row.
// When the body would exceed MaxBodyBytes, detail is reduced in steps:
// one compact line per changed array (and at most 200 folded chunks),
// then counts only.
//
// Line comments sit on the RIGHT (head) side of the diff:
//
//   - a modified array: one comment per changed chunk, on its `ch ix=NNNNNN`
//     line, giving the chunk's rows, the changed row ranges, changed
//     elements, and for floats max |Δ|, mean |Δ|, rel L2 and new NaN/Inf
//     (integers: max |Δ|);
//   - an added, reshaped or retyped array: one comment on its `arr` line.
//
// A chunk counts as changed when its ch line (same ix, off, len, sha256,
// under the same geometry) differs from the base's, which is exactly when
// git shows that ch line as added. Each comment body starts with
// "<!-- snapd-review-comment head=SHA path=P array=A chunk=N -->".
// Comments beyond Options.MaxComments (default 50), and comments on lines
// the diff does not show (or on files without a patch), are folded into
// the body's <details> list instead.
//
// # Position computation
//
// The line of each ch/arr line in the head file comes from a streaming
// scan of its structure (wtxt.ReadIndex: arr/idx/ch lines; the base64 lines of
// a chunk of n raw bytes are skipped by arithmetic, 4*ceil(n/3) characters
// in ceil(n/57) lines of "<b64> p\n"). A comment is anchored only if that
// line is inside a hunk of the file's unified diff: GitHub's `patch` field
// from GET /pulls/N/files, or `git diff --no-index` output for dry runs.
// ParsePatch reads the hunks: after the first "@@ -a,b +c,d @@" header,
// '+' and ' ' lines are new-file lines c, c+1, ...; '-' lines are old
// only; each line below the first header (later headers and "\ No newline"
// markers included) takes the next legacy position, the line just below
// the first header being position 1.
//
// The API calls use the modern fields: `line` (the head-file line number)
// with `side: RIGHT`, and `commit_id` = head SHA; the legacy position is
// computed too and shown by --dry-run (Comment.Position). If GitHub still
// cannot place a comment of a new review (422; it does not say which),
// the review is created without line comments and they are posted singly:
// only those GitHub refuses are folded into the body, which is updated.
//
// # Identity and idempotence
//
// Post acts as one account (Client.Login): the token's user (GET /user),
// an App installation's "<slug>[bot]" (GET /app with the App's JWT), or
// ClientOptions.Login (GitHub Actions' GITHUB_TOKEN is
// "github-actions[bot]" and may not call GET /user). Only that account's
// reviews and comments count: another account's review is never edited
// (GitHub refuses it anyway) and its comments never stand for snapd's,
// marker or not. When GitHub does not say who the token is, no review is
// edited or dismissed. Post lists the pull request's reviews and takes
// the account's last whose body starts with the marker for the head SHA. If its state matches the event
// it updates that review's body (PUT); a different event creates a new
// review and replaces the old one's body by a "superseded" note (GitHub
// cannot change a submitted review's state). Line comments whose marker is
// already among the pull request's review comments are not posted again;
// missing ones are posted singly (POST /pulls/N/comments), one second
// apart. A new head SHA makes new markers, so a new push gets a new
// review. When a review's verdict is not REQUEST_CHANGES, the account's
// earlier snapd reviews that requested changes are dismissed (PUT
// …/reviews/{id}/dismissals): GitHub keeps a pull request blocked by a
// request for changes until it is dismissed, whatever later reviews say.
//
// # Authentication and rate limits
//
// A StaticToken (GITHUB_TOKEN, a PAT, a token file) or a GitHub App: an
// RS256 JWT (iss = App ID, iat backdated 60 s, exp 9 min) authenticates
// POST /app/installations/{id}/access_tokens, which asks for
// contents:read and pull_requests:write only (and, from the CLI, only the
// reviewed repository); the installation token is cached until five
// minutes before it expires, and dropped when GitHub answers 401 (revoked,
// or the installation changed): the request is then retried once with a
// new token (a static token is not retried). Every request has timeouts
// (Timeouts): connect 10 s, TLS handshake 10 s, response headers 60 s, and
// 10 minutes for one attempt including its body; rate-limit waits between
// attempts are bounded by RetryPolicy.MaxWait instead. Authorization is added by the transport only
// for the API host, and no header, token or JWT is ever logged (debug
// logs carry method, path, status, attempt and timing).
//
// The transport below go-github waits out limits: 403/429 with
// Retry-After (seconds or HTTP date) waits that long; with
// X-RateLimit-Remaining: 0 it waits until X-RateLimit-Reset (+1 s); a 429
// or a 403 whose message says "rate limit" without either header waits
// RetryPolicy.SecondaryDelay (60 s) doubling per retry; 502/503/504 and
// network errors of GET requests back off from 1 s. Retries are bounded
// (MaxRetries, default 5) and no single wait longer than MaxWait (default
// 15 min) is slept: the request then fails. Other 403s (permissions) are
// returned at once. A successful response that exhausts the primary limit
// makes the next request wait for the reset; the transport hides that
// reset from go-github, whose own real-clock check would otherwise refuse
// the request locally. The clock and sleep are injectable
// (RetryPolicy.Now, RetryPolicy.Sleep).
//
// # Fetching versions
//
// GitFetcher streams `git cat-file blob SHA:PATH` from a local checkout
// (raw blob, no filters); it reports ErrUnavailable when the directory is
// not a repository or lacks the commit (a shallow CI checkout), and
// Fallback then uses ContentsFetcher: GET /repos/O/R/contents/PATH?ref=SHA
// with Accept: application/vnd.github.raw (files up to 100 MB), streamed
// to a temporary file. ErrNotFound marks a path absent at that commit
// (added or removed files).
package review
