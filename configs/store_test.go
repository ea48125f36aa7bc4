package configs

import (
	"strings"
	"testing"
	"time"
)

// TestStoreOCI: the store.oci section's defaults (one place: Default) and
// every refusal names its field.
func TestStoreOCI(t *testing.T) {
	c, err := Parse([]byte("store:\n  oci:\n    repository: ghcr.io/acme/llama\n    threshold: 1048576\n    mount_from: acme/base\n"))
	if err != nil {
		t.Fatal(err)
	}
	o := c.Store.OCI
	if o.Repository != "ghcr.io/acme/llama" || o.Threshold != 1<<20 || o.SegmentSize != 4<<20 || o.Jobs != 4 || o.Insecure || o.MountFrom != "acme/base" {
		t.Fatalf("store.oci %+v", o)
	}
	if d := Default().Store.OCI; d.Repository != "" || d.SegmentSize != 4<<20 || d.DenseSegmentSize != 16<<20 || d.Threshold != 0 || d.Jobs != 4 ||
		time.Duration(d.Timeout) != 30*time.Second || time.Duration(d.StallTimeout) != time.Minute {
		t.Fatalf("defaults %+v", d)
	}
	if c, err := Parse([]byte("store: {oci: {repository: ghcr.io/acme/x, timeout: 5s, stall_timeout: 2m}}")); err != nil ||
		time.Duration(c.Store.OCI.Timeout) != 5*time.Second || time.Duration(c.Store.OCI.StallTimeout) != 2*time.Minute {
		t.Fatalf("store.oci timeouts: %v", err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"store: {oci: {repository: ghcr.io}}", "store.oci.repository"},
		{"store: {oci: {repository: https://ghcr.io/acme/x}}", "store.oci.repository"},
		{"store: {oci: {repository: ghcr.io/acme/x:tag}}", "store.oci.repository"},
		{"store: {oci: {repository: ghcr.io/acme/x@sha256:00}}", "store.oci.repository"},
		{"store: {oci: {repository: ghcr.io/acme/x, segment_size: 0}}", "store.oci.segment_size"},
		{"store: {oci: {repository: ghcr.io/acme/x, segment_size: 2147483648}}", "store.oci.segment_size"},
		{"store: {oci: {repository: ghcr.io/acme/x, dense_segment_size: 1048576}}", "store.oci.dense_segment_size"},
		{"store: {oci: {repository: ghcr.io/acme/x, dense_segment_size: 2147483648}}", "store.oci.dense_segment_size"},
		{"store: {oci: {repository: ghcr.io/acme/x, threshold: -1}}", "store.oci.threshold"},
		{"store: {oci: {repository: ghcr.io/acme/x, jobs: 0}}", "store.oci.jobs"},
		{"store: {oci: {repository: ghcr.io/acme/x, timeout: 0s}}", "store.oci.timeout"},
		{"store: {oci: {repository: ghcr.io/acme/x, stall_timeout: -1s}}", "store.oci.stall_timeout"},
		{"store: {oci: {repository: ghcr.io/acme/x, password_file: /p}}", "store.oci.username"},
		{"store: {oci: {repository: ghcr.io/acme/x, mount_from: 'h:1/x'}}", "store.oci.mount_from"},
		{"store: {oci: {threshold: 5}}", "store.oci.repository"},
		{"store: {oci: {repository: ghcr.io/acme/x}}\ngit: {enabled: false}", "git.enabled"},
		{"store: {oci: {repository: ghcr.io/acme/x}}\nsnapshot: {encrypt_to: /r}", "encrypt_to"},
		{"store: {oci: {repository: ghcr.io/acme/x}}\nsnapshot: {streaming: true}", "streaming"},
		{"store: {oci: {repo: x}}", `unknown key "repo"`},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.yaml, err, tc.want)
		}
	}
}
