package wal

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/internal/safeopen"
)

// File names of the consumer's state inside the WAL directory.
const (
	CursorFile   = "cursor"
	OutcomesFile = "outcomes.log"
	LockFile     = "consumer.lock"
)

// State is what became of a request.
type State uint8

const (
	Pending State = iota // not handled yet
	Done                 // snapshotted
	Failed               // handling failed; Message says why
)

func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Done:
		return "done"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Outcome is the durable record of handling one generation.
type Outcome struct {
	Gen     uint64
	State   State // Done or Failed
	Pos     Pos   // the request that was handled
	Time    time.Time
	Source  string
	Message string // failure message ("" when Done)
}

// escape percent-encodes the bytes a field value may not contain.
func escape(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			dst = append(dst, '%', hexUpper[c>>4], hexUpper[c&15])
		} else {
			dst = append(dst, c)
		}
	}
	return dst
}

func unescape(b []byte) (string, error) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '%' {
			if needsEscape(c) {
				return "", fmt.Errorf("unescaped byte 0x%02x", c)
			}
			out = append(out, c)
			continue
		}
		if i+2 >= len(b) {
			return "", errors.New("truncated percent escape")
		}
		hi, ok1 := unhexUpper(b[i+1])
		lo, ok2 := unhexUpper(b[i+2])
		if !ok1 || !ok2 || !needsEscape(hi<<4|lo) {
			return "", errors.New("bad percent escape")
		}
		out = append(out, hi<<4|lo)
		i += 2
	}
	return string(out), nil
}

// kvLine encodes `TAG k1=v1 ... crc=XXXXXXXX\n` (values escaped); the CRC32C
// covers everything before " crc=".
func kvLine(tag string, kv ...string) []byte {
	b := []byte(tag)
	for i := 0; i+1 < len(kv); i += 2 {
		b = append(b, ' ')
		b = append(b, kv[i]...)
		b = append(b, '=')
		b = escape(b, kv[i+1])
	}
	return append(b, fmt.Sprintf(" crc=%08x\n", crc32.Checksum(b, castagnoli))...)
}

// parseKV parses a kvLine with exactly the given keys in order.
func parseKV(line []byte, tag string, keys ...string) ([]string, error) {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	i := bytes.LastIndex(line, []byte(" crc="))
	if i < 0 || len(line)-i != 13 {
		return nil, errors.New("missing crc field")
	}
	want, err := strconv.ParseUint(string(line[i+5:]), 16, 32)
	if err != nil {
		return nil, errors.New("bad crc field")
	}
	if got := crc32.Checksum(line[:i], castagnoli); uint32(want) != got {
		return nil, fmt.Errorf("crc32c mismatch: line says %08x, content has %08x", want, got)
	}
	f := bytes.Split(line[:i], []byte{' '})
	if len(f) != len(keys)+1 || string(f[0]) != tag {
		return nil, fmt.Errorf("want %q with %d fields", tag, len(keys))
	}
	vals := make([]string, len(keys))
	for j, k := range keys {
		v, ok := bytes.CutPrefix(f[j+1], []byte(k+"="))
		if !ok {
			return nil, fmt.Errorf("field %d: want %s=", j+1, k)
		}
		if vals[j], err = unescape(v); err != nil {
			return nil, fmt.Errorf("field %s: %w", k, err)
		}
	}
	return vals, nil
}

func parseU(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }

func encodeOutcome(o Outcome) []byte {
	st := "done"
	if o.State == Failed {
		st = "failed"
	}
	return kvLine("outcome",
		"gen", strconv.FormatUint(o.Gen, 10),
		"state", st,
		"seg", strconv.FormatUint(o.Pos.Segment, 10),
		"off", strconv.FormatInt(o.Pos.Offset, 10),
		"ts", strconv.FormatInt(o.Time.UnixNano(), 10),
		"src", o.Source,
		"msg", o.Message)
}

func parseOutcome(line []byte) (Outcome, error) {
	var o Outcome
	v, err := parseKV(line, "outcome", "gen", "state", "seg", "off", "ts", "src", "msg")
	if err != nil {
		return o, err
	}
	var e [4]error
	o.Gen, e[0] = parseU(v[0])
	switch v[1] {
	case "done":
		o.State = Done
	case "failed":
		o.State = Failed
	default:
		return o, fmt.Errorf("unknown state (%d bytes): want done or failed", len(v[1]))
	}
	o.Pos.Segment, e[1] = parseU(v[2])
	o.Pos.Offset, e[2] = strconv.ParseInt(v[3], 10, 64)
	var ts int64
	ts, e[3] = strconv.ParseInt(v[4], 10, 64)
	if err := errors.Join(e[:]...); err != nil {
		return o, err
	}
	o.Time = time.Unix(0, ts).UTC()
	o.Source, o.Message = v[5], v[6]
	return o, nil
}

// outcomeLog is the parsed outcomes.log.
type outcomeLog struct {
	latest  map[uint64]Outcome // outcome per generation (see addOutcome)
	failed  map[Pos]Outcome    // every failed request, by position
	good    int64              // bytes up to the last complete line
	corrupt []*CorruptError
}

// addOutcome records o: a generation's outcome is its last one, except
// that a failure never replaces done (the generation was snapshotted; a
// later request for it that failed, e.g. one re-using its number for
// other content, is that request's failure, kept in failed by position).
func addOutcome(latest map[uint64]Outcome, failed map[Pos]Outcome, o Outcome) {
	if o.State == Failed {
		failed[o.Pos] = o
		if old, ok := latest[o.Gen]; ok && old.State == Done {
			return
		}
	}
	latest[o.Gen] = o
}

// maxOutcomesBytes bounds the outcomes log read into memory at open
// (about 4 million outcomes of typical length).
const maxOutcomesBytes = 1 << 30

// readOutcomes parses the outcomes log; a missing file is empty. Corrupt
// complete lines are reported and skipped; an unterminated tail is left
// out of good.
func readOutcomes(path string) (*outcomeLog, error) {
	l := &outcomeLog{latest: map[uint64]Outcome{}, failed: map[Pos]Outcome{}}
	data, err := safeopen.ReadFile(path, maxOutcomesBytes, safeopen.NoFollow)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wal: read outcomes: %w", err)
	}
	off := 0
	for {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			if off < len(data) {
				l.corrupt = append(l.corrupt, &CorruptError{Offset: int64(off), Length: int64(len(data) - off), Reason: OutcomesFile + ": torn last line"})
			}
			break
		}
		line := data[off : off+i+1]
		if o, err := parseOutcome(line); err != nil {
			l.corrupt = append(l.corrupt, &CorruptError{Offset: int64(off), Length: int64(len(line)), Reason: OutcomesFile + ": " + err.Error()})
		} else {
			addOutcome(l.latest, l.failed, o)
		}
		off += i + 1
	}
	l.good = int64(off)
	return l, nil
}

// LoadOutcomes returns the outcome of every generation recorded in the
// WAL directory dir (the latest, but done once any request for it was
// done), without locking or modifying anything (for listing and garbage
// collection while a consumer runs).
func LoadOutcomes(dir string) (map[uint64]Outcome, error) {
	l, err := readOutcomes(filepath.Join(dir, OutcomesFile))
	if err != nil {
		return nil, err
	}
	return l.latest, nil
}

func encodeCursor(p Pos) []byte {
	return kvLine("cursor", "seg", strconv.FormatUint(p.Segment, 10), "off", strconv.FormatInt(p.Offset, 10))
}

// ReadCursor returns the consumer's persisted position (zero if none).
func ReadCursor(dir string) (Pos, error) {
	data, err := safeopen.ReadFile(filepath.Join(dir, CursorFile), MaxLineSize, safeopen.NoFollow)
	if errors.Is(err, fs.ErrNotExist) {
		return Pos{}, nil
	}
	if err != nil {
		return Pos{}, fmt.Errorf("wal: read cursor: %w", err)
	}
	v, err := parseKV(data, "cursor", "seg", "off")
	if err == nil && bytes.Count(data, []byte{'\n'}) != 1 {
		err = errors.New("trailing data")
	}
	var p Pos
	var e1, e2 error
	if err == nil {
		p.Segment, e1 = parseU(v[0])
		p.Offset, e2 = strconv.ParseInt(v[1], 10, 64)
		err = errors.Join(e1, e2)
	}
	if err == nil && p.Offset < 0 {
		err = errors.New("negative offset")
	}
	if err != nil {
		// The cursor is written atomically, so this is not a crash
		// artifact: refuse rather than silently re-deliver or skip.
		return Pos{}, fmt.Errorf("wal: cursor file %s: %w: %v", filepath.Join(dir, CursorFile), ErrCorrupt, err)
	}
	return p, nil
}

func writeCursor(dir string, p Pos) error {
	if err := atomicfile.WriteFile(filepath.Join(dir, CursorFile), encodeCursor(p), 0o644); err != nil {
		return fmt.Errorf("wal: write cursor: %w", err)
	}
	return nil
}

// appendSync writes b to f with one write and fsyncs it.
func appendSync(f *os.File, b []byte) error {
	n, err := f.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return err
	}
	return f.Sync()
}
