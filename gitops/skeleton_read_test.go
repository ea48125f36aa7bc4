package gitops

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// TestParseSummary: generation.txt of a skeleton-layout generation parses
// into its keys; malformed files are refused naming the line, never
// echoing a value.
func TestParseSummary(t *testing.T) {
	b, err := os.ReadFile("testdata/generation-skeleton.txt")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := ParseSummary(b)
	if err != nil {
		t.Fatal(err)
	}
	if kv["layout"] != "skeleton" || kv["oci_repository"] != "127.0.0.1:5000/snapd/model" || !strings.HasPrefix(kv["oci_manifest"], "sha256:") || len(kv) != 11 {
		t.Fatalf("%v", kv)
	}
	for _, tc := range []struct{ in, want string }{
		{"gen=1\nSECRETVALUE\n", "line 2 is not key=value"},
		{"gen=1\n=SECRETVALUE\n", "line 2 is not key=value"},
		{"gen=1\ngen=SECRETVALUE\n", "line 2: key gen appears twice"},
		{"gen=1\nSECRET\x01=x\nSECRET\x01=y\n", "line 3: key (non-plain key) appears twice"},
		{strings.Repeat("a", MaxSummaryBytes+1), "limit"},
	} {
		_, err := ParseSummary([]byte(tc.in))
		if !errors.Is(err, ErrSummary) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%q: %v", tc.in, err)
		}
	}
}

func FuzzParseSummary(f *testing.F) {
	for _, b := range testutil.Seeds(f, "testdata/generation-*.txt") {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		kv, err := ParseSummary(b)
		if err != nil {
			return
		}
		for k, v := range kv {
			if k == "" || strings.Contains(k, "\n") || strings.Contains(v, "\n") {
				t.Fatalf("key %q value %q", k, v)
			}
		}
	})
}
