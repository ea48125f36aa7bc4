package chunkdiff

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

func TestNonFiniteIntroduced(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func(*snapshot.Snapshot) *snapshot.Snapshot
		want   string
	}{
		{"clean", nil, "[]"},
		{"one NaN", func(s *snapshot.Snapshot) *snapshot.Snapshot {
			return setF32(s, "layer.0/b", 5, float32(math.NaN()))
		}, "[{layer.0/b 1 0}]"},
		{"NaN and -Inf in two arrays", func(s *snapshot.Snapshot) *snapshot.Snapshot {
			s = setF32(s, "layer.0/b", 63, float32(math.Inf(-1)))
			s = setF32(s, "layer.0/w", 0, float32(math.NaN()))
			return setF32(s, "layer.0/w", 511, float32(math.NaN()))
		}, "[{layer.0/b 0 1} {layer.0/w 2 0}]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c.mutate)
			dir := t.TempDir()
			base, head := filepath.Join(dir, "1.wtxt"), filepath.Join(dir, "2.wtxt")
			os.WriteFile(base, f.gen1, 0o600)
			os.WriteFile(head, f.gen2, 0o600)
			rep, err := NonFiniteIntroduced(context.Background(), base, head, 0)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Partial() {
				t.Fatalf("partial without a budget: %+v", rep)
			}
			s := "["
			for i, a := range rep.Arrays {
				if i > 0 {
					s += " "
				}
				s += "{" + a.Array + " " + itoa(a.NewNaN) + " " + itoa(a.NewInf) + "}"
			}
			if s += "]"; s != c.want {
				t.Fatalf("got %s, want %s", s, c.want)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A changed chunk whose base64 does not match its ch line's crc32c is an
// error naming the chunk, never a misread count.
func TestNonFiniteIntroducedChecksChunks(t *testing.T) {
	f := newFixture(t, func(s *snapshot.Snapshot) *snapshot.Snapshot {
		return setF32(s, "layer.0/b", 5, float32(math.NaN()))
	})
	dir := t.TempDir()
	base, head := filepath.Join(dir, "1.wtxt"), filepath.Join(dir, "2.wtxt")
	os.WriteFile(base, f.gen1, 0o600)
	h := append([]byte(nil), f.gen2...)
	x, err := wtxt.ReadIndex(context.Background(), "head", snapshot.Bytes(h), int64(len(h)))
	if err != nil {
		t.Fatal(err)
	}
	c := x.Array("layer.0/b").Chunks[0]
	if h[c.Data] == 'A' {
		h[c.Data] = 'B'
	} else {
		h[c.Data] = 'A'
	}
	os.WriteFile(head, h, 0o600)
	_, err = NonFiniteIntroduced(context.Background(), base, head, 0)
	if err == nil || !strings.Contains(err.Error(), `array layer.0/b: chunk 0: parity`) {
		t.Fatalf("tampered chunk: %v", err)
	}
}

// FuzzNonFiniteIntroduced: any head file against a real base gives a
// result or an error, never a panic or an allocation beyond the file.
func FuzzNonFiniteIntroduced(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.wtxt")
	if len(seeds) == 0 {
		f.Fatal("no testdata/*.wtxt seeds")
	}
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	base := seeds[0]
	f.Fuzz(func(t *testing.T, b []byte) {
		head := filepath.Join(t.TempDir(), "head.wtxt")
		if err := os.WriteFile(head, b, 0o600); err != nil {
			t.Fatal(err)
		}
		NonFiniteIntroduced(context.Background(), base, head, 0)
		NonFiniteIntroduced(context.Background(), head, head, 1<<10)
	})
}

// BenchmarkNonFiniteIntroduced64MiB: a 64 MiB f32 array (4096-byte rows,
// 16 rows per chunk) of which 1% of the rows change and one becomes NaN;
// only the changed chunks are decoded.
func BenchmarkNonFiniteIntroduced64MiB(b *testing.B) {
	const rows, cols = 16384, 1024
	raw := make([]byte, rows*cols*4)
	for i := 0; i < rows*cols; i++ {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(i%977)*0.5))
	}
	mk := func(d []byte) *snapshot.Snapshot {
		m := snapshot.DefaultMeta()
		m.Gen, m.TS = 1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		return &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{{Name: "w", DType: snapshot.F32, Shape: []int64{rows, cols}, Data: snapshot.Bytes(d)}}}
	}
	next := append([]byte(nil), raw...)
	for r := 0; r < rows; r += 100 {
		binary.LittleEndian.PutUint32(next[4*r*cols:], math.Float32bits(float32(r)))
	}
	binary.LittleEndian.PutUint32(next[4*500*cols:], math.Float32bits(float32(math.NaN())))
	dir := b.TempDir()
	base, head := filepath.Join(dir, "1.wtxt"), filepath.Join(dir, "2.wtxt")
	g1 := encode(b, mk(raw), wtxt.EncodeOptions{RowsPerChunk: 16})
	os.WriteFile(base, g1, 0o600)
	g1 = nil
	g2 := encode(b, mk(next), wtxt.EncodeOptions{RowsPerChunk: 16})
	os.WriteFile(head, g2, 0o600)
	g2 = nil
	b.SetBytes(int64(len(raw)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err := NonFiniteIntroduced(context.Background(), base, head, 0)
		if err != nil || len(rep.Arrays) != 1 || rep.Arrays[0].NewNaN != 1 {
			b.Fatalf("%v %+v", err, rep)
		}
	}
}

// A budget smaller than the changed chunks makes the check partial, and
// says so.
func TestNonFiniteIntroducedBudget(t *testing.T) {
	f := newFixture(t, func(s *snapshot.Snapshot) *snapshot.Snapshot {
		s = setF32(s, "layer.0/b", 5, float32(math.NaN()))
		return setF32(s, "layer.0/w", 511, float32(math.NaN()))
	})
	dir := t.TempDir()
	base, head := filepath.Join(dir, "1.wtxt"), filepath.Join(dir, "2.wtxt")
	os.WriteFile(base, f.gen1, 0o600)
	os.WriteFile(head, f.gen2, 0o600)
	full, err := NonFiniteIntroduced(context.Background(), base, head, 0)
	if err != nil || full.Partial() || len(full.Arrays) != 2 {
		t.Fatalf("full: %v %+v", err, full)
	}
	part, err := NonFiniteIntroduced(context.Background(), base, head, 1)
	if err != nil || !part.Partial() || part.CheckedBytes != 0 || part.ChangedBytes != full.ChangedBytes || len(part.Arrays) != 0 {
		t.Fatalf("budget 1: %v %+v (full %+v)", err, part, full)
	}
}

// Without a base (a first generation) every NaN/Inf of head is new.
func TestNonFiniteIntroducedNoBase(t *testing.T) {
	f := newFixture(t, func(s *snapshot.Snapshot) *snapshot.Snapshot {
		return setF32(s, "layer.0/b", 5, float32(math.NaN()))
	})
	head := filepath.Join(t.TempDir(), "2.wtxt")
	os.WriteFile(head, f.gen2, 0o600)
	rep, err := NonFiniteIntroduced(context.Background(), "", head, 0)
	if err != nil || len(rep.Arrays) != 1 || rep.Arrays[0].Array != "layer.0/b" || rep.Arrays[0].NewNaN != 1 || rep.Partial() {
		t.Fatalf("%v %+v", err, rep)
	}
}

// TestNonFiniteFromCounts: deciding from the encoder's counts, and
// comparing only the arrays it leaves (NonFiniteIntroducedIn), reports
// what the comparison of the two files reports, for NaN/Inf that are
// new, that stay where they were, that move (the counts alone would say
// "nothing new": the array is left to the comparison), in several
// arrays, and with no base; arrays holding NaN/Inf only in the head are
// decided without reading anything.
func TestNonFiniteFromCounts(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	s := decodeFile(t, filepath.Join("testdata", "gen2.wtxt"))
	for _, c := range []struct {
		name       string
		base, head func(*snapshot.Snapshot) *snapshot.Snapshot // nil base: no base file
		recheck    string
		want       string
	}{
		{"new NaN", func(s *snapshot.Snapshot) *snapshot.Snapshot { return s },
			func(s *snapshot.Snapshot) *snapshot.Snapshot { return setF32(s, "layer.0/b", 5, nan) }, "[]", "[{layer.0/b 1 0}]"},
		{"NaN stays", func(s *snapshot.Snapshot) *snapshot.Snapshot { return setF32(s, "layer.0/b", 5, nan) },
			func(s *snapshot.Snapshot) *snapshot.Snapshot { return setF32(s, "layer.0/b", 5, nan) }, "[layer.0/b]", "[]"},
		{"NaN moves", func(s *snapshot.Snapshot) *snapshot.Snapshot { return setF32(s, "layer.0/b", 5, nan) },
			func(s *snapshot.Snapshot) *snapshot.Snapshot { return setF32(s, "layer.0/b", 6, nan) }, "[layer.0/b]", "[{layer.0/b 1 0}]"},
		{"Inf held, NaN elsewhere", func(s *snapshot.Snapshot) *snapshot.Snapshot { return setF32(s, "layer.0/w", 3, inf) },
			func(s *snapshot.Snapshot) *snapshot.Snapshot {
				return setF32(setF32(setF32(s, "layer.0/w", 3, inf), "layer.0/w", 400, nan), "layer.0/b", 63, inf)
			}, "[layer.0/w]", "[{layer.0/b 0 1} {layer.0/w 1 0}]"},
		{"NaN gone", func(s *snapshot.Snapshot) *snapshot.Snapshot { return setF32(s, "layer.0/b", 5, nan) },
			func(s *snapshot.Snapshot) *snapshot.Snapshot { return s }, "[]", "[]"},
		{"no base", nil,
			func(s *snapshot.Snapshot) *snapshot.Snapshot {
				return setF32(setF32(s, "layer.0/b", 5, nan), "layer.0/w", 1, inf)
			}, "[]", "[{layer.0/b 1 0} {layer.0/w 0 1}]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name string, s *snapshot.Snapshot) (string, []NonFiniteCount) {
				var buf bytes.Buffer
				res, err := wtxt.Encode(context.Background(), &buf, s, wtxt.EncodeOptions{RowsPerChunk: 8})
				if err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
					t.Fatal(err)
				}
				return p, HeldNonFinite(res.Arrays)
			}
			var base string
			var baseCounts []NonFiniteCount
			if c.base != nil {
				base, baseCounts = write("1.wtxt", c.base(s))
			}
			head, headCounts := write("2.wtxt", c.head(s))
			want, err := NonFiniteIntroduced(context.Background(), base, head, 0)
			if err != nil {
				t.Fatal(err)
			}
			found, recheck := NonFiniteFromCounts(baseCounts, headCounts)
			if got := fmt.Sprint(recheck); got != c.recheck && !(c.recheck == "[]" && recheck == nil) {
				t.Fatalf("recheck %v, want %s", recheck, c.recheck)
			}
			if recheck != nil {
				rep, err := NonFiniteIntroducedIn(context.Background(), base, head, recheck, 0)
				if err != nil {
					t.Fatal(err)
				}
				found = append(found, rep.Arrays...)
				slices.SortFunc(found, func(a, b NonFiniteArray) int { return strings.Compare(a.Array, b.Array) })
			}
			if !slices.Equal(found, want.Arrays) {
				t.Fatalf("from counts %v, the comparison of the files %v", found, want.Arrays)
			}
			if got := fmt.Sprint(want.Arrays); got != c.want {
				t.Fatalf("the comparison of the files found %s, want %s", got, c.want)
			}
		})
	}
}
