package main

import (
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops/review/reviewtest"
)

// TestReviewUnderActionsCannotApprove: in GitHub Actions the GITHUB_TOKEN
// acts as github-actions[bot] (GET /user is not asked: it answers 403 to
// such tokens); where the repository does not let Actions approve, the
// verdict APPROVE is posted as a COMMENT that names the setting.
func TestReviewUnderActionsCannotApprove(t *testing.T) {
	f := newReviewFixture(t)
	f.srv.TokenLogin = reviewtest.ActionsLogin
	env := func(k string) string {
		return map[string]string{"GITHUB_TOKEN": cliToken, "GITHUB_REPOSITORY": "acme/weights", "GITHUB_ACTIONS": "true"}[k]
	}
	code, out, errs := runReviewCLI(t, env, "--pr", "7", "--api-url", f.srv.URL, "--workdir", f.repo.Dir, "--pubkey", f.keys.SignPub,
		"--hmac-key", f.keys.HMACKey, "--require-signature", "--approve")
	if code != exitOK || !strings.Contains(out, "COMMENT") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	rs := f.srv.ReviewList()
	if len(rs) != 1 || rs[0].State != "COMMENTED" || rs[0].User.Login != reviewtest.ActionsLogin ||
		!strings.Contains(rs[0].Body, "GitHub Actions is not permitted to approve pull requests in this repository") {
		t.Fatalf("reviews: %+v", rs)
	}
	for _, r := range f.srv.RequestLog() {
		if r == "GET /user" {
			t.Fatal("GET /user asked under Actions")
		}
	}
}
