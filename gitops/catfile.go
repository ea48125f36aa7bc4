package gitops

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/snapd-ml/snapd/gitops/layout"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/snapd-ml/snapd/internal/gitexec"
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
// Reads are pipelined. A reader that knows which blobs it will open next
// says so (hint; treeFS.Prefetch, which ReadSegments calls with the
// segments its skeleton names ahead of the assembler), and catFile keeps
// up to catWindow of those requests written to git's stdin ahead of the
// answer being read, so git answers the next request while the caller
// consumes the current one instead of waiting for a round trip per 16 KiB
// piece. Opening the blob at the head of the queue consumes its answer;
// opening one further down reads the earlier answers first, keeping those
// of at most catBuffered bytes (up to catStashMax bytes in all) for a
// later open and skipping the rest; opening one not requested writes its
// request behind the queue. So any order of opens is correct, hints only
// make it faster, and a hint naming a blob git lacks costs one "missing"
// answer. Neither pipe can deadlock: the requests in flight are at most
// catWindow lines of 41 bytes, which fit a pipe's minimum buffer (one
// 4 KiB page), so writing them never blocks whatever git is doing, and git
// produces one answer at a time, blocking on its stdout until it is read,
// so unread answers hold no memory here.
//
// Blobs of at most catBuffered bytes (segment pieces, skeleton parts) are
// read whole when opened, so any number of them can be open at once (the
// assembler holds a skeleton part open while it reads segments). A
// bigger blob streams, and while its reader is open, open reports busy
// (the caller falls back to go-git) unless the blob was already read
// ahead, and no further request is written.
// Close kills the child, whatever it is doing; reads of it then fail.
type catFile struct {
	mu   sync.Mutex
	cmd  *gitexec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	busy bool
	err  error // sticky: the child is unusable

	// queue holds the requests written whose answers are unread, oldest
	// first (at most catWindow); hints the blobs announced and not yet
	// requested (at most catMaxHints).
	queue, hints []plumbing.Hash
	// stash keeps answers read to reach a later one, for a later open
	// (stashBytes in all, at most catStashMax).
	stash      map[plumbing.Hash][]byte
	stashBytes int
	reqBuf     []byte   // reused buffer for request lines
	free       [][]byte // buffers of closed catData, for body (at most catFree)

	// served and refused count blobs answered and opens refused as busy;
	// ahead counts the blobs served whose request was written before
	// they were opened (pipelined), skipped the answers read past and
	// not kept (tests check that a read went through git, and how).
	served, refused, ahead, skipped int
}

const (
	// maxCatHeader bounds cat-file's header line ("<hex> blob <size>").
	maxCatHeader = 128
	// catBuffered is the largest blob open reads whole.
	catBuffered = 1 << 20
	// catWindow bounds the requests written ahead of the answer read.
	catWindow = 64
	// catMaxHints bounds the hints held; further ones are dropped.
	catMaxHints = 4096
	// catStashMax bounds the bytes of answers kept for a later open.
	catStashMax = 4 << 20
	// catFree bounds the buffers kept for reuse.
	catFree = 8
	// catPipeSize is the pipe buffer asked for git's answers (Linux).
	catPipeSize = 1 << 20
)

// startCatFile starts `git cat-file --batch` in the repository at dir
// (bare or with a work tree), with none of the caller's GIT_* variables,
// in its own process group (localGit). It fails when git is not
// installed; callers then read through go-git. Cancelling ctx kills the
// child: reads then fail.
func startCatFile(ctx context.Context, dir string) (*catFile, error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, err
	}
	// Pack windows are mapped 16 MiB at a time, 64 MiB at most, so the
	// child's resident size does not grow with the pack (git maps 1 GiB
	// windows by default). A packed blob that is not a delta streams when
	// it is above core.bigFileThreshold; below it git inflates the whole
	// blob in memory first (a 416 MB packed WTXT: 462 MiB).
	cmd := gitexec.Command(ctx, localGit(git, "GIT_NO_REPLACE_OBJECTS=1"), "-C", dir, "-c", "core.packedGitWindowSize=16m", "-c", "core.packedGitLimit=64m",
		"-c", "core.deltaBaseCacheLimit=16m", "-c", "core.bigFileThreshold=1m", "cat-file", "--batch")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	growCatPipe(out)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &catFile{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 256<<10), stash: map[plumbing.Hash][]byte{}}, nil
}

// hint announces blobs about to be opened, in the order they will be:
// their requests are written ahead (up to catWindow outstanding) so git
// answers them while the caller reads. Hints beyond catMaxHints held are
// dropped. A wrong hint costs an answer read and skipped, nothing else.
func (c *catFile) hint(hs ...plumbing.Hash) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.hints = append(c.hints, hs[:min(len(hs), max(catMaxHints-len(c.hints), 0))]...)
	c.fill()
}

// fill writes requests for the oldest hints until catWindow are
// outstanding (none while a big blob streams: its reader owns the
// answers). Called with mu held.
func (c *catFile) fill() {
	if c.busy || c.err != nil {
		return
	}
	n := min(catWindow-len(c.queue), len(c.hints))
	if n <= 0 {
		return
	}
	c.reqBuf = c.reqBuf[:0]
	for _, h := range c.hints[:n] {
		c.reqBuf = append(c.reqBuf, h.String()...)
		c.reqBuf = append(c.reqBuf, '\n')
	}
	if _, err := c.in.Write(c.reqBuf); err != nil {
		c.err = fmt.Errorf("git cat-file: writing requests: %w", err)
		return
	}
	c.queue = append(c.queue, c.hints[:n]...)
	c.hints = c.hints[n:]
	if len(c.hints) == 0 {
		c.hints = nil // let the backing array go
	}
}

// open starts reading blob h, hinted or not, in any order (see catFile).
// busy is true (and nothing else happens) while a big blob from this
// child is being read, unless h's answer was already read ahead. A blob
// the repository lacks is fs.ErrNotExist's kin: errCatMissing, and the
// child stays usable; any other failure is sticky.
func (c *catFile) open(h plumbing.Hash) (rc io.ReadCloser, size int64, busy bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, 0, false, c.err
	}
	if data, ok := c.stash[h]; ok {
		delete(c.stash, h)
		c.stashBytes -= len(data)
		c.served++
		c.ahead++
		return &catData{c: c, b: data}, int64(len(data)), false, nil
	}
	if c.busy {
		c.refused++
		if len(c.hints) > 0 && c.hints[0] == h {
			c.hints = c.hints[1:] // read elsewhere: not worth requesting
		}
		return nil, 0, true, nil
	}
	i := c.queued(h)
	if i >= 0 {
		c.ahead++
	} else {
		// Not requested yet: hints before it were passed over.
		for j, x := range c.hints {
			if x == h {
				c.hints = c.hints[j+1:]
				break
			}
		}
		if len(c.queue) >= catWindow {
			if err := c.skipHead(); err != nil {
				return nil, 0, false, c.broken(err)
			}
		}
		if _, err := c.in.Write([]byte(h.String() + "\n")); err != nil {
			return nil, 0, false, c.broken(fmt.Errorf("git cat-file: %w", err))
		}
		c.queue = append(c.queue, h)
		i = len(c.queue) - 1
	}
	for ; i > 0; i-- {
		if err := c.skipHead(); err != nil {
			return nil, 0, false, c.broken(err)
		}
	}
	c.queue = c.queue[1:]
	size, err = c.header(h)
	if err != nil {
		if errors.Is(err, errCatMissing) {
			c.fill()
			return nil, 0, false, err
		}
		return nil, 0, false, c.broken(err)
	}
	c.served++
	if size > catBuffered {
		c.busy = true
		return &catBlob{c: c, left: size}, size, false, nil
	}
	// The next requests go out before this answer is read, so git works
	// on them meanwhile.
	c.fill()
	data, err := c.body(size)
	if err != nil {
		return nil, 0, false, c.broken(err)
	}
	return &catData{c: c, b: data}, size, false, nil
}

// queued returns the position of h's oldest request in the queue, or -1.
func (c *catFile) queued(h plumbing.Hash) int {
	for i, x := range c.queue {
		if x == h {
			return i
		}
	}
	return -1
}

// broken makes err sticky (the child's answers are out of step) and
// returns it.
func (c *catFile) broken(err error) error {
	if c.err == nil {
		c.err = err
	}
	return err
}

// skipHead reads the answer at the head of the queue: kept in the stash
// when small enough and there is room, else skipped.
func (c *catFile) skipHead() error {
	h := c.queue[0]
	c.queue = c.queue[1:]
	size, err := c.header(h)
	if errors.Is(err, errCatMissing) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, ok := c.stash[h]; !ok && size <= catBuffered && c.stashBytes+int(size) <= catStashMax {
		data, err := c.body(size)
		if err != nil {
			return err
		}
		c.stash[h] = data
		c.stashBytes += len(data)
		return nil
	}
	c.skipped++
	if _, err := c.out.Discard(int(min(size, int64(maxInt)))); err != nil || size > maxInt {
		return fmt.Errorf("git cat-file: skipping the answer for %s: %v", h, err)
	}
	return c.lf(h)
}

const maxInt = int64(^uint(0) >> 1)

// body reads an answer's size bytes (size ≤ catBuffered) and its LF,
// into a buffer from the free list when one is big enough.
func (c *catFile) body(size int64) ([]byte, error) {
	var data []byte
	if n := len(c.free); n > 0 && int64(cap(c.free[n-1])) >= size {
		data, c.free = c.free[n-1][:size], c.free[:n-1]
	} else {
		data = make([]byte, size)
	}
	if _, err := io.ReadFull(c.out, data); err != nil {
		return nil, fmt.Errorf("git cat-file: reading a blob of %d bytes: %w", size, noEOF(err))
	}
	return data, c.lf(plumbing.ZeroHash)
}

// lf consumes the LF cat-file ends an answer with.
func (c *catFile) lf(h plumbing.Hash) error {
	if b, err := c.out.ReadByte(); err != nil || b != '\n' {
		if h.IsZero() {
			return errors.New("git cat-file: answer not terminated")
		}
		return fmt.Errorf("git cat-file: the answer for %s is not terminated", h)
	}
	return nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

var errCatMissing = errors.New("object missing")

// header reads the header of the answer for h (the head of what was
// requested) and returns the blob's size; errCatMissing when git lacks h.
func (c *catFile) header(h plumbing.Hash) (int64, error) {
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

// Close ends the child: stdin closed, then killed with its process group
// (it may be blocked writing answers nobody reads) and waited for. Requests outstanding and
// hints are dropped.
func (c *catFile) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.in.Close()
	if c.err == nil {
		c.err = errors.New("git cat-file: closed")
	}
	c.queue, c.hints, c.stash, c.stashBytes, c.free = nil, nil, nil, 0, nil
	c.cmd.Kill()
	c.cmd.Wait() // "killed" or git's own exit: nothing to report
	return nil
}

// catData is a blob read whole. Close hands its buffer back to the
// child for the next blob, so reads after Close fail.
type catData struct {
	c      *catFile
	b      []byte
	off    int
	closed bool
}

func (d *catData) Read(p []byte) (int, error) {
	if d.closed {
		return 0, os.ErrClosed
	}
	if d.off >= len(d.b) {
		return 0, io.EOF
	}
	n := copy(p, d.b[d.off:])
	d.off += n
	return n, nil
}

func (d *catData) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	if cap(d.b) > 0 {
		d.c.mu.Lock()
		if len(d.c.free) < catFree {
			d.c.free = append(d.c.free, d.b[:0])
		}
		d.c.mu.Unlock()
	}
	d.b = nil
	return nil
}

// catBlob reads one big blob's bytes from the child (the head answer,
// its header read): left bytes, then the LF cat-file ends it with
// (ended: consumed). The child is busy until it is closed.
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
	if err != nil {
		err = noEOF(err)
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
// request, and writes the requests held back while it streamed.
func (b *catBlob) Close() error {
	if b.closed {
		return nil
	}
	_, err := io.Copy(io.Discard, b)
	b.closed = true
	b.c.mu.Lock()
	b.c.busy = false
	b.c.fill()
	b.c.mu.Unlock()
	return err
}

// Prefetch tells the file system which files are about to be opened, in
// order, so their contents are requested from git ahead (catFile.hint);
// without git it does nothing. A name that is a directory stands for its
// segment pieces p000000, p000001, ... (a pieced segment, gitops/layout/segpieces.go),
// at most catMaxHints of them; names that do not exist are ignored. It
// never changes what Open returns, only how soon. Like Open, it is not
// safe for concurrent use (go-git's trees are not).
func (f treeFS) Prefetch(names ...string) {
	if f.cat == nil {
		return
	}
	var hs []plumbing.Hash
	for _, name := range names {
		if !fs.ValidPath(name) {
			continue
		}
		e, err := f.t.FindEntry(name)
		if err != nil {
			continue
		}
		if e.Mode.IsFile() {
			hs = append(hs, e.Hash)
			continue
		}
		for k := 0; len(hs) < catMaxHints; k++ {
			pe, err := f.t.FindEntry(path.Join(name, fmt.Sprintf(layout.SegPieceFmt, k)))
			if err != nil || !pe.Mode.IsFile() {
				break
			}
			hs = append(hs, pe.Hash)
		}
	}
	if len(hs) > 0 {
		f.cat.hint(hs...)
	}
}

// IsDir reports whether name is a directory (subtree) of the tree; Open
// of one fails with fs.ErrNotExist (layout.ReadSegments asks first, as go-git
// would read the subtree as a blob to say so).
func (f treeFS) IsDir(name string) bool {
	if !fs.ValidPath(name) {
		return false
	}
	e, err := f.t.FindEntry(name)
	return err == nil && e.Mode == filemode.Dir
}
