package gitops

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
)

// catFile streams blob contents from one `git cat-file --batch` child.
//
// go-git reads a delta object from a pack twice (once for its size, once
// for its content) and hashes what it reads with a collision-detecting
// SHA-1 each time; for a 1 GiB generation whose pieces are literal deltas
// (packw.go) that was about a third of `snapd checkout`. git applies
// deltas in C and does not hash objects it reads. Nothing is trusted to
// it: readers check every chunk's SHA-256 (and the signed root) anyway,
// and replace refs are ignored (GIT_NO_REPLACE_OBJECTS), so a blob is
// the object its tree names.
//
// Blobs of at most catBuffered bytes (segment pieces, skeleton parts) are
// read whole when opened, so any number of them can be open at once (the
// assembler holds a skeleton part open while it reads segments). A
// bigger blob streams, and while its reader is open, open reports busy
// and the caller falls back to go-git.
type catFile struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	busy bool
	err  error // sticky: the child is unusable
	// served and refused count blobs answered and opens refused as busy
	// (tests check that a read went through git).
	served, refused int
}

// maxCatHeader bounds cat-file's header line ("<hex> blob <size>").
const maxCatHeader = 128

// catBuffered is the largest blob open reads whole.
const catBuffered = 1 << 20

// startCatFile starts `git cat-file --batch` in the repository at dir
// (bare or with a work tree), with none of the caller's GIT_* variables.
// It fails when git is not installed; callers then read through go-git.
func startCatFile(ctx context.Context, dir string) (*catFile, error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, err
	}
	// Pack windows are mapped 16 MiB at a time, 64 MiB at most, so the
	// child's resident size does not grow with the pack (git maps 1 GiB
	// windows by default).
	cmd := exec.CommandContext(ctx, git, "-C", dir, "-c", "core.packedGitWindowSize=16m", "-c", "core.packedGitLimit=64m",
		"-c", "core.deltaBaseCacheLimit=16m", "cat-file", "--batch")
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "GIT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GIT_NO_REPLACE_OBJECTS=1", "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &catFile{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 256<<10)}, nil
}

// open starts reading blob h. busy is true (and nothing else happens)
// while another blob from this child is being read. A blob the
// repository lacks is fs.ErrNotExist's kin: errCatMissing.
func (c *catFile) open(h plumbing.Hash) (rc io.ReadCloser, size int64, busy bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy {
		c.refused++
		return nil, 0, true, nil
	}
	if c.err != nil {
		return nil, 0, false, c.err
	}
	size, err = c.request(h)
	if err != nil {
		if !errors.Is(err, errCatMissing) {
			c.err = err
		}
		return nil, 0, false, err
	}
	c.served++
	b := &catBlob{c: c, left: size}
	if size > catBuffered {
		c.busy = true
		return b, size, false, nil
	}
	c.busy = true // b.Read and b.Close take the lock themselves
	c.mu.Unlock()
	data := make([]byte, size)
	_, err = io.ReadFull(b, data)
	b.Close()
	c.mu.Lock()
	if err != nil {
		return nil, 0, false, err
	}
	return io.NopCloser(bytes.NewReader(data)), size, false, nil
}

var errCatMissing = errors.New("object missing")

// request asks for h and reads the header of the answer.
func (c *catFile) request(h plumbing.Hash) (int64, error) {
	if _, err := io.WriteString(c.in, h.String()+"\n"); err != nil {
		return 0, fmt.Errorf("git cat-file: %w", err)
	}
	line, err := c.out.ReadSlice('\n')
	if err != nil || len(line) > maxCatHeader {
		return 0, fmt.Errorf("git cat-file: reading the answer for %s: unexpected header (%d bytes): %v", h, len(line), err)
	}
	f := strings.Fields(string(bytes.TrimSuffix(line, []byte("\n"))))
	switch {
	case len(f) == 2 && f[0] == h.String() && f[1] == "missing":
		return 0, fmt.Errorf("%s: %w", h, errCatMissing)
	case len(f) != 3 || f[0] != h.String() || f[1] != "blob":
		return 0, fmt.Errorf("git cat-file: %s: not a blob answer", h)
	}
	size, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || size < 0 {
		return 0, fmt.Errorf("git cat-file: %s: bad size", h)
	}
	return size, nil
}

// Close ends the child: stdin closed, then killed (it may be blocked
// writing a blob nobody reads) and waited for.
func (c *catFile) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.in.Close()
	if c.err == nil {
		c.err = errors.New("git cat-file: closed")
	}
	c.cmd.Process.Kill()
	c.cmd.Wait() // "signal: killed" or git's own exit: nothing to report
	return nil
}

// catBlob reads one blob's bytes from the child: left bytes, then the
// LF cat-file ends it with (ended: consumed).
type catBlob struct {
	c      *catFile
	left   int64
	ended  bool
	closed bool
}

func (b *catBlob) Read(p []byte) (int, error) {
	if b.closed {
		return 0, os.ErrClosed
	}
	if b.left == 0 {
		return 0, b.end()
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.c.out.Read(p)
	b.left -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.fail(err)
		return n, fmt.Errorf("git cat-file: %w", err)
	}
	if b.left == 0 {
		if err := b.end(); err != io.EOF {
			return n, err
		}
	}
	return n, nil
}

// end consumes the LF after the blob's bytes; io.EOF when it is there.
func (b *catBlob) end() error {
	if !b.ended {
		if c, err := b.c.out.ReadByte(); err != nil || c != '\n' {
			b.fail(errors.New("answer not terminated"))
			return errors.New("git cat-file: answer not terminated")
		}
		b.ended = true
	}
	return io.EOF
}

func (b *catBlob) fail(err error) {
	b.c.mu.Lock()
	if b.c.err == nil {
		b.c.err = err
	}
	b.c.mu.Unlock()
}

// Close skips what was not read, so the child can answer the next
// request.
func (b *catBlob) Close() error {
	if b.closed {
		return nil
	}
	_, err := io.Copy(io.Discard, b)
	b.closed = true
	b.c.mu.Lock()
	b.c.busy = false
	b.c.mu.Unlock()
	return err
}
