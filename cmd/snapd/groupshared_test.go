//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/pipeline"
)

// TestGroupSharedDaemon: `snapd run` as one Unix user and a training job
// (scripts/snapd_trainer.py: publish_generation + request_snapshot) as
// another, both in one group with umask 0007, in a setgid 2770 state
// directory (README "Trainer and daemon as different users"). Both
// generations are snapshotted and committed (the second with its diff
// picture). Runs only as root: it creates the users and the group and
// removes them.
func TestGroupSharedDaemon(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create users (useradd/groupadd)")
	}
	py := "/usr/bin/python3" // a system python the trainer user may run
	for _, tool := range []string{"useradd", "groupadd", "userdel", "groupdel", "git", py} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	suffix := strconv.Itoa(os.Getpid() % 100000)
	group, trainerName, daemonName := "snpcg"+suffix, "snpct"+suffix, "snpcd"+suffix
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run("groupadd", group)
	t.Cleanup(func() { exec.Command("groupdel", group).Run() })
	creds := map[string]*syscall.Credential{}
	for _, name := range []string{trainerName, daemonName} {
		run("useradd", "-M", "-N", "-g", group, "-d", "/nonexistent", "-s", "/usr/sbin/nologin", name)
		t.Cleanup(func() { exec.Command("userdel", name).Run() })
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		creds[name] = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(gid)}}
	}
	trainer, daemon := creds[trainerName], creds[daemonName]
	// as runs argv as c with umask 0007 (the group-shared mode's).
	as := func(ctx context.Context, c *syscall.Credential, argv ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", `umask 0007 && exec "$@"`, "sh"}, argv...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c}
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
		return cmd
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Guard) // a hang fails, never blocks CI
	defer cancel()

	base, err := os.MkdirTemp("", "snapdgroup")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "snapd")
	copyTo(t, buildSnapd(t), bin, 0o755)
	copyTo(t, "../../scripts/snapd_trainer.py", filepath.Join(base, "snapd_trainer.py"), 0o644)
	for g := uint64(1); g <= 2; g++ {
		var buf bytes.Buffer
		if err := safetensors.New().Encode(ctx, &buf, tinyGen(g), formats.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(base, "in-"+strconv.FormatUint(g, 10)+".safetensors"), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(base, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, int(daemon.Uid), int(daemon.Gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o770|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}

	var logs testutil.SyncBuffer
	d := as(ctx, daemon, bin, "run", "--state-dir", state, "--metrics-addr", "off")
	d.Stdout, d.Stderr = &logs, &logs
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			d.Process.Kill()
			d.Wait()
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	}()

	prog := `import sys; sys.path.insert(0, sys.argv[1]); import snapd_trainer as st
base, state = sys.argv[1], sys.argv[2]
for gen in (1, 2):
    data = open("%s/in-%d.safetensors" % (base, gen), "rb").read()
    p = st.publish_generation(state + "/gens", gen, data, ".safetensors")
    st.request_snapshot(gen, p, state_dir=state)
`
	if out, err := as(ctx, trainer, py, "-c", prog, base, state).CombinedOutput(); err != nil {
		t.Fatalf("trainer: %v\n%s", err, out)
	}
	// Wait for the daemon to finish both (its state files are the event).
	var st *pipeline.Status
	for {
		if st, err = pipeline.ReadStatus(state); err == nil && (st.Done >= 2 || len(st.Failed) > 0) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the daemon did not finish: %v %+v", err, st)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if len(st.Failed) > 0 || st.Chain == nil || st.Chain.Gen != 2 {
		t.Fatalf("status: failed %+v, chain %+v", st.Failed, st.Chain)
	}
	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := d.Wait(); err != nil {
		t.Fatalf("daemon exit: %v", err)
	}
	// The trainer's files are the trainer's, in the shared group; the
	// daemon could read them and (setgid) everything is in the group.
	for _, p := range []string{filepath.Join(state, "gens", "gen-000002.safetensors"), filepath.Join(state, "wal", "00000001.wal")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		sys := fi.Sys().(*syscall.Stat_t)
		if sys.Uid != trainer.Uid || sys.Gid != trainer.Gid || fi.Mode().Perm()&0o060 == 0 {
			t.Errorf("%s: uid %d gid %d mode %v; want the trainer's, group %d, group-accessible", p, sys.Uid, sys.Gid, fi.Mode(), trainer.Gid)
		}
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"--git-dir", filepath.Join(state, "repo")}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if files := git("ls-tree", "-r", "--name-only", "gen-000002"); !strings.Contains(files, "snapshots/current.wtxt") || !strings.Contains(files, "snapshots/current.diff.svg") {
		t.Fatalf("gen 2's commit holds:\n%s", files)
	}
}

func copyTo(t *testing.T, from, to string, perm os.FileMode) {
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
