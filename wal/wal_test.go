package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func appendN(t testing.TB, dir string, from, to uint64) {
	t.Helper()
	w, err := OpenWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for g := from; g < to; g++ {
		if err := w.Append(req(g)); err != nil {
			t.Fatal(err)
		}
	}
}

func gensOf(recs []Record) []uint64 {
	var g []uint64
	for _, r := range recs {
		g = append(g, r.Gen)
	}
	return g
}

func appendRaw(t testing.TB, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func TestAppendRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	appendN(t, dir, 1, 11)
	recs := readAll(t, dir, func(ce *CorruptError) { t.Errorf("unexpected corruption: %v", ce) })
	if fmt.Sprint(gensOf(recs)) != "[1 2 3 4 5 6 7 8 9 10]" {
		t.Fatalf("read %v", gensOf(recs))
	}
	want := req(3)
	if got := recs[2].Request; got.Source != want.Source || !got.Time.Equal(want.Time) || got.Requester != want.Requester {
		t.Fatalf("record 3: %+v", got)
	}
	// Positions chain: each record starts where the previous ended.
	for i := 1; i < len(recs); i++ {
		if recs[i].Pos != recs[i-1].End {
			t.Fatalf("record %d at %v, previous ended at %v", i, recs[i].Pos, recs[i-1].End)
		}
	}
	// Resuming at a record's end yields the rest; tailing sees new appends.
	r := NewReader(dir, recs[6].End, ReaderOptions{})
	defer r.Close()
	var got []uint64
	for r.Next() {
		got = append(got, r.Record().Gen)
	}
	appendN(t, dir, 11, 13)
	for r.Next() {
		got = append(got, r.Record().Gen)
	}
	if fmt.Sprint(got) != "[8 9 10 11 12]" || r.Err() != nil {
		t.Fatalf("resume/tail: %v %v", got, r.Err())
	}
	if err := Append(dir, Request{Gen: 1, Requester: "bad requester", Source: "x"}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("bad request: %v", err)
	}
	w, _ := OpenWriter(dir)
	w.Close()
	if err := w.Append(req(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

func TestEmptyDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	r := NewReader(dir, Pos{}, ReaderOptions{})
	if r.Next() || r.Err() != nil {
		t.Fatalf("empty: %v", r.Err())
	}
	entries, err := List(dir, nil)
	if err != nil || len(entries) != 0 {
		t.Fatalf("List: %v %v", entries, err)
	}
}

// A bad CRC line and garbage are reported and skipped, not fatal.
func TestCorruptLinesSkipped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	appendN(t, dir, 1, 2)
	seg := segPath(dir, 1)
	bad, _ := (&Request{Gen: 2, Time: time.Unix(1, 0), Requester: "x", Source: "/a"}).AppendLine(nil)
	bad[len(bad)-3] ^= 1 // CRC digit
	appendRaw(t, seg, bad)
	appendRaw(t, seg, []byte("\x00\x01 complete garbage\n\n"))
	appendN(t, dir, 3, 4)
	// Long garbage without any newline, then a record.
	appendRaw(t, seg, []byte(strings.Repeat("z", 2*MaxLineSize)))
	appendN(t, dir, 4, 5)
	var corrupt []*CorruptError
	recs := readAll(t, dir, func(ce *CorruptError) { corrupt = append(corrupt, ce) })
	if fmt.Sprint(gensOf(recs)) != "[1 3 4]" {
		t.Fatalf("read %v", gensOf(recs))
	}
	if len(corrupt) < 3 {
		t.Fatalf("corruptions %v", corrupt)
	}
	if !strings.Contains(corrupt[0].Error(), "crc32c mismatch") || corrupt[0].Offset != recs[0].End.Offset || !errors.Is(corrupt[0], ErrCorrupt) {
		t.Fatalf("first corruption: %v", corrupt[0])
	}
	var skipped int64
	for _, c := range corrupt {
		skipped += c.Length
	}
	// Everything that is not a record (except the lone empty line) is
	// accounted for.
	st, _ := os.Stat(seg)
	var good int64
	for _, r := range recs {
		good += r.End.Offset - r.Pos.Offset
	}
	if good+skipped+1 != st.Size() {
		t.Fatalf("good %d + skipped %d + 1 != size %d", good, skipped, st.Size())
	}
}

// A torn last line (crash mid-write) is not returned, is repaired by
// truncation without losing earlier records, and, if new appends arrive
// before the repair, the record glued to the fragment is recovered.
func TestTornTail(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	appendN(t, dir, 1, 4)
	seg := segPath(dir, 1)
	full, _ := req(4).AppendLine(nil)
	torn := full[:len(full)/2]
	appendRaw(t, seg, torn)

	r := NewReader(dir, Pos{}, ReaderOptions{})
	defer r.Close()
	var got []uint64
	for r.Next() {
		got = append(got, r.Record().Gen)
	}
	if fmt.Sprint(got) != "[1 2 3]" || r.Pending() != int64(len(torn)) {
		t.Fatalf("before repair: %v pending %d", got, r.Pending())
	}
	before, _ := os.Stat(seg)
	ce, err := RepairSegment(dir, 1)
	if err != nil || ce == nil || ce.Length != int64(len(torn)) || ce.Offset != before.Size()-int64(len(torn)) {
		t.Fatalf("repair: %v %v", ce, err)
	}
	if ce, err := RepairSegment(dir, 1); ce != nil || err != nil {
		t.Fatalf("second repair: %v %v", ce, err)
	}
	appendN(t, dir, 4, 6)
	for r.Next() { // the same reader continues after the truncation
		got = append(got, r.Record().Gen)
	}
	if fmt.Sprint(got) != "[1 2 3 4 5]" || r.Err() != nil {
		t.Fatalf("after repair: %v %v", got, r.Err())
	}

	// Unrepaired torn fragment followed by a new append: recovered.
	appendRaw(t, seg, torn)
	appendN(t, dir, 6, 7)
	var corrupt []*CorruptError
	recs := readAll(t, dir, func(ce *CorruptError) { corrupt = append(corrupt, ce) })
	if fmt.Sprint(gensOf(recs)) != "[1 2 3 4 5 6]" || len(corrupt) != 1 || corrupt[0].Length != int64(len(torn)) {
		t.Fatalf("resync: %v %v", gensOf(recs), corrupt)
	}
	if recs[5].Pos.Offset != corrupt[0].Offset+int64(len(torn)) {
		t.Fatalf("resynced record at %v", recs[5].Pos)
	}
	// Zero-filled tail (power loss on some file systems), then appends.
	appendRaw(t, seg, make([]byte, 100))
	appendN(t, dir, 7, 8)
	if recs := readAll(t, dir, nil); fmt.Sprint(gensOf(recs)) != "[1 2 3 4 5 6 7]" {
		t.Fatalf("zeros: %v", gensOf(recs))
	}
}

// Rotation: the consumer seals full segments, writers move on, readers
// follow, consumed segments are removed; a torn tail of a sealed segment
// is reported.
func TestRotation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	c, err := OpenConsumer(dir, ConsumerOptions{SegmentSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := OpenConsumer(dir, ConsumerOptions{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second consumer: %v", err)
	}
	w, err := OpenWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := NewReader(dir, c.Cursor(), ReaderOptions{Seal: true})
	defer r.Close()
	var got []uint64
	for g := uint64(1); g <= 40; g++ {
		if err := w.Append(req(g)); err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			rec := r.Record()
			got = append(got, rec.Gen)
			if err := c.Skip(rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(got) != 40 || got[39] != 40 {
		t.Fatalf("read %v", got)
	}
	segs, _ := Segments(dir)
	if len(segs) > 2 || segs[len(segs)-1] < 5 {
		t.Fatalf("segments after consuming: %v", segs)
	}
	// Out-of-order completion is refused.
	if err := c.Skip(Record{Pos: Pos{1, 0}}); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("out of order: %v", err)
	}
	// A sealed segment with a torn tail: reported, and reading continues.
	last := segs[len(segs)-1]
	appendRaw(t, segPath(dir, last), []byte("snapreq/1 gen=77 ts="))
	if err := rotate(dir, last); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(req(41)); err != nil {
		t.Fatal(err)
	}
	var corrupt []*CorruptError
	r2 := NewReader(dir, c.Cursor(), ReaderOptions{OnCorrupt: func(ce *CorruptError) { corrupt = append(corrupt, ce) }})
	defer r2.Close()
	if !r2.Next() || r2.Record().Gen != 41 || len(corrupt) != 1 || corrupt[0].Segment != last {
		t.Fatalf("after sealed torn tail: %v %v", r2.Record(), corrupt)
	}
	// A stale open segment below the highest (rotation interrupted
	// between create and seal) is sealed by a consumer's reader.
	top, _ := Segments(dir)
	n := top[len(top)-1]
	if err := createSegment(dir, n+1); err != nil {
		t.Fatal(err)
	}
	appendRaw(t, segPath(dir, n+1), mustLine(t, req(43)))
	appendRaw(t, segPath(dir, n), mustLine(t, req(42))) // a writer that opened n earlier
	if r3 := readFrom(t, dir, c.Cursor(), false); fmt.Sprint(r3) != "[41 42]" {
		t.Fatalf("plain reader waits at the open segment: %v", r3)
	}
	if r3 := readFrom(t, dir, c.Cursor(), true); fmt.Sprint(r3) != "[41 42 43]" {
		t.Fatalf("sealing reader: %v", r3)
	}
}

func mustLine(t testing.TB, r Request) []byte {
	b, err := r.AppendLine(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readFrom(t testing.TB, dir string, p Pos, seal bool) []uint64 {
	r := NewReader(dir, p, ReaderOptions{Seal: seal})
	defer r.Close()
	var g []uint64
	for r.Next() {
		g = append(g, r.Record().Gen)
	}
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	return g
}

func TestConsumerOutcomesAndList(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	appendN(t, dir, 1, 4)
	Append(dir, req(2)) // duplicate request for gen 2
	Append(dir, req(3)) // retry of gen 3 after it fails
	c, err := OpenConsumer(dir, ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := NewReader(dir, c.Cursor(), ReaderOptions{Seal: true})
	var ran []string
	handle := func(fail bool) {
		if !r.Next() {
			t.Fatalf("no record: %v", r.Err())
		}
		rec := r.Record()
		o, did, err := c.Handle(ctx, rec, func(ctx context.Context, rec Record) error {
			if fail {
				return fmt.Errorf("decode %s: bad magic", rec.Source)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ran = append(ran, fmt.Sprintf("%d:%v:%s", rec.Gen, did, o.State))
	}
	handle(false) // 1 done
	handle(false) // 2 done
	handle(true)  // 3 failed
	entries, err := List(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, e := range entries {
		states = append(states, fmt.Sprintf("%d:%s", e.Gen, e.State))
	}
	// The second request for gen 2 is pending until the consumer judges
	// it (a duplicate, or a re-use of the number for other content).
	if fmt.Sprint(states) != "[1:done 2:done 3:failed 2:pending 3:pending]" {
		t.Fatalf("list: %v", states)
	}
	if !strings.Contains(entries[2].Message, "bad magic") {
		t.Fatalf("message %q", entries[2].Message)
	}
	handle(false) // duplicate 2: skipped
	// A context that ends during handling records nothing.
	cctx, cancel := context.WithCancel(ctx)
	if !r.Next() {
		t.Fatal("no record")
	}
	retry := r.Record()
	_, _, err = c.Handle(cctx, retry, func(ctx context.Context, rec Record) error {
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
	if _, _, err := c.Handle(ctx, retry, func(context.Context, Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ran = append(ran, "3-retry")
	if fmt.Sprint(ran) != "[1:true:done 2:true:done 3:true:failed 2:false:done 3-retry]" {
		t.Fatalf("ran %v", ran)
	}
	if o, _ := c.Outcome(3); o.State != Done || o.Pos != retry.Pos {
		t.Fatalf("gen 3 outcome %+v", o)
	}
	r.Close()
	cur := c.Cursor()
	c.Close()
	// Reopen: cursor and outcomes persisted; nothing left to deliver.
	c2, err := OpenConsumer(dir, ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.Cursor() != cur || readFrom(t, dir, cur, true) != nil {
		t.Fatalf("reopened cursor %v want %v", c2.Cursor(), cur)
	}
	if o, ok := c2.Outcome(1); !ok || o.State != Done || o.Source != req(1).Source {
		t.Fatalf("outcome 1: %+v", o)
	}
}

// A torn outcomes line (crash during the append) and a torn cursor
// temp file are cleaned up at open; a corrupt cursor is refused.
func TestConsumerRecovery(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	appendN(t, dir, 1, 3)
	c, err := OpenConsumer(dir, ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(dir, c.Cursor(), ReaderOptions{})
	r.Next()
	if _, err := c.Complete(r.Record(), Done, ""); err != nil {
		t.Fatal(err)
	}
	r.Close()
	c.Close()
	appendRaw(t, filepath.Join(dir, OutcomesFile), []byte("outcome gen=2 state=do"))
	os.WriteFile(filepath.Join(dir, ".snapd-tmp-cursor-123"), []byte("partial"), 0o644)
	c, err = OpenConsumer(dir, ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Repairs()) != 1 {
		t.Fatalf("repairs %v", c.Repairs())
	}
	if _, ok := c.Outcome(2); ok {
		t.Fatal("torn outcome counted")
	}
	if _, err := os.Stat(filepath.Join(dir, ".snapd-tmp-cursor-123")); err == nil {
		t.Fatal("temp file not swept")
	}
	c.Close()
	outs, err := LoadOutcomes(dir)
	if err != nil || len(outs) != 1 {
		t.Fatalf("outcomes %v %v", outs, err)
	}
	os.WriteFile(filepath.Join(dir, CursorFile), []byte("cursor seg=1 off=x crc=00000000\n"), 0o644)
	if _, err := OpenConsumer(dir, ConsumerOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt cursor: %v", err)
	}
}

// A writer whose segment (or whole directory) was removed by hand starts
// over instead of appending to an unlinked file.
func TestWriterSegmentRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	w, err := OpenWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(req(1)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(segPath(dir, 1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(req(2)); err != nil {
		t.Fatal(err)
	}
	if recs := readAll(t, dir, nil); fmt.Sprint(gensOf(recs)) != "[2]" {
		t.Fatalf("after removal: %v", gensOf(recs))
	}
}
