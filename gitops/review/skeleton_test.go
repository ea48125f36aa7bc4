package review

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// blobMap is an in-memory wtxt.BlobSource.
type blobMap map[[32]byte][]byte

func (m blobMap) OpenBlob(_ context.Context, s wtxt.Segment) (io.ReadCloser, error) {
	b, ok := m[s.Digest]
	if !ok {
		return nil, fmt.Errorf("%s: %w", s.DigestString(), wtxt.ErrBlobNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// skeletonOf splits w into a skeleton file in dir and its blobs into m.
func skeletonOf(t *testing.T, dir, name string, w []byte, m blobMap) string {
	t.Helper()
	var skel bytes.Buffer
	if _, err := wtxt.Split(context.Background(), bytes.NewReader(w), &skel, func(_ context.Context, s wtxt.Segment, b []byte) error {
		m[s.Digest] = bytes.Clone(b)
		return nil
	}, wtxt.SplitOptions{SegmentSize: 256}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, skel.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type chunkKey struct {
	array       string
	chunk       int64
	first, end  int64
	changedElem int64
}

func chunkKeys(f *FileResult, stats bool) []chunkKey {
	var out []chunkKey
	for _, c := range f.Chunks {
		k := chunkKey{array: c.Array, chunk: c.Chunk, first: c.FirstRow, end: c.EndRow}
		if stats && c.Stats != nil {
			k.changedElem = c.Stats.ChangedElements
		}
		out = append(out, k)
	}
	return out
}

// TestBuildSkeleton: the review of two skeletons finds exactly the chunks
// (and rows) the review of the two WTXT files finds, from the ch lines
// alone, with comments on the skeleton's changed ch lines; with a
// registry it also has the WTXT review's numbers; a damaged head
// skeleton, an untrusted signer and a missing blob are problems, never a
// panic.
func TestBuildSkeleton(t *testing.T) {
	f := newFixture(t, nil, nil)
	ctx := context.Background()
	dir := t.TempDir()
	w1, w2 := filepath.Join(dir, "1.wtxt"), filepath.Join(dir, "2.wtxt")
	os.WriteFile(w1, f.gen1, 0o644)
	os.WriteFile(w2, f.gen2, 0o644)
	opts := Options{TrustedKeys: []ed25519.PublicKey{f.pub}, HMACKey: f.hmac}
	full, err := Build(ctx, []FileInput{{Path: wtxtPath, Base: w1, Head: w2}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	blobs := blobMap{}
	s1, s2 := skeletonOf(t, dir, "1.wtxt.skel", f.gen1, blobs), skeletonOf(t, dir, "2.wtxt.skel", f.gen2, blobs)
	patch, err := LocalPatch(ctx, "", s1, s2)
	if err != nil {
		t.Fatal(err)
	}
	in := FileInput{Path: "snapshots/current.wtxt.skel", Base: s1, Head: s2, HasPatch: true, Parsed: patch}
	skel2 := strings.Split(string(mustRead(t, s2)), "\n")

	rv, err := Build(ctx, []FileInput{in}, opts)
	if err != nil {
		t.Fatal(err)
	}
	fr := rv.Files[0]
	if fmt.Sprint(chunkKeys(fr, false)) != fmt.Sprint(chunkKeys(full.Files[0], false)) {
		t.Fatalf("skeleton review chunks %v\nWTXT review chunks %v", chunkKeys(fr, false), chunkKeys(full.Files[0], false))
	}
	if len(fr.Problems) != 0 || fr.Report == nil || fr.Report.Signature != wtxt.SigVerified || fr.Report.Chain != "continues" || rv.Event != EventComment {
		t.Fatalf("problems %v, report %+v, event %s", fr.Problems, fr.Report, rv.Event)
	}
	for _, c := range rv.Comments {
		if c.Chunk >= 0 && !strings.HasPrefix(skel2[c.Line-1], "ch ") {
			t.Fatalf("comment on line %d %q", c.Line, skel2[c.Line-1])
		}
	}
	if len(rv.Comments) == 0 || !strings.Contains(rv.Body, "reviewed from the skeletons' ch lines") {
		t.Fatalf("%d comments\n%s", len(rv.Comments), rv.Body)
	}

	opts.Registry = blobs
	rv, err = Build(ctx, []FileInput{in}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(chunkKeys(rv.Files[0], true)), fmt.Sprint(chunkKeys(full.Files[0], true)); got != want || len(rv.Files[0].Problems) != 0 {
		t.Fatalf("with the registry: chunks %s, want %s; problems %v", got, want, rv.Files[0].Problems)
	}
	for _, c := range rv.Comments {
		if c.Chunk >= 0 && !strings.HasPrefix(skel2[c.Line-1], "ch ") {
			t.Fatalf("with the registry: comment on line %d %q", c.Line, skel2[c.Line-1])
		}
	}

	// A blob of the head missing: the head does not assemble.
	segs, err := wtxt.SkeletonSegments(ctx, bytes.NewReader(mustRead(t, s2)), "2.wtxt.skel")
	if err != nil {
		t.Fatal(err)
	}
	some := blobMap{}
	for k, v := range blobs {
		some[k] = v
	}
	delete(some, segs[len(segs)-1].Digest)
	opts.Registry = some
	if rv, err = Build(ctx, []FileInput{in}, opts); err != nil || rv.Event != EventRequestChanges ||
		!strings.Contains(strings.Join(rv.Files[0].Problems, "\n"), "head skeleton does not assemble from the registry") {
		t.Fatalf("missing blob: %v, event %v", err, rv.Event)
	}

	// Untrusted signer; damaged head skeleton.
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	rv, err = Build(ctx, []FileInput{in}, Options{TrustedKeys: []ed25519.PublicKey{other}})
	if err != nil || rv.Event != EventRequestChanges || !strings.Contains(strings.Join(rv.Files[0].Problems, "\n"), "not among the trusted keys") {
		t.Fatalf("untrusted signer: %v %+v", err, rv.Files[0].Problems)
	}
	b := mustRead(t, s2)
	for _, cut := range []int{20, len(b) / 2, len(b) - 3} {
		bad := filepath.Join(dir, fmt.Sprintf("bad%d.wtxt.skel", cut))
		os.WriteFile(bad, b[:cut], 0o644)
		in.Head = bad
		rv, err = Build(ctx, []FileInput{in}, Options{TrustedKeys: []ed25519.PublicKey{f.pub}})
		if err != nil || rv.Event != EventRequestChanges || !strings.Contains(strings.Join(rv.Files[0].Problems, "\n"), "head skeleton does not parse") {
			t.Fatalf("cut at %d: %v %+v", cut, err, rv.Files[0].Problems)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
