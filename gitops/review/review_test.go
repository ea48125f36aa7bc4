package review

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/review/reviewtest"
	"github.com/snapd-ml/snapd/snapshot"
)

// fixture is two signed, chained generations committed to a real git
// repository.
type fixture struct {
	repo             *reviewtest.Repo
	pub              ed25519.PublicKey
	priv             ed25519.PrivateKey
	hmac             []byte
	gen1, gen2       []byte
	baseSHA, headSHA string
	patch            string
	res1             *wtxt.Result
}

const wtxtPath = "snapshots/current.wtxt"

// gen2Of changes layer.0/w rows 3, 4 (chunk 0) and 41 (chunk 5),
// tok.counts row 10 (chunk 1) and step.
func gen2Of(s *snapshot.Snapshot) *snapshot.Snapshot {
	s = reviewtest.SetF32(s, "layer.0/w", 3*8+1, 0.75)
	s = reviewtest.SetF32(s, "layer.0/w", 4*8+7, -2.5)
	s = reviewtest.SetF32(s, "layer.0/w", 41*8, 0.125)
	s = reviewtest.SetI32(s, "tok.counts", 10*4+2, 99)
	s.Meta.Gen = 2
	s.Meta.TS = s.Meta.TS.Add(3600e9)
	return set2step(s)
}

func set2step(s *snapshot.Snapshot) *snapshot.Snapshot {
	out := reviewtest.Snapshot(2)
	for i, a := range s.Arrays {
		if a.Name == "step" {
			s.Arrays[i] = out.Arrays[2]
		}
	}
	return s
}

func newFixture(t *testing.T, mutate func(*snapshot.Snapshot) *snapshot.Snapshot, prev *[32]byte) *fixture {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{repo: reviewtest.NewRepo(t), pub: pub, priv: priv, hmac: []byte("0123456789abcdef0123456789abcdef")}
	s1 := reviewtest.Snapshot(1)
	f.gen1, f.res1 = reviewtest.Encode(t, s1, wtxt.EncodeOptions{SignKey: priv, HMACKey: f.hmac})
	s2 := gen2Of(s1)
	if mutate != nil {
		s2 = mutate(s2)
	}
	pm := f.res1.MerkleThis
	if prev != nil {
		pm = *prev
	}
	f.gen2, _ = reviewtest.Encode(t, s2, wtxt.EncodeOptions{SignKey: priv, HMACKey: f.hmac, PrevMerkle: pm})
	f.baseSHA = f.repo.Commit(map[string][]byte{wtxtPath: f.gen1, "README": []byte("weights\n")}, "gen 1")
	f.headSHA = f.repo.Commit(map[string][]byte{wtxtPath: f.gen2, "README": []byte("weights, gen 2\n")}, "gen 2")
	f.patch = f.repo.Patch(f.baseSHA, f.headSHA, wtxtPath)
	if f.patch == "" {
		t.Fatal("git shows no diff between the generations")
	}
	return f
}

func (f *fixture) input(t *testing.T, withPatch bool) FileInput {
	dir := t.TempDir()
	base, head := filepath.Join(dir, "base.wtxt"), filepath.Join(dir, "head.wtxt")
	os.WriteFile(base, f.gen1, 0o644)
	os.WriteFile(head, f.gen2, 0o644)
	in := FileInput{Path: wtxtPath, Base: base, Head: head}
	if withPatch {
		in.Patch, in.HasPatch = f.patch, true
	}
	return in
}

func (f *fixture) opts() Options {
	return Options{TrustedKeys: []ed25519.PublicKey{f.pub}, HMACKey: f.hmac, RequireSignature: true, HeadSHA: f.headSHA}
}

// wantChunks are the chunks gen2Of changes (8 rows per chunk).
var wantChunks = []string{"layer.0/w#0", "layer.0/w#5", "step#0", "tok.counts#1"}

func commentKeys(cs []Comment) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s#%d", c.Array, c.Chunk))
	}
	sort.Strings(out)
	return out
}

// checkAnchors checks every comment against the real git diff: the
// comment's line in the head file is the ch line of its chunk (inside its
// array), and the position-th line below the first @@ of the patch is that
// very line, added.
func checkAnchors(t *testing.T, head []byte, patch string, cs []Comment) {
	t.Helper()
	lines := strings.Split(string(head), "\n")
	plines := strings.Split(patch[strings.Index(patch, "@@"):], "\n")
	for _, c := range cs {
		if c.Line < 1 || c.Line > len(lines) {
			t.Fatalf("%s chunk %d: line %d outside the file", c.Array, c.Chunk, c.Line)
		}
		l := lines[c.Line-1]
		if want := fmt.Sprintf("ch ix=%06d ", c.Chunk); !strings.HasPrefix(l, want) {
			t.Errorf("%s chunk %d: line %d is %q, want a %q line", c.Array, c.Chunk, c.Line, l, want)
		}
		arr := ""
		for i := c.Line - 1; i >= 0; i-- {
			if strings.HasPrefix(lines[i], "arr ") {
				arr = strings.Fields(lines[i])[1]
				break
			}
		}
		if arr != "name="+c.Array {
			t.Errorf("%s chunk %d: line %d belongs to %q", c.Array, c.Chunk, c.Line, arr)
		}
		if c.Position < 1 || c.Position >= len(plines) {
			t.Fatalf("%s chunk %d: position %d outside the patch (%d lines)", c.Array, c.Chunk, c.Position, len(plines))
		}
		if got := plines[c.Position]; got != "+"+l {
			t.Errorf("%s chunk %d: patch position %d is %q, want %q", c.Array, c.Chunk, c.Position, got, "+"+l)
		}
	}
}

func TestBuildAnchorsOnGitDiff(t *testing.T) {
	f := newFixture(t, nil, nil)
	rv, err := Build(context.Background(), []FileInput{f.input(t, true)}, f.opts())
	if err != nil {
		t.Fatal(err)
	}
	if rv.Event != EventComment {
		t.Fatalf("event %s, want COMMENT; body:\n%s", rv.Event, rv.Body)
	}
	if got := commentKeys(rv.Comments); fmt.Sprint(got) != fmt.Sprint(wantChunks) {
		t.Fatalf("comments on %v, want %v", got, wantChunks)
	}
	checkAnchors(t, f.gen2, f.patch, rv.Comments)

	byKey := map[string]Comment{}
	for _, c := range rv.Comments {
		byKey[fmt.Sprintf("%s#%d", c.Array, c.Chunk)] = c
		if !strings.HasPrefix(c.Body, c.Marker+"\n") || !strings.Contains(c.Marker, "head="+f.headSHA) {
			t.Errorf("comment body does not start with its marker: %q", c.Body)
		}
	}
	// Chunk 0 of layer.0/w: rows 3 and 4 changed, 2 of 64 elements.
	w0 := byKey["layer.0/w#0"].Body
	for _, want := range []string{"rows 0-7", "rows 3-4 changed", "2 of 64 elements", "max |Δ|", "rel L2"} {
		if !strings.Contains(w0, want) {
			t.Errorf("layer.0/w chunk 0 comment lacks %q:\n%s", want, w0)
		}
	}
	old := math.Sin(4*8 + 7)
	if want := fmt.Sprintf("max |Δ| %.3g", math.Abs(-2.5-float64(float32(old)))); !strings.Contains(w0, want) {
		t.Errorf("layer.0/w chunk 0 comment lacks %q:\n%s", want, w0)
	}
	if c := byKey["tok.counts#1"].Body; !strings.Contains(c, "rows 10 changed, 1 of 32 elements") || strings.Contains(c, "rel L2") {
		t.Errorf("integer chunk comment: %s", c)
	}

	b := rv.Body
	for _, want := range []string{
		ReviewMarker(f.headSHA), "`" + wtxtPath + "` — modified",
		"signature verified", "HMAC verified for all 4 array(s)", "continues the base", "gen 000001 → 000002",
		"4 array(s): 3 modified, 0 added, 0 removed, 0 reshaped, 0 retyped, 1 unchanged",
		"| `layer.0/w` | modified | f32 | (64×8) | 3 / 512 | 3-4,41 | 0,5 |",
		"| `tok.counts` | modified (not thresholded: counter) | i32 | (40×4) | 1 / 160 | 10 | 1 |",
		"| `step` | modified (not thresholded: counter) | i64 | () | 1 / 1 |",
		"**Not thresholded:** 2 counters (",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("body lacks %q:\n%s", want, b)
		}
	}
	if strings.Contains(b, "without a line comment") {
		t.Errorf("everything was anchored, yet the body folds chunks:\n%s", b)
	}

	// The same inputs with Approve configured approve.
	o := f.opts()
	o.Approve = true
	rv, err = Build(context.Background(), []FileInput{f.input(t, true)}, o)
	if err != nil {
		t.Fatal(err)
	}
	if rv.Event != EventApprove {
		t.Fatalf("event %s, want APPROVE:\n%s", rv.Event, rv.Body)
	}

	// MaxComments folds the rest into the body.
	o.MaxComments = 1
	rv, err = Build(context.Background(), []FileInput{f.input(t, true)}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rv.Comments) != 1 || !strings.Contains(rv.Body, "3 changed chunk(s) without a line comment") {
		t.Fatalf("MaxComments 1: %d comments, body:\n%s", len(rv.Comments), rv.Body)
	}
}

// A diff GitHub does not render (no patch) still gets a complete review.
func TestBuildWithoutPatchFoldsEverything(t *testing.T) {
	f := newFixture(t, nil, nil)
	rv, err := Build(context.Background(), []FileInput{f.input(t, false)}, f.opts())
	if err != nil {
		t.Fatal(err)
	}
	if len(rv.Comments) != 0 {
		t.Fatalf("%d comments without a diff", len(rv.Comments))
	}
	for _, want := range []string{"GitHub shows no diff", "4 changed chunk(s) without a line comment",
		"array `layer.0/w` chunk 000005 (rows 40-47): rows 41 changed, 1 of 64 elements",
		"array `tok.counts` chunk 000001 (rows 8-15): rows 10 changed", "array `step` chunk 000000",
		"`layer.0/w`", "`tok.counts`", "`step`", "1 unchanged"} {
		if !strings.Contains(rv.Body, want) {
			t.Errorf("body lacks %q:\n%s", want, rv.Body)
		}
	}
	if rv.Event != EventComment {
		t.Errorf("event %s", rv.Event)
	}
}

func TestLocalPatchMatchesGitDiff(t *testing.T) {
	f := newFixture(t, nil, nil)
	in := f.input(t, false)
	p, err := LocalPatch(context.Background(), "", in.Base, in.Head)
	if err != nil {
		t.Fatal(err)
	}
	in.Parsed, in.HasPatch = p, true
	rv, err := Build(context.Background(), []FileInput{in}, f.opts())
	if err != nil {
		t.Fatal(err)
	}
	if got := commentKeys(rv.Comments); fmt.Sprint(got) != fmt.Sprint(wantChunks) {
		t.Fatalf("comments on %v, want %v", got, wantChunks)
	}
	checkAnchors(t, f.gen2, f.patch, rv.Comments)
}

func TestBuildRequestsChanges(t *testing.T) {
	var zero [32]byte
	cases := []struct {
		name   string
		mutate func(*snapshot.Snapshot) *snapshot.Snapshot
		prev   *[32]byte
		opts   func(*Options)
		want   string
	}{
		{name: "new NaN", mutate: func(s *snapshot.Snapshot) *snapshot.Snapshot {
			return reviewtest.SetF32(s, "layer.0/b", 5, float32(math.NaN()))
		}, want: "array `layer.0/b`: 1 NaN and 0 Inf newly introduced"},
		{name: "new NaN shown as NaN", mutate: func(s *snapshot.Snapshot) *snapshot.Snapshot {
			return reviewtest.SetF32(s, "layer.0/b", 5, float32(math.NaN()))
		}, want: "| NaN | NaN | NaN | **1/0** |"},
		{name: "new Inf shown as inf", mutate: func(s *snapshot.Snapshot) *snapshot.Snapshot {
			return reviewtest.SetF32(s, "layer.0/b", 5, float32(math.Inf(-1)))
		}, want: "| inf | inf | inf | **0/1** |"},
		{name: "rel L2 limit", opts: func(o *Options) { o.Thresholds.MaxRelL2 = 1e-6 }, want: "relative L2 change"},
		{name: "abs delta limit", opts: func(o *Options) { o.Thresholds.MaxAbsDelta = 1 }, want: "array `layer.0/w`: max |Δ|"},
		{name: "broken chain", prev: &zero, want: "chain"},
		{name: "untrusted signer", opts: func(o *Options) {
			other, _, _ := ed25519.GenerateKey(rand.Reader)
			o.TrustedKeys = []ed25519.PublicKey{other}
		}, want: "signature"},
		{name: "wrong hmac key", opts: func(o *Options) { o.HMACKey = []byte("another key, another key, 32 b!") }, want: "hmac"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.mutate, tc.prev)
			o := f.opts()
			o.Approve = true
			if tc.opts != nil {
				tc.opts(&o)
			}
			rv, err := Build(context.Background(), []FileInput{f.input(t, true)}, o)
			if err != nil {
				t.Fatal(err)
			}
			if rv.Event != EventRequestChanges {
				t.Fatalf("event %s, want REQUEST_CHANGES:\n%s", rv.Event, rv.Body)
			}
			if !strings.Contains(rv.Body, "❌") || !strings.Contains(rv.Body, tc.want) {
				t.Fatalf("body does not name the problem %q:\n%s", tc.want, rv.Body)
			}
		})
	}
	// NaN allowed by configuration: no longer a problem.
	f := newFixture(t, cases[0].mutate, nil)
	o := f.opts()
	o.Thresholds.AllowNonFinite = true
	rv, err := Build(context.Background(), []FileInput{f.input(t, true)}, o)
	if err != nil {
		t.Fatal(err)
	}
	nanComment := false
	for _, c := range rv.Comments {
		nanComment = nanComment || c.Array == "layer.0/b" && strings.Contains(c.Body, "**new NaN 1, new Inf 0**")
	}
	if rv.Event != EventComment || !strings.Contains(rv.Body, "| **1/0** |") || !nanComment {
		t.Fatalf("AllowNonFinite: event %s, comments %v\n%s", rv.Event, rv.Comments, rv.Body)
	}
}

func TestBuildAddedRemovedAndUndecodable(t *testing.T) {
	f := newFixture(t, nil, nil)
	in := f.input(t, true)
	added := FileInput{Path: "new.wtxt", Head: in.Head}
	removed := FileInput{Path: "old.wtxt", Base: in.Base}
	bad := filepath.Join(t.TempDir(), "bad.wtxt")
	os.WriteFile(bad, []byte("WTXT 1\nnot really\n"), 0o644)
	broken := FileInput{Path: "broken.wtxt", Base: in.Base, Head: bad}
	rv, err := Build(context.Background(), []FileInput{added, removed, broken}, f.opts())
	if err != nil {
		t.Fatal(err)
	}
	if rv.Event != EventRequestChanges {
		t.Fatalf("event %s", rv.Event)
	}
	for _, want := range []string{
		"`new.wtxt` — added", "4 array(s): 0 modified, 4 added",
		"`old.wtxt` — removed", "4 array(s): 0 modified, 0 added, 4 removed",
		"`broken.wtxt` — modified", "verification failed",
	} {
		if !strings.Contains(rv.Body, want) {
			t.Errorf("body lacks %q:\n%s", want, rv.Body)
		}
	}
	if _, err := Build(context.Background(), []FileInput{{Path: "x.wtxt"}}, Options{}); err == nil {
		t.Error("a file with neither version is accepted")
	}
	if _, err := Build(context.Background(), []FileInput{{Path: "x.wtxt", Head: filepath.Join(t.TempDir(), "missing")}}, Options{}); err == nil {
		t.Error("a missing local file is not an error")
	}
}

func TestBodyStaysUnderLimit(t *testing.T) {
	fr := &FileResult{Path: "big.wtxt", Status: StatusModified, HasPatch: false}
	for i := 0; i < 5000; i++ {
		name := fmt.Sprintf("model.layers.%04d.mlp.down_proj.weight", i)
		fr.Diffs = append(fr.Diffs, snapshot.ArrayDiff{Name: name, Change: snapshot.Modified, DType: "f32", Shape: []int64{4096, 1024},
			Elements: 4 << 20, ChangedElements: 12, ChangedRows: []snapshot.RowRange{{Start: 1, End: 3}, {Start: 9, End: 10}}, MaxAbsDelta: 0.5, RelL2: 0.01})
		fr.Chunks = append(fr.Chunks, ChunkChange{Array: name, Chunk: 0, Line: 10 + i, Change: snapshot.Modified, EndRow: 16})
	}
	rv := &Review{HeadSHA: strings.Repeat("a", 40), Event: EventComment, Files: []*FileResult{fr}}
	b := renderBody(rv, Options{})
	if len(b) > MaxBodyBytes {
		t.Fatalf("body %d bytes, over %d", len(b), MaxBodyBytes)
	}
	for _, want := range []string{ReviewMarker(rv.HeadSHA), "5000 array(s): 5000 modified", "5000 changed chunk(s) without a line comment"} {
		if !strings.Contains(b, want) {
			t.Errorf("degraded body lacks %q", want)
		}
	}
}

var markerRE = regexp.MustCompile(`^<!-- snapd-review head=[0-9a-f]+ -->\n`)

func TestMarkers(t *testing.T) {
	if !markerRE.MatchString(ReviewMarker("abc123") + "\n") {
		t.Fatal("review marker format")
	}
	if m := commentMarker("s", "a`b|c-->d", "x", 3); strings.Count(m, "-->") != 1 || strings.ContainsAny(m, "`|") {
		t.Fatalf("comment marker not sanitized: %q", m)
	}
}
