package review

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops/review/reviewtest"
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
			return reviewtest.SetF32(s, "layer.0/b", 5, float32(math.NaN()))
		}, "[{layer.0/b 1 0}]"},
		{"NaN and -Inf in two arrays", func(s *snapshot.Snapshot) *snapshot.Snapshot {
			s = reviewtest.SetF32(s, "layer.0/b", 63, float32(math.Inf(-1)))
			s = reviewtest.SetF32(s, "layer.0/w", 0, float32(math.NaN()))
			return reviewtest.SetF32(s, "layer.0/w", 511, float32(math.NaN()))
		}, "[{layer.0/b 0 1} {layer.0/w 2 0}]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c.mutate, nil)
			dir := t.TempDir()
			base, head := filepath.Join(dir, "1.wtxt"), filepath.Join(dir, "2.wtxt")
			os.WriteFile(base, f.gen1, 0o600)
			os.WriteFile(head, f.gen2, 0o600)
			got, err := NonFiniteIntroduced(context.Background(), base, head)
			if err != nil {
				t.Fatal(err)
			}
			s := "["
			for i, a := range got {
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

// A changed chunk whose base64 does not match its ch line's sha256 is an
// error naming the chunk, never a misread count.
func TestNonFiniteIntroducedChecksChunks(t *testing.T) {
	f := newFixture(t, func(s *snapshot.Snapshot) *snapshot.Snapshot {
		return reviewtest.SetF32(s, "layer.0/b", 5, float32(math.NaN()))
	}, nil)
	dir := t.TempDir()
	base, head := filepath.Join(dir, "1.wtxt"), filepath.Join(dir, "2.wtxt")
	os.WriteFile(base, f.gen1, 0o600)
	h := append([]byte(nil), f.gen2...)
	x, err := scanIndexBytes(h)
	if err != nil {
		t.Fatal(err)
	}
	c := x.array("layer.0/b").Chunks[0]
	if h[c.Pos] == 'A' {
		h[c.Pos] = 'B'
	} else {
		h[c.Pos] = 'A'
	}
	os.WriteFile(head, h, 0o600)
	_, err = NonFiniteIntroduced(context.Background(), base, head)
	if err == nil || !strings.Contains(err.Error(), `array "layer.0/b" chunk 0: sha256`) {
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
		NonFiniteIntroduced(context.Background(), base, head)
		NonFiniteIntroduced(context.Background(), head, head)
	})
}
