package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// runWALCmds runs request-snapshot / wal / gc on a root that has only
// these commands (so the test does not depend on their registration).
func runWALCmds(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := newEnv(&out, &errb)
	e.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC) }
	root := &cobra.Command{Use: "snapd", SilenceUsage: true, SilenceErrors: true}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	addGlobalFlags(root, &e.global)
	root.AddCommand(newRequestSnapshotCommand(e), newWALCommand(e), newGCCommand(e))
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.ExecuteContext(context.Background())
	if err != nil {
		errb.WriteString("snapd: error: " + err.Error() + "\n")
	}
	return exitCode(err), out.String(), errb.String()
}

func TestRequestListGC(t *testing.T) {
	state := t.TempDir()
	store, err := snapshot.OpenGenStore(filepath.Join(state, "gens"))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for g := uint64(1); g <= 4; g++ {
		gen, err := store.Publish(g, ".bin", func(w io.Writer) error { _, err := w.Write([]byte("x")); return err })
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, gen.Path)
		code, out, errs := runWALCmds(t, "request-snapshot", "--state-dir", state, "--gen", string(rune('0'+g)), "--source", gen.Path)
		if code != 0 || !strings.Contains(out, "requested gen=") {
			t.Fatalf("request-snapshot: %d %s %s", code, out, errs)
		}
	}
	// The daemon handled 1..3 (3 failed).
	c, err := wal.OpenConsumer(filepath.Join(state, "wal"), wal.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := wal.NewReader(c.Dir(), c.Cursor(), wal.ReaderOptions{})
	for i := 0; i < 3 && r.Next(); i++ {
		st, msg := wal.Done, ""
		if i == 2 {
			st, msg = wal.Failed, "zt: bad magic at offset 0"
		}
		if _, err := c.Complete(r.Record(), st, msg); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	c.Close()

	code, out, errs := runWALCmds(t, "wal", "list", "--state-dir", state)
	if code != 0 {
		t.Fatalf("wal list: %d %s", code, errs)
	}
	for _, want := range []string{"1  ", "done", "failed", "zt: bad magic", "pending", "2026-01-02T03:04:05Z", paths[3]} {
		if !strings.Contains(out, want) {
			t.Fatalf("wal list output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runWALCmds(t, "wal", "list", "--state-dir", state, "--json")
	var doc struct {
		Requests []walEntryJSON `json:"requests"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Requests) != 4 {
		t.Fatalf("wal list --json: %d %s", code, out)
	}
	states := ""
	for _, r := range doc.Requests {
		states += r.State + " "
	}
	if states != "done done failed pending " || doc.Requests[2].Message == "" || !doc.Requests[0].InLog {
		t.Fatalf("states %q: %+v", states, doc.Requests)
	}

	// gc --keep 1: 1 is snapshotted and old → deleted; 2 is the newest
	// snapshotted → kept; 3 failed, 4 pending → kept.
	code, out, errs = runWALCmds(t, "gc", "--state-dir", state, "--keep", "1", "--dry-run")
	if code != 0 || !strings.Contains(out, "would delete gen-000001.bin") {
		t.Fatalf("gc dry run: %d %s %s", code, out, errs)
	}
	if _, err := os.Stat(paths[0]); err != nil {
		t.Fatal("dry run deleted")
	}
	code, out, errs = runWALCmds(t, "gc", "--state-dir", state, "--keep", "1", "--json")
	var rep struct {
		Deleted []gcGenJSON `json:"deleted"`
		Kept    []gcGenJSON `json:"kept"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Deleted) != 1 || rep.Deleted[0].Gen != 1 || len(rep.Kept) != 3 {
		t.Fatalf("gc: %d %s %s", code, out, errs)
	}
	if _, err := os.Stat(paths[0]); !os.IsNotExist(err) {
		t.Fatal("gen 1 not deleted")
	}
	// The failed generation 3 goes only once abandoned.
	code, out, _ = runWALCmds(t, "gc", "--state-dir", state, "--keep", "1", "--abandon", "3", "--dry-run")
	if code != 0 || !strings.Contains(out, "would delete gen-000003.bin") || store.Abandoned(3) {
		t.Fatalf("abandon dry run: %d %s", code, out)
	}
	code, out, _ = runWALCmds(t, "gc", "--state-dir", state, "--keep", "1", "--abandon", "3")
	if code != 0 || out != "deleted gen-000003.bin\ndeleted 1 generation, kept 2\n" {
		t.Fatalf("abandon: %d %q", code, out)
	}
	if code, _, errs := runWALCmds(t, "gc", "--state-dir", state, "--keep", "1", "--abandon", "9"); code != exitUsage || !strings.Contains(errs, "not found") {
		t.Fatalf("abandon missing: %d %s", code, errs)
	}
}

func TestWALCmdErrors(t *testing.T) {
	state := t.TempDir()
	src := filepath.Join(state, "ckpt")
	os.WriteFile(src, nil, 0o644)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"request-snapshot", "--state-dir", state, "--source", src}, exitUsage, "required flag"},
		{[]string{"request-snapshot", "--state-dir", state, "--gen", "1", "--source", filepath.Join(state, "missing")}, exitUsage, "no such file"},
		{[]string{"request-snapshot", "--state-dir", state, "--gen", "x", "--source", src}, exitUsage, "invalid argument"},
		{[]string{"request-snapshot", "--state-dir", state, "--gen", "9223372036854775807", "--source", src}, exitUsage, "out of range 1..999999999999999999"},
		{[]string{"request-snapshot", "--state-dir", state, "--gen", "0", "--source", src}, exitUsage, "out of range 1..999999999999999999"},
		{[]string{"request-snapshot", "--state-dir", state, "--gen", "1", "--source", src, "--requester", "a b"}, exitUsage, "requester"},
		{[]string{"request-snapshot", "--state-dir", state, "--gen", "1", "--source", src + strings.Repeat("/x", 3000)}, exitUsage, ""},
		{[]string{"wal", "list", "--state-dir", filepath.Join(state, "nope")}, exitUsage, "nope: no such file"},
		{[]string{"wal", "bogus"}, exitUsage, ""},
		{[]string{"gc", "--state-dir", state}, exitUsage, "required flag"},
		{[]string{"gc", "--state-dir", state, "--keep", "-1"}, exitUsage, ">= 0"},
		{[]string{"gc", "--state-dir", state, "--keep", "1"}, exitUsage, "no generations directory"},
	}
	for _, c := range cases {
		code, _, errs := runWALCmds(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d (want %d), stderr %q (want %q)", c.args, code, c.code, errs, c.want)
		}
	}
}
