package pipeline

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"time"

	"filippo.io/age"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/snapshot"
)

// Policy says what the daemon does when requests arrive faster than
// snapshots complete and QueueMax requests are already waiting.
type Policy string

const (
	// PolicyBlock stops reading the WAL: the requests stay there
	// (durably) until the pipeline catches up. Nothing is skipped.
	PolicyBlock Policy = "block"
	// PolicyCoalesce keeps reading: the newest waiting request is replaced
	// by the one that arrives, so the queue holds the oldest QueueMax-1
	// requests and always the newest. Each replaced request is completed
	// in the WAL as failed with the message "coalesced: ...", logged and
	// counted (snapd_requests_total{result="coalesced"}).
	PolicyCoalesce Policy = "coalesce"
)

// Config is everything that tunes a Daemon. Only cmd/snapd builds it
// (from configs.Config and flags).
type Config struct {
	// StateDir holds wal/, gens/, ring/, state, lock (see doc.go).
	StateDir string
	// Meta values written into every generation (gen and ts come from the
	// request).
	Schema, Build, Host, Cuda string
	// WTXT writer options.
	RowsPerChunk int
	Stream       bool // root_pending + WSUM file
	// Workers bounds the encoder's parallelism; 0 = half the CPUs (>= 1).
	Workers int
	SignKey ed25519.PrivateKey // nil: unsigned
	HMACKey []byte             // nil: no per-array HMAC
	// Recipients: when set, ring files are age-armored with WSEAL seals.
	Recipients []age.Recipient
	// RingKeep is how many generations the ring keeps (>= 1).
	RingKeep int
	// Retention bounds what the daemon keeps on the host besides the
	// ring (retention.go); the zero value keeps everything.
	Retention Retention
	// QueueMax bounds requests waiting for the pipeline (>= 1); Policy
	// applies beyond it.
	QueueMax int
	Policy   Policy
	// WAL listener.
	PollInterval time.Duration
	NoNotify     bool
	// RetryBase and RetryMax bound the backoff for transient errors
	// (disk full, I/O): default 200ms and 30s.
	RetryBase, RetryMax time.Duration
	// MetricsAddr is the host:port of /metrics and /healthz; "" disables
	// the HTTP endpoint.
	MetricsAddr string
	// NoPicture: do not draw the SVG of each generation's change from
	// its base (ring gen-N.diff.svg, committed as current.diff.svg).
	// Pictures are never drawn for encrypted generations.
	NoPicture bool
	// StuckAfter: /healthz reports unhealthy when a request admitted this
	// long ago is not done, or the oldest push job waits this long
	// (default DefaultStuckAfter).
	StuckAfter time.Duration
}

// Deps are the daemon's collaborators.
type Deps struct {
	// Registry decodes sources (required).
	Registry *formats.Registry
	// Logger: nil discards.
	Logger *slog.Logger
	// Metrics receives the collectors and is served on /metrics; nil
	// uses a private registry (never the global default one).
	Metrics *prometheus.Registry
	// Repo is the Git ledger generations are committed to (by the
	// Publisher); nil disables Git.
	Repo *gitops.Repo
	// Queue: when set (with a Pusher), every commit is enqueued for push
	// and the daemon runs the queue. Its branch is Repo's.
	Queue *queue.Queue
	// PullRequest: when set (needs Repo and Queue, whose Pusher must be
	// PullRequest.Pushes), every successful push is followed by opening or
	// updating a pull request from Repo's branch and reviewing its head.
	PullRequest *PullRequest
	// Pushes, when set, is the PushObserver wrapping the Queue's Pusher:
	// the daemon records push metrics and logs through it.
	Pushes *PushObserver
	// FS writes the ring's files; nil means OSFS.
	FS FS
	// Lock is the state directory's lock if the caller took it already
	// (LockStateDir); the daemon owns it from New on (also when New fails)
	// and releases it in Close.
	Lock *StateLock
	// MetricsListener, when set, serves /metrics and /healthz instead of
	// listening on Config.MetricsAddr (the caller listened before creating
	// any state, so a busy port fails first); Start takes it over.
	MetricsListener net.Listener
	// Now is the clock (for stamps and durations); nil means time.Now.
	Now func() time.Time
	// Progress, when set (a terminal), receives a progress line for each
	// generation's encode (internal/progress).
	Progress io.Writer
	// Publisher publishes each chained generation (publish.go): a
	// GitPublisher commits it to Repo, an OCIPublisher (needs Repo and a
	// Queue whose Options.Publisher runs its Jobs) leaves it to a queue
	// job that uploads to a registry and then commits the skeleton. Nil
	// with Repo set: NewGitPublisher(Repo); nil without Repo: nothing is
	// published. A RankPublisher (no Repo needed) makes the daemon a node
	// of a sharded job: it takes only rank requests (rankstage.go).
	Publisher Publisher
	// RankCommitter, when set, is run as a stage of the daemon (the one
	// node of a sharded job that commits its generations, rankcommit.go);
	// its metrics are registered on Metrics.
	RankCommitter *RankCommitter

	// rereadNonFinite (tests) replaces the NaN/Inf check that reads the
	// WTXT files (nonfinite.go); nil: chunkdiff.NonFiniteIntroducedIn.
	rereadNonFinite rereadNonFinite
}

// Defaults of Config and PullRequest, for their zero values; configs.Default
// states the same values by these names (one statement of each default).
const (
	// DefaultRetainKeep is K, the generations each store on the host
	// keeps by default: the ring (DefaultRingKeep), STATE_DIR/gens and
	// the local repository's pushed history (the config's retention
	// section; Retention's zero value is off).
	DefaultRetainKeep = 3
	DefaultRingKeep   = DefaultRetainKeep
	DefaultQueueMax   = 16
	DefaultPolicy     = PolicyCoalesce
	DefaultRetryBase  = 200 * time.Millisecond
	DefaultRetryMax   = 30 * time.Second
	// DefaultPRRetryBase and DefaultPRRetryMax bound the pull-request
	// publisher's backoff.
	DefaultPRRetryBase = 2 * time.Second
	DefaultPRRetryMax  = 5 * time.Minute
)

// DefaultWorkers is the encoder parallelism for Config.Workers == 0: half
// the CPUs, at least one, leaving the rest to the training job.
func DefaultWorkers() int {
	n := runtime.GOMAXPROCS(0) / 2
	if n < 1 {
		n = 1
	}
	return n
}

func (c *Config) setDefaults() error {
	if c.StateDir == "" {
		return errors.New("pipeline: config: StateDir is empty")
	}
	if c.Schema == "" {
		c.Schema = snapshot.DefaultMeta().Schema
	}
	if c.Build == "" {
		c.Build = snapshot.DefaultMeta().Build
	}
	if c.Host == "" {
		c.Host = snapshot.DefaultMeta().Host
	}
	if c.Cuda == "" {
		c.Cuda = snapshot.DefaultMeta().Cuda
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers()
	}
	if c.RingKeep == 0 {
		c.RingKeep = DefaultRingKeep
	}
	if c.QueueMax == 0 {
		c.QueueMax = DefaultQueueMax
	}
	if c.Policy == "" {
		c.Policy = DefaultPolicy
	}
	if c.RetryBase <= 0 {
		c.RetryBase = DefaultRetryBase
	}
	if c.RetryMax <= 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.StuckAfter <= 0 {
		c.StuckAfter = DefaultStuckAfter
	}
	if c.RetryMax < c.RetryBase {
		c.RetryMax = c.RetryBase
	}
	switch {
	case c.Policy != PolicyBlock && c.Policy != PolicyCoalesce:
		return fmt.Errorf("pipeline: config: policy %q: want block or coalesce", c.Policy)
	case c.RingKeep < 1:
		return fmt.Errorf("pipeline: config: ring keep %d: must be >= 1", c.RingKeep)
	case c.Retention.Gens < 0:
		return fmt.Errorf("pipeline: config: retention gens %d: must be >= 0 (0 = off)", c.Retention.Gens)
	case c.Retention.Repo < 0:
		return fmt.Errorf("pipeline: config: retention repo %d: must be >= 0 (0 = off)", c.Retention.Repo)
	case c.QueueMax < 1:
		return fmt.Errorf("pipeline: config: queue max %d: must be >= 1", c.QueueMax)
	case c.Workers < 0:
		return fmt.Errorf("pipeline: config: workers %d: must be >= 0", c.Workers)
	case c.RowsPerChunk < 0:
		return fmt.Errorf("pipeline: config: rows per chunk %d: must be >= 0", c.RowsPerChunk)
	case c.SignKey != nil && len(c.SignKey) != ed25519.PrivateKeySize:
		return errors.New("pipeline: config: sign key is not an Ed25519 private key")
	}
	return nil
}
