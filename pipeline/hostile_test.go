//go:build unix

package pipeline

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/internal/safeopen"
	"github.com/snapd-ml/snapd/internal/testutil"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// rawRequest appends a request line the way a tool without snapd's bounds
// would (wal.Writer refuses generations above wal.MaxGen).
func rawRequest(t *testing.T, stateDir string, gen uint64, src string) {
	t.Helper()
	body := fmt.Sprintf("%s gen=%d ts=1700000000000000000 by=raw src=%s", wal.Magic, gen, src)
	line := fmt.Sprintf("%s crc=%08x\n", body, crc32.Checksum([]byte(body), crc32.MakeTable(crc32.Castagnoli)))
	segs, err := wal.Segments(filepath.Join(stateDir, WALDir))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	f, err := os.OpenFile(filepath.Join(stateDir, WALDir, fmt.Sprintf("%08d.wal", segs[len(segs)-1])), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
}

// A generation above snapshot.MaxGen (2^63-1 once
// wedged the chain; larger values made the writer emit a meta gen its own
// parser rejects) is recorded as failed and the chain goes on.
func TestGenerationOutOfRangeRefused(t *testing.T) {
	f := newFixture(t)
	f.start(t, nil)
	request(t, f.dir, 1, publish(t, f.dir, 1))
	if r := f.wait(t, 1); r.State != wal.Done {
		t.Fatalf("gen 1: %+v", r)
	}
	src := publish(t, f.dir, 2)
	for _, gen := range []uint64{snapshot.MaxGen + 1, 1<<63 - 1, 1<<64 - 1} {
		rawRequest(t, f.dir, gen, src)
		r := f.wait(t, gen)
		if r.State != wal.Failed || !strings.Contains(r.Error, "generation number out of range") || !strings.Contains(r.Error, fmt.Sprint(gen)) {
			t.Fatalf("gen %d: %+v", gen, r)
		}
	}
	if h := f.d.Head(); h.Gen != 1 {
		t.Fatalf("head moved to %d", h.Gen)
	}
	request(t, f.dir, 2, src)
	if r := f.wait(t, 2); r.State != wal.Done || r.BaseGen != 1 {
		t.Fatalf("gen 2 after refused ones: %+v", r)
	}
	verifyChain(t, f.dir, f.keys, []uint64{1, 2})
}

// mustReturn runs fn and fails the test if it blocks; the timeout only
// guards against the hang under test, it orders nothing.
func mustReturn[T any](t *testing.T, what string, fn func() (T, error)) (T, error) {
	t.Helper()
	type res struct {
		v   T
		err error
	}
	done := make(chan res, 1)
	go func() { v, err := fn(); done <- res{v, err} }()
	select {
	case r := <-done:
		return r.v, r.err
	case <-time.After(testutil.Guard):
		t.Fatalf("%s blocked", what)
		var zero T
		return zero, nil
	}
}

// A source that is (or whose symlink now points to) a
// FIFO or a device blocked the daemon forever. It is refused at once,
// recorded as failed, and the chain and Close go on.
func TestHostileSourcesRefused(t *testing.T) {
	f := newFixture(t)
	f.start(t, nil)
	fifo := filepath.Join(f.dir, "ckpt.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	linkFifo := filepath.Join(f.dir, "link-to-fifo.safetensors")
	os.Symlink(fifo, linkFifo)
	zero := filepath.Join(f.dir, "zero.safetensors")
	os.Symlink("/dev/zero", zero)
	dirWithFifo := filepath.Join(f.dir, "gen-dir")
	os.Mkdir(dirWithFifo, 0o755)
	if err := syscall.Mkfifo(filepath.Join(dirWithFifo, "model.safetensors"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		gen  uint64
		src  string
		want string
	}{
		{1, fifo, "named pipe (FIFO)"},
		{2, linkFifo, "named pipe (FIFO)"},
		{3, zero, "character device"},
		{4, dirWithFifo, "not a regular file (a FIFO)"}, // formats/sharddir refuses it inside a directory generation
	}
	for _, c := range cases {
		request(t, f.dir, c.gen, c.src)
	}
	request(t, f.dir, 5, publish(t, f.dir, 5))
	for _, c := range cases {
		r := f.wait(t, c.gen)
		if r.State != wal.Failed || !strings.Contains(r.Error, c.want) || !strings.Contains(r.Error, "source") {
			t.Fatalf("gen %d (%s): %s %q, want failure mentioning %q", c.gen, c.src, r.StateName, r.Error, c.want)
		}
	}
	if r := f.wait(t, 5); r.State != wal.Done {
		t.Fatalf("gen 5: %+v", r)
	}
	if _, err := mustReturn(t, "Close", func() (struct{}, error) { f.stop(t); return struct{}{}, nil }); err != nil {
		t.Fatal(err)
	}
	verifyChain(t, f.dir, f.keys, []uint64{5})
}

// The check is made on the descriptor that is mapped: a symlink flipped
// from a checkpoint to a FIFO after the source was resolved (the race
// between a stat and an open) is refused, not waited on.
func TestSourceFlippedToFIFOAfterResolve(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.safetensors")
	os.WriteFile(real, []byte("0123456789abcdef"), 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "gen.safetensors")
	os.Symlink(real, link)
	path, err := sourcePath(1, link)
	if err != nil || path != link {
		t.Fatalf("resolve: %q %v", path, err)
	}
	// Flip: atomically replace the link by one to the FIFO.
	tmp := link + ".new"
	os.Symlink(fifo, tmp)
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
	_, err = mustReturn(t, "MapFile", func() (*snapshot.Mapping, error) { return snapshot.MapFile(path) })
	if !errors.Is(err, safeopen.ErrNotRegular) || !strings.Contains(err.Error(), "named pipe") {
		t.Fatalf("map after flip: %v", err)
	}
}

// `snapd status` (ReadStatus) and the daemon's start never block on a
// state file, last_error, cursor or WAL segment that is a FIFO or a link
// to /dev/zero.
func TestStatusAndStartWithHostileStateFiles(t *testing.T) {
	for _, name := range []string{StateFile, LastErrorFile, filepath.Join(WALDir, "00000002.wal"), filepath.Join(WALDir, wal.CursorFile)} {
		for _, kind := range []string{"fifo", "zero"} {
			t.Run(kind+"/"+name, func(t *testing.T) {
				f := newFixture(t)
				f.start(t, nil)
				request(t, f.dir, 1, publish(t, f.dir, 1))
				f.wait(t, 1)
				f.stop(t)
				p := filepath.Join(f.dir, name)
				os.Remove(p)
				if kind == "fifo" {
					if err := syscall.Mkfifo(p, 0o644); err != nil {
						t.Fatal(err)
					}
				} else if err := os.Symlink("/dev/zero", p); err != nil {
					t.Fatal(err)
				}
				st, err := mustReturn(t, "ReadStatus", func() (*Status, error) { return ReadStatus(f.dir) })
				msg := ""
				if err != nil {
					msg = err.Error()
				} else {
					msg = strings.Join(st.Warnings, "\n")
				}
				readsIt := name != filepath.Join(WALDir, wal.CursorFile) // status does not read the cursor
				if readsIt && (!strings.Contains(msg, filepath.Base(name)) || !strings.Contains(msg, safeopen.ErrNotRegular.Error())) {
					t.Fatalf("status: err %v, warnings %q: want the file named as not regular", err, msg)
				}
				if name == LastErrorFile {
					return // not read at start
				}
				_, err = mustReturn(t, "New", func() (*Daemon, error) {
					d, err := New(testConfig(f.dir, f.keys), Deps{Registry: testRegistry(), Repo: f.repo})
					if err == nil {
						d.Close(context.Background())
					}
					return d, err
				})
				if !errors.Is(err, safeopen.ErrNotRegular) {
					t.Fatalf("start: %v", err)
				}
			})
		}
	}
}

// truncFS truncates a source file when the ring WTXT of one generation is
// created: after the source was mapped and decoded, before the encoder
// reads its arrays — a deterministic "truncated mid-conversion".
type truncFS struct {
	gen  uint64
	size int64
	mu   sync.Mutex // src is set by the test while the daemon runs
	src  string
	done bool
}

func (f *truncFS) setSource(p string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.src = p
}

func (f *truncFS) Create(path string, perm os.FileMode) (AtomicFile, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.done && filepath.Base(path) == fmt.Sprintf("gen-%06d%s", f.gen, ExtWTXT) {
		f.done = true
		if err := os.Truncate(f.src, f.size); err != nil {
			return nil, err
		}
	}
	return OSFS{}.Create(path, perm)
}

// A source truncated while mapped killed the daemon with
// SIGBUS. Now the generation fails with a clear reason and the daemon and
// the chain go on.
func TestSourceTruncatedWhileMapped(t *testing.T) {
	for _, size := range []int64{0, 4096} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			f := newFixture(t)
			tfs := &truncFS{gen: 2, size: size}
			f.start(t, func(c *Config, d *Deps) { d.FS = tfs })
			request(t, f.dir, 1, publish(t, f.dir, 1))
			if r := f.wait(t, 1); r.State != wal.Done {
				t.Fatalf("gen 1: %+v", r)
			}
			// gen 2 (ztensor) is truncated after it was mapped and decoded.
			src := publish(t, f.dir, 2)
			tfs.setSource(src)
			request(t, f.dir, 2, src)
			r := f.wait(t, 2)
			if r.State != wal.Failed || !strings.Contains(r.Error, "truncated or its storage failed while mapped") || !strings.Contains(r.Error, filepath.Base(src)) {
				t.Fatalf("gen 2: %s %q", r.StateName, r.Error)
			}
			request(t, f.dir, 3, publish(t, f.dir, 3))
			if r := f.wait(t, 3); r.State != wal.Done || r.BaseGen != 1 {
				t.Fatalf("gen 3 after the fault: %+v", r)
			}
			verifyChain(t, f.dir, f.keys, []uint64{1, 3})
			st, err := ReadStatus(f.dir)
			if err != nil || st.LastError == nil || st.LastError.Gen != 2 || !strings.Contains(st.LastError.Message, "while mapped") {
				t.Fatalf("status: %v %+v", err, st)
			}
			f.stop(t)
			noLeftovers(t, f.dir)
		})
	}
}
