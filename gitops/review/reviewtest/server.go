// Package reviewtest provides a fake GitHub REST API for tests of
// gitops/review and `snapd review`: an httptest server that implements the
// endpoints the review uses (pull request, files, reviews list/create/
// update, review comments list/create, contents, App installation token),
// checks every request's Authorization header and request body the way
// GitHub would reject them, and records what was posted.
package reviewtest

import (
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

	"github.com/golang-jwt/jwt/v5"
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

// Review is a stored review.
type Review struct {
	ID       int64  `json:"id"`
	Body     string `json:"body"`
	State    string `json:"state"`
	CommitID string `json:"commit_id"`
}

// Comment is a stored review comment.
type Comment struct {
	ID       int64  `json:"id"`
	ReviewID int64  `json:"pull_request_review_id"`
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
	InstallationID int64
	Key            *rsa.PublicKey
	// Token is the installation token handed out.
	Token string
	// WantRepositories and WantPermissions are required in the request.
	WantRepositories []string
	WantPermissions  map[string]string
}

// Server is the fake API. Configure the exported fields before the first
// request; read them after (under no concurrent requests).
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
	// Token is the token every /repos request must carry.
	Token string
	App   *App
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
	nextID   int64
	// PRs are pull requests created through POST /pulls.
	PRs []map[string]any
}

// New starts a fake API for pull request owner/repo#number.
func New(t testing.TB, owner, repo string, number int) *Server {
	s := &Server{t: t, Owner: owner, Repo: repo, Number: number, Contents: map[string][]byte{},
		HeadRef: "snapshots-next", BaseRef: "snapshots", Now: time.Now, nextID: 100}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *Server) fail(w http.ResponseWriter, status int, format string, a ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"message": fmt.Sprintf(format, a...)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

var (
	reInstall = regexp.MustCompile(`^/app/installations/(\d+)/access_tokens$`)
	reReview  = regexp.MustCompile(`^/reviews/(\d+)$`)
)

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
	if m := reInstall.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodPost {
		s.installationToken(w, r, m[1])
		return
	}
	want := s.Token
	if s.App != nil {
		want = s.App.Token
	}
	if got := r.Header.Get("Authorization"); want != "" && got != "Bearer "+want && got != "token "+want {
		s.fail(w, http.StatusUnauthorized, "Bad credentials")
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
		var out []map[string]any
		for _, pr := range s.PRs {
			out = append(out, pr)
		}
		writeJSON(w, 200, out)
	case rest == "pulls" && r.Method == http.MethodPost:
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			s.fail(w, 400, "bad JSON: %v", err)
			return
		}
		for _, k := range []string{"title", "head", "base"} {
			if v, _ := body[k].(string); v == "" {
				s.fail(w, 422, "%s is missing", k)
				return
			}
		}
		s.HeadRef, s.BaseRef = body["head"].(string), body["base"].(string)
		pr := map[string]any{"number": s.Number, "title": body["title"], "body": body["body"],
			"head": map[string]any{"ref": s.HeadRef, "sha": s.HeadSHA}, "base": map[string]any{"ref": s.BaseRef, "sha": s.BaseSHA}}
		s.PRs = append(s.PRs, pr)
		writeJSON(w, 201, pr)
	case rest == pull && r.Method == http.MethodGet:
		writeJSON(w, 200, map[string]any{"number": s.Number, "html_url": "https://github.example/" + s.Owner + "/" + s.Repo + "/pull/" + strconv.Itoa(s.Number),
			"head": map[string]any{"sha": s.HeadSHA, "ref": s.HeadRef}, "base": map[string]any{"sha": s.BaseSHA, "ref": s.BaseRef}})
	case rest == pull+"/files" && r.Method == http.MethodGet:
		s.page(w, r, len(s.Files), func(i int) any { return s.Files[i] })
	case rest == pull+"/reviews" && r.Method == http.MethodGet:
		s.page(w, r, len(s.Reviews), func(i int) any { return s.Reviews[i] })
	case rest == pull+"/comments" && r.Method == http.MethodGet:
		s.page(w, r, len(s.Comments), func(i int) any { return s.Comments[i] })
	case rest == pull+"/reviews" && r.Method == http.MethodPost:
		s.createReview(w, r)
	case rest == pull+"/comments" && r.Method == http.MethodPost:
		var c Comment
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			s.fail(w, 400, "bad JSON: %v", err)
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
		c.ID = s.nextID
		s.Comments = append(s.Comments, &c)
		writeJSON(w, 201, c)
	case strings.HasPrefix(rest, pull+"/reviews/") && r.Method == http.MethodPut:
		m := reReview.FindStringSubmatch(strings.TrimPrefix(rest, pull))
		if m == nil {
			s.fail(w, 404, "Not Found")
			return
		}
		id, _ := strconv.ParseInt(m[1], 10, 64)
		var body struct {
			Body string `json:"body"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Body == "" {
			s.fail(w, 422, "body is required")
			return
		}
		for _, rv := range s.Reviews {
			if rv.ID == id {
				rv.Body = body.Body
				writeJSON(w, 200, rv)
				return
			}
		}
		s.fail(w, 404, "Not Found")
	default:
		s.fail(w, http.StatusNotFound, "Not Found: %s %s", r.Method, r.URL.Path)
	}
}

// page serves GitHub-style pagination (page, per_page, Link header).
func (s *Server) page(w http.ResponseWriter, r *http.Request, n int, item func(int) any) {
	per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	if per <= 0 {
		per = 30
	}
	pg, _ := strconv.Atoi(r.URL.Query().Get("page"))
	if pg <= 0 {
		pg = 1
	}
	out := []any{}
	for i := (pg - 1) * per; i < n && i < pg*per; i++ {
		out = append(out, item(i))
	}
	if pg*per < n {
		q := r.URL.Query()
		q.Set("page", strconv.Itoa(pg+1))
		u := *r.URL
		u.RawQuery = q.Encode()
		w.Header().Set("Link", fmt.Sprintf(`<%s%s>; rel="next"`, s.URL, u.String()))
	}
	writeJSON(w, 200, out)
}

// commentable returns the RIGHT-side lines that appear in a file's patch
// (an implementation independent of the one under test).
func commentable(patch string) map[int]bool {
	lines := map[int]bool{}
	n, in := 0, false
	for _, l := range strings.Split(patch, "\n") {
		if strings.HasPrefix(l, "@@") {
			var a, b, c, d int
			if _, err := fmt.Sscanf(l, "@@ -%d,%d +%d,%d @@", &a, &b, &c, &d); err != nil {
				if _, err := fmt.Sscanf(l, "@@ -%d +%d,%d @@", &a, &c, &d); err != nil {
					continue
				}
			}
			n, in = c, true
			continue
		}
		if !in || l == "" {
			continue
		}
		switch l[0] {
		case '+', ' ':
			lines[n] = true
			n++
		}
	}
	return lines
}

func (s *Server) checkComment(path string, line int, side, body string) string {
	if side != "RIGHT" {
		return fmt.Sprintf("side %q: the review comments on the head", side)
	}
	if body == "" {
		return "comment body is empty"
	}
	for _, f := range s.Files {
		if f.Filename != path {
			continue
		}
		if f.Patch == "" {
			return fmt.Sprintf("pull_request_review_thread.line: %s has no diff", path)
		}
		if !commentable(f.Patch)[line] {
			return fmt.Sprintf("pull_request_review_thread.line: line %d of %s is not part of the diff", line, path)
		}
		return ""
	}
	return fmt.Sprintf("path %q is not in the pull request", path)
}

func (s *Server) createReview(w http.ResponseWriter, r *http.Request) {
	var req struct {
		CommitID string `json:"commit_id"`
		Body     string `json:"body"`
		Event    string `json:"event"`
		Comments []struct {
			Path     string `json:"path"`
			Line     int    `json:"line"`
			Side     string `json:"side"`
			Body     string `json:"body"`
			Position int    `json:"position"`
		} `json:"comments"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.fail(w, 400, "bad JSON: %v", err)
		return
	}
	state := map[string]string{"APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED", "COMMENT": "COMMENTED"}[req.Event]
	switch {
	case state == "":
		s.fail(w, 422, "event %q is not one of APPROVE, REQUEST_CHANGES, COMMENT", req.Event)
		return
	case req.CommitID != s.HeadSHA:
		s.fail(w, 422, "commit_id %q is not the head %q", req.CommitID, s.HeadSHA)
		return
	case req.Body == "" && req.Event != "APPROVE":
		s.fail(w, 422, "body is required for %s", req.Event)
		return
	case len(req.Body) > 65536:
		s.fail(w, 422, "body is too long (maximum is 65536 characters)")
		return
	}
	for _, c := range req.Comments {
		if c.Position != 0 {
			s.fail(w, 422, "use line+side or position, the test expects line+side")
			return
		}
		if msg := s.checkComment(c.Path, c.Line, c.Side, c.Body); msg != "" {
			s.fail(w, 422, "%s", msg)
			return
		}
	}
	s.nextID++
	rv := &Review{ID: s.nextID, Body: req.Body, State: state, CommitID: req.CommitID}
	s.Reviews = append(s.Reviews, rv)
	for _, c := range req.Comments {
		s.nextID++
		s.Comments = append(s.Comments, &Comment{ID: s.nextID, ReviewID: rv.ID, Body: c.Body, Path: c.Path, Line: c.Line, Side: c.Side, CommitID: req.CommitID})
	}
	writeJSON(w, 200, rv)
}

func (s *Server) installationToken(w http.ResponseWriter, r *http.Request, id string) {
	s.TokenRequests++
	if s.App == nil {
		s.fail(w, 404, "Not Found")
		return
	}
	if id != strconv.FormatInt(s.App.InstallationID, 10) {
		s.fail(w, 404, "installation %s not found", id)
		return
	}
	auth := r.Header.Get("Authorization")
	raw, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		s.fail(w, 401, "A JSON web token could not be decoded")
		return
	}
	claims := &jwt.RegisteredClaims{}
	_, err := jwt.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) { return s.App.Key, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(s.App.ID), jwt.WithTimeFunc(s.Now), jwt.WithIssuedAt())
	if err != nil {
		s.fail(w, 401, "JWT rejected: %v", err)
		return
	}
	if claims.ExpiresAt == nil || claims.IssuedAt == nil || claims.ExpiresAt.Sub(claims.IssuedAt.Time) > 10*time.Minute {
		s.fail(w, 401, "JWT exp must be at most 10 minutes after iat")
		return
	}
	var body struct {
		Repositories []string          `json:"repositories"`
		Permissions  map[string]string `json:"permissions"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		s.fail(w, 400, "bad JSON: %v", err)
		return
	}
	if fmt.Sprint(body.Repositories) != fmt.Sprint(s.App.WantRepositories) {
		s.fail(w, 422, "repositories %v, want %v", body.Repositories, s.App.WantRepositories)
		return
	}
	if fmt.Sprint(body.Permissions) != fmt.Sprint(s.App.WantPermissions) {
		s.fail(w, 422, "permissions %v, want %v", body.Permissions, s.App.WantPermissions)
		return
	}
	writeJSON(w, 201, map[string]any{"token": s.App.Token, "expires_at": s.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
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
