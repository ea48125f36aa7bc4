package configs

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/review"
	"github.com/snapd-ml/snapd/pipeline"
	"github.com/snapd-ml/snapd/snapshot"
)

func TestExampleConfigIsDefault(t *testing.T) {
	c, err := Load("snapd.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	if !reflect.DeepEqual(c, d) {
		t.Fatalf("example config differs from defaults:\n%+v\n%+v", c, d)
	}
}

func TestEmptyIsDefault(t *testing.T) {
	c, err := Parse(nil)
	if err != nil || !reflect.DeepEqual(c, Default()) {
		t.Fatalf("%v %+v", err, c)
	}
}

func TestOverrides(t *testing.T) {
	c, err := Parse([]byte("snapshot:\n  rows_per_chunk: 128\n  build: abc123\nwal:\n  poll_interval: 250ms\nqueue:\n  policy: block\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Snapshot.RowsPerChunk != 128 || c.Snapshot.Build != "abc123" || time.Duration(c.WAL.PollInterval) != 250*time.Millisecond || c.Queue.Policy != "block" {
		t.Fatalf("%+v", c)
	}
	if c.Snapshot.Schema != "weights/v1" {
		t.Fatal("unset field lost its default")
	}
}

func TestStrictErrors(t *testing.T) {
	cases := map[string]string{
		"state_dir: x\nsnapshot:\n  rows_per_chunks: 3\n": `line 3: unknown key "rows_per_chunks"`,
		"bogus: 1\n":                              `line 1: unknown key "bogus"`,
		"queue:\n  policy: drop\n":                "queue.policy",
		"snapshot:\n  build: \"a b\"\n":           "snapshot.build",
		"ring:\n  keep: 0\n":                      "ring.keep",
		"retention:\n  gens: -1\n":                "retention.gens",
		"retention:\n  repo: -3\n":                "retention.repo",
		"retention:\n  ring: 3\n":                 `unknown key "ring"`,
		"git:\n  part_limit: 200000000\n":         "git.part_limit",
		"git:\n  max_packs: -1\n":                 "git.max_packs",
		"wal:\n  poll_interval: fast\n":           "line 2",
		"git:\n  path: /abs\n":                    "git.path",
		"a: 1\n---\nb: 2\n":                       "unknown key",
		"log:\n  format: xml\n":                   "log.format",
		"git:\n  layout: zip\n":                   "git.layout",
		"snapshot:\n  workers: -1\n":              "snapshot.workers",
		"git:\n  token_file: a\n  token_env: B\n": "git.token_file",
		// Several wrong: the first in the documented order is named,
		// every time.
		"snapshot:\n  cuda: \"x y\"\n  host: \"x y\"\n  build: \"a b\"\n": "snapshot.build",
	}
	for in, want := range cases {
		for range 8 { // an order that depended on map iteration would show
			_, err := Parse([]byte(in))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%q: got %v, want error containing %q", in, err, want)
				break
			}
		}
	}
}

func TestGitAuthAndQueueSettings(t *testing.T) {
	c, err := Parse([]byte("git:\n  remote: ssh://git@example.com/a/b.git\n  ssh_key: /k\n  ssh_known_hosts: /kh\n  ssh_passphrase_env: PASS\n" +
		"  retry_base: 100ms\n  retry_max: 1s\n  auth_recheck: 30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := c.Git
	if g.SSHKey != "/k" || g.SSHKnownHosts != "/kh" || g.SSHPassphraseEnv != "PASS" || time.Duration(g.RetryBase) != 100*time.Millisecond ||
		time.Duration(g.RetryMax) != time.Second || time.Duration(g.AuthRecheck) != 30*time.Second {
		t.Fatalf("%+v", g)
	}
	d := Default().Git
	if time.Duration(d.RetryBase) != 2*time.Second || time.Duration(d.AuthRecheck) != 5*time.Minute {
		t.Fatalf("defaults %+v", d)
	}
}

const ghRemote = "git:\n  remote: https://github.com/acme/models.git\n  token_env: GIT_TOKEN\n"

func TestGitHubSection(t *testing.T) {
	c, err := Parse([]byte(ghRemote + "github:\n  repo: acme/models\n  base: release\n  api_url: https://ghe.example.com/api/v3/\n" +
		"  app_id: \"12\"\n  app_key: /etc/snapd/app.pem\n  installation_id: 34\n  approve: true\n  max_comments: -1\n" +
		"  thresholds: {max_rel_l2: 0.5, max_abs_delta: 2, allow_non_finite: true}\n  retry_max: 1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := GitHub{Repo: "acme/models", Base: "release", APIURL: "https://ghe.example.com/api/v3/", AppID: "12", AppKey: "/etc/snapd/app.pem",
		InstallationID: 34, Approve: true, MaxComments: -1, Thresholds: Thresholds{MaxRelL2: Limits{"0.5"}, MaxAbsDelta: Limits{"2"}, AllowNonFinite: Allow{All: true}},
		RetryMax: Duration(time.Minute)}
	if !c.GitHub.Equal(want) {
		t.Fatalf("got  %+v\nwant %+v", c.GitHub, want)
	}
	c, err = Parse([]byte(ghRemote + "github: {repo: acme/models, token_env: GITHUB_TOKEN}\n"))
	if err != nil || c.GitHub.Base != "main" || c.GitHub.APIURL != "https://api.github.com/" || c.GitHub.TokenEnv != "GITHUB_TOKEN" {
		t.Fatalf("%v %+v", err, c)
	}
}

// TestGitHubScopedThresholds: the thresholds take review's flag syntax
// (a number, or a list of NUMBER / PATTERN=NUMBER), include/exclude
// patterns, and allow_non_finite as true or a list of patterns.
func TestGitHubScopedThresholds(t *testing.T) {
	c, err := Parse([]byte(ghRemote + "github:\n  repo: acme/models\n  token_env: T\n  thresholds:\n" +
		"    max_rel_l2: [\"0.1\", \"model.*=0.05\", \"model.embed.*=0\"]\n" +
		"    max_abs_delta: \"lm_head.*=2\"\n" +
		"    allow_non_finite: [\"model.head.*\"]\n" +
		"    include: [\"model.*\", \"optimizer.state.*.step\"]\n" +
		"    exclude: [\"model.embed.*\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	th, field, err := c.GitHub.Thresholds.Review()
	if err != nil {
		t.Fatalf("%s: %v", field, err)
	}
	want := review.Thresholds{MaxRelL2: 0.1, RelL2Limits: []review.Limit{{Pattern: "model.*", Value: 0.05}, {Pattern: "model.embed.*"}},
		AbsDeltaLimits: []review.Limit{{Pattern: "lm_head.*", Value: 2}}, AllowNonFiniteIn: []string{"model.head.*"},
		Include: []string{"model.*", "optimizer.state.*.step"}, Exclude: []string{"model.embed.*"}}
	if !reflect.DeepEqual(th, want) {
		t.Fatalf("got  %+v\nwant %+v", th, want)
	}
	if sc := th.Scope("model.layers.0.w", "f32", []int64{4, 4}); !sc.Thresholded || sc.MaxRelL2 != 0.05 {
		t.Fatalf("model.layers.0.w: %+v", sc)
	}
	if sc := th.Scope("optimizer.state.0.step", "f32", nil); !sc.Thresholded {
		t.Fatalf("the included step: %+v", sc)
	}
	// A plain number still works; 0 is the default.
	c, err = Parse([]byte(ghRemote + "github: {repo: acme/models, token_env: T, thresholds: {max_rel_l2: 0.05, max_abs_delta: 0}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if th, _, _ := c.GitHub.Thresholds.Review(); th.MaxRelL2 != 0.05 || th.MaxAbsDelta != 0 || th.RelL2Limits != nil {
		t.Fatalf("%+v", th)
	}
}

func TestGitHubErrors(t *testing.T) {
	cases := map[string]string{
		"github: {token_env: T}\n":                                                                        "github.repo: must be set (OWNER/NAME) when github.token_env is",
		"github: {repo: acme/models, token_env: T}\n":                                                     "github.repo: needs git.remote",
		ghRemote + "github: {repo: acme, token_env: T}\n":                                                 `github.repo: "acme": want OWNER/NAME`,
		ghRemote + "github: {repo: acme/a/b, token_env: T}\n":                                             "github.repo",
		ghRemote + "github: {repo: -acme/x, token_env: T}\n":                                              "github.repo",
		ghRemote + "github: {repo: acme/models}\n":                                                        "github.token_env: a credential is required",
		ghRemote + "github: {repo: acme/models, token_env: T, token_file: /f}\n":                          "github.token_env: set exactly one",
		ghRemote + "github: {repo: acme/models, token_env: 'A B'}\n":                                      `github.token_env: "A B"`,
		ghRemote + "github: {repo: acme/models, app_id: '1', installation_id: 2}\n":                       "github.app_key: required",
		ghRemote + "github: {repo: acme/models, app_key: /k, installation_id: 2}\n":                       "github.app_id: required",
		ghRemote + "github: {repo: acme/models, app_id: '1', app_key: /k}\n":                              "github.installation_id",
		ghRemote + "github: {repo: acme/models, token_env: T, base: snapshots}\n":                         "github.base: \"snapshots\": must differ from git.branch",
		ghRemote + "github: {repo: acme/models, token_env: T, base: 'a..b'}\n":                            "github.base",
		ghRemote + "github: {repo: acme/models, token_env: T, api_url: ftp://x/}\n":                       "github.api_url",
		ghRemote + "github: {repo: acme/models, token_env: T, api_url: 'https://u:p@x/'}\n":               "github.api_url: must not carry credentials",
		ghRemote + "github: {repo: acme/models, token_env: T, max_comments: -2}\n":                        "github.max_comments",
		ghRemote + "github: {repo: acme/models, token_env: T, thresholds: {max_rel_l2: -1}}\n":            "github.thresholds.max_rel_l2",
		ghRemote + "github: {repo: acme/models, token_env: T, thresholds: {max_abs_delta: .nan}}\n":       "github.thresholds.max_abs_delta",
		ghRemote + "github: {repo: acme/models, token_env: T, retry_max: 0s}\n":                           "github.retry_max",
		ghRemote + "github: {repo: acme/models, token_env: T, thresholds: {max_rel_l2: ['model.*=x']}}\n": "github.thresholds.max_rel_l2",
		ghRemote + "github: {repo: acme/models, token_env: T, thresholds: {max_rel_l2: [0.1, 0.2]}}\n":    "github.thresholds.max_rel_l2: two bare numbers",
		ghRemote + "github: {repo: acme/models, token_env: T, thresholds: {exclude: ['[a']}}\n":           "github.thresholds.exclude",
		ghRemote + "github: {repo: acme/models, token_env: T, thresholds: {include: ['']}}\n":             "github.thresholds.include",
		ghRemote + "github: {repo: acme/models, token_env: T, thresholds: {allow_non_finite: ['a[']}}\n":  "github.thresholds.allow_non_finite",
		ghRemote + "github: {repo: acme/models, token_env: T, thresholds: {allow_non_finite: maybe}}\n":   "want true, false or a list of patterns",
		ghRemote + "github: {repo: acme/models, token_env: T, thresholds: {includes: [x]}}\n":             `unknown key "includes"`,
		ghRemote + "github: {repo: acme/models, token_env: T, tokn: x}\n":                                 `unknown key "tokn"`,
		ghRemote + "snapshot: {encrypt_to: /r}\ngithub: {repo: acme/models, token_env: T}\n":              "snapshot.encrypt_to is set",
		"git: {remote: x, ssh_key: /k, token_file: /t}\n":                                                 "git.ssh_key",
		"git: {retry_base: 0s}\n":                 "git.retry_base",
		"git: {retry_base: 10s, retry_max: 1s}\n": "git.retry_max",
		"git: {auth_recheck: 0s}\n":               "git.auth_recheck",
		"git: {enabled: false, remote: x}\ngithub: {repo: acme/models, token_env: T}\n": "github.repo: needs git.remote",
	}
	for in, want := range cases {
		_, err := Parse([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want error containing %q", in, err, want)
		}
	}
}

// TestReadmeStatesDefaults: the defaults the README quotes are Default's
// (Default is the one statement of them; snapd.example.yaml is checked
// by TestExampleConfigIsDefault, the CLI's help texts quote Default).
func TestReadmeStatesDefaults(t *testing.T) {
	// The user documentation: the README and the docs it links.
	var readme string
	for _, f := range []string{"../README.md", "../docs/COMMANDS.md", "../docs/OPERATING.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		readme += string(b)
	}
	d := Default()
	for _, want := range []string{
		"(`--state-dir`, default `./" + d.StateDir + "`)",
		"(`--metrics-addr`, default `" + d.Metrics.Addr + "`)",
		"`metrics.stuck_after` (default " + strings.TrimSuffix(time.Duration(d.Metrics.StuckAfter).String(), "0s") + ")",
		fmt.Sprintf("`ring.keep` (default %d)", d.Ring.Keep),
		fmt.Sprintf("`retention.gens` (default %d)", d.Retention.Gens),
		fmt.Sprintf("`retention.repo` (default %d)", d.Retention.Repo),
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md and docs/ do not state %s", want)
		}
	}
	// The values a component applies to its own zero config are the ones
	// Default states.
	meta := snapshot.DefaultMeta()
	if s := d.Snapshot; s.Schema != meta.Schema || s.Build != meta.Build || s.Host != meta.Host || s.Cuda != meta.Cuda {
		t.Errorf("snapshot defaults %+v, snapshot.DefaultMeta %+v", s, meta)
	}
	if d.Ring.Keep != pipeline.DefaultRingKeep || d.Retention.Gens != pipeline.DefaultRetainKeep || d.Retention.Repo != pipeline.DefaultRetainKeep || d.Queue.Max != pipeline.DefaultQueueMax || d.Queue.Policy != string(pipeline.DefaultPolicy) ||
		d.Git.Branch != gitops.DefaultBranch || d.Git.PartLimit != gitops.DefaultPartLimit || d.Git.MaxPacks != gitops.DefaultMaxPacks || d.GitHub.APIURL != review.DefaultAPIURL {
		t.Errorf("defaults differ from the components': %+v", d)
	}
}
