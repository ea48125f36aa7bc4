package progress

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a manually driven clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func frames(s string) []string {
	var out []string
	for _, f := range strings.Split(s, "\r") {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

func TestMeterRedrawsAtMostEveryInterval(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	var out bytes.Buffer
	m := Start(Options{Out: &out, Label: "model.wtxt", Total: 100 << 20, Now: c.Now, Interval: time.Second})
	m.Add(1 << 20) // before the first interval: silent
	if out.Len() != 0 {
		t.Fatalf("drew before the interval: %q", out.String())
	}
	c.advance(time.Second)
	m.Add(9 << 20) // 10 MiB after 1 s
	got := frames(out.String())
	want := "model.wtxt: 10.0 MiB / 100.0 MiB (10%), 10.0 MiB/s, ETA 9s\x1b[K"
	if len(got) != 1 || got[0] != want {
		t.Fatalf("frames %q, want %q", got, want)
	}
	for range 5 { // within the interval: no redraw
		c.advance(100 * time.Millisecond)
		m.Add(1 << 20)
	}
	if n := len(frames(out.String())); n != 1 {
		t.Fatalf("%d frames within one interval", n)
	}
	c.advance(500 * time.Millisecond) // t = 2 s, 15 MiB + 1
	m.Add(5 << 20)
	got = frames(out.String())
	if len(got) != 2 || !strings.HasPrefix(got[1], "model.wtxt: 20.0 MiB / 100.0 MiB (20%), 10.0 MiB/s, ETA 8s") {
		t.Fatalf("frames %q", got)
	}
	c.advance(8 * time.Second)
	m.Add(80 << 20)
	m.Finish()
	m.Finish() // idempotent
	s := out.String()
	if !strings.HasSuffix(s, "model.wtxt: 100.0 MiB, 10.0 MiB/s in 10s\x1b[K\n") || strings.Count(s, "\n") != 1 {
		t.Fatalf("final %q", s)
	}
	if m.Done() != 100<<20 {
		t.Fatalf("done %d", m.Done())
	}
}

func TestShortWorkAndDisabledAreSilent(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	var out bytes.Buffer
	m := Start(Options{Out: &out, Total: 10, Now: c.Now})
	m.Add(10)
	m.Finish()
	if out.Len() != 0 {
		t.Fatalf("short work drew %q", out.String())
	}
	// No Out: counting only.
	m = Start(Options{Now: c.Now})
	c.advance(time.Hour)
	n, err := io.Copy(io.Discard, m.Reader(strings.NewReader("abcdef")))
	if err != nil || n != 6 || m.Done() != 6 || m.Enabled() {
		t.Fatalf("n %d err %v done %d", n, err, m.Done())
	}
	m.Finish()
	m.Clear()
	var nilMeter *Meter
	nilMeter.Add(1)
	nilMeter.Finish()
}

func TestClearAndUnknownTotal(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	var out bytes.Buffer
	m := Start(Options{Out: &out, Label: "verify", Now: c.Now, Interval: time.Second})
	w := m.Writer(io.Discard)
	c.advance(2 * time.Second)
	w.Write(make([]byte, 3<<10))
	if got := frames(out.String()); len(got) != 1 || got[0] != "verify: 3.0 KiB, 1.5 KiB/s\x1b[K" {
		t.Fatalf("frames %q", got)
	}
	m.Clear()
	if !strings.HasSuffix(out.String(), "\r\x1b[K") {
		t.Fatalf("clear %q", out.String())
	}
	c.advance(2 * time.Second)
	m.Add(1)
	m.Finish()
	if strings.Count(out.String(), "\r") != 2 || strings.Contains(out.String(), "\n") {
		t.Fatalf("drew after Clear: %q", out.String())
	}
}

func TestConcurrentAdds(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	var out syncBuffer
	m := Start(Options{Out: &out, Total: 8000, Now: c.Now, Interval: time.Millisecond})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.advance(time.Millisecond)
				m.Add(1)
			}
		}()
	}
	wg.Wait()
	m.Finish()
	if m.Done() != 8000 || !strings.HasSuffix(out.String(), "7.8 KiB, 1000 B/s in 8s\x1b[K\n") {
		t.Fatalf("done %d, out tail %q", m.Done(), out.String()[max(0, out.Len()-80):])
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
func (s *syncBuffer) Len() int       { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Len() }

func TestOutputAndBytes(t *testing.T) {
	if Output(&bytes.Buffer{}, false) != nil {
		t.Fatal("a buffer is not a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if Output(f, false) != nil || IsTerminal(f) {
		t.Fatal("a regular file is not a terminal")
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 30: "3.0 GiB", 5 << 40: "5.0 TiB", 5 << 50: "5120.0 TiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestWrapKeepsSeekable(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := Start(Options{})
	w := m.Wrap(f)
	ws, ok := w.(WriteAtSeeker)
	if !ok {
		t.Fatal("a wrapped file lost WriteAt/Seek")
	}
	if _, err := ws.Seek(4, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	ws.Write([]byte("body"))
	ws.WriteAt([]byte("head"), 0)
	if b, _ := os.ReadFile(f.Name()); string(b) != "headbody" || m.Done() != 8 {
		t.Fatalf("file %q, counted %d", b, m.Done())
	}
	if _, ok := m.Wrap(&bytes.Buffer{}).(WriteAtSeeker); ok {
		t.Fatal("a buffer became seekable")
	}
	var nilMeter *Meter
	if nilMeter.Wrap(f) != io.Writer(f) {
		t.Fatal("a nil meter wraps")
	}
}

func TestHideThenRedraw(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	var out bytes.Buffer
	m := Start(Options{Out: &out, Label: "x", Now: c.Now, Interval: time.Second})
	m.Hide() // nothing drawn: nothing to erase
	c.advance(time.Second)
	m.Add(1)
	m.Hide()
	out.WriteString("[stdout line]\n")
	c.advance(time.Second)
	m.Add(1)
	m.Finish()
	want := "\rx: 1 B, 1 B/s\x1b[K\r\x1b[K[stdout line]\n\rx: 2 B, 1 B/s\x1b[K\rx: 2 B, 1 B/s in 2s\x1b[K\n"
	if out.String() != want {
		t.Fatalf("got  %q\nwant %q", out.String(), want)
	}
}
