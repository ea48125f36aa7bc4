package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func publishBytes(t testing.TB, s *GenStore, gen uint64, suffix, content string) Generation {
	t.Helper()
	g, err := s.Publish(gen, suffix, func(w io.Writer) error {
		_, err := io.WriteString(w, content)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGenNames(t *testing.T) {
	good := map[string]uint64{"gen-000123.zt": 123, "gen-000000": 0, "gen-1234567.safetensors": 1234567, "gen-000001.a.b": 1}
	for name, want := range good {
		g, _, ok := ParseGenName(name)
		if !ok || g != want {
			t.Errorf("ParseGenName(%q) = %d, %v", name, g, ok)
		}
	}
	for _, name := range []string{"gen-12345", "gen-0000123", "gen-000123x", "gen-", "xgen-000001", ".tmp-gen-000001", "gen-99999999999999999999999"} {
		if _, _, ok := ParseGenName(name); ok {
			t.Errorf("ParseGenName(%q) accepted", name)
		}
	}
}

func TestPublishListLookup(t *testing.T) {
	s, err := OpenGenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g1 := publishBytes(t, s, 1, ".zt", "one")
	if b, _ := os.ReadFile(g1.Path); string(b) != "one" || g1.Name != "gen-000001.zt" {
		t.Fatalf("published %+v content %q", g1, b)
	}
	g2, err := s.PublishDir(2, "", func(dir string) error {
		if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "sub", "w.bin"), []byte("two"), 0o644)
	})
	if err != nil || !g2.IsDir {
		t.Fatalf("PublishDir: %+v %v", g2, err)
	}
	if _, err := s.Publish(1, ".safetensors", func(io.Writer) error { return nil }); !errors.Is(err, ErrGenExists) {
		t.Fatalf("republish: %v", err)
	}
	if _, err := s.Publish(3, "bad/suffix", func(io.Writer) error { return nil }); !errors.Is(err, ErrBadGenName) {
		t.Fatalf("bad suffix: %v", err)
	}
	failed := errors.New("disk on fire")
	if _, err := s.Publish(3, "", func(io.Writer) error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("fill error: %v", err)
	}
	gens, err := s.List()
	if err != nil || len(gens) != 2 || gens[0].Gen != 1 || gens[1].Gen != 2 {
		t.Fatalf("List = %+v, %v", gens, err)
	}
	ents, _ := os.ReadDir(s.Dir())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			t.Errorf("temp entry left behind: %s", e.Name())
		}
	}
	if _, err := s.Lookup(9); !errors.Is(err, ErrGenNotFound) {
		t.Fatalf("Lookup(9): %v", err)
	}
	// A second entry for generation 1 (e.g. a foreign writer).
	os.WriteFile(filepath.Join(s.Dir(), "gen-000001.other"), nil, 0o644)
	if _, err := s.List(); !errors.Is(err, ErrGenDuplicate) || !strings.Contains(err.Error(), "gen-000001.other") {
		t.Fatalf("duplicate: %v", err)
	}
}

func TestReclaimRules(t *testing.T) {
	s, err := OpenGenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for g := uint64(1); g <= 8; g++ {
		publishBytes(t, s, g, ".bin", fmt.Sprint(g))
	}
	// Snapshotted: 1..5 and 7. Abandoned: 6. 8 is fresh.
	snapped := func(g uint64) bool { return g <= 5 || g == 7 }
	if err := s.Abandon(6); err != nil {
		t.Fatal(err)
	}
	pin, err := s.Pin(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	dry, err := s.Reclaim(context.Background(), ReclaimOptions{Keep: 1, Snapshotted: snapped, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Reclaim(context.Background(), ReclaimOptions{Keep: 1, Snapshotted: snapped})
	if err != nil {
		t.Fatal(err)
	}
	got := func(gs []Generation) (out []uint64) {
		for _, g := range gs {
			out = append(out, g.Gen)
		}
		return
	}
	want := "[1 3 4 5 6]"
	if fmt.Sprint(got(rep.Deleted)) != want || fmt.Sprint(got(dry.Deleted)) != want {
		t.Fatalf("deleted %v (dry run %v), want %s", got(rep.Deleted), got(dry.Deleted), want)
	}
	reasons := map[uint64]string{}
	for _, k := range rep.Kept {
		reasons[k.Gen] = k.Reason
	}
	wantReasons := map[uint64]string{2: "pinned", 7: "newest snapshotted", 8: "newest K"}
	if fmt.Sprint(reasons) != fmt.Sprint(wantReasons) {
		t.Fatalf("kept %v, want %v", reasons, wantReasons)
	}
	left, _ := s.List()
	if fmt.Sprint(got(left)) != "[2 7 8]" {
		t.Fatalf("left %v", got(left))
	}
	if s.Abandoned(6) {
		t.Fatal("abandon marker of a reclaimed generation left behind")
	}
	if err := pin.Release(); err != nil {
		t.Fatal(err)
	}
	if err := pin.Release(); err != nil {
		t.Fatal("second release:", err)
	}
	// Keep 0 still never deletes the newest snapshotted generation.
	rep, err = s.Reclaim(context.Background(), ReclaimOptions{Keep: 0, Snapshotted: func(uint64) bool { return true }})
	if err != nil || fmt.Sprint(got(rep.Deleted)) != "[2 7]" {
		t.Fatalf("keep 0: deleted %v, %v", got(rep.Deleted), err)
	}
	if left, _ := s.List(); len(left) != 1 || left[0].Gen != 8 {
		t.Fatalf("keep 0 left %v", got(left))
	}
	if _, err := s.Reclaim(context.Background(), ReclaimOptions{Keep: -1}); err == nil {
		t.Fatal("negative keep accepted")
	}
	// Nothing snapshotted, nothing abandoned: nothing goes.
	publishBytes(t, s, 9, "", "9")
	if rep, err := s.Reclaim(context.Background(), ReclaimOptions{}); err != nil || len(rep.Deleted) != 0 {
		t.Fatalf("unsnapshotted deleted: %v %v", got(rep.Deleted), err)
	}
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	bin, err := exec.LookPath("true")
	if err != nil {
		bin = os.Args[0]
	}
	cmd := exec.Command(bin, "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestStalePins(t *testing.T) {
	s, err := OpenGenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for g := uint64(1); g <= 4; g++ {
		publishBytes(t, s, g, "", "x")
	}
	live, err := s.Pin(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	o := currentOwner()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(s.Dir(), pinsDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A crashed daemon (pid gone), a pin from before a reboot, a pid that
	// was reused (start time differs), another host (cannot tell: live),
	// and a garbled file (kept as pinned, reported).
	write("000002.1.a.pin", fmt.Sprintf("pin gen=2 pid=%d start=5 boot=%s host=%s ts=1\n", deadPID(t), o.Boot, o.Host))
	write("000003.1.b.pin", fmt.Sprintf("pin gen=3 pid=%d start=%d boot=other-boot host=%s ts=1\n", o.PID, o.Start, o.Host))
	write("000003.1.c.pin", fmt.Sprintf("pin gen=3 pid=%d start=%d boot=%s host=%s ts=1\n", o.PID, o.Start+1, o.Boot, o.Host))
	write("000004.1.d.pin", fmt.Sprintf("pin gen=4 pid=%d start=5 boot=x host=elsewhere ts=1\n", deadPID(t)))
	write("000001.1.e.pin", "garbage")
	pins, err := s.Pins()
	var pfe *PinFileError
	if !errors.As(err, &pfe) || pfe.Gen != 1 {
		t.Fatalf("garbled pin file: %v", err)
	}
	stale := map[uint64]int{}
	for _, p := range pins {
		if p.Stale {
			stale[p.Gen]++
		}
	}
	if fmt.Sprint(stale) != "map[2:1 3:2]" {
		t.Fatalf("stale pins %v", stale)
	}
	rep, err := s.Reclaim(context.Background(), ReclaimOptions{Snapshotted: func(uint64) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.StalePins) != 3 || len(rep.Warnings) != 1 {
		t.Fatalf("stale %d warnings %v", len(rep.StalePins), rep.Warnings)
	}
	var deleted []uint64
	for _, g := range rep.Deleted {
		deleted = append(deleted, g.Gen)
	}
	// 4 is the newest snapshotted (and pinned from elsewhere); 1 pinned.
	if fmt.Sprint(deleted) != "[2 3]" {
		t.Fatalf("deleted %v", deleted)
	}
}

// A reclaim racing with pins never deletes a pinned generation: either
// Pin fails with ErrGenNotFound, or the generation survives while pinned.
func TestReclaimRacesPin(t *testing.T) {
	s, err := OpenGenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rounds := 200
	if testing.Short() {
		rounds = 60
	}
	pinnedWins, reclaimWins := 0, 0
	for i := 0; i < rounds; i++ {
		old, newest := uint64(2*i+1), uint64(2*i+2)
		g := publishBytes(t, s, old, ".bin", "old")
		publishBytes(t, s, newest, ".bin", "new")
		var wg sync.WaitGroup
		var pin *Pin
		var perr, rerr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			pin, perr = s.Pin(context.Background(), old)
		}()
		go func() {
			defer wg.Done()
			_, rerr = s.Reclaim(context.Background(), ReclaimOptions{Keep: 0, Snapshotted: func(uint64) bool { return true }})
		}()
		wg.Wait()
		if rerr != nil {
			t.Fatal(rerr)
		}
		if perr != nil {
			if !errors.Is(perr, ErrGenNotFound) {
				t.Fatal(perr)
			}
			reclaimWins++
			continue
		}
		pinnedWins++
		// Another reclaim while pinned must not touch it either.
		if _, err := s.Reclaim(context.Background(), ReclaimOptions{Keep: 0, Snapshotted: func(uint64) bool { return true }}); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(g.Path); err != nil || string(b) != "old" {
			t.Fatalf("round %d: pinned generation deleted: %v", i, err)
		}
		pin.Release()
	}
	t.Logf("pin first %d times, reclaim first %d times", pinnedWins, reclaimWins)
	if pinnedWins+reclaimWins != rounds {
		t.Fatal("lost rounds")
	}
}

func TestSweepTemp(t *testing.T) {
	s, err := OpenGenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(s.Dir(), fmt.Sprintf(".tmp-gen-000001.bin-%d-abcd", deadPID(t)))
	alive := filepath.Join(s.Dir(), fmt.Sprintf(".tmp-gen-000002.bin-%d-abcd", os.Getpid()))
	trash := filepath.Join(s.Dir(), ".trash-gen-000003-ffff")
	for _, p := range []string{dead, alive, trash} {
		os.WriteFile(p, []byte("x"), 0o644)
	}
	if _, err := s.Reclaim(context.Background(), ReclaimOptions{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{dead: false, alive: true, trash: false} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: exists=%v, want %v", filepath.Base(p), err == nil, want)
		}
	}
}

// TestLockHonoursContext: while another open file holds the store's lock
// exclusively (a trainer in Reclaim's critical section, or one stuck
// there), Pin and Reclaim wait without blocking the caller's context:
// cancelled, they return its error and leave no pin; once the lock is
// released, a waiting Pin proceeds.
func TestLockHonoursContext(t *testing.T) {
	s, err := OpenGenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	publishBytes(t, s, 1, ".bin", "one")
	hold := func() *os.File {
		f, err := os.OpenFile(filepath.Join(s.Dir(), lockName), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if err := tryLock(f, lockExclusive); err != nil {
			t.Fatal(err)
		}
		return f
	}

	f := hold()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { _, err := s.Pin(ctx, 1); done <- err }()
	go func() { _, err := s.Reclaim(ctx, ReclaimOptions{}); done <- err }()
	cancel()
	for range 2 {
		if err := <-done; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "held by another process") {
			t.Fatalf("with the lock held and ctx cancelled: %v", err)
		}
	}
	if pins, err := s.Pins(); err != nil || len(pins) != 0 {
		t.Fatalf("pins after a cancelled Pin: %v %v", pins, err)
	}

	// A Pin waiting on the lock proceeds once it is released.
	got := make(chan error, 1)
	go func() {
		p, err := s.Pin(context.Background(), 1)
		if err == nil {
			err = p.Release()
		}
		got <- err
	}()
	f.Close() // releases the flock
	if err := <-got; err != nil {
		t.Fatalf("Pin after the lock was released: %v", err)
	}
	// Released, Pin leaves no lock behind.
	g, err := os.OpenFile(filepath.Join(s.Dir(), lockName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := tryLock(g, lockExclusive); err != nil {
		t.Fatalf("the store's lock is still held after Pin and Release: %v", err)
	}
}
