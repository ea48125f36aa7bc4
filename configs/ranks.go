package configs

import (
	"fmt"
	"regexp"
	"sync"

	"github.com/snapd-ml/snapd/pipeline"
)

// Ranks makes `snapd run` one node of a sharded training job:
// every request in its WAL is one rank's shard (request-snapshot --rank R
// --world-size W), converted to a rank part and pushed to Repository as
// the rank manifest gen-NNNNNN.rank-R. Exactly one node of the job sets
// Committer: it commits each generation, once all WorldSize rank
// manifests are in, to git.remote (branch git.branch) as one signed,
// chained commit. Enabled by WorldSize > 0.
type Ranks struct {
	// Job names the training job; its SHA-256 (with a prefix) is the
	// chain id every rank part carries. The same on every node.
	Job       string `yaml:"job"`
	WorldSize int    `yaml:"world_size"`
	// Repository is the OCI repository HOST[:PORT]/NAME (plain HTTP only
	// for loopback hosts or with Insecure). Credentials as for `snapd oci
	// push`: SNAPD_OCI_USERNAME/SNAPD_OCI_PASSWORD or ~/.docker/config.json.
	Repository  string `yaml:"repository"`
	Insecure    bool   `yaml:"insecure"`
	SegmentSize int64  `yaml:"segment_size"` // default 4 MiB
	Committer   bool   `yaml:"committer"`
	// Timeout: a generation missing ranks this long after the committer
	// first saw it is reported as timed out (default 10m); OnTimeout then
	// says whether later generations wait (wait, default) or it is skipped
	// and the gap recorded once a later generation is complete (skip).
	Timeout   Duration `yaml:"timeout"`
	OnTimeout string   `yaml:"on_timeout"`
	// PollInterval is how often the committer lists the rank tags
	// (default 2s).
	PollInterval Duration `yaml:"poll_interval"`
}

var jobRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._:/+-]{1,128}$`) })

// Enabled reports whether the ranks section is in use.
func (r Ranks) Enabled() bool { return r.WorldSize != 0 }

// ValidateRanks checks the ranks section (and what it needs of c).
func (c *Config) ValidateRanks() error {
	r := c.Ranks
	if !r.Enabled() {
		return nil
	}
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("ranks.%s: %s", field, fmt.Sprintf(format, a...))
	}
	if r.WorldSize < 1 || r.WorldSize > 1<<16 {
		return bad("world_size", "%d out of range 1..65536", r.WorldSize)
	}
	if !jobRE().MatchString(r.Job) {
		return bad("job", "%q: want 1..128 of [A-Za-z0-9._:/+-] (the same on every node)", r.Job)
	}
	if r.Repository == "" {
		return bad("repository", "required: the OCI repository HOST[:PORT]/NAME every node pushes to")
	}
	if r.SegmentSize < 0 {
		return bad("segment_size", "must not be negative")
	}
	switch r.OnTimeout {
	case "", pipeline.RankOnTimeoutWait, pipeline.RankOnTimeoutSkip:
	default:
		return bad("on_timeout", "%q: want wait or skip", r.OnTimeout)
	}
	if r.Timeout < 0 {
		return bad("timeout", "must not be negative")
	}
	if r.PollInterval < 0 {
		return bad("poll_interval", "must not be negative")
	}
	if r.Committer && c.Git.Remote == "" {
		return bad("committer", "needs git.remote (the ledger every generation is committed to)")
	}
	return nil
}

// WithDefaults returns r with its defaults filled in.
func (r Ranks) WithDefaults() Ranks {
	if r.Timeout == 0 {
		r.Timeout = Duration(pipeline.DefaultRankTimeout)
	}
	if r.PollInterval == 0 {
		r.PollInterval = Duration(pipeline.DefaultRankPoll)
	}
	if r.OnTimeout == "" {
		r.OnTimeout = pipeline.RankOnTimeoutWait
	}
	return r
}
