package wal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"
)

// The test binary doubles as the child processes of the multi-process
// tests: WAL_TEST_CHILD selects the role.
func TestMain(m *testing.M) {
	switch os.Getenv("WAL_TEST_CHILD") {
	case "":
		os.Exit(m.Run())
	case "append":
		os.Exit(childAppend())
	case "consume":
		os.Exit(childConsume())
	default:
		fmt.Fprintln(os.Stderr, "unknown WAL_TEST_CHILD")
		os.Exit(3)
	}
}

func envInt(name string) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(3)
	}
	return n
}

// appenderGen is the generation appender id writes as its i-th request
// (generations start at 1).
func appenderGen(id, i int) uint64 { return uint64(id)*1_000_000 + uint64(i) + 1 }

// childAppend appends WAL_TEST_N requests as appender WAL_TEST_ID.
func childAppend() int {
	dir, id, n := os.Getenv("WAL_TEST_DIR"), envInt("WAL_TEST_ID"), envInt("WAL_TEST_N")
	w, err := OpenWriter(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pace, _ := strconv.Atoi(os.Getenv("WAL_TEST_PACE")) // sleep 1 ms every pace appends
	for i := 0; i < n; i++ {
		if pace > 0 && i%pace == pace-1 {
			time.Sleep(time.Millisecond)
		}
		err := w.Append(Request{Gen: appenderGen(id, i), Time: time.Now(), Requester: fmt.Sprintf("p%d", id), Source: fmt.Sprintf("/gens/p%d/%d", id, i)})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if os.Getenv("WAL_TEST_STOP") != "" { // then the request that stops childConsume
		if err := w.Append(Request{Gen: stopGen, Time: time.Now(), Requester: fmt.Sprintf("p%d", id), Source: "/gens/stop"}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if err := w.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// stopGen is the request that makes the consumer child exit.
const stopGen = 999_999_999

// childConsume runs the daemon's consume loop (Consumer + Listener) on
// WAL_TEST_DIR. Its handler appends "<gen>\n" to WAL_TEST_EFFECTS; it
// first appends "start <pid>\n". It exits 0 after handling stopGen.
func childConsume() int {
	dir, effects := os.Getenv("WAL_TEST_DIR"), os.Getenv("WAL_TEST_EFFECTS")
	ef, err := os.OpenFile(effects, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := OpenConsumer(dir, ConsumerOptions{SegmentSize: int64(envInt("WAL_TEST_SEGSIZE"))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(ef, "start %d\n", os.Getpid())
	ctx := context.Background()
	l := NewListener(dir, c.Cursor(), ListenerOptions{PollInterval: 5 * time.Millisecond})
	out := make(chan Record, 16)
	if err := l.Start(ctx, out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer l.Close(ctx)
	for rec := range out {
		_, _, err := c.Handle(ctx, rec, func(ctx context.Context, rec Record) error {
			_, err := fmt.Fprintf(ef, "%d\n", rec.Gen)
			return err
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if rec.Gen == stopGen {
			return 0
		}
	}
	return 1
}

// percentiles returns the p50 and p99 of durations (sorted in place).
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) time.Duration {
		i := int(q*float64(len(d))+0.5) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return at(0.50), at(0.99)
}

func reportPercentiles(b *testing.B, d []time.Duration) {
	p50, p99 := percentiles(d)
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(p99.Nanoseconds())/1e3, "p99-µs")
}

func TestPercentiles(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i))
	}
	if p50, p99 := percentiles(d); p50 != 50 || p99 != 99 {
		t.Fatalf("p50 %d p99 %d", p50, p99)
	}
	if p50, p99 := percentiles([]time.Duration{7}); p50 != 7 || p99 != 7 {
		t.Fatal("single")
	}
}

// req is a small request for tests.
func req(gen uint64) Request {
	return Request{Gen: gen, Time: time.Unix(1700000000, int64(gen)), Requester: "test", Source: filepath.Join("/gens", fmt.Sprintf("gen-%06d.zt", gen))}
}

// readAll reads every record from dir starting at the beginning.
func readAll(t testing.TB, dir string, onCorrupt func(*CorruptError)) []Record {
	t.Helper()
	r := NewReader(dir, Pos{}, ReaderOptions{OnCorrupt: onCorrupt})
	defer r.Close()
	var out []Record
	for r.Next() {
		out = append(out, r.Record())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
