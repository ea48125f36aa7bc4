//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/internal/gittest"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/pipeline"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// bigSource is size bytes of deterministic pseudo-random data (never held
// in memory).
type bigSource struct{ seed, size int64 }

func (s bigSource) Size() int64 { return s.size }

func (s bigSource) ReadAt(b []byte, off int64) (int, error) {
	if off >= s.size {
		return 0, io.EOF
	}
	n := len(b)
	if int64(n) > s.size-off {
		n = int(s.size - off)
	}
	for i := 0; i < n; {
		pos := off + int64(i)
		z := uint64(s.seed)<<40 ^ uint64(pos/8)*0x9e3779b97f4a7c15
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		for j := pos % 8; j < 8 && i < n; j++ {
			b[i] = byte(z >> (8 * j))
			i++
		}
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// vmHWM returns a process's peak resident set (VmHWM) in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestBigGenerationPush (SNAPD_TEST_BIG=1; SNAPD_TEST_BIG_SIZE bytes,
// default 1 GiB; SNAPD_TEST_BIG_LAYOUT=split for the split layout):
// `snapd run` (a child process) converts, commits (layout auto: segments
// above split_above) and pushes one generation of that size to a local bare remote
// through the git CLI; the daemon's peak RSS stays <= 256 MiB and the
// generation arrives whole (git fsck of the remote's new objects).
func TestBigGenerationPush(t *testing.T) {
	if os.Getenv("SNAPD_TEST_BIG") != "1" {
		t.Skip("writes several GB: set SNAPD_TEST_BIG=1")
	}
	size := int64(1 << 30)
	if s := os.Getenv("SNAPD_TEST_BIG_SIZE"); s != "" {
		var err error
		if size, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	remote := filepath.Join(dir, "remote.git")
	gittest.Git(t, dir, "init", "-q", "--bare", remote)
	layout := os.Getenv("SNAPD_TEST_BIG_LAYOUT") // auto (segments above split_above), split or segments
	if layout == "" {
		layout = "auto"
	}
	cfg := writeConfig(t, dir, fmt.Sprintf("git:\n  remote: file://%s\n  layout: %s\nmetrics: {addr: \"off\"}\n", remote, layout))

	// The generation: four f32 matrices of 1024 columns.
	const cols = 1024
	rows := size / 4 / (cols * 4)
	s := &snapshot.Snapshot{}
	for i := range 4 {
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: fmt.Sprintf("m%d", i), DType: snapshot.F32, Shape: []int64{rows, cols},
			Data: bigSource{seed: int64(i), size: rows * cols * 4}})
	}
	store, err := snapshot.OpenGenStore(filepath.Join(state, pipeline.GensDir))
	if err != nil {
		t.Fatal(err)
	}
	g, err := store.Publish(1, ".safetensors", func(w io.Writer) error {
		return safetensors.New().Encode(context.Background(), w, s, formats.EncodeOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}

	var childErr testutil.SyncBuffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestDaemonChildProcess$")
	cmd.Env = append(os.Environ(), "SNAPD_TEST_DAEMON_ARGS="+strings.Join([]string{"run", "--state-dir", state, "--config", cfg}, "\n"))
	cmd.Stdout, cmd.Stderr = io.Discard, &childErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	t.Cleanup(func() {
		if !done {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	w, err := wal.OpenWriter(filepath.Join(state, pipeline.WALDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(wal.Request{Gen: 1, Time: time.Now(), Requester: "test", Source: g.Path}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// Completion is awaited (bounded only as a guard against a hang).
	guard := time.Now().Add(time.Hour)
	for {
		if _, err := gittest.GitRun(remote, "rev-parse", "-q", "--verify", "refs/tags/gen-000001"); err == nil {
			break
		}
		if time.Now().After(guard) {
			t.Fatalf("generation not pushed:\n%s", childErr.String())
		}
		if cmd.ProcessState != nil {
			t.Fatalf("daemon exited:\n%s", childErr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	peak := vmHWM(t, cmd.Process.Pid)
	t.Logf("daemon peak RSS %d MiB for a %d MiB generation", peak>>20, size>>20)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon: %v\n%s", err, childErr.String())
	}
	done = true
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		// wait4 reports the largest of the daemon and its reaped
		// descendants (git push, pack-objects, the local receive-pack).
		t.Logf("largest process of the daemon's tree (incl. git children): %d MiB", ru.Maxrss>>10)
	}
	if peak > 256<<20 {
		t.Fatalf("daemon peak RSS %d MiB > 256 MiB", peak>>20)
	}
	gittest.Git(t, remote, "fsck", "--connectivity-only", "--no-dangling")
	if left, _ := filepath.Glob(filepath.Join(remote, "objects", "*incoming-*")); len(left) > 0 {
		t.Fatalf("quarantine left: %v", left)
	}
}
