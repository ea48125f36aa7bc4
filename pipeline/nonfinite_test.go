package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"filippo.io/age"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/chunkdiff"
	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/pipeline/ring"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// TestNonFiniteGenerationWarns: a generation that makes elements NaN or
// Inf is logged as a warning, recorded in its result and the chain state,
// and `snapd status` (ReadStatus) warns; the next clean generation clears
// the status warning.
func TestNonFiniteGenerationWarns(t *testing.T) {
	f := newFixture(t)
	f.start(t, nil)
	publishModel := func(gen uint64, s *snapshot.Snapshot) string {
		st, err := snapshot.OpenGenStore(filepath.Join(f.dir, GensDir))
		if err != nil {
			t.Fatal(err)
		}
		g, err := st.Publish(gen, ".safetensors", func(w io.Writer) error {
			return safetensors.New().Encode(context.Background(), w, s, formats.EncodeOptions{})
		})
		if err != nil {
			t.Fatal(err)
		}
		return g.Path
	}
	withNaN := func(s *snapshot.Snapshot, arr int, nan, inf []int) *snapshot.Snapshot {
		b := append([]byte(nil), s.Arrays[arr].Data.(snapshot.Bytes)...)
		for _, i := range nan {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(math.NaN())))
		}
		for _, i := range inf {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(math.Inf(1))))
		}
		s.Arrays[arr].Data = snapshot.Bytes(b)
		return s
	}
	// Generation 1 starts with one NaN in embed.weight: warned against
	// nothing.
	request(t, f.dir, 1, publishModel(1, withNaN(model(1), 0, []int{3}, nil)))
	if r := f.wait(t, 1); r.Error != "" || len(r.NonFinite) != 1 || r.NonFinite[0].Array != "embed.weight" || r.NonFinite[0].NewNaN != 1 {
		t.Fatalf("gen 1: %+v", r)
	}
	if st, _ := ReadStatus(f.dir); !strings.Contains(strings.Join(st.Warnings, "\n"), "generation 1 introduced NaN/Inf (the first of the chain): embed.weight (1 NaN, 0 Inf)") {
		t.Fatalf("status warnings: %v", st.Warnings)
	}
	// Generation 2 keeps that NaN (not new) and adds three in head.weight.
	request(t, f.dir, 2, publishModel(2, withNaN(withNaN(model(1), 0, []int{3}, nil), 1, []int{7, 100}, []int{2000})))
	r := f.wait(t, 2)
	if r.Error != "" || len(r.NonFinite) != 1 || r.NonFinite[0].Array != "head.weight" || r.NonFinite[0].NewNaN != 2 || r.NonFinite[0].NewInf != 1 {
		t.Fatalf("gen 2: %+v", r.NonFinite)
	}
	if l := f.logs.String(); !strings.Contains(l, "generation introduces NaN/Inf") || !strings.Contains(l, "head.weight (2 NaN, 1 Inf)") {
		t.Fatalf("log:\n%s", l)
	}
	st, err := ReadStatus(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(st.Warnings, "\n"), "generation 2 introduced NaN/Inf (against generation 1): head.weight (2 NaN, 1 Inf)") {
		t.Fatalf("status warnings: %v", st.Warnings)
	}
	request(t, f.dir, 3, publishModel(3, model(3)))
	if r := f.wait(t, 3); r.Error != "" || r.NonFinite != nil {
		t.Fatalf("gen 3: %+v", r)
	}
	f.stop(t)
	if st, _ := ReadStatus(f.dir); strings.Contains(strings.Join(st.Warnings, "\n"), "NaN") {
		t.Fatalf("status still warns: %v", st.Warnings)
	}
}

// rereads records the calls of the NaN/Inf check that reads the WTXT
// files (Deps.rereadNonFinite) and passes them on.
type rereads struct {
	mu    sync.Mutex
	calls [][]string // each call's arrays ("*": every array)
}

func (r *rereads) reread(ctx context.Context, base, head string, arrays []string, maxBytes int64) (*chunkdiff.NonFiniteReport, error) {
	r.mu.Lock()
	if arrays == nil {
		r.calls = append(r.calls, []string{"*"})
	} else {
		r.calls = append(r.calls, slices.Clone(arrays))
	}
	r.mu.Unlock()
	return chunkdiff.NonFiniteIntroducedIn(ctx, base, head, arrays, maxBytes)
}

// take returns the calls so far and forgets them.
func (r *rereads) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprint(r.calls)
	r.calls = nil
	return s
}

// TestNonFiniteFromEncoderCounts: the NaN/Inf check decides from the
// counts the encoder took and the chain state kept, reading no WTXT:
// a dense generation (every element changed) introducing a NaN and an
// Inf is reported without any read, whatever the budget; an array that
// holds NaN in both generations is the only one compared by reading the
// files; and a chain state without counts (written before they were
// kept) falls back to comparing every array, and keeps counts again.
// An encrypted ring works the same (the counts are the plaintext's).
func TestNonFiniteFromEncoderCounts(t *testing.T) {
	t.Parallel()
	for _, encrypted := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "encrypted"}[encrypted], func(t *testing.T) {
			testNonFiniteFromEncoderCounts(t, encrypted)
		})
	}
}

func testNonFiniteFromEncoderCounts(t *testing.T, encrypted bool) {
	f := newFixture(t)
	rr := &rereads{}
	var rcp []age.Recipient
	if encrypted {
		var err error
		if rcp, err = keys.LoadAgeRecipients(f.keys.gen.AgePub); err != nil {
			t.Fatal(err)
		}
	}
	mod := func(c *Config, d *Deps) { c.Recipients, d.rereadNonFinite = rcp, rr.reread }
	f.start(t, mod)
	nanAt := func(s *snapshot.Snapshot, arr int, nan, inf []int) *snapshot.Snapshot {
		b := bytes.Clone(s.Arrays[arr].Data.(snapshot.Bytes))
		for _, i := range nan {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(math.NaN())))
		}
		for _, i := range inf {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(math.Inf(-1))))
		}
		s.Arrays[arr].Data = snapshot.Bytes(b)
		return s
	}
	// Four f32 arrays of 512 KiB; 256 KiB under the race detector, where
	// encoding, hashing and rereading each byte costs about ten times as
	// much (still several chunks per array, every one changed by a step).
	mib := 2
	if raceEnabled {
		mib = 1
	}
	last := mib<<20/16 - 1
	step := func(gen uint64, s *snapshot.Snapshot, want, wantCalls string) {
		t.Helper()
		request(t, f.dir, gen, publishSnap(t, f.dir, gen, s))
		r := f.wait(t, gen)
		if r.Error != "" {
			t.Fatalf("gen %d: %s", gen, r.Error)
		}
		if got := fmt.Sprint(r.NonFinite); got != want {
			t.Errorf("gen %d: NaN/Inf introduced %s, want %s", gen, got, want)
		}
		if got := rr.take(); got != wantCalls {
			t.Errorf("gen %d: the check read the WTXT files for %s, want %s", gen, got, wantCalls)
		}
	}
	step(1, denseModel(mib, 1), "[]", "[]")
	step(2, nanAt(nanAt(denseModel(mib, 2), 2, []int{12345}, nil), 3, nil, []int{last}),
		"[{layer2.weight 1 0} {layer3.weight 0 1}]", "[]")
	if r := f.wait(t, 2); r.DeltaChanged != r.DeltaChunks || r.Delta != "" {
		t.Fatalf("gen 2 is not dense: %d of %d chunks changed, delta %q", r.DeltaChanged, r.DeltaChunks, r.Delta)
	}
	c, err := ReadChainState(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Held == nil || fmt.Sprint(c.Held.Arrays) != "[{layer2.weight 1 0} {layer3.weight 0 1}]" {
		t.Fatalf("chain state after gen 2 holds %+v", c.Held)
	}
	// The NaN of layer2 stays and another joins it: only layer2 is read.
	step(3, nanAt(denseModel(mib, 3), 2, []int{12345, 99}, nil), "[{layer2.weight 1 0}]", "[[layer2.weight]]")

	// A chain state from before the counts were kept: every array is
	// compared by reading, with the same result.
	f.stop(t)
	c, err = ReadChainState(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	c.Held = nil
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, StateFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	f.start(t, mod)
	step(4, nanAt(nanAt(denseModel(mib, 4), 2, []int{12345, 99}, nil), 0, []int{7}, nil), "[{layer0.weight 1 0}]", "[[*]]")
	if c, err = ReadChainState(f.dir); err != nil || c.Held == nil || fmt.Sprint(c.Held.Arrays) != "[{layer0.weight 1 0} {layer2.weight 2 0}]" {
		t.Fatalf("chain state after gen 4 holds %+v (%v)", c.Held, err)
	}
	f.stop(t)
}

// TestHeldNonFiniteBounded: the chain state keeps the counts of the
// arrays holding NaN/Inf (an empty list when none does: known, not
// unknown), and nothing (unknown: the next check reads the files) when
// their list would crowd the state file.
func TestHeldNonFiniteBounded(t *testing.T) {
	if h := heldNonFinite([]wtxt.ArrayInfo{{Name: "a"}, {Name: "b"}}); h == nil || h.Arrays != nil {
		t.Fatalf("no NaN/Inf: %+v", h)
	}
	if h := heldNonFinite([]wtxt.ArrayInfo{{Name: "a"}, {Name: "b", NaN: 2, Inf: 1}}); h == nil || fmt.Sprint(h.Arrays) != "[{b 2 1}]" {
		t.Fatalf("one array: %+v", h)
	}
	var many []wtxt.ArrayInfo
	for i := range 300 {
		many = append(many, wtxt.ArrayInfo{Name: fmt.Sprintf("%04d", i) + strings.Repeat("x", 1000), NaN: 1})
	}
	if h := heldNonFinite(many); h != nil {
		t.Fatalf("300 arrays of 1 KiB names kept: %d", len(h.Arrays))
	}
	if h := heldNonFinite(many[:100]); h == nil || len(h.Arrays) != 100 {
		t.Fatalf("100 arrays of 1 KiB names: %+v", h)
	}
}

// TestNonFiniteListBounded: a generation introducing NaN in very many
// arrays (more than the state file could hold by their names) is
// reported whole in its result, while the chain state keeps the first
// arrays within maxNonFiniteBytes and counts the rest, so the state file
// stays readable (the daemon restarts on it) and `snapd status` says how
// many more there are.
func TestNonFiniteListBounded(t *testing.T) {
	const arrays = 1100
	name := func(i int) string { return fmt.Sprintf("layer%05d.", i) + strings.Repeat("w", 1000) }
	s := &snapshot.Snapshot{}
	for i := range arrays {
		b := make([]byte, 4*4)
		binary.LittleEndian.PutUint32(b[4*(i%4):], math.Float32bits(float32(math.NaN())))
		s.Arrays = append(s.Arrays, &snapshot.Array{Name: name(i), DType: snapshot.F32, Shape: []int64{4}, Data: snapshot.Bytes(b)})
	}
	f := newFixture(t)
	f.start(t, nil)
	st, err := snapshot.OpenGenStore(filepath.Join(f.dir, GensDir))
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.Publish(1, ".safetensors", func(w io.Writer) error {
		return safetensors.New().Encode(context.Background(), w, s, formats.EncodeOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
	request(t, f.dir, 1, g.Path)
	if r := f.wait(t, 1); r.Error != "" || len(r.NonFinite) != arrays {
		t.Fatalf("gen 1: %d arrays with NaN reported (%s), want %d", len(r.NonFinite), r.Error, arrays)
	}
	f.stop(t)

	// The chain state is the only file that keeps the list: the WAL's
	// outcome line and the ring's request record do not carry it (they
	// stay small and read back), and the log's warning names 8 arrays
	// and counts the rest.
	outcomes, err := wal.LoadOutcomes(filepath.Join(f.dir, WALDir))
	if err != nil || outcomes[1].State != wal.Done {
		t.Fatalf("WAL outcome of gen 1: %+v, %v", outcomes[1], err)
	}
	for _, p := range []string{filepath.Join(f.dir, WALDir, wal.OutcomesFile), ringPath(filepath.Join(f.dir, RingDir), 1, ring.ExtRequest)} {
		if fi, err := os.Stat(p); err != nil || fi.Size() > 4<<10 {
			t.Fatalf("%s: %v, %v (the NaN list persisted?)", p, fi, err)
		}
	}
	if req, err := readGenRequest(ringPath(filepath.Join(f.dir, RingDir), 1, ring.ExtRequest)); err != nil || req.Gen != 1 {
		t.Fatalf("ring request record of gen 1: %+v, %v", req, err)
	}
	for _, line := range strings.Split(f.logs.String(), "\n") {
		if strings.Contains(line, "introduces NaN/Inf") && (len(line) > 16<<10 || !strings.Contains(line, fmt.Sprintf("… and %d more (%d arrays in all)", arrays-8, arrays))) {
			t.Fatalf("NaN/Inf warning of %d bytes: %.300s", len(line), line)
		}
	}

	fi, err := os.Stat(filepath.Join(f.dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > maxNonFiniteBytes+maxHeldBytes+64<<10 {
		t.Fatalf("state file %d bytes", fi.Size())
	}
	c, err := ReadChainState(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	kept := len(c.NonFinite)
	if kept == 0 || c.NonFiniteMore == 0 || kept+c.NonFiniteMore != arrays {
		t.Fatalf("chain state: %d arrays listed, %d more; want %d in all, some left out", kept, c.NonFiniteMore, arrays)
	}
	for i, a := range c.NonFinite {
		if a.Array != name(i) || a.NewNaN != 1 || a.NewInf != 0 {
			t.Fatalf("chain state's array %d: %s (%d NaN, %d Inf), want the first ones in order", i, a.Array[:12], a.NewNaN, a.NewInf)
		}
	}
	status, err := ReadStatus(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("… and %d more (%d arrays in all)", arrays-8, arrays)
	if w := strings.Join(status.Warnings, "\n"); !strings.Contains(w, "generation 1 introduced NaN/Inf (the first of the chain): "+name(0)+" (1 NaN, 0 Inf)") || !strings.Contains(w, want) {
		t.Fatalf("status warnings lack %q:\n%.600s", want, w)
	}

	// The daemon restarts on that state file and chains on; a clean
	// generation clears the list and its count.
	f.start(t, nil)
	request(t, f.dir, 2, publish(t, f.dir, 2))
	if r := f.wait(t, 2); r.Error != "" || r.BaseGen != 1 {
		t.Fatalf("gen 2: %+v", r)
	}
	f.stop(t)
	if c, err := ReadChainState(f.dir); err != nil || c.Gen != 2 || c.NonFinite != nil || c.NonFiniteMore != 0 {
		t.Fatalf("chain state after gen 2: %v, %v", c, err)
	}
}

// TestCapNonFinite: the list is kept whole within maxNonFiniteBytes and
// cut at the first array past it; the summary counts what is not shown.
func TestCapNonFinite(t *testing.T) {
	var nf []chunkdiff.NonFiniteArray
	for i := 0; len(nf) < 10 || len(nf)*(1000+nonFiniteEntryBytes) <= maxNonFiniteBytes; i++ {
		nf = append(nf, chunkdiff.NonFiniteArray{Array: fmt.Sprintf("%04d", i) + strings.Repeat("x", 996), NewNaN: 1})
	}
	fit := maxNonFiniteBytes / (1000 + nonFiniteEntryBytes)
	if kept, more := capNonFinite(nf[:fit]); len(kept) != fit || more != 0 {
		t.Fatalf("%d arrays that fit: %d kept, %d more", fit, len(kept), more)
	}
	kept, more := capNonFinite(nf)
	if len(kept) != fit || more != len(nf)-fit || kept[fit-1].Array != nf[fit-1].Array {
		t.Fatalf("%d arrays: %d kept, %d more; want %d kept", len(nf), len(kept), more, fit)
	}
	if got := nonFiniteSummary(nf[:2]); got != nf[0].Array+" (1 NaN, 0 Inf), "+nf[1].Array+" (1 NaN, 0 Inf)" {
		t.Fatalf("summary of 2: %q", got)
	}
	c := &ChainState{NonFinite: nf[:3], NonFiniteMore: 5}
	if got := c.nonFiniteSummary(); !strings.HasSuffix(got, nf[2].Array+" (1 NaN, 0 Inf), … and 5 more (8 arrays in all)") {
		t.Fatalf("summary of 3 and 5 more: %q", got)
	}
	if got := nonFiniteSummary(nf[:10]); !strings.HasSuffix(got, nf[7].Array+" (1 NaN, 0 Inf), … and 2 more (10 arrays in all)") {
		t.Fatalf("summary of 10: %q", got)
	}
}
