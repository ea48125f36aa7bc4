package configs

import (
	"fmt"
	"strings"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// Store selects where tensor bytes go besides Git.
type Store struct {
	OCI OCIStore `yaml:"oci"`
}

// OCIStore puts generations in the skeleton layout (for models bigger than Git holds): tensor
// bytes as segment blobs in an OCI registry, the signed WTXT skeleton in
// Git. Enabled by Repository. Defaults are in Default.
type OCIStore struct {
	// Repository is HOST[:PORT]/NAME (no scheme, tag or digest). HTTPS,
	// or plain HTTP only for a loopback host or with Insecure.
	Repository string `yaml:"repository"`
	// Insecure allows plain HTTP to a non-loopback registry.
	Insecure bool `yaml:"insecure"`
	// SegmentSize is the target size of one segment blob (chunk-aligned);
	// default 4 MiB.
	SegmentSize int64 `yaml:"segment_size"`
	// DenseSegmentSize is the segment size while generations change
	// nearly every chunk (dense updates: fewer, larger uploads cost the
	// registry less; arrays up to 256 MiB are then one segment each);
	// default 16 MiB, 0: always SegmentSize. See
	// pipeline.OCIConfig.DenseSegmentSize for when it applies.
	DenseSegmentSize int64 `yaml:"dense_segment_size"`
	// Threshold: a generation whose WTXT is larger than this many bytes
	// goes the skeleton layout, smaller ones are committed whole to Git
	// (still in order through the same queue). Default 0: with a
	// repository set, every generation goes the skeleton layout.
	Threshold int64 `yaml:"threshold"`
	// Credentials: Username with the password or token in PasswordFile
	// (mode 0600; re-read whenever the registry asks, so a rotated token
	// works without a restart; never logged); else $SNAPD_OCI_USERNAME /
	// $SNAPD_OCI_PASSWORD; else DockerConfig (default
	// $DOCKER_CONFIG/config.json or ~/.docker/config.json, credential
	// helpers included); else anonymous. GHCR: user + a token with
	// write:packages.
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	DockerConfig string `yaml:"docker_config"`
	// MountFrom names another repository NAME on the same registry (e.g.
	// the base model's): blobs it has are mounted, not uploaded.
	MountFrom string `yaml:"mount_from"`
	// Jobs bounds parallel blob uploads; default 4.
	Jobs int `yaml:"jobs"`
	// Timeout bounds connecting to the registry, the TLS handshake and
	// the wait for a response's headers; default 30s. StallTimeout fails a
	// request or response body that moves less than 1 KiB/s over that
	// much waiting; default 60s. Either failure is retried (the push job
	// stays queued), as for an unreachable registry. Both also bound a
	// ranks node's registry (ranks.repository).
	Timeout      Duration `yaml:"timeout"`
	StallTimeout Duration `yaml:"stall_timeout"`
}

// maxSegmentSize bounds store.oci.segment_size: a segment is held in
// memory while it uploads (Jobs at a time).
const maxSegmentSize = 1 << 30

func defaultOCIStore() OCIStore {
	return OCIStore{SegmentSize: wtxt.DefaultSegmentSize, DenseSegmentSize: 4 * wtxt.DefaultSegmentSize, Jobs: 4, Timeout: Duration(30 * time.Second), StallTimeout: Duration(time.Minute)}
}

func (c *Config) validateStore() error {
	o := c.Store.OCI
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("store.oci.%s: %s", field, fmt.Sprintf(format, a...))
	}
	if o.SegmentSize < 1 || o.SegmentSize > maxSegmentSize {
		return bad("segment_size", "%d: must be in [1, %d]", o.SegmentSize, maxSegmentSize)
	}
	if o.DenseSegmentSize != 0 && (o.DenseSegmentSize < o.SegmentSize || o.DenseSegmentSize > maxSegmentSize) {
		return bad("dense_segment_size", "%d: must be 0 or in [segment_size %d, %d]", o.DenseSegmentSize, o.SegmentSize, maxSegmentSize)
	}
	if o.Threshold < 0 {
		return bad("threshold", "%d: must be >= 0", o.Threshold)
	}
	if o.Jobs < 1 || o.Jobs > 64 {
		return bad("jobs", "%d: must be in [1, 64]", o.Jobs)
	}
	if o.Timeout <= 0 {
		return bad("timeout", "%s: must be > 0", time.Duration(o.Timeout))
	}
	if o.StallTimeout <= 0 {
		return bad("stall_timeout", "%s: must be > 0", time.Duration(o.StallTimeout))
	}
	if o.Repository == "" {
		if o.MountFrom != "" || o.Username != "" || o.PasswordFile != "" || o.Threshold != 0 {
			return bad("repository", "must be set when store.oci.mount_from, store.oci.username, store.oci.password_file or store.oci.threshold is")
		}
		return nil
	}
	host, name, ok := strings.Cut(o.Repository, "/")
	if !ok || host == "" || name == "" || strings.ContainsAny(o.Repository, "@ \t\n") || strings.Contains(name, ":") || strings.Contains(o.Repository, "://") {
		return bad("repository", "%q: want HOST[:PORT]/NAME (no scheme, tag or digest)", o.Repository)
	}
	if strings.Contains(o.MountFrom, ":") || strings.ContainsAny(o.MountFrom, "@ \t\n") || strings.HasPrefix(o.MountFrom, "/") {
		return bad("mount_from", "%q: want a repository NAME on the same registry", o.MountFrom)
	}
	if o.PasswordFile != "" && o.Username == "" {
		return bad("username", "must be set with store.oci.password_file")
	}
	if !c.Git.Enabled {
		return bad("repository", "needs git.enabled (Git keeps the skeletons)")
	}
	if c.Snapshot.EncryptTo != "" {
		return bad("repository", "cannot be combined with snapshot.encrypt_to (the registry would get the tensor bytes in the clear)")
	}
	if c.Snapshot.Streaming {
		return bad("repository", "cannot be combined with snapshot.streaming")
	}
	return nil
}
