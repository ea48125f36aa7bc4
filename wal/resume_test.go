package wal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A declared resume round-trips through the line format; the field is
// refused where it cannot mean anything.
func TestResumedFromLine(t *testing.T) {
	r := req(5)
	r.ResumedFrom = 2
	line, err := r.AppendLine(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(line), " resumed_from=2 src=") {
		t.Fatalf("line %q", line)
	}
	got, err := ParseLine(line)
	if err != nil {
		t.Fatal(err)
	}
	if got.ResumedFrom != 2 || got.Gen != 5 || got.Source != r.Source {
		t.Fatalf("parsed %+v", got)
	}
	for _, bad := range []struct {
		from uint64
		rank bool
	}{{5, false}, {6, false}, {2, true}} {
		b := req(5)
		b.ResumedFrom = bad.from
		if bad.rank {
			b.Rank, b.WorldSize = 0, 2
		}
		if _, err := b.AppendLine(nil); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("resumed_from=%d rank=%v: %v, want ErrInvalidRequest", bad.from, bad.rank, err)
		}
	}
	// A hand-made line with resumed_from >= gen is corrupt.
	body := "snapreq/1 gen=3 ts=1 by=x resumed_from=3 src=/a"
	if _, err := ParseLine(withCRC(body)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("resumed_from=gen: %v", err)
	}
}

// A failed request for a generation that is done does not undo the done
// outcome; it is listed as failed with its message, also after reopening.
func TestFailureAfterDoneIsPerRequest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	appendN(t, dir, 1, 3)
	other := req(1)
	other.Source = "/other/gen-000001"
	if err := Append(dir, other); err != nil {
		t.Fatal(err)
	}
	c, err := OpenConsumer(dir, ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(dir, c.Cursor(), ReaderOptions{})
	defer r.Close()
	var recs []Record
	for r.Next() {
		recs = append(recs, r.Record())
	}
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	if _, err := c.Complete(recs[0], Done, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(recs[1], Done, ""); err != nil {
		t.Fatal(err)
	}
	if c.Handled(recs[2]) || !c.Seen(recs[2]) {
		t.Fatal("a second request for a done generation: Seen but not Handled")
	}
	if _, err := c.Complete(recs[2], Failed, "gen 1 re-used"); err != nil {
		t.Fatal(err)
	}
	if !c.Handled(recs[2]) || !c.Handled(recs[0]) {
		t.Fatal("completed requests are Handled")
	}
	if o, _ := c.Outcome(1); o.State != Done || o.Pos != recs[0].Pos {
		t.Fatalf("gen 1 outcome %+v, want done at %s", o, recs[0].Pos)
	}
	c.Close()
	list := func() string {
		ents, err := List(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, e := range ents {
			s = append(s, fmt.Sprintf("%d:%s:%s", e.Gen, e.State, e.Message))
		}
		return strings.Join(s, " ")
	}
	if got, want := list(), "1:done: 2:done: 1:failed:gen 1 re-used"; got != want {
		t.Fatalf("list %q, want %q", got, want)
	}
	c2, err := OpenConsumer(dir, ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if o, _ := c2.Outcome(1); o.State != Done || !c2.Handled(recs[2]) {
		t.Fatalf("reopened: gen 1 %+v, handled %v", o, c2.Handled(recs[2]))
	}
}

// withCRC completes a hand-made request line body with its CRC.
func withCRC(body string) []byte {
	return []byte(fmt.Sprintf("%s crc=%08x\n", body, crc32.Checksum([]byte(body), castagnoli)))
}

// The Python helper writes a declared resume byte for byte as Go does.
func TestPythonResumedFrom(t *testing.T) {
	py := python(t)
	state := t.TempDir()
	prog := `
import sys
sys.path.insert(0, sys.argv[1])
import snapd_trainer as st
st.request_snapshot(4, "/g/gen 4", state_dir=sys.argv[2], requester="py:r", ts_ns=7, resumed_from=2)
try:
    st.request_snapshot(4, "/g", state_dir=sys.argv[2], resumed_from=4)
except ValueError:
    print("refused")
`
	out, err := exec.Command(py, "-c", prog, trainerScripts, state).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "refused" {
		t.Fatalf("python: %v: %s", err, out)
	}
	recs := readAll(t, filepath.Join(state, "wal"), nil)
	want := Request{Gen: 4, Time: time.Unix(0, 7), Requester: "py:r", Source: "/g/gen 4", ResumedFrom: 2}
	if len(recs) != 1 || recs[0].ResumedFrom != 2 || recs[0].End.Offset-recs[0].Pos.Offset != int64(len(mustLine(t, want))) {
		t.Fatalf("records %+v", recs)
	}
}
