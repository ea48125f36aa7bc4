package ring

import (
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"filippo.io/age"

	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/snapshot"
)

// Writer writes generations into one ring directory through an FS. It
// holds no per-generation state (Begin returns that), so one Writer
// serves the daemon's whole life; it is safe for concurrent use as far as
// its FS is.
type Writer struct {
	dir string
	fs  FS
	log *slog.Logger
}

// NewWriter returns the Writer of the ring directory dir. A nil fs is
// OSFS; a nil log discards.
func NewWriter(dir string, fs FS, log *slog.Logger) *Writer {
	if fs == nil {
		fs = OSFS{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Writer{dir: dir, fs: fs, log: log}
}

// Dir returns the ring directory.
func (w *Writer) Dir() string { return w.dir }

// Init creates the ring directory and its plaintext directory (0700).
func (w *Writer) Init() error {
	for _, dir := range []string{w.dir, filepath.Join(w.dir, PlainDir)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	os.Chmod(filepath.Join(w.dir, PlainDir), 0o700)
	return nil
}

// Path returns the path of generation gen's file with extension ext.
func (w *Writer) Path(gen uint64, ext string) string { return Path(w.dir, gen, ext) }

// List lists the ring (see List).
func (w *Writer) List() ([]Entry, error) { return List(w.dir) }

// Remove deletes every file of generation gen (see Remove).
func (w *Writer) Remove(gen uint64) error { return Remove(w.dir, gen) }

// Lookup returns generation gen's files (see Lookup).
func (w *Writer) Lookup(gen uint64) Files { return Lookup(w.dir, gen) }

// Trim removes the oldest entries while more than keep remain, skipping
// every generation for which protect reports true (the chain head, and
// generations built ahead of their acknowledgement). Failures are logged
// ("ring: list", "ring: trim"), not returned: a trim is retried by the
// next one.
func (w *Writer) Trim(keep int, protect func(gen uint64) bool) {
	entries, err := w.List()
	if err != nil {
		w.log.Warn("ring: list", "error", err)
		return
	}
	for i := 0; i < len(entries)-keep; i++ {
		if protect(entries[i].Gen) {
			continue
		}
		if err := w.Remove(entries[i].Gen); err != nil {
			w.log.Warn("ring: trim", "gen", entries[i].Gen, "error", err)
		}
	}
}

// PrunePlain removes every file of the plaintext directory except
// generation keep's plaintext copy (stale copies a crash left behind).
func (w *Writer) PrunePlain(keep uint64) {
	pd := filepath.Join(w.dir, PlainDir)
	ents, err := os.ReadDir(pd)
	if err != nil {
		return
	}
	for _, e := range ents {
		if g, _, ok := snapshot.ParseGenName(e.Name()); !ok || g != keep {
			os.Remove(filepath.Join(pd, e.Name()))
		}
	}
}

// WriteFile writes path through the FS: fill gets the writer; nothing is
// visible under path unless everything succeeded (fill's error is
// returned as is).
func (w *Writer) WriteFile(path string, perm os.FileMode, fill func(io.Writer) error) error {
	f, err := w.fs.Create(path, perm)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := fill(f.Writer()); err != nil {
		return err
	}
	return f.Commit()
}

// Put writes data to path atomically through the FS (small files the
// caller keeps beside the ring, such as the chain state).
func (w *Writer) Put(path string, data []byte, perm os.FileMode) error {
	return w.WriteFile(path, perm, func(wr io.Writer) error {
		_, err := wr.Write(data)
		return err
	})
}

// Options are one generation's write options (they may change between
// generations: the daemon reloads its keys).
type Options struct {
	// Recipients: when not empty the ring files are age-armored to them
	// and sealed, and the plaintext WTXT is kept in the plaintext
	// directory as the base of the next delta.
	Recipients []age.Recipient
	// SignKey signs the seals (nil: unsigned seals).
	SignKey ed25519.PrivateKey
}

// Gen is one generation being written. Its methods are called from one
// goroutine, in the order WriteWTXT, SetSeal, then Armor, WriteWSUM and
// WriteDelta as needed; Close must be called (it waits for a background
// commit). Any failure may leave complete files of this generation under
// their final names: the caller removes the generation (Writer.Remove)
// unless it committed it.
type Gen struct {
	w       *Writer
	gen     uint64
	opts    Options
	pending *pendingCommit
	seal    armor.Seal
}

// Begin starts writing generation gen.
func (w *Writer) Begin(gen uint64, opts Options) *Gen {
	return &Gen{w: w, gen: gen, opts: opts}
}

// Encrypted reports whether the generation is armored.
func (g *Gen) Encrypted() bool { return len(g.opts.Recipients) > 0 }

// WTXTPath is the ring's WTXT of the generation (armored when
// encrypting).
func (g *Gen) WTXTPath() string { return g.w.Path(g.gen, ExtWTXT) }

// PlainPath is where the plaintext WTXT goes: WTXTPath, or the plaintext
// directory when encrypting.
func (g *Gen) PlainPath() string {
	if g.Encrypted() {
		return PlainPath(g.w.dir, g.gen)
	}
	return g.WTXTPath()
}

// BasePath is the plaintext WTXT of an earlier generation base, the base
// of this generation's delta.
func (g *Gen) BasePath(base uint64) string {
	if g.Encrypted() {
		return PlainPath(g.w.dir, base)
	}
	return g.w.Path(base, ExtWTXT)
}

// WriteWTXT writes the plaintext WTXT (PlainPath; mode 0644, or 0600 when
// encrypting) with fill. With async, and when the file is not encrypted,
// the commit (fsync, rename, fsync dir) runs in the background while the
// caller goes on (PlainFile reads the content meanwhile; Wait returns the
// commit's outcome); the kernel is asked to start writing the pages back
// while fill runs (sync_file_range), so that fsync has less left to do.
func (g *Gen) WriteWTXT(fill func(io.Writer) error, async bool) error {
	if g.Encrypted() {
		return g.w.WriteFile(g.PlainPath(), 0o600, fill)
	}
	if !async {
		return g.w.WriteFile(g.PlainPath(), 0o644, fill)
	}
	p, err := g.w.writeFileAsync(g.PlainPath(), 0o644, fill)
	if err != nil {
		return err
	}
	g.pending = p
	return nil
}

// PlainFile is an open descriptor on the plaintext WTXT while its commit
// runs in the background (valid across the rename), or nil: then open
// PlainPath.
func (g *Gen) PlainFile() *os.File { return g.pending.file() }

// Wait waits for the WTXT's background commit and returns its error (nil
// without one). It may be called more than once.
func (g *Gen) Wait() error { return g.pending.wait() }

// CommitDone returns a channel closed once the WTXT is under PlainPath (at
// once when its commit did not run in the background) and the commit's
// error, valid after that. Unlike Wait it may be used from another
// goroutine while PlainFile is being read (it neither closes nor touches
// the descriptor).
func (g *Gen) CommitDone() (done <-chan struct{}, err func() error) {
	if g.pending == nil {
		c := make(chan struct{})
		close(c)
		return c, func() error { return nil }
	}
	p := g.pending
	return p.finished, func() error { return p.commitErr }
}

// Close waits for a background commit; no goroutine outlives it.
func (g *Gen) Close() { g.pending.wait() }

// SetSeal sets the generation values of the seals (Kind is set per file;
// Bytes, SHA256, KeyID and Sig are computed).
func (g *Gen) SetSeal(v armor.Seal) { g.seal = v }

// writeSeal writes path's seal of kind through the FS.
func (g *Gen) writeSeal(path, kind string) error {
	v := g.seal
	v.Kind = kind
	s, err := armor.SealFile(path, v, g.opts.SignKey)
	if err != nil {
		return err
	}
	if err := g.w.Put(armor.SealPath(path), s.Marshal(), 0o644); err != nil {
		return fmt.Errorf("write seal: %w", err)
	}
	return nil
}

// encrypted wraps fill so that its output is age-armored on the way to
// the writer when the generation is encrypted.
func (g *Gen) encrypted(fill func(io.Writer) error) func(io.Writer) error {
	if !g.Encrypted() {
		return fill
	}
	return func(w io.Writer) error {
		aw, err := armor.NewWriter(w, g.opts.Recipients...)
		if err != nil {
			return err
		}
		if err := fill(aw); err != nil {
			return err
		}
		return aw.Close()
	}
}

// Armor writes the armored WTXT (WTXTPath) from the plaintext copy, and
// its seal; it returns the seal's path. Only for encrypted generations,
// after WriteWTXT.
func (g *Gen) Armor() (string, error) {
	if !g.Encrypted() {
		return "", fmt.Errorf("ring: gen %d: Armor without recipients", g.gen)
	}
	p := g.WTXTPath()
	err := g.w.WriteFile(p, 0o644, g.encrypted(func(w io.Writer) error {
		f, err := os.Open(g.PlainPath())
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	}))
	if err == nil {
		err = g.writeSeal(p, armor.KindWTXT)
	}
	if err != nil {
		return "", err
	}
	return armor.SealPath(p), nil
}

// WriteWSUM writes the WSUM (armored and sealed when encrypting) and
// returns its path.
func (g *Gen) WriteWSUM(wsum []byte) (string, error) {
	p := g.w.Path(g.gen, ExtWSUM)
	err := g.w.WriteFile(p, 0o644, g.encrypted(func(w io.Writer) error { _, err := w.Write(wsum); return err }))
	if err == nil && g.Encrypted() {
		err = g.writeSeal(p, armor.KindWSUM)
	}
	if err != nil {
		return "", err
	}
	return p, nil
}

// Delta is the outcome of WriteDelta.
type Delta struct {
	Path  string // "" when the delta was not kept
	Bytes int64  // its size as written (armored when encrypting)
}

// WriteDelta writes the delta with fill (armored when encrypting). A delta
// of limit bytes or more (no smaller than its snapshot) earns nothing and
// is removed again: Path is then "". A kept delta of an encrypted
// generation is sealed.
func (g *Gen) WriteDelta(fill func(io.Writer) error, limit int64) (Delta, error) {
	p := g.w.Path(g.gen, ExtDelta)
	if err := g.w.WriteFile(p, 0o644, g.encrypted(fill)); err != nil {
		return Delta{}, err
	}
	st, err := os.Stat(p)
	if err != nil {
		return Delta{}, err
	}
	if st.Size() >= limit {
		return Delta{Bytes: st.Size()}, os.Remove(p)
	}
	return Delta{Path: p, Bytes: st.Size()}, nil
}

// SealDelta writes the seal of the kept delta at path (WriteDelta's
// Delta.Path) when encrypting; a no-op otherwise or for path "".
func (g *Gen) SealDelta(path string) error {
	if !g.Encrypted() || path == "" {
		return nil
	}
	return g.writeSeal(path, armor.KindDelta)
}

// Committed is called once the caller persisted the generation as the new
// chain head on top of prev: the plaintext copy of prev (encrypting) is no
// longer needed as a delta base and is removed.
func (g *Gen) Committed(prev uint64) {
	if g.Encrypted() && prev != 0 {
		os.Remove(PlainPath(g.w.dir, prev))
	}
}

// pendingCommit is an atomic write whose commit (fsync, rename, fsync
// dir) runs in the background.
type pendingCommit struct {
	r         *os.File // a read descriptor on the written content, or nil
	finished  chan struct{}
	commitErr error // the commit's outcome, set before finished is closed
	err       error
	got       bool
}

// writeFileAsync fills path like WriteFile, then commits in the background
// and returns at once. When the FS hands out real files it also opens a
// read descriptor on the content, valid across the rename (file()); wait()
// returns the commit's error and closes it. A nil *pendingCommit is a
// finished one.
func (w *Writer) writeFileAsync(path string, perm os.FileMode, fill func(w io.Writer) error) (*pendingCommit, error) {
	f, err := w.fs.Create(path, perm)
	if err != nil {
		return nil, err
	}
	stop := startWriteback(f.Writer())
	err = fill(f.Writer())
	stop()
	if err != nil {
		f.Abort()
		return nil, err
	}
	p := &pendingCommit{finished: make(chan struct{})}
	if of, ok := f.Writer().(*os.File); ok {
		if r, err := os.Open(of.Name()); err == nil {
			p.r = r
			go func() {
				p.commitErr = f.Commit()
				close(p.finished)
			}()
			return p, nil
		}
	}
	// No descriptor to read the content before the rename: commit now.
	if err := f.Commit(); err != nil {
		return nil, err
	}
	close(p.finished)
	return p, nil
}

// startWriteback asks the kernel, every 20 ms while a large file is being
// written, to start writing its dirty pages (sync_file_range with
// SYNC_FILE_RANGE_WRITE: asynchronous, no wait), so the fsync at commit
// finds most of the file already on disk. The returned func stops it.
func startWriteback(w io.Writer) func() {
	f, ok := w.(*os.File)
	if !ok {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				kickWriteback(f)
			}
		}
	}()
	return func() { close(done); <-stopped }
}

func (p *pendingCommit) file() *os.File {
	if p == nil {
		return nil
	}
	return p.r
}

func (p *pendingCommit) wait() error {
	if p == nil {
		return nil
	}
	if !p.got {
		<-p.finished
		p.err, p.got = p.commitErr, true
		if p.r != nil {
			p.r.Close()
			p.r = nil
		}
	}
	return p.err
}
