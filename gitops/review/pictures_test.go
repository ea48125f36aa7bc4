package review

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops/review/reviewtest"
)

// TestReviewLinksPictures: the review body shows every diff picture the
// pull request adds or changes as an image from the head commit, plus a
// link to its page; removed pictures are not shown; paths are escaped.
func TestReviewLinksPictures(t *testing.T) {
	f := newFixture(t, nil, nil)
	s := newPRServer(t, f, true)
	s.Files = append(s.Files,
		reviewtest.File{Filename: "snapshots/current.diff.svg", Status: "modified"},
		reviewtest.File{Filename: "old/gone.diff.svg", Status: "removed"},
		reviewtest.File{Filename: "a b/(x).diff.svg", Status: "added"},
	)
	c := newTestClient(t, s, newFakeClock(), nil)
	req := Request{Owner: "acme", Repo: "weights", Number: 7, Fetch: GitFetcher{Dir: f.repo.Dir}, Options: f.opts(), TempDir: t.TempDir(), DryRun: true}
	res, err := c.ReviewPullRequest(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(s.URL)
	page := u.Scheme + "://" + u.Host + "/acme/weights/blob/" + f.headSHA + "/snapshots/current.diff.svg"
	body := res.Review.Body
	for _, want := range []string{
		"### Which rows moved",
		"![rows changed per array in snapshots/current.diff.svg](" + page + "?raw=true)",
		"[`snapshots/current.diff.svg`](" + page + ")",
		"/blob/" + f.headSHA + "/a%20b/%28x%29.diff.svg?raw=true)",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("no %q in the body:\n%s", want, body)
		}
	}
	if strings.Contains(body, "gone.diff.svg") {
		t.Error("a removed picture is shown")
	}
	if i, j := strings.Index(body, "### Which rows moved"), strings.Index(body, "### `"); i < 0 || j < 0 || i > j {
		t.Error("the pictures do not come before the per-file sections")
	}
	gh, err := NewClient(ClientOptions{Token: StaticToken(testToken)})
	if err != nil {
		t.Fatal(err)
	}
	if got := gh.webBase(); got != "https://github.com" {
		t.Fatalf("web base of api.github.com: %s", got)
	}
}
