//go:build unix

package wal

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/safeopen"
)

// mustReturn runs fn and fails the test if it blocks; the timeout only
// guards against the hang under test, it orders nothing.
func mustReturn(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s blocked", what)
		return nil
	}
}

// A WAL segment (or the cursor or outcomes file) that is
// a FIFO or a link to /dev/zero made `wal list`, `status` and the daemon
// block forever. Every open is non-blocking and checked on the opened
// descriptor: such files are refused with an error naming them.
func TestHostileWALFiles(t *testing.T) {
	hostile := map[string]func(t *testing.T, p string){
		"fifo": func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"dev-zero-link": func(t *testing.T, p string) {
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
		},
		"link-to-good-segment": func(t *testing.T, p string) {
			good := filepath.Join(t.TempDir(), "elsewhere.wal")
			if err := os.WriteFile(good, []byte{}, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(good, p); err != nil {
				t.Fatal(err)
			}
		},
	}
	for kind, make := range hostile {
		for _, file := range []string{SegmentName(2), CursorFile, OutcomesFile} {
			t.Run(kind+"/"+file, func(t *testing.T) {
				dir := t.TempDir()
				if err := Append(dir, req(1)); err != nil {
					t.Fatal(err)
				}
				if file == SegmentName(2) {
					// Segment 1 sealed, the hostile one is the newest.
					if err := sealSegment(dir, 1); err != nil {
						t.Fatal(err)
					}
				}
				make(t, filepath.Join(dir, file))
				check := func(what string, err error) {
					t.Helper()
					if err == nil {
						t.Fatalf("%s: no error", what)
					}
					if !errors.Is(err, safeopen.ErrNotRegular) || !strings.Contains(err.Error(), file) {
						t.Fatalf("%s: %v, want ErrNotRegular naming %s", what, err, file)
					}
				}
				if file != CursorFile { // List does not read the cursor
					check("list", mustReturn(t, "List", func() error { _, err := List(dir, nil); return err }))
				}
				check("consumer", mustReturn(t, "OpenConsumer", func() error {
					c, err := OpenConsumer(dir, ConsumerOptions{})
					if err == nil {
						c.Close()
					}
					return err
				}))
				if file == SegmentName(2) {
					check("append", mustReturn(t, "Append", func() error { return Append(dir, req(2)) }))
				} else {
					check("load", mustReturn(t, "load", func() error {
						if _, err := LoadOutcomes(dir); err != nil {
							return err
						}
						_, err := ReadCursor(dir)
						return err
					}))
				}
			})
		}
	}
}

// The Python helper refuses a segment that is a FIFO (it would block the
// training loop) or a link (e.g. to /dev/zero) instead of waiting.
func TestPythonHostileSegment(t *testing.T) {
	py := python(t)
	for _, kind := range []string{"fifo", "zero"} {
		dir := t.TempDir()
		p := filepath.Join(dir, SegmentName(1))
		if kind == "fifo" {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Symlink("/dev/zero", p); err != nil {
			t.Fatal(err)
		}
		const prog = `
import sys
sys.path.insert(0, sys.argv[1])
import snapd_trainer as st
try:
    st.request_snapshot(1, "/x", state_dir=sys.argv[2])
except OSError as e:
    assert "not a regular file" in str(e), e
    print("refused")
`
		// request_snapshot appends to STATE_DIR/wal.
		wdir := filepath.Join(t.TempDir(), "state")
		os.Mkdir(wdir, 0o755)
		if err := os.Rename(dir, filepath.Join(wdir, "wal")); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(py, "-c", prog, trainerScripts, wdir)
		out, err := mustReturnOut(t, cmd)
		if err != nil || strings.TrimSpace(out) != "refused" {
			t.Fatalf("%s: %v %s", kind, err, out)
		}
	}
}

func mustReturnOut(t *testing.T, cmd *exec.Cmd) (string, error) {
	t.Helper()
	var out []byte
	err := mustReturn(t, "python", func() error {
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	return string(out), err
}

// A torn tail repaired while the reader holds it, then an append at the
// cut before the reader reads again (what a loaded machine does to the
// listener): the new record must be read, not glued to the stale bytes.
func TestReaderAfterRepairThenAppend(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	appendN(t, dir, 1, 2)
	appendRaw(t, segPath(dir, 1), mustLine(t, req(2))[:20])
	r := NewReader(dir, Pos{}, ReaderOptions{})
	defer r.Close()
	if !r.Next() || r.Record().Gen != 1 {
		t.Fatalf("first record: %v", r.Err())
	}
	if r.Next() || r.Pending() != 20 {
		t.Fatalf("torn tail: pending %d", r.Pending())
	}
	ce, err := RepairSegment(dir, 1)
	if err != nil || ce == nil || ce.Length != 20 {
		t.Fatalf("repair: %+v %v", ce, err)
	}
	r.truncated(ce.Segment, ce.Offset) // what the listener does
	appendN(t, dir, 3, 4)
	if !r.Next() || r.Record().Gen != 3 {
		t.Fatalf("record after the repair: %v (skipped %d)", r.Err(), r.Skipped())
	}
}

// A WAL directory replaced by a FIFO: appends and listing fail at once.
func TestWALDirIsFIFO(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	if err := syscall.Mkfifo(dir, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mustReturn(t, "Append", func() error { return Append(dir, req(1)) }); err == nil {
		t.Fatal("append into a FIFO accepted")
	}
	if err := mustReturn(t, "Segments", func() error { _, err := Segments(dir); return err }); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("segments: %v", err)
	}
}
