package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConvertDCP: a torch.distributed.checkpoint directory written by
// two ranks converts to WTXT with every tensor whole, back to a DCP
// directory with --to dcp (one rank file), and that converts to the same
// WTXT; an incomplete directory (no .metadata) is refused with a hint.
func TestConvertDCP(t *testing.T) {
	d := t.TempDir()
	src := filepath.Join(fixtures, "torch2", "dcp2")
	a, b := filepath.Join(d, "a.wtxt"), filepath.Join(d, "b.wtxt")
	mustRun(t, "convert", src, a, "--ts", "2026-01-01T00:00:00Z")
	back := filepath.Join(d, "back")
	mustRun(t, "convert", a, back, "--to", "dcp")
	for _, f := range []string{".metadata", "__0_0.distcp"} {
		if _, err := os.Stat(filepath.Join(back, f)); err != nil {
			t.Fatal(err)
		}
	}
	mustRun(t, "convert", back, b, "--ts", "2026-01-01T00:00:00Z")
	x, _ := os.ReadFile(a)
	y, _ := os.ReadFile(b)
	if !bytes.Equal(x, y) {
		t.Fatal("DCP -> WTXT -> DCP -> WTXT changed the WTXT")
	}
	if out := mustRun(t, "inspect", src); !strings.Contains(out, "dcp, 4 arrays") {
		t.Errorf("inspect: %s", out)
	}

	part := filepath.Join(d, "part")
	if err := os.MkdirAll(part, 0o755); err != nil {
		t.Fatal(err)
	}
	rank0, _ := os.ReadFile(filepath.Join(src, "__0_0.distcp"))
	if err := os.WriteFile(filepath.Join(part, "__0_0.distcp"), rank0, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := snapd(t, nil, "convert", part, filepath.Join(d, "c.wtxt"))
	if code == 0 || !strings.Contains(errs, "no .metadata") || !strings.Contains(errs, "still being written") {
		t.Fatalf("incomplete DCP directory: exit %d\n%s", code, errs)
	}
	// Requested before .metadata exists: appended, with a note.
	code, _, errs = snapd(t, nil, "request-snapshot", "--state-dir", filepath.Join(d, "state"), "--gen", "1", "--source", part)
	if code != 0 || !strings.Contains(errs, "no .metadata yet") {
		t.Fatalf("request-snapshot of an incomplete DCP directory: exit %d\n%s", code, errs)
	}
}
