//go:build unix

package wal

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unixAccount is a throwaway user (or group) made by the test as root.
type unixAccount struct{ uid, gid uint32 }

// makeAccounts creates group g and users trainer and daemon in it, and
// removes them when the test ends.
func makeAccounts(t *testing.T, g, trainer, daemon string) (unixAccount, unixAccount) {
	t.Helper()
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run("groupadd", g)
	t.Cleanup(func() { exec.Command("groupdel", g).Run() })
	var accts []unixAccount
	for _, name := range []string{trainer, daemon} {
		run("useradd", "-M", "-N", "-g", g, "-d", "/nonexistent", "-s", "/usr/sbin/nologin", name)
		t.Cleanup(func() { exec.Command("userdel", name).Run() })
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		accts = append(accts, unixAccount{uint32(uid), uint32(gid)})
	}
	return accts[0], accts[1]
}

// asUser runs argv as a with umask 0007 (the group-shared mode's) and
// environment env; it fails the test on a non-zero exit.
func asUser(t *testing.T, ctx context.Context, a unixAccount, env []string, stdin io.Reader, argv ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", `umask 0007 && exec "$@"`, "sh"}, argv...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: []uint32{a.gid}}}
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}, env...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v as uid %d: %v\n%s", argv, a.uid, err, out)
	}
	return string(out)
}

type segInfo struct {
	uid, gid uint32
	perm     os.FileMode
	data     []byte
}

func statSeg(t *testing.T, dir string, n uint64) segInfo {
	t.Helper()
	p := segPath(dir, n)
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	return segInfo{sys.Uid, sys.Gid, st.Mode().Perm(), data}
}

// TestGroupSharedUsers runs the trainer and the daemon as two real Unix
// users of one group (wal/doc.go, "Group-shared mode"): the trainer's
// segment is sealed by the daemon (which cannot chmod it) with the seal
// marker, the trainer then appends to the daemon's segment, the daemon
// seals that one (marker and chmod) and deletes the trainer's, and the
// Python helper as the trainer skips the sealed segment. Runs only as
// root (it creates the users and group, and removes them).
func TestGroupSharedUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create users (useradd/groupadd)")
	}
	for _, tool := range []string{"useradd", "groupadd", "userdel", "groupdel"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	suffix := strconv.Itoa(os.Getpid() % 100000)
	trainer, daemon := makeAccounts(t, "snpg"+suffix, "snpt"+suffix, "snpd"+suffix)
	g := trainer.gid
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang fails, never blocks CI
	defer cancel()

	// A tree both users can enter: the test binary and the Python helper
	// copied in, the state directory setgid 2770 owned by the daemon.
	base, err := os.MkdirTemp("", "walgroup")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "wal.test")
	copyFile(t, self, bin, 0o755)
	state := filepath.Join(base, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, int(daemon.uid), int(g)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o2770|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(state, "wal")
	effects := filepath.Join(state, "effects")

	appendAs := func(id, n int) {
		t.Helper()
		asUser(t, ctx, trainer, []string{"WAL_TEST_CHILD=append", "WAL_TEST_DIR=" + dir, "WAL_TEST_ID=" + strconv.Itoa(id), "WAL_TEST_N=" + strconv.Itoa(n), "WAL_TEST_STOP=1"}, nil, bin)
	}
	consumeAs := func() {
		t.Helper()
		asUser(t, ctx, daemon, []string{"WAL_TEST_CHILD=consume", "WAL_TEST_DIR=" + dir, "WAL_TEST_EFFECTS=" + effects, "WAL_TEST_SEGSIZE=300"}, nil, bin)
	}

	// 1. The trainer starts the WAL: directory 2770 (setgid inherited,
	// umask 0007), segment 1 its own, 0660.
	appendAs(1, 5)
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSetgid == 0 || st.Mode().Perm() != 0o770 || st.Sys().(*syscall.Stat_t).Gid != g {
		t.Fatalf("WAL directory made by the trainer: mode %v gid %d, want drwxrws--- gid %d", st.Mode(), st.Sys().(*syscall.Stat_t).Gid, g)
	}
	s1 := statSeg(t, dir, 1)
	if s1.uid != trainer.uid || s1.gid != g || s1.perm != 0o660 {
		t.Fatalf("segment 1: uid %d gid %d perm %v, want the trainer's, group %d, 0660", s1.uid, s1.gid, s1.perm, g)
	}

	// 2. The daemon consumes and rotates: segment 2 is its own, segment 1
	// (the trainer's, which it cannot chmod) is sealed by the marker.
	consumeAs()
	s1 = statSeg(t, dir, 1)
	if !bytes.HasSuffix(s1.data, []byte("\n"+SealMarker)) || s1.perm != 0o660 {
		t.Fatalf("segment 1 after rotation: perm %v, ends %q; want the seal marker, write bits kept", s1.perm, tail(s1.data))
	}
	s2 := statSeg(t, dir, 2)
	if s2.uid != daemon.uid || s2.gid != g || s2.perm != 0o660 || len(s2.data) != 0 {
		t.Fatalf("segment 2: uid %d gid %d perm %v size %d, want the daemon's, group %d, 0660, empty", s2.uid, s2.gid, s2.perm, len(s2.data), g)
	}

	// 3. The trainer sees the seal and appends to the daemon's segment 2.
	appendAs(2, 5)
	if after := statSeg(t, dir, 1); !bytes.Equal(after.data, s1.data) {
		t.Fatalf("the trainer appended to sealed segment 1 (%d -> %d bytes)", len(s1.data), len(after.data))
	}
	if recs := readSeg(t, dir, 2); len(recs) != 6 || recs[0] != appenderGen(2, 0) || recs[5] != stopGen {
		t.Fatalf("segment 2 holds %v, want the trainer's 6 requests", recs)
	}

	// 4. The daemon again: it deletes the trainer's sealed segment 1 and
	// seals its own segment 2 by marker and chmod.
	consumeAs()
	if _, err := os.Stat(segPath(dir, 1)); !os.IsNotExist(err) {
		t.Fatalf("consumed segment 1 of the trainer not removed: %v", err)
	}
	s2 = statSeg(t, dir, 2)
	if !bytes.HasSuffix(s2.data, []byte("\n"+SealMarker)) || s2.perm != 0o440 {
		t.Fatalf("segment 2 after rotation: perm %v, ends %q; want the marker and 0440", s2.perm, tail(s2.data))
	}

	// 5. The Python helper as the trainer skips the sealed segment (a
	// system python3: one under root's home is not the trainer's to run).
	if py := "/usr/bin/python3"; fileExists(py) {
		copyFile(t, filepath.Join(trainerScripts, "snapd_trainer.py"), filepath.Join(base, "snapd_trainer.py"), 0o644)
		prog := `import sys; sys.path.insert(0, sys.argv[1]); import snapd_trainer as s; s.request_snapshot(777, "/gens/py", state_dir=sys.argv[2])`
		asUser(t, ctx, trainer, nil, nil, py, "-c", prog, base, state)
		if recs := readSeg(t, dir, 3); len(recs) != 1 || recs[0] != 777 {
			t.Fatalf("segment 3 after the Python append: %v", recs)
		}
		// Segment 3 is the daemon's (made by its rotation in step 4).
		if s3 := statSeg(t, dir, 3); s3.uid != daemon.uid || s3.perm != 0o660 {
			t.Fatalf("segment 3: uid %d perm %v, want the daemon's, 0660", s3.uid, s3.perm)
		}
		if after := statSeg(t, dir, 2); !bytes.Equal(after.data, s2.data) {
			t.Fatal("the Python helper appended to sealed segment 2")
		}
	}

	// Every request was handled once, in order, by the daemon.
	eff, err := os.ReadFile(effects)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for id := 1; id <= 2; id++ {
		for i := range 5 {
			want = append(want, strconv.FormatUint(appenderGen(id, i), 10))
		}
		if id == 1 {
			want = append(want, strconv.Itoa(stopGen)) // handled once: done the second time
		}
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(eff)), "\n") {
		if !strings.HasPrefix(l, "start ") {
			got = append(got, l)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
}

// readSeg returns the generations of the records in segment n alone.
func readSeg(t *testing.T, dir string, n uint64) []uint64 {
	t.Helper()
	r := NewReader(dir, Pos{Segment: n}, ReaderOptions{})
	defer r.Close()
	var gens []uint64
	for r.Next() && r.Record().Pos.Segment == n {
		gens = append(gens, r.Record().Gen)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return gens
}

func tail(b []byte) []byte { return b[max(len(b)-24, 0):] }

func copyFile(t *testing.T, from, to string, perm os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, perm); err != nil {
		t.Fatal(err)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestSealKinds: a segment sealed the old way (write bit cleared, no
// marker) and one sealed only by the marker (another user's segment) are
// both skipped by appenders and read through by readers; a marker that is
// not a whole line is no seal.
func TestSealKinds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for n := uint64(1); n <= 3; n++ {
		if err := createSegment(dir, n); err != nil {
			t.Fatal(err)
		}
		appendRaw(t, segPath(dir, n), mustLine(t, req(n)))
	}
	if err := os.Chmod(segPath(dir, 1), modeSealed); err != nil { // old WAL
		t.Fatal(err)
	}
	appendRaw(t, segPath(dir, 2), []byte(SealMarker)) // marker only
	appendRaw(t, segPath(dir, 3), []byte("x"+SealMarker))
	for n, want := range map[uint64]bool{1: true, 2: true, 3: false} {
		if got, err := segmentSealed(dir, n); err != nil || got != want {
			t.Fatalf("segment %d sealed = %v, %v; want %v", n, got, err, want)
		}
	}
	// Segment 3 ends with a garbage line: still open, the append lands there.
	if err := Append(dir, req(4)); err != nil {
		t.Fatal(err)
	}
	var corrupt []*CorruptError
	got := readAll(t, dir, func(ce *CorruptError) { corrupt = append(corrupt, ce) })
	var gens []uint64
	for _, r := range got {
		gens = append(gens, r.Gen)
	}
	if fmt.Sprint(gens) != "[1 2 3 4]" || len(corrupt) != 1 || corrupt[0].Segment != 3 {
		t.Fatalf("read %v, corrupt %v", gens, corrupt)
	}
	// Sealing an already sealed segment changes nothing; sealing an
	// empty one writes the bare marker.
	before := statSeg(t, dir, 2)
	if err := sealSegment(dir, 2); err != nil {
		t.Fatal(err)
	}
	if after := statSeg(t, dir, 2); !bytes.Equal(after.data, before.data) {
		t.Fatal("resealing changed segment 2")
	}
	if err := createSegment(dir, 4); err != nil {
		t.Fatal(err)
	}
	if err := sealSegment(dir, 4); err != nil {
		t.Fatal(err)
	}
	if s4 := statSeg(t, dir, 4); string(s4.data) != SealMarker || s4.perm != 0o444 {
		t.Fatalf("sealed empty segment: %q %v", s4.data, s4.perm)
	}
	if err := Append(dir, req(5)); err != nil {
		t.Fatal(err)
	}
	if recs := readSeg(t, dir, 5); fmt.Sprint(recs) != "[5]" {
		t.Fatalf("append after sealed empty segment 4: segment 5 holds %v", recs)
	}
}
