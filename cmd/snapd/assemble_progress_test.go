package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/progress"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

// TestAssembleOCIProgress: `snapd assemble --oci-repository` draws a
// progress line on a terminal (total estimated from the skeleton's
// segments, within 2% of what is written), ends it with the size written,
// writes the same bytes with and without it, and erases it before the
// error when a blob is missing.
func TestAssembleOCIProgress(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	d := t.TempDir()
	p := func(n string) string { return filepath.Join(d, n) }
	writeF32Safetensors(t, p("m.safetensors"), 1024, 512) // 2 MiB raw
	if code, _, errs := snapdTTY(t, false, "convert", p("m.safetensors"), p("m.wtxt"), "--ts=2026-01-01T00:00:00Z"); code != 0 {
		t.Fatalf("convert: %d %s", code, errs)
	}
	repo := reg.Host + "/snapd/progress"
	if code, out, errs := snapdTTY(t, false, "oci", "push", p("m.wtxt"), "--oci-repository", repo, "--segment-size", "262144"); code != 0 {
		t.Fatalf("push: %d %s%s", code, out, errs)
	}
	want, _ := os.ReadFile(p("m.wtxt"))
	if est := progress.WTXTEstimate(2 << 20); est < int64(len(want))*98/100 || est > int64(len(want))*102/100 {
		t.Fatalf("estimate %d, WTXT %d", est, len(want))
	}

	code, _, errs := snapdTTY(t, true, "assemble", "--oci-repository", repo, p("m.wtxt.skel"), p("a.wtxt"))
	fs := frames(errs)
	if code != 0 || len(fs) < 3 || strings.Count(errs, "\n") != 1 || !strings.HasSuffix(errs, "\n") {
		t.Fatalf("assemble: %d %q", code, errs)
	}
	if !strings.HasPrefix(fs[0], "a.wtxt: ") || !strings.Contains(fs[0], "/ "+progress.Bytes(progress.WTXTEstimate(2<<20))+" (") || !strings.Contains(fs[0], ", ETA ") {
		t.Fatalf("first frame %q", fs[0])
	}
	last := fs[len(fs)-1]
	if w := fmt.Sprintf("a.wtxt: %s, ", progress.Bytes(int64(len(want)))); !strings.HasPrefix(last, w) || !strings.Contains(last, " in ") {
		t.Fatalf("final frame %q, want prefix %q", last, w)
	}
	if got, _ := os.ReadFile(p("a.wtxt")); !bytes.Equal(got, want) {
		t.Fatal("assembled WTXT differs")
	}
	// No terminal or --quiet: nothing on stderr, same bytes.
	for i, args := range [][]string{{}, {"--quiet"}} {
		tty := i == 1
		out := p(fmt.Sprintf("q%d.wtxt", i))
		a := append([]string{"assemble", "--oci-repository", repo, p("m.wtxt.skel"), out}, args...)
		if code, _, errs := snapdTTY(t, tty, a...); code != 0 || errs != "" {
			t.Fatalf("%v: %d %q", a, code, errs)
		}
		if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
			t.Fatalf("%v: assembled WTXT differs", a)
		}
	}
	// A blob missing from the registry halfway: the line is erased before
	// the error and nothing is written.
	skel, err := os.ReadFile(p("m.wtxt.skel"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(skel, []byte("seg "))
	if !ok {
		t.Fatal("no seg line")
	}
	_, rest, _ = bytes.Cut(rest, []byte("seg ")) // the second segment
	i := bytes.Index(rest, []byte("sha256="))
	if i < 0 {
		t.Fatalf("no digest in %q", rest[:min(len(rest), 200)])
	}
	var digest [32]byte
	if n, err := hex.Decode(digest[:], rest[i+7:i+7+64]); err != nil || n != 32 {
		t.Fatalf("digest: %v", err)
	}
	if err := os.Remove(registrytest.BlobPath(reg, digest)); err != nil {
		t.Fatal(err)
	}
	code, _, errs = snapdTTY(t, true, "assemble", "--oci-repository", repo, p("m.wtxt.skel"), p("bad.wtxt"))
	if before, _, ok := strings.Cut(errs, "snapd: error: "); code == 0 || !ok || !strings.HasSuffix(before, "\r\x1b[K") {
		t.Fatalf("missing blob: %d %q", code, errs)
	}
	if _, err := os.Stat(p("bad.wtxt")); err == nil {
		t.Fatal("output left behind")
	}
}

// compactJSON returns the JSON document s without insignificant space
// (s itself when it is not JSON, so a substring check then fails).
func compactJSON(s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return s
	}
	return b.String()
}
