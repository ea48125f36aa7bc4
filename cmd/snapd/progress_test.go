package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/internal/progress"
)

// writeF32Safetensors writes one f32 array of rows×cols with varying values.
func writeF32Safetensors(t *testing.T, path string, rows, cols int) {
	t.Helper()
	n := rows * cols * 4
	hdr := fmt.Sprintf(`{"w":{"dtype":"F32","shape":[%d,%d],"data_offsets":[0,%d]}}`, rows, cols, n)
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(hdr)))
	b.WriteString(hdr)
	for i := range rows * cols {
		binary.Write(&b, binary.LittleEndian, float32(i%977)*0.25)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// snapdTTY runs the CLI as if stderr were a terminal, with a clock that
// advances one second per reading (so every counted write may redraw).
func snapdTTY(t *testing.T, tty bool, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := newEnv(&out, &errb)
	e.getenv = func(string) string { return "" }
	e.forceTTY = tty
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}
	root := newRootCommand(e)
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.ExecuteContext(context.Background())
	if err != nil {
		errb.WriteString("snapd: error: " + err.Error() + "\n")
	}
	return exitCode(err), out.String(), errb.String()
}

// frames splits a progress stream into its redrawn lines.
func frames(s string) []string {
	var out []string
	for _, f := range strings.Split(s, "\r") {
		if f = strings.TrimSuffix(strings.TrimSuffix(f, "\n"), "\x1b[K"); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// TestProgressLines: convert, verify and assemble draw a progress line
// (bytes, rate, ETA) on a terminal and end it with the final size and
// time; not with --quiet, not when stderr is not a terminal.
func TestProgressLines(t *testing.T) {
	d := t.TempDir()
	p := func(n string) string { return filepath.Join(d, n) }
	writeF32Safetensors(t, p("m.safetensors"), 1024, 512) // 2 MiB raw
	ts := "--ts=2026-01-01T00:00:00Z"

	code, _, errs := snapdTTY(t, true, "convert", p("m.safetensors"), p("m.wtxt"), ts)
	if code != 0 {
		t.Fatalf("convert: %d %s", code, errs)
	}
	fs := frames(errs)
	if len(fs) < 3 || !strings.HasSuffix(errs, "\n") || strings.Count(errs, "\n") != 1 {
		t.Fatalf("convert progress %q", errs)
	}
	if !strings.HasPrefix(fs[0], "m.wtxt: ") || !strings.Contains(fs[0], "MiB (") || !strings.Contains(fs[0], "/s, ETA ") {
		t.Fatalf("first frame %q", fs[0])
	}
	st, err := os.Stat(p("m.wtxt"))
	if err != nil {
		t.Fatal(err)
	}
	// The estimated total is within 2% of what was written.
	if est := progress.WTXTEstimate(2 << 20); est < st.Size()*98/100 || est > st.Size()*102/100 {
		t.Fatalf("estimate %d, written %d", est, st.Size())
	}
	last := fs[len(fs)-1]
	if want := fmt.Sprintf("m.wtxt: %.1f MiB, ", float64(st.Size())/(1<<20)); !strings.HasPrefix(last, want) || !strings.Contains(last, " in ") {
		t.Fatalf("final frame %q, want prefix %q", last, want)
	}
	// Same bytes with or without progress.
	if code, _, errs := snapdTTY(t, false, "convert", p("m.safetensors"), p("m2.wtxt"), ts); code != 0 || errs != "" {
		t.Fatalf("convert without a terminal: %d %q", code, errs)
	}
	a, _ := os.ReadFile(p("m.wtxt"))
	b, _ := os.ReadFile(p("m2.wtxt"))
	if !bytes.Equal(a, b) {
		t.Fatal("progress changed the output")
	}
	// To a binary format: total = raw bytes.
	code, _, errs = snapdTTY(t, true, "convert", p("m.wtxt"), p("back.safetensors"))
	if fs := frames(errs); code != 0 || len(fs) < 2 || !strings.Contains(fs[0], "/ 2.0 MiB (") {
		t.Fatalf("convert back: %d %q", code, errs)
	}

	code, out, errs := snapdTTY(t, true, "verify", p("m.wtxt"))
	fs = frames(errs)
	if code != 0 || !strings.Contains(out, "result:      OK") || len(fs) < 2 || !strings.Contains(fs[0], "ETA") {
		t.Fatalf("verify: %d %q %q", code, out, errs)
	}
	for _, args := range [][]string{{"verify", "--quiet", p("m.wtxt")}, {"-q", "verify", p("m.wtxt")}, {"convert", "-q", p("m.safetensors"), p("m3.wtxt"), ts}} {
		if code, _, errs := snapdTTY(t, true, args...); code != 0 || errs != "" {
			t.Fatalf("%v: %d %q", args, code, errs)
		}
	}
	// A failing verify erases its line before the report.
	bad := append([]byte(nil), a...)
	bad[len(bad)/2] ^= 1
	os.WriteFile(p("bad.wtxt"), bad, 0o644)
	code, _, errs = snapdTTY(t, true, "verify", p("bad.wtxt"))
	if before, _, ok := strings.Cut(errs, "snapd: error: "); code != 1 || !ok || !strings.HasSuffix(before, "\r\x1b[K") {
		t.Fatalf("failed verify: %d %q", code, errs)
	}

	// assemble: total from the MANIFEST.
	parts := p("parts")
	os.Mkdir(parts, 0o755)
	f, _ := os.Open(p("m.wtxt"))
	m, err := layout.SplitParts(context.Background(), f, st.Size(), gitops.MinPartLimit, func(part layout.Part, data []byte) error {
		return os.WriteFile(filepath.Join(parts, part.Name), data, 0o644)
	})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(parts, layout.ManifestName), m.Encode(), 0o644)
	code, _, errs = snapdTTY(t, true, "assemble", parts, p("asm.wtxt"))
	fs = frames(errs)
	if code != 0 || len(fs) < 2 || !strings.Contains(fs[0], fmt.Sprintf("/ %.1f MiB (", float64(st.Size())/(1<<20))) {
		t.Fatalf("assemble: %d %q", code, errs)
	}
	if c, _ := os.ReadFile(p("asm.wtxt")); !bytes.Equal(c, a) {
		t.Fatal("assembled file differs")
	}
}

// TestVerifyRepoProgress: verify-repo's progress line counts the WTXT
// bytes checked and is hidden while each generation's line is printed.
func TestVerifyRepoProgress(t *testing.T) {
	f := verifytest.Build(t, verifytest.Options{})
	code, out, errs := snapdTTY(t, true, "verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners)
	if code != 0 || strings.Count(out, "\n") < 5 {
		t.Fatalf("verify-repo: %d\n%s\n%q", code, out, errs)
	}
	fs := frames(errs)
	if len(fs) < 4 || !strings.HasPrefix(fs[0], "verify-repo "+f.Dir+": ") || !strings.Contains(fs[len(fs)-1], " in ") {
		t.Fatalf("frames %q", fs)
	}
	// Hidden before each generation is printed: one erase per generation.
	if n := strings.Count(errs, "\r\x1b[K"); n < 4 {
		t.Fatalf("%d erases in %q", n, errs)
	}
	if code, _, errs := snapdTTY(t, true, "--quiet", "verify-repo", f.Dir, "--pubkey", f.Key.AllowedSigners, "--json"); code != 0 || errs != "" {
		t.Fatalf("quiet: %d %q", code, errs)
	}
}
