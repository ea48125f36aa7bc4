package pipeline

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/queue"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/pipeline/ring"
	"github.com/snapd-ml/snapd/snapshot"
	"github.com/snapd-ml/snapd/wal"
)

// TestSegmentModeRule: a push that uploads at least 90% of its segments,
// cut at the same size as the push before it, switches later generations
// to DenseSegmentSize; one that uploads fewer than half switches back; a
// push cut at a new size (which uploads everything once) is not judged.
// A start takes the mode from the head's segment size.
func TestSegmentModeRule(t *testing.T) {
	repo, err := gitops.OpenRepo(filepath.Join(t.TempDir(), "repo"), gitops.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := oci.Open("127.0.0.1:1/x", oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const small, big = 8 << 10, 32 << 10
	p, err := NewOCIPublisher(reg, repo, OCIConfig{StateDir: t.TempDir(), SegmentSize: small, DenseSegmentSize: big, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	push := func(gen uint64, segments, uploaded int) int64 {
		t.Helper()
		seg := p.segmentSize()
		p.pushed(gen, &oci.PushResult{PushStats: oci.PushStats{Segments: segments, Uploaded: uploaded}}, seg, nil)
		return seg
	}
	for i, c := range []struct {
		segments, uploaded int
		cut, next          int64 // the size this push is cut at, the next one's
	}{
		{64, 64, small, small}, // the first: nothing to compare with
		{64, 60, small, big},   // 94%: dense
		{16, 16, big, big},     // a new size: not judged
		{16, 9, big, big},      // between the bounds: unchanged
		{16, 7, big, small},    // under half: sparse again
		{64, 64, small, small}, // a new size: not judged
		{64, 57, small, small}, // 89%: not dense
	} {
		if got := push(uint64(i+1), c.segments, c.uploaded); got != c.cut {
			t.Fatalf("push %d cut at %d, want %d", i+1, got, c.cut)
		}
		if got := p.segmentSize(); got != c.next {
			t.Fatalf("after push %d the next is cut at %d, want %d", i+1, got, c.next)
		}
	}
	for _, c := range []struct{ head, want int64 }{{big, big}, {small, small}, {0, small}} {
		q, err := NewOCIPublisher(reg, repo, OCIConfig{StateDir: t.TempDir(), SegmentSize: small, DenseSegmentSize: big})
		if err != nil {
			t.Fatal(err)
		}
		q.resumeSegments(c.head)
		if got := q.segmentSize(); got != c.want {
			t.Fatalf("started after a head cut at %d: cut at %d, want %d", c.head, got, c.want)
		}
	}
	// Judged by changed chunks (the direct path), a push is judged
	// whatever its cut, and while dense, arrays are whole segments.
	c, err := NewOCIPublisher(reg, repo, OCIConfig{StateDir: t.TempDir(), SegmentSize: small, DenseSegmentSize: big})
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range []struct {
		changed, total int64
		next           int64
	}{
		{100, 100, big},  // dense at once: chunks do not depend on the cut
		{95, 100, big},   // still dense, though the cut changed
		{60, 100, big},   // between the bounds
		{10, 100, small}, // sparse, though its whole arrays were all uploaded
		{90, 100, big},
	} {
		c.pushed(uint64(i+1), &oci.PushResult{PushStats: oci.PushStats{Segments: 1, Uploaded: 1}}, c.segmentSize(), &chunkChange{changed: k.changed, total: k.total})
		if got, whole := c.segmentSize(), c.wholeArray(); got != k.next || (whole == wholeArrayMax) != (k.next == big) {
			t.Fatalf("chunk push %d: the next is cut at %d, whole arrays up to %d", i+1, got, whole)
		}
	}
	off, err := NewOCIPublisher(reg, repo, OCIConfig{StateDir: t.TempDir(), SegmentSize: small})
	if err != nil {
		t.Fatal(err)
	}
	off.pushed(1, &oci.PushResult{PushStats: oci.PushStats{Segments: 8, Uploaded: 8}}, small, nil)
	off.pushed(2, &oci.PushResult{PushStats: oci.PushStats{Segments: 8, Uploaded: 8}}, small, nil)
	if got := off.segmentSize(); got != small {
		t.Fatalf("without DenseSegmentSize: cut at %d", got)
	}
}

// everyElementModel is a 512 KiB f32 array whose every element moves with step
// when dense, else only row step.
func everyElementModel(step int, dense bool) *snapshot.Snapshot {
	const rows, cols = 2048, 64
	b := make([]byte, rows*cols*4)
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			v := float32(r*cols+c) * 0.5
			if dense || r == step {
				v += float32(step)
			}
			u := math.Float32bits(v)
			i := 4 * (r*cols + c)
			b[i], b[i+1], b[i+2], b[i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
	}
	return &snapshot.Snapshot{Arrays: []*snapshot.Array{{Name: "w", DType: snapshot.F32, Shape: []int64{rows, cols}, Data: snapshot.Bytes(b)}}}
}

// TestOCIDirectDenseSegments: a daemon pushing generations that change
// every element (to a real registry) cuts them at DenseSegmentSize from
// the third one, each array of at most wholeArrayMax bytes one segment
// whose digest is its sha256, and at SegmentSize again after a sparse one
// (judged by its changed chunks, though its one segment was uploaded
// whole); every generation is committed and its ring record names the
// size it was cut at.
func TestOCIDirectDenseSegments(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, "", "")
	f := newFixture(t)
	r, err := oci.Open(reg.Host+"/snapd/dense", oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const small, big = 8 << 10, 32 << 10
	var ociPub *OCIPublisher
	f.start(t, func(c *Config, d *Deps) {
		p, err := NewOCIPublisher(r, f.repo, OCIConfig{StateDir: f.dir, SegmentSize: small, DenseSegmentSize: big})
		if err != nil {
			t.Fatal(err)
		}
		ociPub = p
		d.Publisher = p
		if d.Queue, err = queue.Open(filepath.Join(f.dir, QueueDir), queue.Options{Pusher: LocalOnly{}, Publisher: p.Jobs(),
			BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	})
	st, err := snapshot.OpenGenStore(filepath.Join(f.dir, GensDir))
	if err != nil {
		t.Fatal(err)
	}
	ringDir := filepath.Join(f.dir, RingDir)
	for g, c := range []struct {
		dense bool
		cut   int64
	}{
		{true, small}, {true, small}, {true, big}, {true, big}, {false, big}, {false, small},
	} {
		gen := uint64(g + 1)
		snap := everyElementModel(g+1, c.dense)
		if !c.dense {
			snap = everyElementModel(4, true) // the last dense generation, with row gen moved
			row := snap.Arrays[0].Data.(snapshot.Bytes)
			for i := 0; i < 64*4; i++ {
				row[int(gen)*64*4+i] ^= 0x40
			}
		}
		pub, err := st.Publish(gen, ".safetensors", func(w io.Writer) error {
			return safetensors.New().Encode(context.Background(), w, snap, formats.EncodeOptions{})
		})
		if err != nil {
			t.Fatal(err)
		}
		request(t, f.dir, gen, pub.Path)
		if res := f.wait(t, gen); res.State != wal.Done || res.OCI == nil {
			t.Fatalf("gen %d: %+v, want done from the direct path", gen, res)
		}
		rec := ringOCIRecord(ringDir, gen)
		if rec == nil || rec.SegmentSize != c.cut {
			t.Fatalf("gen %d: ring record %+v, want cut at %d", gen, rec, c.cut)
		}
		skel, err := os.ReadFile(ringPath(ringDir, gen, ring.ExtSkeleton))
		if err != nil {
			t.Fatal(err)
		}
		raw := snap.Arrays[0].Data.(snapshot.Bytes)
		segs := strings.Count(string(skel), "\nseg ")
		if c.cut == big {
			sum := sha256.Sum256(raw)
			if segs != 1 || !strings.Contains(string(skel), fmt.Sprintf(" len=%d sha256=%x\n", len(raw), sum)) {
				t.Fatalf("gen %d: %d seg lines, want one for the whole array with its sha256", gen, segs)
			}
		} else if segs != len(raw)/small {
			t.Fatalf("gen %d: %d seg lines, want %d", gen, segs, len(raw)/small)
		}
		waitPushed(t, f)
		if _, err := f.repo.ResolveGen(gen); err != nil {
			t.Fatalf("gen %d not committed: %v", gen, err)
		}
		// The next build takes this skeleton parsed from memory.
		head, err := ReadChainState(f.dir)
		if err != nil || head.Gen != gen || ociPub.lastSkeleton(head) == nil {
			t.Fatalf("gen %d: the parsed skeleton is not kept for the next build (head %+v, %v)", gen, head, err)
		}
		if other := *head; ociPub.lastSkeleton(&other) != nil {
			other.MerkleThis = strings.Repeat("0", 64)
			if ociPub.lastSkeleton(&other) != nil {
				t.Fatalf("gen %d: the kept skeleton is taken for another head", gen)
			}
		}
	}
	f.stop(t)
}
