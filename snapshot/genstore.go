package snapshot

// Generation store: the directory a trainer publishes checkpoint
// generations into, with durable cross-process pins and reclaim.
//
// Layout of a generations directory (STATE_DIR/gens):
//
//	gen-000123.safetensors   a published generation: a file or a directory
//	gen-000124/              named "gen-" + decimal (>= 6 digits, zero-padded)
//	                         + optional suffix starting with '.'; one entry
//	                         per generation; immutable once published
//	.tmp-<name>-<pid>-<hex>  a publish in progress (file or directory)
//	.trash-<name>-<hex>      a reclaimed generation being deleted
//	.lock                    flock: pins hold it shared, reclaim exclusive
//	.pins/<gen>.<pid>.<hex>.pin   one file per pin (see PinInfo)
//	.abandoned/gen-NNNNNN    marker: generation may be reclaimed unsnapshotted
//
// Every other dot-name is ignored. This file imports internal/atomicfile
// (a small helper, not a domain package) for its durable writes.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/safeopen"
)

// Sentinel errors of the generation store.
var (
	// ErrGenNotFound: no published entry for the generation.
	ErrGenNotFound = errors.New("snapshot: generation not found")
	// ErrGenExists: the generation is already published (generations
	// are immutable).
	ErrGenExists = errors.New("snapshot: generation already published")
	// ErrGenDuplicate: two entries claim the same generation.
	ErrGenDuplicate = errors.New("snapshot: generation published twice")
	// ErrBadGenName: an entry or suffix does not follow the naming rules.
	ErrBadGenName = errors.New("snapshot: bad generation name")
)

const (
	genPrefix    = "gen-"
	tmpPrefix    = ".tmp-"
	trashPrefix  = ".trash-"
	pinsDir      = ".pins"
	abandonedDir = ".abandoned"
	lockName     = ".lock"
	pinSuffix    = ".pin"
	maxPinBytes  = 4096 // a pin file is one short line
	// staleTempAge: a temp entry of a dead or unknown writer older than
	// this is swept by Reclaim.
	staleTempAge = 24 * time.Hour
)

// GenName returns the entry name of generation gen with suffix ("" or
// starting with '.'), e.g. GenName(123, ".zt") == "gen-000123.zt".
func GenName(gen uint64, suffix string) string {
	return fmt.Sprintf("%s%06d%s", genPrefix, gen, suffix)
}

// ParseGenName splits an entry name into generation and suffix.
func ParseGenName(name string) (gen uint64, suffix string, ok bool) {
	rest, ok := strings.CutPrefix(name, genPrefix)
	if !ok {
		return 0, "", false
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	digits, suffix := rest[:i], rest[i:]
	if len(digits) < 6 || (suffix != "" && suffix[0] != '.') || strings.ContainsRune(suffix, '/') {
		return 0, "", false
	}
	gen, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || GenName(gen, suffix) != name {
		return 0, "", false // overflow or non-canonical padding
	}
	return gen, suffix, true
}

func checkSuffix(suffix string) error {
	if suffix == "" {
		return nil
	}
	if suffix[0] != '.' || strings.ContainsAny(suffix, "/\x00") || len(suffix) > 64 {
		return fmt.Errorf("%w: suffix %q must start with '.', have no '/' and be at most 64 bytes", ErrBadGenName, suffix)
	}
	return nil
}

// Generation is one published generation.
type Generation struct {
	Gen   uint64
	Name  string // entry name in the store
	Path  string // Dir()/Name
	IsDir bool
}

// GenStore manages a generations directory shared by the trainer (which
// publishes), the daemon (which pins and reads) and `snapd gc` (which
// reclaims). Methods are safe for concurrent use within and across
// processes.
type GenStore struct {
	dir string
	id  ownerID
}

// OpenGenStore opens (creating it if needed) the generations directory.
func OpenGenStore(dir string) (*GenStore, error) {
	for _, d := range []string{dir, filepath.Join(dir, pinsDir), filepath.Join(dir, abandonedDir)} {
		if err := os.MkdirAll(d, 0o775); err != nil { // less the umask: 2770 in the group-shared mode (wal/doc.go)
			return nil, fmt.Errorf("snapshot: generation store: %w", err)
		}
	}
	return &GenStore{dir: dir, id: currentOwner()}, nil
}

// Dir returns the store's directory.
func (s *GenStore) Dir() string { return s.dir }

// List returns the published generations, ascending. Two entries for one
// generation fail with ErrGenDuplicate (naming both).
func (s *GenStore) List() ([]Generation, error) {
	ents, err := safeopen.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: list generations: %w", err)
	}
	var gens []Generation
	byGen := map[uint64]string{}
	for _, e := range ents {
		gen, _, ok := ParseGenName(e.Name())
		if !ok {
			continue
		}
		if prev, dup := byGen[gen]; dup {
			return nil, fmt.Errorf("%w: generation %d: %q and %q in %s", ErrGenDuplicate, gen, prev, e.Name(), s.dir)
		}
		byGen[gen] = e.Name()
		gens = append(gens, Generation{Gen: gen, Name: e.Name(), Path: filepath.Join(s.dir, e.Name()), IsDir: e.IsDir()})
	}
	sort.Slice(gens, func(i, j int) bool { return gens[i].Gen < gens[j].Gen })
	return gens, nil
}

// GenOf returns the generation whose store entry path is or lies in: an
// entry itself (file or directory generation) or any path inside a
// directory generation (gens/gen-000007/model-00001-of-00002.safetensors
// is generation 7). Paths are compared after filepath.Abs (lexically, no
// symlinks resolved); ok is false outside the store.
func (s *GenStore) GenOf(path string) (gen uint64, ok bool) {
	abs, err1 := filepath.Abs(path)
	store, err2 := filepath.Abs(s.dir)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	rel, err := filepath.Rel(store, abs)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return 0, false
	}
	first, _, _ := strings.Cut(rel, string(filepath.Separator))
	gen, _, ok = ParseGenName(first)
	return gen, ok
}

// Lookup returns generation gen, or ErrGenNotFound.
func (s *GenStore) Lookup(gen uint64) (Generation, error) {
	gens, err := s.List()
	if err != nil {
		return Generation{}, err
	}
	for _, g := range gens {
		if g.Gen == gen {
			return g, nil
		}
	}
	return Generation{}, fmt.Errorf("%w: %d in %s", ErrGenNotFound, gen, s.dir)
}

func randHex() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *GenStore) tempName(final string) string {
	return filepath.Join(s.dir, fmt.Sprintf("%s%s-%d-%s", tmpPrefix, final, os.Getpid(), randHex()))
}

// Publish atomically publishes a file generation: fill writes the content
// to a temp file, which is fsynced and renamed (without replacing) to
// GenName(gen, suffix), and the directory is fsynced. It fails with
// ErrGenExists if gen is already published.
func (s *GenStore) Publish(gen uint64, suffix string, fill func(w io.Writer) error) (Generation, error) {
	if err := checkSuffix(suffix); err != nil {
		return Generation{}, err
	}
	if err := s.checkAbsent(gen); err != nil {
		return Generation{}, err
	}
	name := GenName(gen, suffix)
	tmp := s.tempName(name)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return Generation{}, fmt.Errorf("snapshot: publish gen %d: %w", gen, err)
	}
	defer os.Remove(tmp)
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Generation{}, fmt.Errorf("snapshot: publish gen %d: %w", gen, err)
	}
	return s.commit(gen, tmp, name, false)
}

// PublishDir atomically publishes a directory generation: fill populates
// a temp directory; every file and directory in it is fsynced, then it is
// renamed (without replacing) to GenName(gen, suffix).
func (s *GenStore) PublishDir(gen uint64, suffix string, fill func(dir string) error) (Generation, error) {
	if err := checkSuffix(suffix); err != nil {
		return Generation{}, err
	}
	if err := s.checkAbsent(gen); err != nil {
		return Generation{}, err
	}
	name := GenName(gen, suffix)
	tmp := s.tempName(name)
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return Generation{}, fmt.Errorf("snapshot: publish gen %d: %w", gen, err)
	}
	defer os.RemoveAll(tmp)
	if err := fill(tmp); err != nil {
		return Generation{}, fmt.Errorf("snapshot: publish gen %d: %w", gen, err)
	}
	if err := syncTree(tmp); err != nil {
		return Generation{}, fmt.Errorf("snapshot: publish gen %d: %w", gen, err)
	}
	return s.commit(gen, tmp, name, true)
}

func (s *GenStore) checkAbsent(gen uint64) error {
	_, err := s.Lookup(gen)
	if err == nil {
		return fmt.Errorf("%w: %d in %s", ErrGenExists, gen, s.dir)
	}
	if errors.Is(err, ErrGenNotFound) {
		return nil
	}
	return err
}

// commit renames tmp to name without replacing an existing entry.
func (s *GenStore) commit(gen uint64, tmp, name string, isDir bool) (Generation, error) {
	final := filepath.Join(s.dir, name)
	err := renameNoReplace(tmp, final, isDir)
	if errors.Is(err, fs.ErrExist) {
		return Generation{}, fmt.Errorf("%w: %s", ErrGenExists, final)
	}
	if err != nil {
		return Generation{}, fmt.Errorf("snapshot: publish gen %d: rename: %w", gen, err)
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return Generation{}, fmt.Errorf("snapshot: publish gen %d: %w", gen, err)
	}
	return Generation{Gen: gen, Name: name, Path: final, IsDir: isDir}, nil
}

// syncTree fsyncs every regular file and directory under root.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
}

// lock takes the store's flock (shared or exclusive) and returns the unlock.
// Another process holds it only for a scan of the pins or a few renames;
// while it does, lock retries (1 ms, doubling to 50 ms) until ctx ends,
// so a process that keeps the lock cannot hold up a daemon's shutdown.
func (s *GenStore) lock(ctx context.Context, how int) (func(), error) {
	f, err := s.lockFile(ctx, how)
	if err != nil {
		return nil, err
	}
	return func() { unlock(f); f.Close() }, nil
}

// lockFile is lock's work: the open lock file holding the flock.
func (s *GenStore) lockFile(ctx context.Context, how int) (*os.File, error) {
	f, err := safeopen.OpenFile(filepath.Join(s.dir, lockName), os.O_RDWR|os.O_CREATE, 0o644, safeopen.NoFollow)
	if err != nil {
		return nil, fmt.Errorf("snapshot: store lock: %w", err)
	}
	wait := time.Millisecond
	for {
		err = tryLock(f, how)
		if err != errLockBusy {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("snapshot: store lock (held by another process): %w", ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("snapshot: store lock: %w", err)
	}
	return f, nil
}

// ownerID identifies a process across pid reuse and reboots.
type ownerID struct {
	PID   int
	Start uint64 // process start time in clock ticks since boot (/proc/PID/stat field 22)
	Boot  string // /proc/sys/kernel/random/boot_id
	Host  string
}

func currentOwner() ownerID {
	host, _ := os.Hostname()
	pid := os.Getpid()
	start, _ := procStart(pid)
	return ownerID{PID: pid, Start: start, Boot: bootID(), Host: sanitizeToken(host)}
}

func sanitizeToken(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c <= ' ' || c >= 0x7f || c == '=' {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "-"
	}
	return string(b)
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "-"
	}
	return sanitizeToken(strings.TrimSpace(string(b)))
}

// procStart reads the start time of pid; fs.ErrNotExist if it is gone.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// comm (field 2) may contain spaces and parentheses: fields after the
	// last ')' start at field 3.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	const startField = 22 - 3
	if len(f) <= startField {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[startField], 10, 64)
}

// alive reports whether the owner is (possibly) still running. Owners on
// another host are always considered alive.
func (o ownerID) alive(self ownerID) bool {
	if o.Host != self.Host {
		return true
	}
	if o.Boot != self.Boot && o.Boot != "-" && self.Boot != "-" {
		return false // rebooted since
	}
	start, err := procStart(o.PID)
	if err == nil {
		return o.Start == 0 || start == o.Start
	}
	if errors.Is(err, fs.ErrNotExist) {
		// No /proc entry: gone, unless /proc is not mounted at all.
		if _, perr := os.Stat("/proc/self/stat"); perr == nil {
			return false
		}
		return processExists(o.PID)
	}
	return true
}

// PinInfo describes a pin file. Its content is one line:
//
//	pin gen=<dec> pid=<dec> start=<dec> boot=<boot_id> host=<hostname> ts=<unix ns>
type PinInfo struct {
	Gen   uint64
	File  string // path of the pin file
	PID   int
	Start uint64
	Boot  string
	Host  string
	Time  time.Time
	Stale bool // the owner is gone (set by Pins)
}

func (p PinInfo) owner() ownerID {
	return ownerID{PID: p.PID, Start: p.Start, Boot: p.Boot, Host: p.Host}
}

func parsePin(path string, b []byte) (PinInfo, error) {
	pi := PinInfo{File: path}
	line, ok := strings.CutSuffix(string(b), "\n")
	if !ok || strings.Contains(line, "\n") {
		return pi, errors.New("want exactly one line")
	}
	f := strings.Split(line, " ")
	keys := []string{"pin", "gen=", "pid=", "start=", "boot=", "host=", "ts="}
	if len(f) != len(keys) || f[0] != "pin" {
		return pi, fmt.Errorf("want %d fields starting with \"pin\"", len(keys))
	}
	vals := make([]string, len(keys))
	for i := 1; i < len(keys); i++ {
		v, ok := strings.CutPrefix(f[i], keys[i])
		if !ok {
			return pi, fmt.Errorf("field %d: want %s", i+1, keys[i])
		}
		vals[i] = v
	}
	var e [4]error
	var ts int64
	pi.Gen, e[0] = strconv.ParseUint(vals[1], 10, 64)
	pi.PID, e[1] = strconv.Atoi(vals[2])
	pi.Start, e[2] = strconv.ParseUint(vals[3], 10, 64)
	ts, e[3] = strconv.ParseInt(vals[6], 10, 64)
	if err := errors.Join(e[:]...); err != nil {
		return pi, err
	}
	if pi.PID <= 0 {
		return pi, fmt.Errorf("pid %d", pi.PID)
	}
	pi.Boot, pi.Host, pi.Time = vals[4], vals[5], time.Unix(0, ts).UTC()
	return pi, nil
}

// Pin is a held pin on a generation. Release it when done.
type Pin struct {
	Generation
	file string
}

// File returns the pin file's path.
func (p *Pin) File() string { return p.file }

// Release removes the pin. Releasing twice is a no-op.
func (p *Pin) Release() error {
	if p.file == "" {
		return nil
	}
	err := os.Remove(p.file)
	p.file = ""
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("snapshot: unpin gen %d: %w", p.Gen, err)
	}
	return nil
}

// Pin durably pins generation gen so that Reclaim (in any process) will
// not delete it until the pin is released or its owner (this process) is
// gone. It fails with ErrGenNotFound if gen is not published (or was just
// reclaimed), and with ctx's error if another process holds the store's
// lock until ctx ends.
func (s *GenStore) Pin(ctx context.Context, gen uint64) (*Pin, error) {
	unlock, err := s.lock(ctx, lockShared)
	if err != nil {
		return nil, err
	}
	defer unlock()
	g, err := s.Lookup(gen)
	if err != nil {
		return nil, err
	}
	o := s.id
	name := fmt.Sprintf("%06d.%d.%s%s", gen, o.PID, randHex(), pinSuffix)
	path := filepath.Join(s.dir, pinsDir, name)
	line := fmt.Sprintf("pin gen=%d pid=%d start=%d boot=%s host=%s ts=%d\n", gen, o.PID, o.Start, o.Boot, o.Host, time.Now().UnixNano())
	if err := atomicfile.WriteFile(path, []byte(line), 0o644); err != nil {
		return nil, fmt.Errorf("snapshot: pin gen %d: %w", gen, err)
	}
	return &Pin{Generation: g, file: path}, nil
}

// Pins lists the pin files, marking those whose owner is gone as Stale.
// Unreadable or malformed pin files are returned as errors joined into err
// (alongside the good ones); Reclaim treats their generation as pinned.
func (s *GenStore) Pins() ([]PinInfo, error) {
	dir := filepath.Join(s.dir, pinsDir)
	ents, err := safeopen.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: list pins: %w", err)
	}
	var pins []PinInfo
	var errs []error
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), pinSuffix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := safeopen.ReadFile(p, maxPinBytes, safeopen.NoFollow)
		if errors.Is(err, fs.ErrNotExist) {
			continue // released meanwhile
		}
		if err == nil {
			var pi PinInfo
			if pi, err = parsePin(p, b); err == nil {
				pi.Stale = !pi.owner().alive(s.id)
				pins = append(pins, pi)
				continue
			}
		}
		errs = append(errs, &PinFileError{File: p, Gen: pinFileGen(e.Name()), Err: err})
	}
	return pins, errors.Join(errs...)
}

// PinFileError is a pin file that cannot be read or parsed.
type PinFileError struct {
	File string
	Gen  uint64 // from the file name; reclaim keeps this generation
	Err  error
}

func (e *PinFileError) Error() string { return fmt.Sprintf("snapshot: pin file %s: %v", e.File, e.Err) }
func (e *PinFileError) Unwrap() error { return e.Err }

func pinFileGen(name string) uint64 {
	d, _, _ := strings.Cut(name, ".")
	g, _ := strconv.ParseUint(d, 10, 64)
	return g
}

// RecoverStalePins removes the pins of owners that are gone (a crashed
// daemon) and returns them.
func (s *GenStore) RecoverStalePins(ctx context.Context) ([]PinInfo, error) {
	unlock, err := s.lock(ctx, lockExclusive)
	if err != nil {
		return nil, err
	}
	defer unlock()
	_, stale, warn, err := s.scanPins(true)
	if err == nil {
		err = errors.Join(warn...)
	}
	return stale, err
}

// scanPins classifies the pins (caller holds the exclusive lock): live
// ones, stale ones (removed if remove is set) and unreadable pin files
// (*PinFileError, whose generation counts as pinned).
func (s *GenStore) scanPins(remove bool) (live map[uint64]bool, stale []PinInfo, warn []error, err error) {
	pins, perr := s.Pins()
	live = map[uint64]bool{}
	if perr != nil {
		for _, e := range unjoin(perr) {
			var pfe *PinFileError
			if !errors.As(e, &pfe) {
				return nil, nil, nil, e
			}
			live[pfe.Gen] = true
			warn = append(warn, e)
		}
	}
	for _, p := range pins {
		if !p.Stale {
			live[p.Gen] = true
			continue
		}
		stale = append(stale, p)
		if remove {
			if err := os.Remove(p.File); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, nil, nil, fmt.Errorf("snapshot: remove stale pin: %w", err)
			}
		}
	}
	if remove {
		// Leftover temp files of interrupted pin writes (no pin is being
		// written while the exclusive lock is held).
		if _, err := atomicfile.Sweep(filepath.Join(s.dir, pinsDir)); err != nil {
			return nil, nil, nil, fmt.Errorf("snapshot: sweep pins: %w", err)
		}
	}
	return live, stale, warn, nil
}

// Abandon durably marks generation gen as reclaimable although it was
// never snapshotted.
func (s *GenStore) Abandon(gen uint64) error {
	if err := atomicfile.WriteFile(filepath.Join(s.dir, abandonedDir, GenName(gen, "")), nil, 0o644); err != nil {
		return fmt.Errorf("snapshot: abandon gen %d: %w", gen, err)
	}
	return nil
}

// Abandoned reports whether gen was marked with Abandon.
func (s *GenStore) Abandoned(gen uint64) bool {
	_, err := os.Stat(filepath.Join(s.dir, abandonedDir, GenName(gen, "")))
	return err == nil
}

// ReclaimOptions select what Reclaim deletes.
type ReclaimOptions struct {
	// Keep is how many of the newest generations are never deleted.
	Keep int
	// Snapshotted reports whether a generation has been snapshotted (for
	// snapd: its WAL outcome is done). Nil means none is.
	Snapshotted func(gen uint64) bool
	// Abandoned reports generations to treat as abandoned in addition to
	// those marked with Abandon (e.g. for a dry run). Nil means none.
	Abandoned func(gen uint64) bool
	// DryRun reports what would be deleted without deleting.
	DryRun bool
}

// Kept is a generation Reclaim did not delete, and why.
type Kept struct {
	Generation
	Reason string // "newest K", "newest snapshotted", "pinned", "not snapshotted"
}

// ReclaimReport says what Reclaim did.
type ReclaimReport struct {
	Deleted   []Generation
	Kept      []Kept
	StalePins []PinInfo // removed stale pins
	Warnings  []error   // unreadable pin files (their generations were kept)
}

// Reclaim deletes every generation that is unpinned, snapshotted (or
// abandoned), not among the newest Keep, and not the newest snapshotted
// one. It first removes stale pins. It holds the store's exclusive lock
// while it decides and moves victims aside, so a concurrent Pin either
// sees the generation gone (ErrGenNotFound) or is seen by Reclaim. It
// waits for that lock until ctx ends.
func (s *GenStore) Reclaim(ctx context.Context, opts ReclaimOptions) (ReclaimReport, error) {
	var rep ReclaimReport
	if opts.Keep < 0 {
		return rep, fmt.Errorf("snapshot: reclaim: keep %d must be >= 0", opts.Keep)
	}
	snapped := opts.Snapshotted
	if snapped == nil {
		snapped = func(uint64) bool { return false }
	}
	s.sweepTrash()
	unlock, err := s.lock(ctx, lockExclusive)
	if err != nil {
		return rep, err
	}
	var trash []string
	func() {
		defer unlock()
		var pinned map[uint64]bool
		pinned, rep.StalePins, rep.Warnings, err = s.scanPins(!opts.DryRun)
		if err != nil {
			return
		}
		var gens []Generation
		if gens, err = s.List(); err != nil {
			return
		}
		newestSnap := -1
		for i, g := range gens {
			if snapped(g.Gen) {
				newestSnap = i
			}
		}
		for i, g := range gens {
			reason := ""
			switch {
			case i >= len(gens)-opts.Keep:
				reason = "newest K"
			case i == newestSnap:
				reason = "newest snapshotted"
			case pinned[g.Gen]:
				reason = "pinned"
			case !snapped(g.Gen) && !s.Abandoned(g.Gen) && (opts.Abandoned == nil || !opts.Abandoned(g.Gen)):
				reason = "not snapshotted"
			}
			if reason != "" {
				rep.Kept = append(rep.Kept, Kept{g, reason})
				continue
			}
			if !opts.DryRun {
				t := filepath.Join(s.dir, trashPrefix+g.Name+"-"+randHex())
				if err = os.Rename(g.Path, t); err != nil {
					err = fmt.Errorf("snapshot: reclaim gen %d: %w", g.Gen, err)
					return
				}
				trash = append(trash, t)
				os.Remove(filepath.Join(s.dir, abandonedDir, GenName(g.Gen, "")))
			}
			rep.Deleted = append(rep.Deleted, g)
		}
		if len(trash) > 0 {
			err = atomicfile.SyncDir(s.dir)
		}
	}()
	for _, t := range trash {
		if rerr := os.RemoveAll(t); rerr != nil && err == nil {
			err = fmt.Errorf("snapshot: reclaim: %w", rerr)
		}
	}
	return rep, err
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// sweepTrash removes what an interrupted Reclaim left behind, and temp
// entries of publishes whose writer is gone (pid not running on this
// host) or that are older than a day.
func (s *GenStore) sweepTrash() {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		p := filepath.Join(s.dir, name)
		switch {
		case strings.HasPrefix(name, trashPrefix):
			os.RemoveAll(p)
		case strings.HasPrefix(name, tmpPrefix):
			info, err := e.Info()
			if err != nil {
				continue
			}
			if time.Since(info.ModTime()) > staleTempAge || !tempWriterAlive(name) {
				os.RemoveAll(p)
			}
		}
	}
}

// tempWriterAlive parses ".tmp-<name>-<pid>-<hex>" and checks the pid.
func tempWriterAlive(name string) bool {
	parts := strings.Split(name, "-")
	if len(parts) < 3 {
		return true
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil || pid <= 0 {
		return true
	}
	return processExists(pid)
}
