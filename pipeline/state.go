package pipeline

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/chunkdiff"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/safeopen"
	"github.com/snapd-ml/snapd/pipeline/ring"
	"github.com/snapd-ml/snapd/snapshot"
)

// Names inside the state directory (see doc.go).
const (
	WALDir        = "wal"
	GensDir       = "gens"
	KeysDir       = "keys"
	RingDir       = "ring"
	RepoDir       = "repo"
	QueueDir      = "push-queue"
	StateFile     = "state"
	LastErrorFile = "last_error"
	LockFile      = "lock"
	plainDir      = ring.PlainDir
)

// Sentinel errors.
var (
	// ErrLocked: another daemon holds the state directory.
	ErrLocked = errors.New("pipeline: state directory is in use by another snapd")
	// ErrNotNewer: a request names a generation that is not newer than the
	// chain head; the chain never goes backwards.
	ErrNotNewer = errors.New("generation is not newer than the chain head")
	// ErrSource: the source of a request cannot be read as a checkpoint
	// (missing, not a regular file, unknown format, corrupt).
	ErrSource = errors.New("source")
	// ErrCorruptState: the state file exists but does not parse.
	ErrCorruptState = errors.New("pipeline: corrupt state file")
)

// ChainState is the chain head, persisted atomically in STATE_DIR/state
// after every generation (see doc.go). The zero value is an empty chain.
// Its GenText, TS, Build and hex fields are the persisted (JSON) form of
// Gen's wtxt.Root: build one with newChainState, read the Root back with
// Root, so the conversion is written once.
type ChainState struct {
	Version int `json:"version"`
	// Gen is the newest generation in the chain; 0 when empty.
	Gen     uint64 `json:"gen"`
	GenText string `json:"gen_text"` // as written in meta (e.g. "000123")
	PrevGen uint64 `json:"prev_gen"` // the generation Gen was chained to (0: first)
	TS      string `json:"ts"`
	Build   string `json:"build"`
	// Root values of Gen, lowercase hex.
	SHA256All  string    `json:"sha256_all"`
	MerklePrev string    `json:"merkle_prev"`
	MerkleThis string    `json:"merkle_this"`
	Updated    time.Time `json:"updated"`
	// Generations counts the generations chained by this state directory.
	Generations uint64 `json:"generations"`
	// NonFinite: the arrays in which Gen introduced NaN/±Inf (against
	// PrevGen); `snapd status` warns about them. The state file keeps
	// the first of them, at most maxNonFiniteBytes (capNonFinite), and
	// NonFiniteMore counts the arrays left out.
	NonFinite     []chunkdiff.NonFiniteArray `json:"nonfinite,omitempty"`
	NonFiniteMore int                        `json:"nonfinite_more,omitempty"`
	// Held counts the NaN and ±Inf elements Gen holds, per float array
	// holding any, as Gen's encode counted them; nil when they are not
	// known (a state file from before they were kept, a resume's base,
	// or a list too long to keep: see heldNonFinite). The next
	// generation's NaN/Inf check compares against them instead of
	// reading Gen's WTXT (nonfinite.go).
	Held *HeldNonFinite `json:"nonfinite_held,omitempty"`
	// Resume is the last resume of the run that reached Gen (carried
	// from generation to generation): the trainer restarted from
	// generation From's checkpoint, generation AtGen chained to From, and
	// the generations above From up to AbandonedLast were abandoned.
	Resume *ResumeState `json:"resume,omitempty"`
	// Resuming is a declared resume no generation completed yet (the
	// first one failed or is in progress): the next generation chains to
	// Resuming.Base (From's chain values), not to Gen, and ring entries
	// above From are half-written (removed at start).
	Resuming *ResumeState `json:"resuming,omitempty"`
	// Meta is Gen's metadata (the request's, stored inside the
	// generation): the Snapd-Meta trailer of its commit, shown by `snapd
	// status`.
	Meta snapshot.UserMeta `json:"meta,omitempty"`
}

// HeldNonFinite is the NaN/±Inf a generation holds: the arrays holding
// any (none: an empty list, which is not the same as no HeldNonFinite).
type HeldNonFinite struct {
	Arrays []chunkdiff.NonFiniteCount `json:"arrays,omitempty"`
}

// ResumeState is a declared resume (see docs/FORMAT.md "Resumed runs").
type ResumeState struct {
	From          uint64 `json:"from"`
	AbandonedLast uint64 `json:"abandoned_last"` // the chain head when it was declared
	AtGen         uint64 `json:"at_gen,omitempty"`
	// Base holds From's chain values while the resume is pending.
	Base *ChainState `json:"base,omitempty"`
}

// chainHead is the state the next generation chains to: the chain head,
// or the generation a pending resume restarted from.
func (c *ChainState) chainHead() ChainState {
	if r := c.Resuming; r != nil && r.Base != nil {
		b := *r.Base
		b.Generations = c.Generations
		return b
	}
	return *c
}

// newChainState is the chain head after generation gen with root r,
// chained to prev.
func newChainState(gen uint64, r wtxt.Root, prev *ChainState, updated time.Time) *ChainState {
	return &ChainState{Version: 1, Gen: gen, GenText: r.Gen, PrevGen: prev.Gen, TS: r.TS, Build: r.Build,
		SHA256All: hex.EncodeToString(r.SHA256All[:]), MerklePrev: hex.EncodeToString(r.MerklePrev[:]), MerkleThis: hex.EncodeToString(r.MerkleThis[:]),
		Updated: updated, Generations: prev.Generations + 1}
}

// Root returns the chain head's root values (the zero Root for an empty
// chain); hex fields that do not parse are ErrCorruptState.
func (c *ChainState) Root() (wtxt.Root, error) {
	r := wtxt.Root{Gen: c.GenText, TS: c.TS, Build: c.Build}
	if c.Gen == 0 {
		return r, nil
	}
	for _, f := range []struct {
		name string
		hex  string
		dst  *[32]byte
	}{{"sha256_all", c.SHA256All, &r.SHA256All}, {"merkle_prev", c.MerklePrev, &r.MerklePrev}, {"merkle_this", c.MerkleThis, &r.MerkleThis}} {
		b, err := hex.DecodeString(f.hex)
		if err != nil || len(b) != 32 || !wtxt.IsHex64(f.hex) {
			return wtxt.Root{}, fmt.Errorf("%w: gen %d: %s is not 64 lowercase hex digits", ErrCorruptState, c.Gen, f.name)
		}
		copy(f.dst[:], b)
	}
	return r, nil
}

// gitHeader is the chain head as the header gitops commits it with.
func (c *ChainState) gitHeader() (*gitops.Header, error) {
	r, err := c.Root()
	if err != nil {
		return nil, err
	}
	return &gitops.Header{Gen: c.Gen, Root: r, Meta: c.Meta}, nil
}

// maxStateBytes bounds the small JSON state files read into memory.
const maxStateBytes = 1 << 20

// readStateFile reads one of the daemon's small state files: never
// blocking (a FIFO), never through a symlink, at most maxStateBytes.
func readStateFile(p string) ([]byte, error) {
	return safeopen.ReadFile(p, maxStateBytes, safeopen.NoFollow)
}

// ReadChainState reads STATE_DIR/state; a missing file is an empty chain.
func ReadChainState(stateDir string) (*ChainState, error) {
	p := filepath.Join(stateDir, StateFile)
	b, err := safeopen.ReadFile(p, maxStateBytes, safeopen.NoFollow)
	if errors.Is(err, fs.ErrNotExist) {
		return &ChainState{Version: 1}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pipeline: read state: %w", err)
	}
	var c ChainState
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrCorruptState, p, err)
	}
	if c.Version != 1 {
		return nil, fmt.Errorf("%w %s: version %d, want 1", ErrCorruptState, p, c.Version)
	}
	if _, err := c.Root(); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if r := c.Resuming; r != nil {
		if r.Base == nil || r.Base.Gen != r.From || r.From >= c.Gen {
			return nil, fmt.Errorf("%w %s: resuming from gen %d without that generation's chain values below the head %d", ErrCorruptState, p, r.From, c.Gen)
		}
		if _, err := r.Base.Root(); err != nil {
			return nil, fmt.Errorf("%s: resuming: %w", p, err)
		}
	}
	return &c, nil
}

// writeChainState persists c atomically (temp, fsync, rename, fsync dir)
// through the ring's FS, so injected disk faults cover it too.
// Its NonFinite list is capped there (capNonFinite); c is not changed.
func writeChainState(w *ring.Writer, stateDir string, c *ChainState) error {
	if kept, more := capNonFinite(c.NonFinite); more > 0 {
		capped := *c
		capped.NonFinite, capped.NonFiniteMore = kept, c.NonFiniteMore+more
		c = &capped
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := w.Put(filepath.Join(stateDir, StateFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("pipeline: write state: %w", err)
	}
	return nil
}

// LastError is the most recent failure, persisted in STATE_DIR/last_error
// so that `snapd status` shows it without the daemon.
type LastError struct {
	Time    time.Time `json:"time"`
	Gen     uint64    `json:"gen,omitempty"`
	Stage   string    `json:"stage"`
	Message string    `json:"message"`
}

// ReadLastError reads STATE_DIR/last_error (nil when there is none).
func ReadLastError(stateDir string) (*LastError, error) {
	b, err := safeopen.ReadFile(filepath.Join(stateDir, LastErrorFile), maxStateBytes, safeopen.NoFollow)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pipeline: read last error: %w", err)
	}
	var e LastError
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("pipeline: %s: %v", LastErrorFile, err)
	}
	return &e, nil
}

func writeLastError(stateDir string, e *LastError) error {
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(stateDir, LastErrorFile), append(b, '\n'), 0o644)
}

// StateLock is the exclusive flock on STATE_DIR/lock, held for the
// daemon's lifetime; the file holds the owner's pid.
type StateLock struct{ f *os.File }

// LockStateDir takes the state directory's lock (creating the directory),
// failing with ErrLocked (naming the holder's pid) when another daemon
// holds it. Callers that open other state (the Git repository, the resend
// queue) before New take it first and pass it in Deps.Lock.
func LockStateDir(stateDir string) (*StateLock, error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	return lockStateDir(stateDir)
}

// Release drops the lock (New's daemon releases it in Close).
func (l *StateLock) Release() error { return l.release() }

func lockStateDir(stateDir string) (*StateLock, error) {
	p := filepath.Join(stateDir, LockFile)
	f, err := safeopen.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644, safeopen.NoFollow)
	if err != nil {
		return nil, fmt.Errorf("pipeline: open lock: %w", err)
	}
	// An OFD write lock (not flock): `snapd status` can then ask whether
	// it is held (F_OFD_GETLK) without taking a lock itself, so a status
	// probe never makes a starting daemon see its directory "in use".
	// Like flock it belongs to the open file, so it ends with the process.
	err = lockFile(f)
	if err != nil {
		pid := readPID(f)
		f.Close()
		if errors.Is(err, errLockHeld) {
			if pid > 0 {
				return nil, fmt.Errorf("%w: %s (pid %d)", ErrLocked, stateDir, pid)
			}
			return nil, fmt.Errorf("%w: %s", ErrLocked, stateDir)
		}
		return nil, fmt.Errorf("pipeline: lock %s: %w", p, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &StateLock{f: f}, nil
}

func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	return pid
}

func (l *StateLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	// Unlocked before it is closed: a copy of the descriptor in a child
	// being forked would otherwise keep the lock a moment longer.
	err := errors.Join(unlockFile(l.f), l.f.Close())
	l.f = nil
	return err
}

// daemonRunning reports whether a daemon holds the state directory's lock
// and its pid (from the lock file), without disturbing it.
func daemonRunning(stateDir string) (bool, int) {
	f, err := safeopen.Open(filepath.Join(stateDir, LockFile), safeopen.NoFollow)
	if err != nil {
		return false, 0
	}
	defer f.Close()
	if !lockHeld(f) {
		return false, 0
	}
	return true, readPID(f)
}
