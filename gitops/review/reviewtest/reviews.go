package reviewtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func (s *Server) pullJSON() map[string]any {
	title, prBody, state := "", "", "open"
	for _, pr := range s.PRs {
		if pr["number"] == s.Number {
			title, _ = pr["title"].(string)
			prBody, _ = pr["body"].(string)
			state, _ = pr["state"].(string)
		}
	}
	return map[string]any{"number": s.Number, "state": state, "title": title, "body": prBody, "user": User{Login: s.author()},
		"html_url": "https://github.example/" + s.Owner + "/" + s.Repo + "/pull/" + strconv.Itoa(s.Number),
		"head":     map[string]any{"sha": s.HeadSHA, "ref": s.HeadRef}, "base": map[string]any{"sha": s.BaseSHA, "ref": s.BaseRef}}
}

func (s *Server) review(id int64) *Review {
	for _, rv := range s.Reviews {
		if rv.ID == id {
			return rv
		}
	}
	return nil
}

// reviewAction serves PUT (update the body), DELETE (a pending review),
// POST …/events (submit a pending review) and PUT …/dismissals.
func (s *Server) reviewAction(w http.ResponseWriter, method, sub string, body []byte, who string, rv *Review) {
	var in struct{ Body, Event, Message string }
	if len(body) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			s.fail(w, 400, "Problems parsing JSON")
			return
		}
	}
	switch {
	case method == http.MethodPut && sub == "":
		if rv.User.Login != who {
			// GitHub: only a review's author can edit it.
			s.fail(w, http.StatusForbidden, "You can only edit your own reviews (review by %s)", rv.User.Login)
			return
		}
		if in.Body == "" {
			s.unprocessable(w, "Body can't be blank")
			return
		}
		rv.Body = in.Body
		writeJSON(w, 200, rv)
	case method == http.MethodDelete && sub == "":
		if rv.State != "PENDING" {
			s.unprocessable(w, "Can not delete a non-pending pull request review")
			return
		}
		kept := s.Reviews[:0]
		for _, x := range s.Reviews {
			if x != rv {
				kept = append(kept, x)
			}
		}
		s.Reviews = kept
		cs := s.Comments[:0]
		for _, c := range s.Comments {
			if c.ReviewID != rv.ID {
				cs = append(cs, c)
			}
		}
		s.Comments = cs
		writeJSON(w, 200, rv)
	case method == http.MethodPost && sub == "/events":
		if rv.State != "PENDING" {
			s.unprocessable(w, "Can not submit a non-pending pull request review")
			return
		}
		state, msg := s.eventState(in.Event, who, in.Body)
		if msg != "" {
			s.unprocessable(w, msg)
			return
		}
		rv.State = state
		if in.Body != "" {
			rv.Body = in.Body
		}
		writeJSON(w, 200, rv)
	case method == http.MethodPut && sub == "/dismissals":
		if rv.State != "APPROVED" && rv.State != "CHANGES_REQUESTED" {
			s.unprocessable(w, "Can not dismiss a "+strings.ToLower(rv.State)+" pull request review")
			return
		}
		rv.State = "DISMISSED"
		writeJSON(w, 200, rv)
	default:
		s.fail(w, 404, "Not Found")
	}
}

// eventState checks an event as GitHub does for the caller and returns
// the review state it makes, or GitHub's 422 message.
func (s *Server) eventState(event, who, body string) (string, string) {
	state := map[string]string{"APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED", "COMMENT": "COMMENTED", "": "PENDING"}[event]
	switch {
	case event == "APPROVE" && who == s.author():
		return "", "Can not approve your own pull request"
	case event == "REQUEST_CHANGES" && who == s.author():
		return "", "Can not request changes on your own pull request"
	case event == "APPROVE" && who == ActionsLogin && !s.AllowActionsApproval:
		return "", "GitHub Actions is not permitted to approve pull requests."
	case body == "" && (event == "REQUEST_CHANGES" || event == "COMMENT"):
		return "", "Body can't be blank"
	case len(body) > 65536:
		return "", "Body is too long (maximum is 65536 characters)"
	}
	return state, ""
}

// page serves GitHub-style pagination: page, per_page (default 30, at
// most 100) and a Link header with first, prev, next and last.
func (s *Server) page(w http.ResponseWriter, r *http.Request, n int, item func(int) any) {
	per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	if per <= 0 {
		per = 30
	}
	per = min(per, 100)
	pg, _ := strconv.Atoi(r.URL.Query().Get("page"))
	if pg <= 0 {
		pg = 1
	}
	last := max(1, (n+per-1)/per)
	out := []any{}
	for i := (pg - 1) * per; i < n && i < pg*per; i++ {
		out = append(out, item(i))
	}
	link := func(p int, rel string) string {
		q := r.URL.Query()
		q.Set("page", strconv.Itoa(p))
		u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
		return fmt.Sprintf(`<%s%s>; rel="%s"`, s.URL, u.String(), rel)
	}
	var links []string
	if pg < last {
		links = append(links, link(pg+1, "next"), link(last, "last"))
	}
	if pg > 1 {
		links = append(links, link(1, "first"), link(min(pg-1, last), "prev"))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
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

// checkComment returns GitHub's message for a line comment it refuses.
func (s *Server) checkComment(path string, line int, side, body string) string {
	if side != "RIGHT" {
		return fmt.Sprintf("side %q: the review comments on the head", side)
	}
	if body == "" {
		return "Body can't be blank"
	}
	for _, f := range s.Files {
		if f.Filename != path {
			continue
		}
		if f.Patch == "" || !commentable(f.Patch)[line] || s.Unplaceable[fmt.Sprintf("%s:%d", path, line)] {
			return "Pull request review thread line must be part of the diff"
		}
		return ""
	}
	return "Pull request review thread path could not be resolved"
}

func (s *Server) createReview(w http.ResponseWriter, body []byte, who string) {
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
	if err := json.Unmarshal(body, &req); err != nil {
		s.fail(w, 400, "Problems parsing JSON")
		return
	}
	for _, rv := range s.Reviews {
		if rv.State == "PENDING" && rv.User.Login == who {
			s.unprocessable(w, "User can only have one pending review per pull request")
			return
		}
	}
	if req.CommitID != s.HeadSHA {
		s.unprocessable(w, fmt.Sprintf("commit_id %s is not the head of the pull request", req.CommitID))
		return
	}
	state, msg := s.eventState(req.Event, who, req.Body)
	if msg != "" {
		s.unprocessable(w, msg)
		return
	}
	for _, c := range req.Comments {
		if c.Position != 0 {
			s.unprocessable(w, "the test server expects line+side, not the deprecated position")
			return
		}
		if msg := s.checkComment(c.Path, c.Line, c.Side, c.Body); msg != "" {
			s.unprocessable(w, msg)
			return
		}
	}
	s.nextID++
	rv := &Review{ID: s.nextID, User: User{Login: who}, Body: req.Body, State: state, CommitID: req.CommitID}
	s.Reviews = append(s.Reviews, rv)
	for _, c := range req.Comments {
		s.nextID++
		s.Comments = append(s.Comments, &Comment{ID: s.nextID, ReviewID: rv.ID, User: User{Login: who}, Body: c.Body, Path: c.Path,
			Line: c.Line, Side: c.Side, CommitID: req.CommitID})
	}
	writeJSON(w, 200, rv)
}

func (s *Server) jwtClaims(r *http.Request) (*jwt.RegisteredClaims, string) {
	auth := r.Header.Get("Authorization")
	raw, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		return nil, "A JSON web token could not be decoded"
	}
	claims := &jwt.RegisteredClaims{}
	_, err := jwt.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) { return s.App.Key, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(s.App.ID), jwt.WithTimeFunc(s.Now), jwt.WithIssuedAt())
	if err != nil {
		return nil, fmt.Sprintf("JWT rejected: %v", err)
	}
	if claims.ExpiresAt == nil || claims.IssuedAt == nil || claims.ExpiresAt.Sub(claims.IssuedAt.Time) > 10*time.Minute {
		return nil, "JWT exp must be at most 10 minutes after iat"
	}
	return claims, ""
}

// getApp serves GET /app (JWT): the App's slug.
func (s *Server) getApp(w http.ResponseWriter, r *http.Request) {
	if s.App == nil {
		s.fail(w, 404, "Not Found")
		return
	}
	if _, msg := s.jwtClaims(r); msg != "" {
		s.fail(w, 401, "%s", msg)
		return
	}
	slug := strings.TrimSuffix(s.App.Login(), "[bot]")
	writeJSON(w, 200, map[string]any{"slug": slug, "name": slug, "client_id": s.App.ID})
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
	if _, msg := s.jwtClaims(r); msg != "" {
		s.fail(w, 401, "%s", msg)
		return
	}
	var body struct {
		Repositories []string          `json:"repositories"`
		Permissions  map[string]string `json:"permissions"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		s.fail(w, 400, "Problems parsing JSON")
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
	writeJSON(w, 201, map[string]any{"token": s.appToken(), "expires_at": s.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
}
