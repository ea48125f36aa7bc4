package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/configs"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/gitops/review"
	"github.com/snapd-ml/snapd/gitops/sshsig"
	"github.com/snapd-ml/snapd/internal/sdnotify"
	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/pipeline"
)

type runOptions struct {
	stateDir     string
	config       string
	metricsAddr  string
	logFormat    string
	logLevel     string
	remote       string
	branch       string
	baseBranch   string
	ringKeep     int
	retainGens   int
	retainRepo   int
	queueMax     int
	policy       string
	workers      int
	rowsPerChunk int
	build        string
	stream       bool
	encryptTo    string
	signKey      string
	hmacKey      string
	noGit        bool
	principal    string
	cpuProfile   string
	oci          ociTargetFlags
	// changed reports whether a flag was set on the command line.
	changed func(name string) bool
	// signals delivers SIGHUP/SIGTERM/SIGINT (tests inject their own).
	signals <-chan os.Signal
}

func newRunCommand(e *env) *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the snapshot daemon beside a training job",
		Long: `run is the daemon. It watches STATE_DIR/wal for snapshot requests (one line
per request, appended by the trainer, e.g. with scripts/snapd_trainer.py),
pins the generation, converts it to a signed, HMAC'd, Merkle-chained WTXT,
optionally age-encrypts it, writes a DELTA v2 against the previous
generation into the local ring (STATE_DIR/ring), commits it to the local Git
repository (STATE_DIR/repo) and, with a remote, pushes through a durable
resend queue. With --oci-repository (store.oci; --oci-insecure is
store.oci.insecure) tensor bytes go to an OCI
registry and Git gets the skeleton: the build encodes each generation
straight to the skeleton and segment blobs and uploads the missing ones and
the manifest (when the registry cannot take them, the queue job uploads them
later), then one queue job per generation commits and pushes (README "Big
models: OCI registry"). With a github section it then opens (or updates) a pull
request from the generations branch to github.base and posts a review of the
newest generation (verification, changed rows, thresholds).

It needs no configuration: keys are generated into STATE_DIR/keys on first
start (sign_ed25519, hmac.key, and allowed_signers for the principal
snapd@HOSTNAME; --sign-key, --hmac-key and --principal name others).
--config FILE (strict YAML, see configs/snapd.example.yaml) sets
everything; flags override it, and a flag not given leaves the config's
value (e.g. --branch: git.branch, default "` + gitops.DefaultBranch + `"). SIGHUP reloads the config file; SIGTERM and
SIGINT stop cleanly (the generation in flight is abandoned and handled again
after a restart). A second daemon on the same state dir refuses to start.

With a ranks: section (world_size > 0) the daemon is one node of a sharded
training job instead: each request is one rank's shard, pushed to
ranks.repository as a rank manifest; the node with ranks.committer: true
commits every complete generation to git.remote (README "Sharded training
jobs", docs/FORMAT.md section 7; snapd ranks status).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			sd, sdSet := e.stateDirOverride(cmd)
			if sdSet {
				o.stateDir = sd
			}
			if p := e.configPath(cmd); p != "" {
				o.config = p
			}
			o.changed = func(n string) bool { return cmd.Flags().Changed(n) || (n == "state-dir" && sdSet) }
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			stop, err := startCPUProfile(o.cpuProfile)
			if err != nil {
				return ioError{err}
			}
			err = runRun(ctx, e, &o)
			if perr := stop(); perr != nil && err == nil {
				err = ioError{perr}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.metricsAddr, "metrics-addr", "", `Prometheus /metrics and /healthz address, "off" to disable (default from config: `+configs.Default().Metrics.Addr+`)`)
	f.StringVar(&o.logFormat, "log-format", "", "text or json")
	f.StringVar(&o.logLevel, "log-level", "", "debug, info, warn or error")
	f.StringVar(&o.remote, "git-remote", "", "Git remote to push to (URL or path; a relative path is taken from the working directory)")
	registerConfigBranch(f, &o.branch)
	f.StringVar(&o.branch, "git-branch", "", "old spelling of --branch")
	f.MarkHidden("git-branch") // --branch, as in clone, checkout and verify-repo
	cmd.MarkFlagsMutuallyExclusive("branch", "git-branch")
	f.StringVar(&o.baseBranch, "base-branch", "", "start the generations branch from this branch of the remote (e.g. main), not an orphan (git.base_branch)")
	f.BoolVar(&o.noGit, "no-git", false, "do not commit to a local Git repository")
	f.IntVar(&o.ringKeep, "ring-keep", 0, "generations kept in the local ring")
	f.IntVar(&o.retainGens, "retain-gens", 0, "generations kept in STATE_DIR/gens, reclaimed after each generation as by snapd gc --keep (retention.gens; 0: never)")
	f.IntVar(&o.retainRepo, "retain-repo", 0, "pushed generations whose history the local repository keeps, plus all not yet pushed (retention.repo; 0: all)")
	f.IntVar(&o.queueMax, "queue-max", 0, "requests waiting for the pipeline before the queue policy applies")
	f.StringVar(&o.policy, "queue-policy", "", "block or coalesce")
	f.IntVar(&o.workers, "workers", 0, "encoder threads (0 = half the CPUs)")
	f.IntVar(&o.rowsPerChunk, "rows-per-chunk", 0, usageRows)
	f.StringVar(&o.build, "build", "", usageBuild)
	f.BoolVar(&o.stream, "stream", false, "streaming WTXT (root_pending + WSUM)")
	f.StringVar(&o.encryptTo, "encrypt-to", "", usageEncryptTo)
	f.StringVar(&o.signKey, "sign-key", "", usageSignKey)
	f.StringVar(&o.principal, "principal", "", usagePrincipal)
	f.StringVar(&o.hmacKey, "hmac-key", "", usageHMACKeyOut)
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "debugging aid: write a Go CPU profile of the daemon (not its git children) to FILE when it stops (go tool pprof FILE)")
	o.oci.register(f)
	return cmd
}

// loadRunConfig reads the config file (or the defaults) and applies the
// flags that were set.
func loadRunConfig(o *runOptions) (*configs.Config, error) {
	c := configs.Default()
	if o.config != "" {
		var err error
		if c, err = configs.Load(o.config); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, ioError{err}
			}
			return nil, usageError{err}
		}
	}
	ch := o.changed
	if ch == nil {
		ch = func(string) bool { return false }
	}
	set := func(name string, apply func()) {
		if ch(name) {
			apply()
		}
	}
	set("state-dir", func() { c.StateDir = o.stateDir })
	set("metrics-addr", func() { c.Metrics.Addr = o.metricsAddr })
	set("log-format", func() { c.Log.Format = o.logFormat })
	set("log-level", func() { c.Log.Level = o.logLevel })
	set("git-remote", func() { c.Git.Remote = o.remote })
	set("branch", func() { c.Git.Branch = o.branch })
	set("git-branch", func() { c.Git.Branch = o.branch })
	set("base-branch", func() { c.Git.BaseBranch = o.baseBranch })
	set("no-git", func() { c.Git.Enabled = !o.noGit })
	set("ring-keep", func() { c.Ring.Keep = o.ringKeep })
	set("retain-gens", func() { c.Retention.Gens = o.retainGens })
	set("retain-repo", func() { c.Retention.Repo = o.retainRepo })
	set("queue-max", func() { c.Queue.Max = o.queueMax })
	set("queue-policy", func() { c.Queue.Policy = o.policy })
	set("workers", func() { c.Snapshot.Workers = o.workers })
	set("rows-per-chunk", func() { c.Snapshot.RowsPerChunk = o.rowsPerChunk })
	set("build", func() { c.Snapshot.Build = o.build })
	set("stream", func() { c.Snapshot.Streaming = o.stream })
	set("encrypt-to", func() { c.Snapshot.EncryptTo = o.encryptTo })
	set("sign-key", func() { c.Keys.Sign = o.signKey })
	set("hmac-key", func() { c.Keys.HMAC = o.hmacKey })
	set("principal", func() { c.Keys.Principal = o.principal })
	applyRunOCIFlags(c, &o.oci, set)
	// The daemon records paths under its state directory in durable jobs
	// (the push queue's hold files) that must not depend on the working
	// directory: a relative --state-dir is made absolute once, here.
	if c.StateDir != "" && !filepath.IsAbs(c.StateDir) {
		abs, err := filepath.Abs(c.StateDir)
		if err != nil {
			return nil, ioError{fmt.Errorf("state directory: %w", err)}
		}
		c.StateDir = abs
	}
	// A local-path remote is resolved against the working directory too:
	// git pushes from the repository, where a relative path means
	// something else.
	if r := c.Git.Remote; isRelativeLocalPath(r) {
		abs, err := filepath.Abs(r)
		if err != nil {
			return nil, ioError{fmt.Errorf("git remote: %w", err)}
		}
		c.Git.Remote = abs
	}
	if err := c.Validate(); err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// isRelativeLocalPath reports whether a Git remote is a relative path on
// this machine (not a URL, not scp-like host:path, not absolute).
func isRelativeLocalPath(remote string) bool {
	if remote == "" || filepath.IsAbs(remote) || strings.Contains(remote, "://") {
		return false
	}
	// scp-like syntax: a colon before the first slash (git's own rule).
	if i := strings.IndexByte(remote, ':'); i >= 0 && (strings.IndexByte(remote, '/') < 0 || i < strings.IndexByte(remote, '/')) {
		return false
	}
	return true
}

func newLogger(w io.Writer, c *configs.Config) *slog.Logger {
	var lv slog.Level
	lv.UnmarshalText([]byte(c.Log.Level))
	ho := &slog.HandlerOptions{Level: lv}
	if c.Log.Format == "json" {
		ho.ReplaceAttr = durationSeconds
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// daemonKeys returns the signing and HMAC keys, generating the key set in
// STATE_DIR/keys on first start when the config names none.
func daemonKeys(c *configs.Config, log *slog.Logger) (signPath, hmacPath string, err error) {
	kd := filepath.Join(c.StateDir, pipeline.KeysDir)
	signPath, hmacPath = c.Keys.Sign, c.Keys.HMAC
	if signPath == "" {
		signPath = filepath.Join(kd, keys.SignKeyFile)
	}
	if hmacPath == "" {
		hmacPath = filepath.Join(kd, keys.HMACKeyFile)
	}
	if c.Keys.Sign == "" || c.Keys.HMAC == "" {
		if _, err := os.Stat(filepath.Join(kd, keys.SignKeyFile)); errors.Is(err, fs.ErrNotExist) {
			g, err := keys.Generate(kd)
			if err != nil {
				return "", "", ioError{fmt.Errorf("generate keys in %s: %w", kd, err)}
			}
			log.Info("generated keys", "dir", kd, "keyid", keys.KeyID(g.PublicKey), "public_key", g.SignPub)
		}
	}
	return signPath, hmacPath, nil
}

// pipelineConfig turns the file config into the daemon's config.
func pipelineConfig(c *configs.Config, log *slog.Logger) (pipeline.Config, error) {
	signPath, hmacPath, err := daemonKeys(c, log)
	if err != nil {
		return pipeline.Config{}, err
	}
	sk, err := keys.LoadSigner(signPath)
	if err != nil {
		return pipeline.Config{}, keyError(err)
	}
	principal := c.Keys.Principal
	if principal == "" {
		principal = defaultPrincipal()
	}
	if _, err := sshsig.WriteAllowedSigners(filepath.Join(c.StateDir, pipeline.KeysDir), principal, sk.Public().(ed25519.PublicKey)); err != nil {
		return pipeline.Config{}, ioError{fmt.Errorf("allowed_signers: %w", err)}
	}
	hk, err := keys.LoadHMACKey(hmacPath)
	if err != nil {
		return pipeline.Config{}, keyError(err)
	}
	pc := pipeline.Config{
		StateDir: c.StateDir, Schema: c.Snapshot.Schema, Build: c.Snapshot.Build, Host: c.Snapshot.Host, Cuda: c.Snapshot.Cuda,
		RowsPerChunk: c.Snapshot.RowsPerChunk, Stream: c.Snapshot.Streaming, Workers: c.Snapshot.Workers,
		SignKey: sk, HMACKey: hk, RingKeep: c.Ring.Keep, Retention: pipeline.Retention{Gens: c.Retention.Gens, Repo: c.Retention.Repo}, QueueMax: c.Queue.Max, Policy: pipeline.Policy(c.Queue.Policy),
		PollInterval: time.Duration(c.WAL.PollInterval), NoNotify: c.WAL.DisableFsnotify,
		StuckAfter: time.Duration(c.Metrics.StuckAfter), NoPicture: !c.Git.Picture,
	}
	if c.Metrics.Addr != "off" {
		pc.MetricsAddr = c.Metrics.Addr
	}
	if c.Snapshot.EncryptTo != "" {
		if pc.Recipients, err = keys.LoadAgeRecipients(c.Snapshot.EncryptTo); err != nil {
			return pipeline.Config{}, keyError(err)
		}
	}
	return pc, nil
}

// newGitPusher returns the pusher of the repository at repoDir to the
// git section's remote (credentials, timeouts).
func newGitPusher(c *configs.Config, repoDir string, log *slog.Logger) (*gitops.GitPusher, error) {
	gp, err := gitops.NewPusher(repoDir, gitops.Remote{URL: c.Git.Remote, Username: c.Git.Username,
		TokenFile: c.Git.TokenFile, TokenEnv: c.Git.TokenEnv, SSHKeyFile: c.Git.SSHKey,
		SSHKnownHostsFile: c.Git.SSHKnownHosts, SSHPassphraseEnv: c.Git.SSHPassphraseEnv,
		Timeout: time.Duration(c.Git.PushTimeout), MinRate: c.Git.PushMinRate, Stall: time.Duration(c.Git.PushStall), Logger: log})
	if err != nil {
		return nil, usageError{err}
	}
	return gp, nil
}

func runRun(ctx context.Context, e *env, o *runOptions) error {
	c, err := loadRunConfig(o)
	if err != nil {
		return err
	}
	logOut, progOut := e.daemonOutputs()
	log := newLogger(logOut, c)
	// Everything that can be refused is checked before anything is
	// created: the Git remote settings, then the metrics port.
	repoDir := c.Git.Repo
	if repoDir == "" {
		repoDir = filepath.Join(c.StateDir, pipeline.RepoDir)
	}
	var gp *gitops.GitPusher
	if c.Git.Enabled && c.Git.Remote != "" {
		if gp, err = newGitPusher(c, repoDir, log); err != nil {
			return err
		}
	}
	if err := checkGitHubCredentials(e, c); err != nil {
		return err
	}
	ociRepo, err := openOCIStore(e, c, log)
	if err != nil {
		return err
	}
	ln, err := listenMetrics(c)
	if err != nil {
		return err
	}
	defer func() {
		if ln != nil {
			ln.Close() // not handed to the daemon
		}
	}()
	if err := os.MkdirAll(c.StateDir, 0o700); err != nil {
		return ioError{err}
	}
	// The lock first: nothing of the state directory is touched while
	// another daemon owns it.
	lock, err := pipeline.LockStateDir(c.StateDir)
	if err != nil {
		if errors.Is(err, pipeline.ErrLocked) {
			return withHint(ioError{err}, "another snapd run uses this state directory; stop it or pick another --state-dir")
		}
		return ioError{err}
	}
	owned := false
	defer func() {
		if !owned {
			lock.Release()
		}
	}()
	pc, err := pipelineConfig(c, log)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoCollector())
	deps := pipeline.Deps{Registry: newRegistry(), Logger: log, Metrics: reg, Lock: lock, MetricsListener: ln, Progress: progOut}
	if c.Ranks.Enabled() {
		// A node of a sharded job (cmd/snapd/ranks.go): rank requests,
		// pushed to the registry; the committer commits generations.
		if err := ranksDeps(e, c, &pc, gp, repoDir, log, &deps); err != nil {
			return err
		}
	} else if c.Git.Enabled {
		layout, err := gitops.ParseLayout(c.Git.Layout)
		if err != nil {
			return usageError{err}
		}
		split := c.Git.SplitAbove
		if split > gitops.MaxPartLimit {
			split = gitops.MaxPartLimit
		}
		if deps.Repo, err = gitops.OpenRepo(repoDir, gitops.Config{Branch: c.Git.Branch, Path: c.Git.Path, Layout: layout, AuthorName: c.Git.AuthorName, AuthorEmail: c.Git.AuthorEmail,
			SplitThreshold: split, PartLimit: c.Git.PartLimit, MaxPacks: maxPacks(c.Git.MaxPacks), SigningKey: pc.SignKey, Delta: gitops.DeltaPolicy(c.Git.CommitDelta),
			BaseBranch: c.Git.BaseBranch, FetchBase: fetchBase(gp), History: history(gp)}); err != nil {
			return err
		}
		// The Publisher: commit to Git, or (store.oci) upload through a
		// queue job first; pub does the queue's jobs.
		var pub queue.Publisher
		deps.Publisher = pipeline.NewGitPublisher(deps.Repo)
		if ociRepo != nil {
			op, err := pipeline.NewOCIPublisher(ociRepo, deps.Repo, pipeline.OCIConfig{StateDir: c.StateDir,
				SegmentSize: c.Store.OCI.SegmentSize, DenseSegmentSize: c.Store.OCI.DenseSegmentSize, Threshold: c.Store.OCI.Threshold, Logger: log})
			if err != nil {
				return usageError{err}
			}
			deps.Publisher, pub = op, op.Jobs()
			if gp == nil {
				// No remote: the queue still carries the registry upload
				// and the commit; the push is a no-op.
				if deps.Queue, err = queue.Open(filepath.Join(c.StateDir, pipeline.QueueDir), queue.Options{Pusher: pipeline.LocalOnly{},
					Publisher: pub, Logger: log, BaseDelay: time.Duration(c.Git.RetryBase), MaxDelay: time.Duration(c.Git.RetryMax),
					AuthRecheck: time.Duration(c.Git.AuthRecheck)}); err != nil {
					return ioError{err}
				}
			}
		}
		if gp != nil {
			deps.Pushes = pipeline.ObservePushes(gp)
			var p gitops.Pusher = deps.Pushes
			if c.GitHub.Repo != "" {
				if deps.PullRequest, err = pullRequestDeps(e, c, &pc, log); err != nil {
					return err
				}
				if deps.PullRequest.Pushes, err = pipeline.TrackPushes(p, c.StateDir); err != nil {
					return ioError{err}
				}
				p = deps.PullRequest.Pushes
			}
			if deps.Queue, err = queue.Open(filepath.Join(c.StateDir, pipeline.QueueDir), queue.Options{Pusher: p, Logger: log,
				BaseDelay: time.Duration(c.Git.RetryBase), MaxDelay: time.Duration(c.Git.RetryMax),
				AuthRecheck: time.Duration(c.Git.AuthRecheck), MaxTimeouts: c.Git.PushMaxTimeouts, Publisher: pub,
				AfterPush: deps.Pushes.AfterPush}); err != nil {
				return ioError{err}
			}
		}
	}
	owned = true // New releases the lock on failure, Close otherwise
	d, err := pipeline.New(pc, deps)
	if err != nil {
		return err
	}
	ln = nil // Start serves it, Close closes it
	sigs := o.signals
	if sigs == nil {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(ch)
		sigs = ch
	}
	if err := d.Start(ctx); err != nil {
		d.Close(context.Background())
		return err
	}
	if c.Ranks.Enabled() {
		logRanksNode(c, &pc, log)
	} else {
		log.Info("destinations", destinations(c)...)
	}
	if a := d.Addr(); a != nil {
		log.Info("metrics", "url", "http://"+a.String()+"/metrics")
	}
	sdNotify(e, log, readyState(c.StateDir, d.Head().Gen))
	for {
		select {
		case <-ctx.Done():
			sdNotify(e, log, sdnotify.Stopping)
			return closeDaemon(d, log)
		case s := <-sigs:
			if s != syscall.SIGHUP {
				log.Info("signal: stopping", "signal", s.String())
				sdNotify(e, log, sdnotify.Stopping)
				return closeDaemon(d, log)
			}
			sdNotify(e, log, sdnotify.ReloadingState())
			nc, err := loadRunConfig(o)
			if err == nil && nc.StateDir != c.StateDir {
				err = errors.New("state_dir cannot change on reload")
			}
			var npc pipeline.Config
			if err == nil {
				npc, err = pipelineConfig(nc, log)
			}
			if err == nil {
				err = d.Reload(npc)
			}
			if err == nil && (nc.Git != c.Git || !nc.GitHub.Equal(c.GitHub) || (c.GitHub.Repo != "" && nc.Keys != c.Keys)) {
				log.Warn("SIGHUP: the git and github sections (and the keys the reviews check) take effect at the next start")
			}
			if err != nil {
				log.Error("SIGHUP: config not reloaded; keeping the running configuration", "error", err)
			}
			sdNotify(e, log, readyState(c.StateDir, d.Head().Gen))
		}
	}
}

// pullRequestDeps builds the pull-request step from the github section:
// the API client (a token read from its file at every request, from the
// environment at start, or a GitHub App) and the review options (the
// daemon's own public key is the trusted signer, its HMAC key checks the
// arrays).
func pullRequestDeps(e *env, c *configs.Config, pc *pipeline.Config, log *slog.Logger) (*pipeline.PullRequest, error) {
	g := c.GitHub
	owner, name, _ := strings.Cut(g.Repo, "/")
	copts := review.ClientOptions{APIURL: g.APIURL, Logger: log, UserAgent: "snapd"}
	switch {
	case g.TokenFile != "":
		if _, err := review.TokenFromFile(g.TokenFile); err != nil {
			return nil, withHint(credError(fmt.Errorf("github.token_file: %w", err)), "put a GitHub token with contents:read and pull_requests:write into the file")
		}
		copts.Token = fileToken(g.TokenFile)
	case g.TokenEnv != "":
		t, err := review.TokenFromEnv(e.getenv, g.TokenEnv)
		if err != nil {
			return nil, usageError{fmt.Errorf("github.token_env: %w", err)}
		}
		copts.Token = t
	default:
		pem, err := review.LoadAppKey(g.AppKey)
		if err != nil {
			return nil, credError(fmt.Errorf("github.app_key: %w", err))
		}
		copts.App = &review.AppConfig{AppID: g.AppID, InstallationID: g.InstallationID, PrivateKeyPEM: pem, Repositories: []string{name}}
	}
	client, err := review.NewClient(copts)
	if err != nil {
		return nil, usageError{fmt.Errorf("github: %w", err)}
	}
	th, _, _ := g.Thresholds.Review() // checked by Config.Validate
	ropts := review.Options{HMACKey: pc.HMACKey, Approve: g.Approve, MaxComments: g.MaxComments, Thresholds: th}
	if pc.SignKey != nil {
		ropts.TrustedKeys = []ed25519.PublicKey{pc.SignKey.Public().(ed25519.PublicKey)}
		ropts.RequireSignature = true
	}
	title := g.Title
	if title == "" {
		title = "snapd: generations from " + c.Git.Branch
	}
	body := fmt.Sprintf("Snapshot generations written by the snapd daemon to `%s`.\n\n"+
		"Every push of a generation updates this pull request and snapd reviews the newest one: "+
		"verification (signature, HMACs, Merkle chain against `%s`) and which rows of which arrays changed, by how much. "+
		"Merging accepts the newest generation into `%s`.\n", c.Git.Branch, g.Base, g.Base)
	return &pipeline.PullRequest{Client: client, Owner: owner, Repo: name, Base: g.Base, Title: title, Body: body,
		Options: ropts, RetryBase: time.Duration(c.Git.RetryBase), RetryMax: time.Duration(g.RetryMax)}, nil
}

// credError classifies a credential that cannot be loaded: an unreadable
// file is an I/O error, anything else (empty, malformed) a usage error.
func credError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return ioError{err}
	}
	return usageError{err}
}

// fileToken is a GitHub token read from a file at every request, so a
// rotated token takes effect without a restart. It never prints the token.
type fileToken string

// Authorization implements review.TokenSource.
func (f fileToken) Authorization(ctx context.Context) (string, error) {
	t, err := review.TokenFromFile(string(f))
	if err != nil {
		return "", err
	}
	return t.Authorization(ctx)
}

func closeDaemon(d *pipeline.Daemon, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		log.Error("close", "error", err)
		return err
	}
	return nil
}

// maxPacks maps git.max_packs (0: never) to gitops.Config.MaxPacks
// (negative: never).
func maxPacks(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// destinations are the startup log's attributes naming where generations
// go: the Git repository and remote (and branch) and the OCI registry
// repository, or "none". Credentials never appear: URLs lose their
// userinfo, query and fragment (see publicURL); tokens are not read.
func destinations(c *configs.Config) []any {
	remote, registry := "none", "none"
	if c.Git.Enabled && c.Git.Remote != "" {
		remote = publicURL(c.Git.Remote)
	}
	if r := c.Store.OCI.Repository; r != "" {
		registry = r
	}
	git := "disabled"
	if c.Git.Enabled {
		git = c.Git.Branch
	}
	return []any{"git_branch", git, "git_remote", remote, "registry", registry}
}

// publicURL returns u without userinfo, query or fragment when it is a
// URL with a scheme (https://user:token@host/x -> https://host/x); other
// forms (paths, scp-like git@host:repo, whose user is not a secret) are
// returned as they are.
func publicURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" || p.Host == "" {
		if i := strings.Index(u, "://"); i >= 0 {
			// Unparsable but URL-shaped: drop everything up to the last @
			// of the authority, which may hold a token.
			rest := u[i+3:]
			auth, path, _ := strings.Cut(rest, "/")
			if j := strings.LastIndex(auth, "@"); j >= 0 {
				return u[:i+3] + auth[j+1:] + "/" + path
			}
		}
		return u
	}
	p.User, p.RawQuery, p.Fragment, p.ForceQuery = nil, "", "", false
	return p.String()
}
