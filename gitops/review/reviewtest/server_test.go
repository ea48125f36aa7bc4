package reviewtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// recordingTB keeps the errors the server reports instead of failing.
type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingTB) Errorf(format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}

func call(t *testing.T, s *Server, method, path, token, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestServerIsStrict: bodies are checked against GitHub's schemas, the
// author cannot approve, others' reviews cannot be edited, one pending
// review per user, lists are [] and paginate with full Link headers.
func TestServerIsStrict(t *testing.T) {
	rec := &recordingTB{TB: t}
	s := New(rec, "acme", "weights", 7)
	s.Token, s.HeadSHA, s.BaseSHA = "tok-snapd", "h1", "b1"
	s.Users = map[string]string{"tok-other": "octo-author", "tok-actions": ActionsLogin}
	const pulls = "/repos/acme/weights/pulls"

	// Schema: an event outside the enum, a body of the wrong type, a PUT
	// without its required body.
	for _, c := range []struct{ method, path, body string }{
		{"POST", pulls + "/7/reviews", `{"commit_id":"h1","event":"LGTM","body":"x"}`},
		{"POST", pulls + "/7/comments", `{"commit_id":"h1","path":"a","body":5}`},
		{"PUT", pulls + "/7/reviews/1", ``},
		{"PUT", pulls + "/7/reviews/1/dismissals", `{"event":"DISMISS"}`},
		{"PATCH", pulls + "/7", `{"state":"merged"}`},
	} {
		n := len(rec.errs)
		if code, _, _ := call(t, s, c.method, c.path, "tok-snapd", c.body); code != 422 || len(rec.errs) != n+1 {
			t.Errorf("%s %s %s: status %d, schema errors %v", c.method, c.path, c.body, code, rec.errs[n:])
		}
	}
	if len(s.SchemaErrors) != 5 {
		t.Fatalf("schema errors: %v", s.SchemaErrors)
	}

	// Empty lists are [], never null.
	for _, p := range []string{pulls, pulls + "/7/reviews", pulls + "/7/comments", pulls + "/7/files"} {
		if code, _, b := call(t, s, "GET", p, "tok-snapd", ""); code != 200 || strings.TrimSpace(b) != "[]" {
			t.Errorf("GET %s: %d %q", p, code, b)
		}
	}

	// The author (octo-author) cannot approve or request changes; Actions
	// cannot approve unless allowed.
	for _, c := range []struct{ token, event, want string }{
		{"tok-other", "APPROVE", "Can not approve your own pull request"},
		{"tok-other", "REQUEST_CHANGES", "Can not request changes on your own pull request"},
		{"tok-actions", "APPROVE", "GitHub Actions is not permitted to approve pull requests."},
	} {
		code, _, b := call(t, s, "POST", pulls+"/7/reviews", c.token, `{"commit_id":"h1","event":"`+c.event+`","body":"x"}`)
		var e struct{ Errors []string }
		json.Unmarshal([]byte(b), &e)
		if code != 422 || len(e.Errors) != 1 || e.Errors[0] != c.want {
			t.Errorf("%s %s: %d %s", c.token, c.event, code, b)
		}
	}

	// A pending review blocks a second review of the same user.
	if code, _, b := call(t, s, "POST", pulls+"/7/reviews", "tok-snapd", `{"commit_id":"h1"}`); code != 200 || !strings.Contains(b, `"PENDING"`) {
		t.Fatalf("pending: %d %s", code, b)
	}
	if code, _, b := call(t, s, "POST", pulls+"/7/reviews", "tok-snapd", `{"commit_id":"h1","event":"COMMENT","body":"x"}`); code != 422 ||
		!strings.Contains(b, "User can only have one pending review per pull request") {
		t.Fatalf("second review: %d %s", code, b)
	}
	// Others do not see it.
	if _, _, b := call(t, s, "GET", pulls+"/7/reviews", "tok-other", ""); strings.TrimSpace(b) != "[]" {
		t.Fatalf("pending review visible to others: %s", b)
	}
	pending := s.ReviewList()[0].ID
	if code, _, _ := call(t, s, "DELETE", fmt.Sprintf("%s/7/reviews/%d", pulls, pending), "tok-snapd", ""); code != 200 {
		t.Fatalf("delete pending: %d", code)
	}

	// Only the author edits a review; approvals can be dismissed.
	id := s.AddReview("octo-reviewer", "CHANGES_REQUESTED", "h1", "<!-- snapd-review head=h1 -->\nforged")
	if code, _, _ := call(t, s, "PUT", fmt.Sprintf("%s/7/reviews/%d", pulls, id), "tok-snapd", `{"body":"mine now"}`); code != 403 {
		t.Fatalf("edit of another's review: %d", code)
	}
	if code, _, _ := call(t, s, "PUT", fmt.Sprintf("%s/7/reviews/%d/dismissals", pulls, id), "tok-snapd", `{"message":"m","event":"DISMISS"}`); code != 200 ||
		s.ReviewList()[0].State != "DISMISSED" {
		t.Fatalf("dismiss: %d %+v", code, s.ReviewList())
	}

	// Pagination: 5 files, 2 per page.
	for i := 0; i < 5; i++ {
		s.Files = append(s.Files, File{Filename: fmt.Sprint(i), Status: "added"})
	}
	_, h, _ := call(t, s, "GET", pulls+"/7/files?per_page=2&page=2", "tok-snapd", "")
	l := h.Get("Link")
	for _, want := range []string{`page=3&per_page=2>; rel="next"`, `page=3&per_page=2>; rel="last"`, `page=1&per_page=2>; rel="first"`, `page=1&per_page=2>; rel="prev"`} {
		if !strings.Contains(l, want) {
			t.Errorf("Link %q lacks %s", l, want)
		}
	}
	_, h, b := call(t, s, "GET", pulls+"/7/files?per_page=2&page=3", "tok-snapd", "")
	if l := h.Get("Link"); strings.Contains(l, `rel="next"`) || !strings.Contains(l, `rel="prev"`) || strings.Count(b, "filename") != 1 {
		t.Errorf("last page: Link %q, %s", l, b)
	}

	// PATCH on the pull request.
	if code, _, b := call(t, s, "PATCH", pulls+"/7", "tok-snapd", `{"title":"t2"}`); code != 200 || !strings.Contains(b, `"number":7`) {
		t.Fatalf("PATCH: %d %s", code, b)
	}
	if code, _, _ := call(t, s, "GET", pulls+"/7", "wrong", ""); code != 401 {
		t.Fatalf("wrong token: %d", code)
	}
}
