package wal

import (
	"bufio"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func childCmd(role string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"WAL_TEST_CHILD=" + role}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

// 4 processes append 5,000 requests each at once while this process
// consumes with rotation (small segments): every request is read exactly
// once and nothing is torn.
func TestConcurrentProcessAppends(t *testing.T) {
	const procs = 4
	n := 5000
	if testing.Short() {
		n = 1500
	}
	dir := filepath.Join(t.TempDir(), "wal")
	c, err := OpenConsumer(dir, ConsumerOptions{SegmentSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var corrupt []*CorruptError
	// A failure guard only: on a loaded machine the 2,000 fsynced
	// commits below alone can take a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := NewListener(dir, c.Cursor(), ListenerOptions{
		PollInterval: 20 * time.Millisecond,
		OnCorrupt:    func(ce *CorruptError) { corrupt = append(corrupt, ce) },
		OnError:      func(err error) { t.Errorf("listener: %v", err) },
	})
	out := make(chan Record, 256)
	if err := l.Start(ctx, out); err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for id := 0; id < procs; id++ {
		cmd := childCmd("append", "WAL_TEST_DIR="+dir, fmt.Sprintf("WAL_TEST_ID=%d", id), fmt.Sprintf("WAL_TEST_N=%d", n), "WAL_TEST_PACE=50")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	// Rotate every 5 ms while the appenders run, so that
	// sealing races appends (the consumer also rotates on size).
	rotStop, rotDone := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { rotDone <- n }()
		for {
			select {
			case <-rotStop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			segs, err := Segments(dir)
			if err != nil || len(segs) == 0 {
				continue
			}
			if st, err := os.Stat(segPath(dir, segs[len(segs)-1])); err != nil || st.Size() == 0 {
				continue
			}
			if err := rotate(dir, segs[len(segs)-1]); err != nil {
				t.Error(err)
				return
			}
			n++
		}
	}()
	seen := map[uint64]int{}
	maxSeg := uint64(0)
	for got := 0; got < procs*n; got++ {
		var rec Record
		select {
		case rec = <-out:
		case <-ctx.Done():
			per := make([]int, procs)
			for g := range seen {
				if id := int(g / 1_000_000); id < procs {
					per[id]++
				}
			}
			t.Fatalf("timeout after %d of %d records (per appender %v; corrupt %v; segments %v)", got, procs*n, per, corrupt, mustSegments(dir))
		}
		seen[rec.Gen]++
		id, i := int(rec.Gen/1_000_000), int(rec.Gen%1_000_000)-1
		if rec.Requester != fmt.Sprintf("p%d", id) || rec.Source != fmt.Sprintf("/gens/p%d/%d", id, i) {
			t.Fatalf("record fields mixed up: %+v", rec.Request)
		}
		maxSeg = max(maxSeg, rec.Pos.Segment)
		if got%10 == 9 { // commit now and then: drives rotation and removal
			if err := c.Skip(rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("appender: %v", err)
		}
	}
	close(rotStop)
	rotations := <-rotDone
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for id := 0; id < procs; id++ {
		for i := 0; i < n; i++ {
			if k := seen[appenderGen(id, i)]; k != 1 {
				t.Fatalf("request p%d/%d read %d times", id, i, k)
			}
		}
	}
	if len(seen) != procs*n || len(corrupt) != 0 {
		t.Fatalf("%d distinct, corrupt %v", len(seen), corrupt)
	}
	// Nothing more arrives.
	select {
	case rec := <-out:
		t.Fatalf("extra record %+v", rec)
	default:
	}
	if maxSeg < 3 || rotations < 3 {
		t.Fatalf("too little rotation: max segment %d, %d forced rotations", maxSeg, rotations)
	}
	t.Logf("%d records over %d segments (%d forced rotations)", procs*n, maxSeg, rotations)
}

// The consumer is killed (SIGKILL) at random points across many runs
// while requests keep arriving; at the end no request is lost, no
// generation is recorded done twice, and the handler ran twice for a
// generation only when a kill hit between the handler and its outcome.
func TestConsumerKill9(t *testing.T) {
	runs := 50
	if testing.Short() {
		runs = 12
	}
	tmp := t.TempDir()
	dir, effects := filepath.Join(tmp, "wal"), filepath.Join(tmp, "effects.log")
	w, err := OpenWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	requested := map[uint64]bool{}
	next := uint64(1)
	appendSome := func(k int) {
		for range k {
			g := next
			if rng.Intn(5) == 0 && next > 1 { // duplicate request of an older generation
				g = uint64(rng.Int63n(int64(next-1))) + 1
			} else {
				next++
			}
			requested[g] = true
			if err := w.Append(req(g)); err != nil {
				t.Fatal(err)
			}
		}
	}
	env := []string{"WAL_TEST_DIR=" + dir, "WAL_TEST_EFFECTS=" + effects, "WAL_TEST_SEGSIZE=700"}
	killedRuns := 0
	deadline := time.Now().Add(25 * time.Second)
	for run := 0; run < runs && time.Now().Before(deadline); run++ {
		appendSome(8)
		before := effectLines(t, effects)
		cmd := childCmd("consume", env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until the child is running (it logs "start"), then kill it
		// at a random moment while it works and more requests arrive.
		for effectLines(t, effects) == before && time.Since(deadline) < 0 {
			time.Sleep(time.Millisecond)
		}
		appendSome(4)
		time.Sleep(time.Duration(rng.Intn(25000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			killedRuns++
		} else if err != nil {
			t.Fatalf("run %d: consumer failed: %v", run, err)
		}
	}
	// Final run to completion.
	requested[stopGen] = true
	if err := w.Append(req(stopGen)); err != nil {
		t.Fatal(err)
	}
	cmd := childCmd("consume", env...)
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("final consumer: %v", err)
		}
	case <-time.After(3 * time.Minute): // failure guard only
		cmd.Process.Kill()
		t.Fatal("final consumer did not finish")
	}
	t.Logf("%d runs killed, %d generations requested", killedRuns, len(requested))

	// Outcomes: every requested generation done, exactly one done line each.
	data, err := os.ReadFile(filepath.Join(dir, OutcomesFile))
	if err != nil {
		t.Fatal(err)
	}
	doneLines := map[uint64]int{}
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if line == "" {
			continue
		}
		o, err := parseOutcome([]byte(line))
		if err != nil {
			t.Fatalf("outcome line %q: %v", line, err)
		}
		if o.State != Done {
			t.Fatalf("gen %d: %s %s", o.Gen, o.State, o.Message)
		}
		doneLines[o.Gen]++
	}
	for g := range requested {
		if doneLines[g] != 1 {
			t.Fatalf("gen %d recorded done %d times", g, doneLines[g])
		}
	}
	if len(doneLines) != len(requested) {
		t.Fatalf("%d generations done, %d requested", len(doneLines), len(requested))
	}

	// Effects: split into runs. A generation handled in two runs must be
	// the very last effect of the earlier (killed) run.
	f, err := os.Open(effects)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type run struct{ gens []uint64 }
	var rs []*run
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "start ") {
			rs = append(rs, &run{})
			continue
		}
		g, err := strconv.ParseUint(line, 10, 64)
		if err != nil || len(rs) == 0 {
			t.Fatalf("effects line %q", line)
		}
		rs[len(rs)-1].gens = append(rs[len(rs)-1].gens, g)
	}
	var perRun []int
	for _, r := range rs {
		perRun = append(perRun, len(r.gens))
	}
	t.Logf("handler runs per consumer run: %v", perRun)
	handledIn := map[uint64][]int{}
	for i, r := range rs {
		for _, g := range r.gens {
			if prev := handledIn[g]; len(prev) > 0 && prev[len(prev)-1] == i {
				t.Fatalf("run %d handled gen %d twice", i, g)
			}
			handledIn[g] = append(handledIn[g], i)
		}
	}
	redone := 0
	for g, runsOf := range handledIn {
		for _, ri := range runsOf[:len(runsOf)-1] {
			gs := rs[ri].gens
			if gs[len(gs)-1] != g {
				t.Fatalf("gen %d handled again after run %d, where it was not the last effect", g, ri)
			}
			redone++
		}
	}
	for g := range requested {
		if len(handledIn[g]) == 0 {
			t.Fatalf("gen %d never handled", g)
		}
	}
	t.Logf("%d handler re-runs (kill between handler and outcome)", redone)
}

func effectLines(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func mustSegments(dir string) []uint64 {
	segs, _ := Segments(dir)
	return segs
}
