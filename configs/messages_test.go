package configs

import (
	"regexp"
	"strings"
	"testing"
)

// camelCase matches a Go identifier such as TokenFile or SSHKey; a config
// error must name YAML keys (git.token_file) instead.
var camelCase = regexp.MustCompile(`\b(?:[A-Z]+[a-z]+[A-Z]\w*|[a-z]+[A-Z]\w*)\b`)

// TestMessagesNameYAMLKeys: every Validate message names the YAML keys
// involved (section.key), never a Go field name.
func TestMessagesNameYAMLKeys(t *testing.T) {
	const gh = "git: {remote: https://example.com/r.git}\n"
	for _, c := range []struct{ yaml, want string }{
		{"git: {token_file: /t, token_env: T}", "git.token_file: set git.token_file or git.token_env, not both"},
		{"git: {ssh_key: /k, token_env: T}", "git.ssh_key: set git.ssh_key (ssh remotes) or git.token_file/git.token_env (https remotes), not both"},
		{"git: {remote: 'https://u:secret@example.com/r.git'}", "git.remote: carries a password; remove it from the URL and use git.token_file or git.token_env"},
		{"git: {retry_base: 10s, retry_max: 1s}", "git.retry_max: 1s: must be >= git.retry_base (10s)"},
		{"git: {branch: main, base_branch: main}", "git.base_branch"},
		{gh + "github: {repo: a/b}", "github.token_env: a credential is required: github.token_env, github.token_file, or github.app_id + github.app_key + github.installation_id"},
		{gh + "github: {repo: a/b, token_env: T, token_file: /t}", "github.token_env: set exactly one of github.token_env, github.token_file, or github.app_id + github.app_key + github.installation_id"},
		{gh + "github: {repo: a/b, token_env: T, api_url: 'https://u:p@example.com/'}", "github.api_url: must not carry credentials; use github.token_env, github.token_file or github.app_id + github.app_key + github.installation_id"},
		{gh + "github: {repo: a/b, app_id: '1', installation_id: 2}", "github.app_key: required with github.app_id"},
		{"github: {token_env: T}", "github.repo: must be set (OWNER/NAME) when github.token_env is"},
		{"store: {oci: {username: u}}", "store.oci.repository: must be set when store.oci.mount_from, store.oci.username, store.oci.password_file or store.oci.threshold is"},
		{"store: {oci: {repository: r.example/x, password_file: /p}}", "store.oci.username: must be set with store.oci.password_file"},
		{"ranks: {world_size: 2, job: j, repository: r.example/x, timeout: -1s}", "ranks.timeout: must not be negative"},
		{"ranks: {world_size: 2, job: j, repository: r.example/x, poll_interval: -1s}", "ranks.poll_interval: must not be negative"},
		{"ranks: {world_size: 2, job: j, repository: r.example/x, committer: true}", "ranks.committer: needs git.remote"},
	} {
		_, err := Parse([]byte(c.yaml))
		if err == nil {
			t.Errorf("%s: accepted", c.yaml)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant %s", c.yaml, err, c.want)
		}
		if m := camelCase.FindString(strings.ReplaceAll(err.Error(), "GitHub", "")); m != "" {
			t.Errorf("%s: %v names the Go identifier %s", c.yaml, err, m)
		}
	}
}

// TestUnknownKeySuggestsNearest: a mistyped key names the nearest key of
// its own section; a key nothing resembles gets no suggestion.
func TestUnknownKeySuggestsNearest(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"stat_dir: x\n", `line 1: unknown key "stat_dir" (did you mean "state_dir"?)`},
		{"git:\n  token_flie: /t\n", `line 2: unknown key "token_flie" (did you mean "token_file"?)`},
		{"snapshot:\n  rows_per_chunks: 3\n", `line 2: unknown key "rows_per_chunks" (did you mean "rows_per_chunk"?)`},
		{"store:\n  oci:\n    repo: x\n", `line 3: unknown key "repo" (did you mean "repository"?)`},
		{"bogus: 1\n", `line 1: unknown key "bogus"`},
	} {
		_, err := Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %s", c.yaml, err, c.want)
		}
	}
	if _, err := Parse([]byte("bogus: 1\n")); err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("bogus: %v", err)
	}
}
