// Package reviewtest provides a fake GitHub REST API for tests of
// gitops/review and `snapd review`: an httptest server that implements the
// endpoints the review uses and behaves as GitHub does where tests have
// found the difference to matter:
//
//   - every request body is validated against GitHub's published OpenAPI
//     request schema of its operation (../shared/github-openapi, validated
//     with github.com/santhosh-tekuri/jsonschema/v6); a body that does not
//     conform fails the test and is answered 422, as GitHub answers;
//   - it knows who calls (a token's user, an App installation's
//     "<slug>[bot]") and who opened the pull request: approving or
//     requesting changes on one's own pull request is a 422 with GitHub's
//     message, so is approving with GitHub Actions' token where the
//     repository does not allow it, and so is a second pending review;
//   - only a review's author can update it; pending reviews are visible
//     to their author only, and can be submitted or deleted;
//   - reviews that approve or request changes can be dismissed;
//   - pull requests can be listed (filtered by head and base), created,
//     read and updated (PATCH);
//   - lists paginate like GitHub (per_page at most 100, Link header with
//     first/prev/next/last) and an empty page is [], never null.
package reviewtest

import (
	"bytes"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// File is one changed file of the fake pull request.
type File struct {
	Filename         string `json:"filename"`
	PreviousFilename string `json:"previous_filename,omitempty"`
	Status           string `json:"status"`
	// Patch is omitted from the JSON when empty, as GitHub does for
	// diffs too large to render.
	Patch string `json:"patch,omitempty"`
}

// User is an account as GitHub shows it in reviews and comments.
type User struct {
	Login string `json:"login"`
	Type  string `json:"type,omitempty"` // "User" or "Bot"
}

// Review is a stored review.
type Review struct {
	ID       int64  `json:"id"`
	User     User   `json:"user"`
	Body     string `json:"body"`
	State    string `json:"state"` // PENDING, COMMENTED, APPROVED, CHANGES_REQUESTED, DISMISSED
	CommitID string `json:"commit_id"`
}

// Comment is a stored review comment.
type Comment struct {
	ID       int64  `json:"id"`
	ReviewID int64  `json:"pull_request_review_id"`
	User     User   `json:"user"`
	Body     string `json:"body"`
	Path     string `json:"path"`
	Line     int    `json:"line"`
	Side     string `json:"side"`
	CommitID string `json:"commit_id"`
}

// Failure is a canned error response served instead of the real one.
type Failure struct {
	Method, PathSuffix string // matched against the request
	Status             int
	Header             map[string]string
	Body               string
}

// App describes the GitHub App whose JWTs the server accepts.
type App struct {
	ID             string
	Slug           string // "" = "snapd-app"; the installation acts as Slug+"[bot]"
	InstallationID int64
	Key            *rsa.PublicKey
	// Token is the installation token handed out (after RevokeTokens, a
	// new one derived from it).
	Token string
	// WantRepositories and WantPermissions are required in the request.
	WantRepositories []string
	WantPermissions  map[string]string
}

// Login is the account an App installation acts as.
func (a *App) Login() string {
	slug := a.Slug
	if slug == "" {
		slug = "snapd-app"
	}
	return slug + "[bot]"
}

// ActionsLogin is the account GitHub Actions' GITHUB_TOKEN acts as.
const ActionsLogin = "github-actions[bot]"

// Server is the fake API. Configure the exported fields before the first
// request; read them after (under no concurrent requests), or through the
// accessor methods.
type Server struct {
	*httptest.Server
	t testing.TB

	Owner, Repo      string
	Number           int
	HeadSHA, BaseSHA string
	HeadRef, BaseRef string
	Files            []File
	// Contents maps "sha:path" to file content for the contents API.
	Contents map[string][]byte
	// Token is the token every /repos request must carry (with App nil);
	// TokenLogin the account it belongs to ("" = "snapd-bot"; ActionsLogin
	// makes it GitHub Actions' GITHUB_TOKEN, which GET /user refuses).
	Token      string
	TokenLogin string
	// Users maps further tokens to their accounts (other reviewers).
	Users map[string]string
	App   *App
	// Author opened the pull request Number when it was not created
	// through POST /pulls ("" = "octo-author").
	Author string
	// Unplaceable lists "path:line" positions GitHub cannot place a
	// comment on although the patch shows them (as when GitHub's diff
	// differs from the one the review was built on).
	Unplaceable map[string]bool
	// AllowActionsApproval lets GitHub Actions approve pull requests (the
	// repository setting; off by default, as GitHub's).
	AllowActionsApproval bool
	// Now is the server's clock (for JWT checks).
	Now func() time.Time

	mu       sync.Mutex
	Reviews  []*Review
	Comments []*Comment
	// Requests lists "METHOD path" of every request.
	Requests []string
	// TokenRequests counts installation token requests.
	TokenRequests int
	// Failures are served first, in order, to matching requests.
	Failures []Failure
	// SchemaErrors lists request bodies that failed GitHub's schema.
	SchemaErrors []string
	nextID       int64
	revoked      int
	// PRs are pull requests created through POST /pulls.
	PRs []map[string]any

	ops []operation
}

// New starts a fake API for pull request owner/repo#number. The request
// schemas are read from the shared OpenAPI fragments (SchemaFile).
func New(t testing.TB, owner, repo string, number int) *Server {
	ops, err := loadOperations(SchemaFile())
	if err != nil {
		t.Fatalf("reviewtest: %v", err)
	}
	s := &Server{t: t, Owner: owner, Repo: repo, Number: number, Contents: map[string][]byte{},
		HeadRef: "snapshots-next", BaseRef: "snapshots", Now: time.Now, nextID: 100, ops: ops}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *Server) fail(w http.ResponseWriter, status int, format string, a ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"message": fmt.Sprintf(format, a...)})
}

// unprocessable answers 422 the way GitHub's review endpoints do:
// {"message": "Unprocessable Entity", "errors": [msg]}.
func (s *Server) unprocessable(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Unprocessable Entity", "errors": []string{msg},
		"documentation_url": "https://docs.github.com/rest/pulls/reviews#create-a-review-for-a-pull-request"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

var (
	reInstall = regexp.MustCompile(`^/app/installations/(\d+)/access_tokens$`)
	reReview  = regexp.MustCompile(`^/reviews/(\d+)(/events|/dismissals)?$`)
)

func (s *Server) tokenLogin() string {
	if s.TokenLogin == "" {
		return "snapd-bot"
	}
	return s.TokenLogin
}

func (s *Server) author() string {
	if s.Author == "" {
		return "octo-author"
	}
	return s.Author
}

// appToken is the installation token currently valid.
func (s *Server) appToken() string {
	if s.revoked == 0 {
		return s.App.Token
	}
	return fmt.Sprintf("%s_r%d", s.App.Token, s.revoked)
}

// RevokeTokens makes the installation token handed out so far invalid
// (as GitHub does when an installation's permissions change): requests
// carrying it get 401 until a new one is requested.
func (s *Server) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked++
}

// caller returns the account of the request's credentials ("" = none
// valid).
func (s *Server) caller(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		tok, _ = strings.CutPrefix(auth, "token ")
	}
	switch {
	case tok == "":
		return ""
	case s.App != nil && tok == s.appToken():
		return s.App.Login()
	case s.App == nil && s.Token != "" && tok == s.Token:
		return s.tokenLogin()
	}
	return s.Users[tok]
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Requests = append(s.Requests, r.Method+" "+r.URL.Path)
	for i, f := range s.Failures {
		if f.Method == r.Method && strings.HasSuffix(r.URL.Path, f.PathSuffix) {
			s.Failures = append(s.Failures[:i:i], s.Failures[i+1:]...)
			for k, v := range f.Header {
				w.Header().Set(k, v)
			}
			w.WriteHeader(f.Status)
			io.WriteString(w, f.Body)
			return
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		s.fail(w, 400, "read body: %v", err)
		return
	}
	if op, problem := s.checkSchema(r, body); problem != "" {
		msg := fmt.Sprintf("%s %s (%s): the request body does not match GitHub's schema: %s", r.Method, r.URL.Path, op, problem)
		s.SchemaErrors = append(s.SchemaErrors, msg)
		s.t.Errorf("reviewtest: %s", msg)
		s.fail(w, http.StatusUnprocessableEntity, "Invalid request.\n\n%s", problem)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if m := reInstall.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodPost {
		s.installationToken(w, r, m[1])
		return
	}
	if r.URL.Path == "/app" && r.Method == http.MethodGet {
		s.getApp(w, r)
		return
	}
	who := s.caller(r)
	if who == "" && (s.Token != "" || s.App != nil) {
		s.fail(w, http.StatusUnauthorized, "Bad credentials")
		return
	}
	if r.URL.Path == "/user" && r.Method == http.MethodGet {
		if s.App != nil || who == ActionsLogin {
			s.fail(w, http.StatusForbidden, "Resource not accessible by integration")
			return
		}
		writeJSON(w, 200, User{Login: who, Type: "User"})
		return
	}
	prefix := fmt.Sprintf("/repos/%s/%s/", s.Owner, s.Repo)
	if !strings.HasPrefix(r.URL.Path, prefix) {
		s.fail(w, http.StatusNotFound, "Not Found")
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, prefix)
	pull := fmt.Sprintf("pulls/%d", s.Number)
	switch {
	case strings.HasPrefix(rest, "contents/") && r.Method == http.MethodGet:
		if a := r.Header.Get("Accept"); !strings.Contains(a, "application/vnd.github.raw") {
			s.fail(w, http.StatusBadRequest, "test server serves only the raw media type, got Accept %q", a)
			return
		}
		b, ok := s.Contents[r.URL.Query().Get("ref")+":"+strings.TrimPrefix(rest, "contents/")]
		if !ok {
			s.fail(w, http.StatusNotFound, "Not Found")
			return
		}
		w.Header().Set("Content-Type", "application/vnd.github.raw")
		w.Write(b)
	case rest == "pulls" && r.Method == http.MethodGet:
		q := r.URL.Query()
		var out []map[string]any
		for _, pr := range s.PRs {
			h, _ := pr["head"].(map[string]any)
			b, _ := pr["base"].(map[string]any)
			if v := q.Get("head"); v != "" && v != s.Owner+":"+fmt.Sprint(h["ref"]) {
				continue
			}
			if v := q.Get("base"); v != "" && v != fmt.Sprint(b["ref"]) {
				continue
			}
			if v := q.Get("state"); v != "" && v != "all" && v != fmt.Sprint(pr["state"]) {
				continue
			}
			out = append(out, pr)
		}
		s.page(w, r, len(out), func(i int) any { return out[i] })
	case rest == "pulls" && r.Method == http.MethodPost:
		var in struct{ Title, Head, Base, Body string }
		if err := json.Unmarshal(body, &in); err != nil {
			s.fail(w, 400, "Problems parsing JSON")
			return
		}
		if in.Title == "" {
			s.fail(w, 422, "Validation Failed: title is missing")
			return
		}
		s.HeadRef, s.BaseRef = in.Head, in.Base
		s.Author = who
		pr := map[string]any{"number": s.Number, "state": "open", "title": in.Title, "body": in.Body, "user": User{Login: who},
			"head": map[string]any{"ref": s.HeadRef, "sha": s.HeadSHA}, "base": map[string]any{"ref": s.BaseRef, "sha": s.BaseSHA}}
		s.PRs = append(s.PRs, pr)
		writeJSON(w, 201, pr)
	case rest == pull && r.Method == http.MethodGet:
		writeJSON(w, 200, s.pullJSON())
	case rest == pull && r.Method == http.MethodPatch:
		var in map[string]any
		if err := json.Unmarshal(body, &in); err != nil {
			s.fail(w, 400, "Problems parsing JSON")
			return
		}
		for _, pr := range s.PRs {
			if pr["number"] == s.Number {
				for _, k := range []string{"title", "body", "state"} {
					if v, ok := in[k]; ok {
						pr[k] = v
					}
				}
			}
		}
		writeJSON(w, 200, s.pullJSON())
	case rest == pull+"/files" && r.Method == http.MethodGet:
		s.page(w, r, len(s.Files), func(i int) any { return s.Files[i] })
	case rest == pull+"/reviews" && r.Method == http.MethodGet:
		var vis []*Review
		for _, rv := range s.Reviews {
			if rv.State != "PENDING" || rv.User.Login == who {
				vis = append(vis, rv)
			}
		}
		s.page(w, r, len(vis), func(i int) any { return vis[i] })
	case rest == pull+"/comments" && r.Method == http.MethodGet:
		var vis []*Comment
		for _, c := range s.Comments {
			if rv := s.review(c.ReviewID); rv == nil || rv.State != "PENDING" || rv.User.Login == who {
				vis = append(vis, c)
			}
		}
		s.page(w, r, len(vis), func(i int) any { return vis[i] })
	case rest == pull+"/reviews" && r.Method == http.MethodPost:
		s.createReview(w, body, who)
	case rest == pull+"/comments" && r.Method == http.MethodPost:
		var c Comment
		if err := json.Unmarshal(body, &c); err != nil {
			s.fail(w, 400, "Problems parsing JSON")
			return
		}
		if msg := s.checkComment(c.Path, c.Line, c.Side, c.Body); msg != "" {
			s.fail(w, 422, "%s", msg)
			return
		}
		if c.CommitID != s.HeadSHA {
			s.fail(w, 422, "commit_id %q is not the head", c.CommitID)
			return
		}
		s.nextID++
		c.ID, c.User = s.nextID, User{Login: who}
		s.Comments = append(s.Comments, &c)
		writeJSON(w, 201, c)
	case strings.HasPrefix(rest, pull+"/reviews/"):
		m := reReview.FindStringSubmatch(strings.TrimPrefix(rest, pull))
		if m == nil {
			s.fail(w, 404, "Not Found")
			return
		}
		id, _ := strconv.ParseInt(m[1], 10, 64)
		rv := s.review(id)
		if rv == nil || rv.State == "PENDING" && rv.User.Login != who {
			s.fail(w, 404, "Not Found")
			return
		}
		s.reviewAction(w, r.Method, m[2], body, who, rv)
	default:
		s.fail(w, http.StatusNotFound, "Not Found: %s %s", r.Method, r.URL.Path)
	}
}

// AddReview stores a review as if login had posted it (another account's
// review, or debris such as a pending review of an interrupted run).
func (s *Server) AddReview(login, state, commit, body string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	s.Reviews = append(s.Reviews, &Review{ID: s.nextID, User: User{Login: login}, Body: body, State: state, CommitID: commit})
	return s.nextID
}

// ReviewList returns a copy of the stored reviews.
func (s *Server) ReviewList() []Review {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Review, len(s.Reviews))
	for i, r := range s.Reviews {
		out[i] = *r
	}
	return out
}

// CommentList returns a copy of the stored comments.
func (s *Server) CommentList() []Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Comment, len(s.Comments))
	for i, c := range s.Comments {
		out[i] = *c
	}
	return out
}

// RequestLog returns a copy of the request log.
func (s *Server) RequestLog() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.Requests...)
}

// AddFailure queues a canned error response.
func (s *Server) AddFailure(f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Failures = append(s.Failures, f)
}
