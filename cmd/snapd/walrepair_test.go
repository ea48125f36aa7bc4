package main

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/pipeline"
	"github.com/snapd-ml/snapd/wal"
)

// walRunGuard turns a daemon that never stops into a failure; it is a
// guard, not a timing assertion.
const walRunGuard = 5 * time.Minute

// runDaemonUntil runs `snapd run` (no git, no metrics) on state until ok
// holds for its status, then stops it; it returns runRun's error. When
// ok is nil it expects runRun to end by itself.
func runDaemonUntil(t *testing.T, state string, ok func(*pipeline.Status) bool) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runRun(ctx, newEnv(io.Discard, io.Discard), &runOptions{stateDir: state, metricsAddr: "off", noGit: true,
			changed: func(n string) bool { return n == "state-dir" || n == "metrics-addr" || n == "no-git" }})
	}()
	if ok == nil {
		select {
		case err := <-done:
			return err
		case <-time.After(walRunGuard):
			cancel()
			<-done
			t.Fatal("snapd run did not stop on a damaged WAL cursor")
		}
	}
	waitStatus(t, state, "the daemon's progress", ok)
	cancel()
	return <-done
}

// A lost WAL tail (cursor past its segment's end): snapd run refuses to
// start, wal list and status report it and exit 1, wal repair moves the
// cursor back to the last handled request, and the request appended
// after the loss is then delivered.
func TestWALCursorDamageRunListStatusRepair(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "s")
	walDir := filepath.Join(state, pipeline.WALDir)
	junk := filepath.Join(dir, "junk.bin")
	os.WriteFile(junk, []byte("garbage garbage garbage"), 0o644)
	appendReq := func(gen uint64) {
		t.Helper()
		if err := wal.Append(walDir, wal.Request{Gen: gen, Time: time.Unix(1700000000, 0), Requester: "t", Source: junk}); err != nil {
			t.Fatal(err)
		}
	}
	for g := uint64(1); g <= 3; g++ {
		appendReq(g)
	}
	c, err := wal.OpenConsumer(walDir, wal.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := wal.NewReader(walDir, wal.Pos{}, wal.ReaderOptions{})
	var first wal.Record
	for r.Next() {
		if first.Gen == 0 {
			first = r.Record()
		}
		if _, err := c.Complete(r.Record(), wal.Done, ""); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	c.Close()
	seg := filepath.Join(walDir, wal.SegmentName(1))
	if err := os.Truncate(seg, first.End.Offset); err != nil { // gens 2 and 3 lost
		t.Fatal(err)
	}
	appendReq(4) // lands below the cursor

	err = runDaemonUntil(t, state, nil)
	if err == nil || !strings.Contains(err.Error(), "past the end of segment 00000001.wal") || !strings.Contains(err.Error(), "snapd wal repair") {
		t.Fatalf("snapd run on a damaged cursor: %v", err)
	}
	code, _, errs := snapd(t, nil, "wal", "list", "--state-dir", state)
	if code != exitInvalid || !strings.Contains(errs, "past the end") || !strings.Contains(errs, "snapd wal repair") {
		t.Fatalf("wal list: exit %d\n%s", code, errs)
	}
	code, out, errs := snapd(t, nil, "wal", "list", "--json", "--state-dir", state)
	if code != exitInvalid || !strings.Contains(out, `"cursor_error": "wal: cursor 1:`) {
		t.Fatalf("wal list --json: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = snapd(t, nil, "status", "--state-dir", state)
	if code != exitInvalid || !strings.Contains(out, "warning:     wal: cursor 1:") || !strings.Contains(errs, "snapd wal repair") {
		t.Fatalf("status: exit %d\n%s\n%s", code, out, errs)
	}

	code, out, errs = snapd(t, nil, "wal", "repair", "--state-dir", state)
	if code != exitOK || !strings.Contains(out, "cursor moved from 1:") || !strings.Contains(out, "to "+first.End.String()+" (after gen 1") ||
		!strings.Contains(out, "1 never handled, the first gen 4 at "+first.End.String()) {
		t.Fatalf("wal repair: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = snapd(t, nil, "wal", "repair", "--state-dir", state)
	if code != exitOK || !strings.Contains(out, "nothing to repair") {
		t.Fatalf("second wal repair: exit %d\n%s", code, out)
	}
	if code, _, errs := snapd(t, nil, "wal", "list", "--state-dir", state); code != exitOK {
		t.Fatalf("wal list after repair: exit %d\n%s", code, errs)
	}
	// Gen 4 (a junk source) is delivered and fails.
	if err := runDaemonUntil(t, state, func(s *pipeline.Status) bool { return len(s.Failed) == 1 && s.Failed[0].Gen == 4 }); err != nil {
		t.Fatal(err)
	}
}

// A cursor inside a line or with a huge offset stops snapd run too.
func TestWALCursorMidRecordAndHugeOffsetStopRun(t *testing.T) {
	for name, off := range map[string]int64{"mid-record": 7, "huge": 999999999} {
		t.Run(name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "s")
			walDir := filepath.Join(state, pipeline.WALDir)
			if err := wal.Append(walDir, wal.Request{Gen: 1, Time: time.Unix(1700000000, 0), Requester: "t", Source: "/nowhere"}); err != nil {
				t.Fatal(err)
			}
			// A valid cursor file (CRC and all) at a bad position.
			c, err := wal.OpenConsumer(walDir, wal.ConsumerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			writeTestCursor(t, walDir, wal.Pos{Segment: 1, Offset: off})
			err = runDaemonUntil(t, state, nil)
			want := map[string]string{"mid-record": "not a record boundary", "huge": "offset 999999999 is past the end"}[name]
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("snapd run: %v, want %q", err, want)
			}
		})
	}
}

// writeTestCursor writes a well-formed cursor file (docs: wal/doc.go)
// holding p.
func writeTestCursor(t *testing.T, walDir string, p wal.Pos) {
	t.Helper()
	b := fmt.Appendf(nil, "cursor seg=%d off=%d", p.Segment, p.Offset)
	b = fmt.Appendf(b, " crc=%08x\n", crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	if err := os.WriteFile(filepath.Join(walDir, wal.CursorFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := wal.ReadCursor(walDir); err != nil || got != p {
		t.Fatalf("cursor written: %v %v", got, err)
	}
}
