package wal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"time"

	"github.com/snapd-ml/snapd/snapshot"
)

// Magic starts every request line; it names the line format and its
// version. Together with the following " gen=" it can only occur at the
// start of a record, because no field value may contain a space.
const Magic = "snapreq/1"

// MaxLineSize is the largest request line, newline included, that Append
// writes. A line is written with exactly one write(2) on a file opened with
// O_APPEND, which the kernel does not interleave with other appends on a
// local file system; 4096 bytes keeps every line within one page so that
// even readers racing the write never see more than one partial line.
const MaxLineSize = 4096

// MaxGen is the largest generation a request may name (snapshot.MaxGen,
// 999999999999999999: what the WTXT writer and parser agree on, see
// doc.go). Writers refuse 0 and larger values with ErrInvalidRequest;
// the parser still reads any canonical uint64 so that a line written by
// another tool reaches the daemon, which records it as failed.
const MaxGen = snapshot.MaxGen

// MaxRequesterLen is the longest requester token.
const MaxRequesterLen = 64

// MaxWorldSize is the largest world size of a rank request (a sharded job).
const MaxWorldSize = 1 << 16

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sentinel errors callers branch on.
var (
	// ErrLineTooLong: the encoded request exceeds MaxLineSize.
	ErrLineTooLong = errors.New("wal: request line exceeds MaxLineSize")
	// ErrInvalidRequest: a field cannot be encoded (empty source, bad
	// requester token, negative time).
	ErrInvalidRequest = errors.New("wal: invalid request")
	// ErrCorrupt: a line in a segment is not a valid record (bad CRC,
	// garbage, torn). Readers report and skip such lines.
	ErrCorrupt = errors.New("wal: corrupt record")
	// ErrLocked: another consumer holds the WAL directory.
	ErrLocked = errors.New("wal: directory is locked by another consumer")
	// ErrClosed: the object was closed.
	ErrClosed = errors.New("wal: closed")
	// ErrOutOfOrder: a completion was reported for a record before the
	// consumer's cursor.
	ErrOutOfOrder = errors.New("wal: completion out of order")
)

// Request is one "snapshot requested" entry.
type Request struct {
	Gen       uint64    // generation to snapshot
	Time      time.Time // when it was requested (stored as Unix nanoseconds)
	Requester string    // who asked: 1..64 of [A-Za-z0-9._:@/+-]
	Source    string    // path of the published generation (file or directory)
	// Rank and WorldSize mark one rank's shard of a sharded generation
	// (written " rank=R world_size=W" before src=); WorldSize 0 (and Rank
	// 0) is an ordinary request. Otherwise 1 <= WorldSize <= MaxWorldSize
	// and 0 <= Rank < WorldSize.
	Rank, WorldSize int
	// ResumedFrom, when not 0, declares that the run restarted from
	// generation ResumedFrom's checkpoint (written " resumed_from=R"
	// before src=): 1 <= ResumedFrom < Gen, on an ordinary request only.
	// The daemon then chains Gen to ResumedFrom and records the
	// generations above it as abandoned (pipeline, docs/FORMAT.md).
	ResumedFrom uint64
	// Meta is the trainer's metadata of the generation (step, loss, ...;
	// snapshot.UserMeta), written " meta=<canonical JSON, percent-encoded
	// like src>" after resumed_from and before src=; on ordinary requests
	// only. The daemon stores it inside the generation.
	Meta snapshot.UserMeta
}

// Pos is a position in the log: a segment number and a byte offset in it.
type Pos struct {
	Segment uint64
	Offset  int64
}

// String renders p as SEGMENT:OFFSET.
func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Segment, p.Offset) }

// Less orders positions.
func (p Pos) Less(q Pos) bool {
	if p.Segment != q.Segment {
		return p.Segment < q.Segment
	}
	return p.Offset < q.Offset
}

// Record is a request read back from the log with where it was found.
type Record struct {
	Request
	Pos Pos // first byte of the line
	End Pos // first byte after the line's newline
}

// ParseError is a line that is not a valid record.
type ParseError struct {
	Col    int    // byte offset in the line where the check failed
	Reason string // which check failed
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("column %d: %s", e.Col, e.Reason)
}

func (e *ParseError) Unwrap() error { return ErrCorrupt }

// CorruptError describes bytes of a segment that were skipped.
type CorruptError struct {
	Segment uint64
	Offset  int64 // first skipped byte
	Length  int64 // number of skipped bytes (newline included)
	Reason  string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("wal: segment %08d offset %d: %d bytes skipped: %s", e.Segment, e.Offset, e.Length, e.Reason)
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func validRequesterByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '@' || c == '/' || c == '+' || c == '-'
}

// needsEscape reports whether a source byte is percent-encoded.
func needsEscape(c byte) bool { return c <= ' ' || c >= 0x7f || c == '%' }

const hexUpper = "0123456789ABCDEF"
const hexLower = "0123456789abcdef"

// validate checks the fields that have constraints.
func (r Request) validate() error {
	if err := checkGen(r.Gen); err != nil {
		return err
	}
	return r.validateFields()
}

// checkGen refuses generation numbers outside 1..MaxGen.
func checkGen(gen uint64) error {
	if gen < 1 || gen > MaxGen {
		return fmt.Errorf("%w: gen %d out of range 1..%d (at most 18 decimal digits, see MaxGen)", ErrInvalidRequest, gen, MaxGen)
	}
	return nil
}

// validateFields checks every field but the generation.
func (r Request) validateFields() error {
	if len(r.Requester) == 0 || len(r.Requester) > MaxRequesterLen {
		return fmt.Errorf("%w: requester: length must be 1..%d (got %d bytes)", ErrInvalidRequest, MaxRequesterLen, len(r.Requester))
	}
	for i := 0; i < len(r.Requester); i++ {
		if !validRequesterByte(r.Requester[i]) {
			return fmt.Errorf("%w: requester: byte %d not in [A-Za-z0-9._:@/+-]", ErrInvalidRequest, i)
		}
	}
	if r.Source == "" {
		return fmt.Errorf("%w: empty source path", ErrInvalidRequest)
	}
	if r.Time.Before(time.Unix(0, 0)) {
		return fmt.Errorf("%w: time %s before the Unix epoch", ErrInvalidRequest, r.Time)
	}
	if err := checkRank(r.Rank, r.WorldSize); err != nil {
		return err
	}
	if err := checkResume(r.Gen, r.ResumedFrom, r.WorldSize); err != nil {
		return err
	}
	return checkMeta(r.Meta)
}

// checkMeta checks a request's metadata: canonical and within the limits
// of snapshot.UserMeta. A rank request may carry it too: the metadata of
// that rank's part (the committer requires every rank of a generation to
// give the same).
func checkMeta(m snapshot.UserMeta) error {
	if len(m) == 0 {
		return nil
	}
	if _, err := snapshot.BuildUserMeta(m); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	for i := 1; i < len(m); i++ {
		if m[i-1].Key >= m[i].Key {
			return fmt.Errorf("%w: meta keys not in ascending order (build it with snapshot.BuildUserMeta)", ErrInvalidRequest)
		}
	}
	if _, err := snapshot.ParseUserMetaCanonical(m.JSON()); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return nil
}

// checkResume checks a declared resume (0: none): below the generation,
// and not on a rank request.
func checkResume(gen, from uint64, world int) error {
	if from == 0 {
		return nil
	}
	if from >= gen {
		return fmt.Errorf("%w: resumed_from %d must be below gen %d (the run restarted from an earlier generation)", ErrInvalidRequest, from, gen)
	}
	if world > 0 {
		return fmt.Errorf("%w: resumed_from is declared on ordinary requests only, not on a rank's shard", ErrInvalidRequest)
	}
	return nil
}

// checkRank checks a rank request's fields (both zero: not one).
func checkRank(rank, world int) error {
	if world == 0 && rank == 0 {
		return nil
	}
	if world < 1 || world > MaxWorldSize {
		return fmt.Errorf("%w: world size %d out of range 1..%d", ErrInvalidRequest, world, MaxWorldSize)
	}
	if rank < 0 || rank >= world {
		return fmt.Errorf("%w: rank %d out of range 0..%d for world size %d", ErrInvalidRequest, rank, world-1, world)
	}
	return nil
}

// AppendLine appends the request's line (with CRC and newline) to dst.
// It fails with ErrInvalidRequest or ErrLineTooLong; on failure dst is
// returned unchanged.
func (r Request) AppendLine(dst []byte) ([]byte, error) {
	if err := checkGen(r.Gen); err != nil {
		return dst, err
	}
	return r.appendLine(dst)
}

// appendLine is AppendLine without the generation bound: the encoding of
// any record ParseLine accepts (the parser reads every canonical uint64).
func (r Request) appendLine(dst []byte) ([]byte, error) {
	if err := r.validateFields(); err != nil {
		return dst, err
	}
	start := len(dst)
	b := append(dst, Magic...)
	b = append(b, " gen="...)
	b = strconv.AppendUint(b, r.Gen, 10)
	b = append(b, " ts="...)
	b = strconv.AppendInt(b, r.Time.UnixNano(), 10)
	b = append(b, " by="...)
	b = append(b, r.Requester...)
	if r.WorldSize > 0 {
		b = append(b, " rank="...)
		b = strconv.AppendInt(b, int64(r.Rank), 10)
		b = append(b, " world_size="...)
		b = strconv.AppendInt(b, int64(r.WorldSize), 10)
	}
	if r.ResumedFrom != 0 {
		b = append(b, " resumed_from="...)
		b = strconv.AppendUint(b, r.ResumedFrom, 10)
	}
	if len(r.Meta) > 0 {
		b = append(b, " meta="...)
		b = escape(b, string(r.Meta.JSON()))
	}
	b = append(b, " src="...)
	b = escape(b, r.Source)
	crc := crc32.Checksum(b[start:], castagnoli)
	b = append(b, " crc="...)
	for s := 28; s >= 0; s -= 4 {
		b = append(b, hexLower[(crc>>uint(s))&15])
	}
	b = append(b, '\n')
	if len(b)-start > MaxLineSize {
		return b[:start], fmt.Errorf("%w: %d bytes > %d (source %d bytes, meta %d bytes)", ErrLineTooLong, len(b)-start, MaxLineSize, len(r.Source), len(r.Meta.JSON()))
	}
	return b, nil
}

// ParseLine parses one record line, with or without its trailing newline.
// Only the canonical encoding is accepted: exact field order, no leading
// zeros, percent escapes exactly for the bytes that need them (uppercase
// hex), lowercase CRC. Errors are *ParseError wrapping ErrCorrupt.
func ParseLine(line []byte) (Request, error) {
	var r Request
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if len(line) > MaxLineSize-1 {
		return r, &ParseError{MaxLineSize - 1, fmt.Sprintf("line of %d bytes exceeds MaxLineSize", len(line)+1)}
	}
	const crcField = len(" crc=") + 8
	if len(line) < len(Magic)+crcField {
		return r, &ParseError{0, "line too short"}
	}
	body := line[:len(line)-crcField]
	tail := line[len(line)-crcField:]
	if string(tail[:5]) != " crc=" {
		return r, &ParseError{len(body), "missing \" crc=\" field at end"}
	}
	var want uint32
	for i, c := range tail[5:] {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		default:
			return r, &ParseError{len(body) + 5 + i, "crc is not 8 lowercase hex digits"}
		}
		want = want<<4 | uint32(v)
	}
	if got := crc32.Checksum(body, castagnoli); got != want {
		return r, &ParseError{len(body) + 5, fmt.Sprintf("crc32c mismatch: line says %08x, content has %08x", want, got)}
	}
	p := parser{b: body}
	if !p.lit(Magic) {
		return r, &ParseError{0, "missing magic " + Magic}
	}
	gen, ok := p.field(" gen=", 20)
	if !ok {
		return r, &ParseError{p.i, "bad gen field"}
	}
	if r.Gen, ok = parseUint(gen); !ok {
		return r, &ParseError{p.i - len(gen), "gen is not a canonical decimal uint64"}
	}
	ts, ok := p.field(" ts=", 19)
	if !ok {
		return r, &ParseError{p.i, "bad ts field"}
	}
	nanos, ok := parseUint(ts)
	if !ok || nanos > 1<<63-1 {
		return r, &ParseError{p.i - len(ts), "ts is not a canonical decimal int64"}
	}
	r.Time = time.Unix(0, int64(nanos)).UTC()
	by, ok := p.field(" by=", MaxRequesterLen)
	if !ok || len(by) == 0 {
		return r, &ParseError{p.i, "bad by field"}
	}
	for i, c := range by {
		if !validRequesterByte(c) {
			return r, &ParseError{p.i - len(by) + i, "requester byte not in [A-Za-z0-9._:@/+-]"}
		}
	}
	r.Requester = string(by)
	if p.lit(" rank=") {
		p.i -= len(" rank=")
		rank, ok := p.field(" rank=", 5)
		rv, ok2 := parseUint(rank)
		if !ok || !ok2 {
			return r, &ParseError{p.i, "bad rank field"}
		}
		world, ok := p.field(" world_size=", 5)
		wv, ok2 := parseUint(world)
		if !ok || !ok2 {
			return r, &ParseError{p.i, "bad world_size field (a rank needs one)"}
		}
		if wv < 1 || wv > MaxWorldSize || rv >= wv {
			return r, &ParseError{p.i - len(world), "rank or world_size out of range"}
		}
		r.Rank, r.WorldSize = int(rv), int(wv)
	}
	if p.lit(" resumed_from=") {
		p.i -= len(" resumed_from=")
		v, ok := p.field(" resumed_from=", 20)
		from, ok2 := parseUint(v)
		if !ok || !ok2 {
			return r, &ParseError{p.i, "bad resumed_from field"}
		}
		if from == 0 || from >= r.Gen || r.WorldSize > 0 {
			return r, &ParseError{p.i - len(v), "resumed_from must be 1..gen-1, on an ordinary request"}
		}
		r.ResumedFrom = from
	}
	if p.lit(" meta=") {
		p.i -= len(" meta=")
		v, ok := p.field(" meta=", MaxLineSize)
		if !ok || len(v) == 0 {
			return r, &ParseError{p.i, "bad meta field"}
		}
		at := p.i - len(v)
		text, perr := unescapeField(v, at, "meta")
		if perr != nil {
			return r, perr
		}
		m, err := snapshot.ParseUserMetaCanonical(text)
		if err != nil {
			return r, &ParseError{at, err.Error()}
		}
		r.Meta = m
	}
	if !p.lit(" src=") {
		return r, &ParseError{p.i, "missing src field"}
	}
	src := body[p.i:]
	if len(src) == 0 {
		return r, &ParseError{p.i, "empty src"}
	}
	out, perr := unescapeField(src, p.i, "src")
	if perr != nil {
		return r, perr
	}
	r.Source = string(out)
	return r, nil
}

// unescapeField decodes a percent-encoded field value that starts at column
// at, accepting only the canonical encoding (escape's).
func unescapeField(v []byte, at int, field string) ([]byte, *ParseError) {
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '%' {
			if i+2 >= len(v) {
				return nil, &ParseError{at + i, "truncated percent escape"}
			}
			hi, ok1 := unhexUpper(v[i+1])
			lo, ok2 := unhexUpper(v[i+2])
			if !ok1 || !ok2 {
				return nil, &ParseError{at + i, "percent escape is not two uppercase hex digits"}
			}
			x := hi<<4 | lo
			if !needsEscape(x) {
				return nil, &ParseError{at + i, "non-canonical escape: the byte needs no escaping"}
			}
			out = append(out, x)
			i += 2
			continue
		}
		if needsEscape(c) {
			return nil, &ParseError{at + i, fmt.Sprintf("unescaped byte 0x%02x in %s", c, field)}
		}
		out = append(out, c)
	}
	return out, nil
}

type parser struct {
	b []byte
	i int
}

func (p *parser) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// field consumes key and a value running up to the next space (at most
// max bytes); the value must be followed by a space.
func (p *parser) field(key string, max int) ([]byte, bool) {
	if !p.lit(key) {
		return nil, false
	}
	j := p.i
	for j < len(p.b) && p.b[j] != ' ' {
		j++
		if j-p.i > max {
			return nil, false
		}
	}
	if j == len(p.b) {
		return nil, false
	}
	v := p.b[p.i:j]
	p.i = j
	return v, true
}

// parseUint parses a canonical decimal (no sign, no leading zero).
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

func unhexUpper(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
