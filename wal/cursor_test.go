package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// handleAll opens a consumer of dir, handles (as done) every record from
// its cursor and closes it; it returns the generations handled.
func handleAll(t *testing.T, dir string) []uint64 {
	t.Helper()
	c, err := OpenConsumer(dir, ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := NewReader(dir, c.Cursor(), ReaderOptions{})
	defer r.Close()
	var gens []uint64
	for r.Next() {
		if _, _, err := c.Handle(context.Background(), r.Record(), func(context.Context, Record) error { return nil }); err != nil {
			t.Fatal(err)
		}
		gens = append(gens, r.Record().Gen)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return gens
}

// wantDamaged checks that both the consumer and CheckCursor refuse the
// cursor with a *CursorError whose message names the problem and the
// repair, and echoes no segment content.
func wantDamaged(t *testing.T, dir, reason string) {
	t.Helper()
	c, err := OpenConsumer(dir, ConsumerOptions{})
	if err == nil {
		c.Close()
		t.Fatal("OpenConsumer accepted a damaged cursor")
	}
	for what, err := range map[string]error{"OpenConsumer": err, "CheckCursor": CheckCursor(dir)} {
		var ce *CursorError
		if !errors.Is(err, ErrCursorDamaged) || !errors.As(err, &ce) {
			t.Fatalf("%s: %v, want a *CursorError", what, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, reason) || !strings.Contains(msg, "snapd wal repair") || !strings.Contains(msg, CursorFile) {
			t.Fatalf("%s: %q: want %q, the repair command and the cursor file named", what, msg, reason)
		}
		if strings.Contains(msg, "snapreq") || strings.Contains(msg, "/gens/") {
			t.Fatalf("%s: %q echoes segment content", what, msg)
		}
	}
}

// segSize is the size of segment n of dir.
func segSize(t *testing.T, dir string, n uint64) int64 {
	t.Helper()
	st, err := os.Stat(segPath(dir, n))
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// A lost tail: the segment is shorter than the cursor says.
func TestCursorPastSegmentEnd(t *testing.T) {
	dir := t.TempDir()
	appendN(t, dir, 1, 4)
	if g := handleAll(t, dir); fmt.Sprint(g) != "[1 2 3]" {
		t.Fatalf("handled %v", g)
	}
	one := int64(len(mustLine(t, req(1))))
	if err := os.Truncate(segPath(dir, 1), one); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dir, fmt.Sprintf("past the end of segment %s (%d bytes)", SegmentName(1), one))
}

// A cursor inside a line (a valid cursor file from another state).
func TestCursorMidRecord(t *testing.T) {
	dir := t.TempDir()
	appendN(t, dir, 1, 4)
	if err := writeCursor(dir, Pos{Segment: 1, Offset: int64(len(mustLine(t, req(1)))) + 5}); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dir, "is not a record boundary")
}

// A cursor with a valid CRC and an absurd offset.
func TestCursorHugeOffset(t *testing.T) {
	dir := t.TempDir()
	appendN(t, dir, 1, 2)
	if err := writeCursor(dir, Pos{Segment: 1, Offset: 999999999}); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dir, "offset 999999999 is past the end")
}

// A cursor in a segment above every segment present: appenders write
// below it.
func TestCursorSegmentMissing(t *testing.T) {
	dir := t.TempDir()
	appendN(t, dir, 1, 2)
	if err := writeCursor(dir, Pos{Segment: 5, Offset: 10}); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dir, "does not exist and the log ends at segment "+SegmentName(1))
	// A missing segment below a present one is sound: readers go on.
	if err := CheckCursorAt(dir, Pos{Segment: 0, Offset: 0}); err != nil {
		t.Fatal(err)
	}
	appendRaw(t, segPath(dir, 1), []byte(SealMarker))
	if err := createSegment(dir, 7); err != nil {
		t.Fatal(err)
	}
	if err := CheckCursor(dir); err != nil {
		t.Fatalf("cursor below a present segment: %v", err)
	}
}

// Sound cursors: none, at 0, at a record end, at the segment's end.
func TestCursorSound(t *testing.T) {
	dir := t.TempDir()
	if err := CheckCursor(dir); err != nil {
		t.Fatal(err)
	}
	appendN(t, dir, 1, 3)
	one := int64(len(mustLine(t, req(1))))
	for _, p := range []Pos{{}, {1, 0}, {1, one}, {1, segSize(t, dir, 1)}} {
		if err := CheckCursorAt(dir, p); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	rep, err := RepairCursor(context.Background(), dir)
	if err != nil || rep.Damage != nil || rep.New != rep.Old {
		t.Fatalf("repair of a sound cursor: %+v %v", rep, err)
	}
}

// Repair after a lost tail: the requests appended after the loss (below
// the old cursor) are delivered, the handled ones are not handled again.
func TestRepairCursorThenDelivery(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	appendN(t, dir, 1, 4)
	if g := handleAll(t, dir); fmt.Sprint(g) != "[1 2 3]" {
		t.Fatalf("handled %v", g)
	}
	one := int64(len(mustLine(t, req(1))))
	if err := os.Truncate(segPath(dir, 1), one); err != nil {
		t.Fatal(err)
	}
	// After the loss the trainer appends gen 4 — below the old cursor.
	appendN(t, dir, 4, 5)

	rep, err := RepairCursor(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Damage == nil || rep.New != (Pos{1, one}) || !rep.HasLastHandled || rep.LastHandled.Gen != 1 {
		t.Fatalf("repair: %+v", rep)
	}
	if rep.Redelivered != 1 || rep.Unhandled != 1 || rep.FirstUnhandled.Gen != 4 {
		t.Fatalf("repair counts: %+v", rep)
	}
	if p, err := ReadCursor(dir); err != nil || p != rep.New {
		t.Fatalf("cursor file: %v %v", p, err)
	}
	if g := handleAll(t, dir); fmt.Sprint(g) != "[4]" {
		t.Fatalf("after repair handled %v, want [4]", g)
	}
	// And a later request too.
	appendN(t, dir, 5, 6)
	if g := handleAll(t, dir); fmt.Sprint(g) != "[5]" {
		t.Fatalf("later request: handled %v, want [5]", g)
	}
}

// Repair of a cursor inside a line resumes at the start of that line; a
// record before it that was never handled keeps the cursor before it.
func TestRepairCursorMidRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	appendN(t, dir, 1, 4)
	c, err := OpenConsumer(dir, ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(dir, Pos{}, ReaderOptions{})
	var recs []Record
	for r.Next() {
		recs = append(recs, r.Record())
	}
	r.Close()
	if _, err := c.Complete(recs[0], Done, ""); err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Gen 2 was not handled, gen 3 was (outcome from another state).
	o := Outcome{Gen: 3, State: Done, Pos: recs[2].Pos, Source: recs[2].Source}
	appendRaw(t, filepath.Join(dir, OutcomesFile), encodeOutcome(o))
	if err := writeCursor(dir, Pos{1, recs[2].Pos.Offset + 3}); err != nil {
		t.Fatal(err)
	}
	rep, err := RepairCursor(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.New != recs[0].End || rep.Redelivered != 1 || rep.Unhandled != 1 || rep.FirstUnhandled.Gen != 2 {
		t.Fatalf("repair: %+v", rep)
	}
	if g := handleAll(t, dir); fmt.Sprint(g) != "[2 3]" {
		t.Fatalf("after repair handled %v", g)
	}
	outs, err := LoadOutcomes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if outs[3].Pos != recs[2].Pos {
		t.Fatal("gen 3 handled again")
	}
}

// Repair of a cursor whose segment is missing, above every segment.
func TestRepairCursorSegmentMissing(t *testing.T) {
	dir := t.TempDir()
	appendN(t, dir, 1, 3)
	if err := writeCursor(dir, Pos{Segment: 9, Offset: 40}); err != nil {
		t.Fatal(err)
	}
	rep, err := RepairCursor(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Damage == nil || rep.Damage.Size != -1 || rep.New != (Pos{Segment: 1}) || rep.Unhandled != 2 {
		t.Fatalf("repair: %+v", rep)
	}
	if g := handleAll(t, dir); fmt.Sprint(g) != "[1 2]" {
		t.Fatalf("after repair handled %v", g)
	}
}

// Repair refuses while a consumer holds the directory.
func TestRepairCursorLocked(t *testing.T) {
	dir := t.TempDir()
	appendN(t, dir, 1, 2)
	c, err := OpenConsumer(dir, ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := RepairCursor(context.Background(), dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("repair under a running consumer: %v", err)
	}
}
