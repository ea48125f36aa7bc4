package reviewtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// Snapshot returns a small deterministic snapshot for generation gen:
//
//	layer.0/b   f32 (64)       — never changed by the helpers below
//	layer.0/w   f32 (64×8)     — 32-byte rows
//	step        i64 ()         — scalar
//	tok.counts  i32 (40×4)     — 16-byte rows
func Snapshot(gen uint64) *snapshot.Snapshot {
	m := snapshot.DefaultMeta()
	m.Gen = gen
	m.TS = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(gen) * time.Hour)
	f32 := func(n int, f func(i int) float32) snapshot.Bytes {
		b := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f(i)))
		}
		return b
	}
	counts := make([]byte, 4*160)
	for i := 0; i < 160; i++ {
		binary.LittleEndian.PutUint32(counts[4*i:], uint32(i*7%13))
	}
	step := make([]byte, 8)
	binary.LittleEndian.PutUint64(step, 1000*gen)
	return &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{
		{Name: "layer.0/b", DType: snapshot.F32, Shape: []int64{64}, Data: f32(64, func(i int) float32 { return float32(i) / 64 })},
		{Name: "layer.0/w", DType: snapshot.F32, Shape: []int64{64, 8}, Data: f32(512, func(i int) float32 { return float32(math.Sin(float64(i))) })},
		{Name: "step", DType: snapshot.I64, Shape: nil, Data: snapshot.Bytes(step)},
		{Name: "tok.counts", DType: snapshot.I32, Shape: []int64{40, 4}, Data: snapshot.Bytes(counts)},
	}}
}

// SetF32 returns a copy of s where element i of the f32 array name is v.
func SetF32(s *snapshot.Snapshot, name string, i int, v float32) *snapshot.Snapshot {
	return set(s, name, func(b []byte) { binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v)) })
}

// SetI32 returns a copy of s where element i of the i32 array name is v.
func SetI32(s *snapshot.Snapshot, name string, i int, v int32) *snapshot.Snapshot {
	return set(s, name, func(b []byte) { binary.LittleEndian.PutUint32(b[4*i:], uint32(v)) })
}

func set(s *snapshot.Snapshot, name string, f func([]byte)) *snapshot.Snapshot {
	out := &snapshot.Snapshot{Meta: s.Meta, Attrs: s.Attrs}
	for _, a := range s.Arrays {
		c := *a
		if a.Name == name {
			b, err := snapshot.ReadAll(a.Data)
			if err != nil {
				panic(err)
			}
			b = bytes.Clone(b)
			f(b)
			c.Data = snapshot.Bytes(b)
		}
		out.Arrays = append(out.Arrays, &c)
	}
	return out
}

// Encode writes s as WTXT (8 rows per chunk unless opts say otherwise) and
// returns the bytes and the encoder's result.
func Encode(t testing.TB, s *snapshot.Snapshot, opts wtxt.EncodeOptions) ([]byte, *wtxt.Result) {
	t.Helper()
	if opts.RowsPerChunk == 0 {
		opts.RowsPerChunk = 8
	}
	var buf bytes.Buffer
	res, err := wtxt.Encode(context.Background(), &buf, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), res
}

// Git runs the real git CLI in dir with a neutral configuration and
// returns its stdout.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.String()
}

// Repo is a temporary git repository holding generations of WTXT files.
type Repo struct {
	Dir string
	t   testing.TB
}

// NewRepo creates an empty repository (requires git on PATH).
func NewRepo(t testing.TB) *Repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not on PATH")
	}
	dir := t.TempDir()
	Git(t, dir, "init", "-q", "-b", "main", ".")
	return &Repo{Dir: dir, t: t}
}

// Commit writes files (path → content; nil content removes the file) and
// commits them, returning the commit sha.
func (r *Repo) Commit(files map[string][]byte, msg string) string {
	r.t.Helper()
	for p, b := range files {
		full := filepath.Join(r.Dir, filepath.FromSlash(p))
		if b == nil {
			Git(r.t, r.Dir, "rm", "-q", "--", p)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			r.t.Fatal(err)
		}
		Git(r.t, r.Dir, "add", "--", p)
	}
	Git(r.t, r.Dir, "commit", "-q", "--allow-empty", "-m", msg)
	return strings.TrimSpace(Git(r.t, r.Dir, "rev-parse", "HEAD"))
}

// Patch returns `git diff base head -- path` cut to what GitHub's `patch`
// field holds: everything from the first @@ line ("" when unchanged).
func (r *Repo) Patch(base, head, path string) string {
	r.t.Helper()
	out := Git(r.t, r.Dir, "diff", "--no-color", "--no-ext-diff", "--unified=3", base, head, "--", path)
	i := strings.Index(out, "@@")
	if i < 0 {
		return ""
	}
	return strings.TrimSuffix(out[i:], "\n")
}
