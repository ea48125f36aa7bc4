// Package configs loads snapd's YAML configuration. Loading is strict:
// unknown keys are errors naming the key and its line, and Validate names
// the field that is wrong. Every field has a default, so an empty file (or
// no file at all) is a valid configuration.
package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/gitops/review"
	"github.com/snapd-ml/snapd/gitops/sshsig"
	"github.com/snapd-ml/snapd/internal/suggest"
	"github.com/snapd-ml/snapd/pipeline"
	"github.com/snapd-ml/snapd/snapshot"
	"gopkg.in/yaml.v3"
)

// Config is the whole daemon configuration. Paths that are relative are
// resolved against StateDir by Resolve.
type Config struct {
	// StateDir holds wal/, gens/, keys/, ring/, state and the local Git
	// repository. Default ./.snapd.
	StateDir string `yaml:"state_dir"`
	Log      Log    `yaml:"log"`
	Ranks    Ranks  `yaml:"ranks"` // one node of a sharded job (configs/ranks.go)
	Snapshot Snap   `yaml:"snapshot"`
	Keys     Keys   `yaml:"keys"`
	Ring     Ring   `yaml:"ring"`
	// Retention bounds the host's disk: STATE_DIR/gens and the local
	// repository (the ring's bound is ring.keep).
	Retention Retention `yaml:"retention"`
	Queue     Queue     `yaml:"queue"`
	Git       Git       `yaml:"git"`
	Metrics   Metric    `yaml:"metrics"`
	WAL       WAL       `yaml:"wal"`
	GitHub    GitHub    `yaml:"github"`
	Store     Store     `yaml:"store"`
}

// Log configures log/slog output.
type Log struct {
	Format string `yaml:"format"` // text (default) or json
	Level  string `yaml:"level"`  // debug, info (default), warn, error
}

// Snap are the WTXT writer options.
type Snap struct {
	Schema       string `yaml:"schema"`         // default weights/v1
	Build        string `yaml:"build"`          // default unknown
	Host         string `yaml:"host"`           // default cpu
	Cuda         string `yaml:"cuda"`           // default off
	RowsPerChunk int    `yaml:"rows_per_chunk"` // 0 = the profile's default per array
	Streaming    bool   `yaml:"streaming"`      // root_pending + WSUM
	// Workers bounds the encoder's parallelism (the daemon's CPU use beside
	// the training job); 0 = half the CPUs, at least 1.
	Workers int `yaml:"workers"`
	// EncryptTo is an age recipients file; when set every snapshot, delta
	// and WSUM is age-armored and gets a WSEAL seal.
	EncryptTo string `yaml:"encrypt_to"`
}

// Keys name key files; empty paths mean the generated keys in
// StateDir/keys.
type Keys struct {
	Sign string `yaml:"sign"` // OpenSSH Ed25519 private key
	HMAC string `yaml:"hmac"` // 64 hex chars
	// Principal names the signing key in StateDir/keys/allowed_signers
	// (git verify-commit, ssh-keygen -Y verify); "" = snapd@HOSTNAME.
	Principal string `yaml:"principal"`
}

// Ring is the local ring of finished generations.
type Ring struct {
	Keep int `yaml:"keep"` // generations kept, default 3 (pipeline.DefaultRingKeep)
}

// Retention is how many generations each store on the training host
// keeps (pipeline.Retention); 0 turns a rule off. With the defaults
// (pipeline.DefaultRetainKeep = 3, as ring.keep) the host's disk stays
// bounded after any number of generations (docs/OPERATING.md "Disk").
type Retention struct {
	// Gens: after every done generation STATE_DIR/gens is reclaimed as by
	// `snapd gc --keep Gens` (never the newest snapshotted, a pinned, a
	// pending or a failed generation); default 3, 0 never.
	Gens int `yaml:"gens"`
	// Repo: after every push the local repository (on a sharded job's
	// committer node, its ledger) keeps the history of the newest Repo
	// pushed generations plus everything not yet pushed (a shallow
	// repository; older generations are read from the remote); only
	// with git.remote; default 3, 0 keeps all history.
	Repo int `yaml:"repo"`
}

// Queue is the request queue between the WAL and the pipeline.
type Queue struct {
	// Max requests waiting for the pipeline; default 16.
	Max int `yaml:"max"`
	// Policy when Max is reached: "block" (back-pressure on the WAL reader;
	// requests stay in the WAL) or "coalesce" (keep the newest, log and
	// count the skipped ones). Default coalesce.
	Policy string `yaml:"policy"`
}

// Git is where generations are committed and pushed.
type Git struct {
	Enabled bool   `yaml:"enabled"` // default true (a local repository)
	Repo    string `yaml:"repo"`    // local repository path, default StateDir/repo
	Branch  string `yaml:"branch"`  // default snapshots
	// BaseBranch: the generations branch starts from this branch of the
	// remote (or of the local repository) instead of an orphan commit, so
	// pull requests into it have a merge base. Empty = orphan (default).
	BaseBranch string `yaml:"base_branch"`
	Path       string `yaml:"path"` // directory inside the repository, default snapshots
	// AuthorName and AuthorEmail are the generation commits' author and
	// committer; default snapd <snapd@localhost>.
	AuthorName  string `yaml:"author_name"`
	AuthorEmail string `yaml:"author_email"`
	// Layout: auto (the default: one file up to split_above, the
	// segments layout above it; an age-armored WTXT above it as part
	// files), single (one file whatever its size), split (always part
	// files) or segments (always: text pieces + raw tensor segments in
	// Git, gitops doc "Segments layout"; not the OCI skeleton layout of
	// store.oci).
	Layout string `yaml:"layout"`
	// CommitDelta: when the DELTA is committed beside the WTXT: auto (the
	// default: only with a single-file WTXT; split parts already store
	// just the changed chunks), always, never. The ring keeps it anyway.
	CommitDelta string `yaml:"commit_delta"`
	// Picture: commit current.diff.svg, the picture of which rows of which
	// arrays changed since the previous generation (snapshot/diffsvg),
	// beside each generation that has a base; default true. Never for
	// encrypted generations.
	Picture bool `yaml:"picture"`

	Remote string `yaml:"remote"` // URL or path; empty = no push
	// Auth for HTTP(S): TokenFile or TokenEnv (read at every push, never
	// logged), Username (default git). For ssh: SSHKey, SSHKnownHosts
	// (default the user's known_hosts) and SSHPassphraseEnv (the key's
	// passphrase, if any, from that environment variable).
	TokenFile        string `yaml:"token_file"`
	TokenEnv         string `yaml:"token_env"`
	Username         string `yaml:"username"`
	SSHKey           string `yaml:"ssh_key"`
	SSHKnownHosts    string `yaml:"ssh_known_hosts"`
	SSHPassphraseEnv string `yaml:"ssh_passphrase_env"`
	// SplitAbove is the WTXT size above which the auto layout stores a
	// generation as segments (age-armored: part files); default 64 MiB. PartLimit caps one part; default 256 KiB
	// (small parts keep repository growth close to the changed bytes).
	SplitAbove int64 `yaml:"split_above"`
	PartLimit  int64 `yaml:"part_limit"`
	// MaxPacks: after a push (after a commit without a remote) the daemon
	// repacks its repository geometrically once it holds more packs than
	// this (gitops Repo.Maintain); default 50, 0 never.
	MaxPacks int `yaml:"max_packs"`
	// RetryBase is the resend queue's first retry delay after a failed
	// push (default 2s); it doubles per failure up to RetryMax (default 5m).
	RetryBase Duration `yaml:"retry_base"`
	RetryMax  Duration `yaml:"retry_max"`
	// AuthRecheck: after the remote refused the credential the queue stops
	// (snapd status: needs-attention) and tries one push this often, so it
	// resumes by itself once the token file or key is fixed; default 5m.
	// `snapd queue retry` resumes at once.
	AuthRecheck Duration `yaml:"auth_recheck"`
	// PushTimeout + (bytes to send) / PushMinRate bounds one push (git
	// ls-remote + git push); defaults 5m and 1 MiB/s. PushStall: a push
	// whose git shows no progress for this long is killed (default 2m).
	// Either becomes a retry; after PushMaxTimeouts consecutive ones
	// (default 3) the queue stops as needs-attention.
	PushTimeout     Duration `yaml:"push_timeout"`
	PushMinRate     int64    `yaml:"push_min_rate"`
	PushStall       Duration `yaml:"push_stall"`
	PushMaxTimeouts int      `yaml:"push_max_timeouts"`
}

// GitHub makes the daemon open (or update) a pull request from the
// generations branch (git.branch, pushed to git.remote) to Base after every
// successful push, and post a review of the newest generation (gitops/review).
// It is enabled by Repo.
type GitHub struct {
	// Repo is OWNER/NAME of the GitHub repository git.remote points to;
	// empty disables the pull-request step.
	Repo string `yaml:"repo"`
	// Base is the branch the pull request targets; default main.
	Base string `yaml:"base"`
	// APIURL is the REST API root; default https://api.github.com/ (GitHub
	// Enterprise Server: https://HOST/api/v3/).
	APIURL string `yaml:"api_url"`
	// Exactly one credential: TokenEnv (an environment variable holding a
	// token), TokenFile, or a GitHub App (AppID, AppKey = its private key
	// PEM file, InstallationID). Tokens are never logged.
	TokenEnv       string `yaml:"token_env"`
	TokenFile      string `yaml:"token_file"`
	AppID          string `yaml:"app_id"`
	AppKey         string `yaml:"app_key"`
	InstallationID int64  `yaml:"installation_id"`
	// Title of the pull request; default "snapd: generations from <branch>".
	// It stays the same across generations (each review names its own).
	Title string `yaml:"title"`
	// Approve lets a review that passes every check be an APPROVE instead
	// of a COMMENT.
	Approve bool `yaml:"approve"`
	// MaxComments caps line comments per review (0 = 50, -1 = none).
	MaxComments int        `yaml:"max_comments"`
	Thresholds  Thresholds `yaml:"thresholds"`
	// RetryMax caps the backoff between failed attempts to publish; default 5m.
	RetryMax Duration `yaml:"retry_max"`
}

// Metric configures the Prometheus endpoint.
type Metric struct {
	// Addr is a host:port; default 127.0.0.1:9464; "off" disables.
	Addr string `yaml:"addr"`
	// StuckAfter: /healthz turns unhealthy when a request is not done, or
	// the oldest push waits, this long; default 30m.
	StuckAfter Duration `yaml:"stuck_after"`
}

// WAL configures the request-log listener.
type WAL struct {
	// PollInterval is the fallback poll period (fsnotify does not fire on
	// NFS); default 1s.
	PollInterval Duration `yaml:"poll_interval"`
	// DisableFsnotify polls only.
	DisableFsnotify bool `yaml:"disable_fsnotify"`
}

// Duration is a time.Duration written as "250ms", "5m".
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration like 5s", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %v", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Default returns the configuration used when no file is given. It is
// the one statement of the daemon's defaults: values a component also
// applies to its own zero config (pipeline, gitops, queue, review,
// snapshot.DefaultMeta) are taken from that component's exported
// defaults, not repeated; snapd.example.yaml is tested to equal it and
// the CLI's help texts quote it.
func Default() *Config {
	meta := snapshot.DefaultMeta()
	return &Config{
		StateDir:  ".snapd",
		Log:       Log{Format: "text", Level: "info"},
		Snapshot:  Snap{Schema: meta.Schema, Build: meta.Build, Host: meta.Host, Cuda: meta.Cuda},
		Ring:      Ring{Keep: pipeline.DefaultRingKeep},
		Retention: Retention{Gens: pipeline.DefaultRetainKeep, Repo: pipeline.DefaultRetainKeep},
		Queue:     Queue{Max: pipeline.DefaultQueueMax, Policy: string(pipeline.DefaultPolicy)},
		Git: Git{Enabled: true, Branch: gitops.DefaultBranch, Path: gitops.DefaultPath, Layout: string(gitops.LayoutAuto), CommitDelta: string(gitops.DeltaAuto), Picture: true,
			SplitAbove: 64 << 20, PartLimit: gitops.DefaultPartLimit, MaxPacks: gitops.DefaultMaxPacks, RetryBase: Duration(queue.DefaultBaseDelay), RetryMax: Duration(queue.DefaultMaxDelay),
			AuthRecheck: Duration(queue.DefaultAuthRecheck), PushTimeout: Duration(gitops.DefaultPushTimeout), PushMinRate: gitops.DefaultPushMinRate,
			PushStall: Duration(gitops.DefaultPushStall), PushMaxTimeouts: queue.DefaultMaxTimeouts},
		Metrics: Metric{Addr: "127.0.0.1:9464", StuckAfter: Duration(pipeline.DefaultStuckAfter)},
		WAL:     WAL{PollInterval: Duration(time.Second)}, // the daemon polls less often than wal.DefaultPollInterval
		GitHub:  GitHub{Base: "main", APIURL: review.DefaultAPIURL, RetryMax: Duration(pipeline.DefaultPRRetryMax)},
		Store:   Store{OCI: defaultOCIStore()},
	}
}

// Load reads the file at path over the defaults. It fails on unknown keys,
// naming the key and line, and runs Validate.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse parses YAML over the defaults and validates the result.
func Parse(b []byte) (*Config, error) {
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, cleanYAMLError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// cleanYAMLError turns yaml.v3's "field x not found in type configs.Git"
// into "line N: unknown key "x"", followed by "(did you mean "y"?)" when a
// key of that section is close to x.
func cleanYAMLError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, m := range te.Errors {
		if i := strings.Index(m, ": field "); i >= 0 && strings.Contains(m, " not found in type ") {
			key := strings.TrimPrefix(m[i:], ": field ")
			typ := key[strings.Index(key, " not found in type ")+len(" not found in type "):]
			key = key[:strings.Index(key, " not found")]
			m = fmt.Sprintf("%s: unknown key %q", m[:i], key)
			if near := suggest.Nearest(key, yamlKeys(typ)); near != "" {
				m += fmt.Sprintf(" (did you mean %q?)", near)
			}
		}
		msgs = append(msgs, m)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// yamlKeys returns the YAML keys of the section whose Go type yaml.v3
// names typ (such as "configs.Git"), found by walking Config; nil if no
// section has that type.
func yamlKeys(typ string) []string {
	var walk func(t reflect.Type) []string
	walk = func(t reflect.Type) []string {
		if t.Kind() != reflect.Struct {
			return nil
		}
		if t.String() == typ {
			var keys []string
			for i := range t.NumField() {
				if k, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); k != "" && k != "-" {
					keys = append(keys, k)
				}
			}
			return keys
		}
		for i := range t.NumField() {
			if keys := walk(t.Field(i).Type); keys != nil {
				return keys
			}
		}
		return nil
	}
	return walk(reflect.TypeFor[Config]())
}

// Validate checks every field and names the first wrong one.
func (c *Config) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...))
	}
	if c.StateDir == "" {
		return bad("state_dir", "must not be empty")
	}
	if err := c.ValidateRanks(); err != nil {
		return err
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return bad("log.format", "%q: want text or json", c.Log.Format)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return bad("log.level", "%q: want debug, info, warn or error", c.Log.Level)
	}
	for _, f := range [...]struct{ field, v string }{{"snapshot.schema", c.Snapshot.Schema}, {"snapshot.build", c.Snapshot.Build}, {"snapshot.host", c.Snapshot.Host}, {"snapshot.cuda", c.Snapshot.Cuda}} {
		if !wtxt.IsToken(f.v) {
			return bad(f.field, "%q: want one or more of A-Z a-z 0-9 . _ - / : +", f.v)
		}
	}
	if c.Snapshot.RowsPerChunk < 0 {
		return bad("snapshot.rows_per_chunk", "%d: must be >= 0 (0 = default)", c.Snapshot.RowsPerChunk)
	}
	if c.Snapshot.Workers < 0 {
		return bad("snapshot.workers", "%d: must be >= 0 (0 = half the CPUs)", c.Snapshot.Workers)
	}
	if c.Ring.Keep < 1 {
		return bad("ring.keep", "%d: must be >= 1", c.Ring.Keep)
	}
	if c.Retention.Gens < 0 {
		return bad("retention.gens", "%d: must be >= 0 (0 = never reclaim)", c.Retention.Gens)
	}
	if c.Retention.Repo < 0 {
		return bad("retention.repo", "%d: must be >= 0 (0 = keep all history)", c.Retention.Repo)
	}
	if c.Metrics.StuckAfter <= 0 {
		return bad("metrics.stuck_after", "%s: must be > 0", time.Duration(c.Metrics.StuckAfter))
	}
	if p := c.Keys.Principal; p != "" && !sshsig.ValidPrincipal(p) {
		return bad("keys.principal", "%q: want 1..128 of A-Z a-z 0-9 . _ @ + -", p)
	}
	if c.Queue.Max < 1 {
		return bad("queue.max", "%d: must be >= 1", c.Queue.Max)
	}
	switch c.Queue.Policy {
	case "block", "coalesce":
	default:
		return bad("queue.policy", "%q: want block or coalesce", c.Queue.Policy)
	}
	if !validBranch(c.Git.Branch) {
		return bad("git.branch", "%q: not a valid branch name", c.Git.Branch)
	}
	if c.Git.BaseBranch != "" && (!validBranch(c.Git.BaseBranch) || c.Git.BaseBranch == c.Git.Branch) {
		return bad("git.base_branch", "%q: not a valid branch name other than git.branch", c.Git.BaseBranch)
	}
	for _, f := range []struct{ name, v string }{{"git.author_name", c.Git.AuthorName}, {"git.author_email", c.Git.AuthorEmail}} {
		if len(f.v) > 256 || strings.ContainsAny(f.v, "<>") || strings.ContainsFunc(f.v, unicode.IsControl) {
			return bad(f.name, "want at most 256 characters, no <, > or control characters")
		}
	}
	if filepath.IsAbs(c.Git.Path) || strings.Contains(filepath.ToSlash(c.Git.Path), "..") {
		return bad("git.path", "%q: must be relative inside the repository", c.Git.Path)
	}
	switch c.Git.Layout {
	case "auto", "single", "split", "segments":
	default:
		return bad("git.layout", "%q: want auto, single, split or segments", c.Git.Layout)
	}
	switch c.Git.CommitDelta {
	case "", "auto", "always", "never":
	default:
		return bad("git.commit_delta", "%q: want auto, always or never", c.Git.CommitDelta)
	}
	if c.Git.TokenFile != "" && c.Git.TokenEnv != "" {
		return bad("git.token_file", "set git.token_file or git.token_env, not both")
	}
	if u, err := url.Parse(c.Git.Remote); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return bad("git.remote", "carries a password; remove it from the URL and use git.token_file or git.token_env")
		}
	}
	if c.Git.PartLimit < 64<<10 || c.Git.PartLimit > 95<<20 {
		return bad("git.part_limit", "%d: must be in [64 KiB, 95 MiB] (GitHub rejects files over 100 MiB)", c.Git.PartLimit)
	}
	if c.Git.MaxPacks < 0 {
		return bad("git.max_packs", "%d: must be >= 0 (0: never repack)", c.Git.MaxPacks)
	}
	if c.Git.SplitAbove <= 0 {
		return bad("git.split_above", "%d: must be > 0", c.Git.SplitAbove)
	}
	if c.Git.SSHKey != "" && (c.Git.TokenFile != "" || c.Git.TokenEnv != "") {
		return bad("git.ssh_key", "set git.ssh_key (ssh remotes) or git.token_file/git.token_env (https remotes), not both")
	}
	if c.Git.RetryBase <= 0 {
		return bad("git.retry_base", "must be > 0")
	}
	if c.Git.RetryMax <= 0 {
		return bad("git.retry_max", "must be > 0")
	}
	if c.Git.RetryMax < c.Git.RetryBase {
		return bad("git.retry_max", "%v: must be >= git.retry_base (%v)", time.Duration(c.Git.RetryMax), time.Duration(c.Git.RetryBase))
	}
	if c.Git.AuthRecheck <= 0 {
		return bad("git.auth_recheck", "must be > 0")
	}
	if c.Git.PushTimeout <= 0 {
		return bad("git.push_timeout", "must be > 0")
	}
	if c.Git.PushMinRate <= 0 {
		return bad("git.push_min_rate", "%d: must be > 0 (bytes per second)", c.Git.PushMinRate)
	}
	if c.Git.PushStall <= 0 {
		return bad("git.push_stall", "must be > 0")
	}
	if c.Git.PushMaxTimeouts < 1 {
		return bad("git.push_max_timeouts", "%d: must be >= 1", c.Git.PushMaxTimeouts)
	}
	if c.WAL.PollInterval < Duration(10*time.Millisecond) {
		return bad("wal.poll_interval", "%v: must be >= 10ms", time.Duration(c.WAL.PollInterval))
	}
	if err := c.validateStore(); err != nil {
		return err
	}
	return c.validateGitHub()
}

// validBranch is a conservative check of a branch name (git
// check-ref-format rules that matter in a config file).
func validBranch(b string) bool {
	if b == "" || strings.ContainsAny(b, " ~^:?*[\\\t\n") || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") ||
		strings.HasSuffix(b, "/") || strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, ".") || strings.Contains(b, "..") ||
		strings.Contains(b, "@{") || strings.Contains(b, "//") {
		return false
	}
	return true
}

var (
	reGitHubOwner = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$`) })
	reGitHubName  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`) })
)

// validateGitHub checks the github section.
func (c *Config) validateGitHub() error {
	g := &c.GitHub
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("github.%s: %s", field, fmt.Sprintf(format, a...))
	}
	app := g.AppID != "" || g.AppKey != "" || g.InstallationID != 0
	if g.Repo == "" {
		for _, f := range [...]struct {
			field string
			set   bool
		}{{"token_env", g.TokenEnv != ""}, {"token_file", g.TokenFile != ""}, {"app_id", app}, {"title", g.Title != ""}} {
			if f.set {
				return bad("repo", "must be set (OWNER/NAME) when github.%s is", f.field)
			}
		}
		return nil
	}
	owner, name, ok := strings.Cut(g.Repo, "/")
	if !ok || !reGitHubOwner().MatchString(owner) || !reGitHubName().MatchString(name) || name == "." || name == ".." {
		return bad("repo", "%q: want OWNER/NAME", g.Repo)
	}
	if !c.Git.Enabled || c.Git.Remote == "" {
		return bad("repo", "needs git.remote: the pull request's head branch (git.branch) is pushed there")
	}
	if c.Snapshot.EncryptTo != "" {
		return bad("repo", "snapshot.encrypt_to is set: encrypted snapshots cannot be reviewed")
	}
	if !validBranch(g.Base) {
		return bad("base", "%q: not a valid branch name", g.Base)
	}
	if g.Base == c.Git.Branch {
		return bad("base", "%q: must differ from git.branch, the pull request's head", g.Base)
	}
	u, err := url.Parse(g.APIURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return bad("api_url", "%q: want an absolute http(s) URL such as https://api.github.com/", g.APIURL)
	}
	if u.User != nil {
		return bad("api_url", "must not carry credentials; use github.token_env, github.token_file or github.app_id + github.app_key + github.installation_id")
	}
	n := 0
	for _, set := range []bool{g.TokenEnv != "", g.TokenFile != "", app} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return bad("token_env", "a credential is required: github.token_env, github.token_file, or github.app_id + github.app_key + github.installation_id")
	case n > 1:
		return bad("token_env", "set exactly one of github.token_env, github.token_file, or github.app_id + github.app_key + github.installation_id")
	}
	if app {
		switch {
		case g.AppID == "":
			return bad("app_id", "required with github.app_key and github.installation_id")
		case g.AppKey == "":
			return bad("app_key", "required with github.app_id (the App's private key PEM file)")
		case g.InstallationID <= 0:
			return bad("installation_id", "%d: required with github.app_id, must be > 0", g.InstallationID)
		}
	}
	if g.TokenEnv != "" && !reEnvName().MatchString(g.TokenEnv) {
		return bad("token_env", "%q: not an environment variable name", g.TokenEnv)
	}
	if g.MaxComments < -1 {
		return bad("max_comments", "%d: must be >= -1 (0 = default, -1 = no line comments)", g.MaxComments)
	}
	if _, field, err := g.Thresholds.Review(); err != nil {
		return bad("thresholds."+field, "%v", err)
	}
	if g.RetryMax <= 0 {
		return bad("retry_max", "must be > 0")
	}
	return nil
}

var reEnvName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
