package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/snapshot"
)

func fileSnapshot(gen uint64) *snapshot.Snapshot {
	r := rand.New(rand.NewPCG(3, 4))
	w := make([]byte, 4096*64*4)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	m := snapshot.DefaultMeta()
	m.Gen, m.TS, m.Build = gen, time.Date(2026, 11, 24, 5, 0, int(gen), 0, time.UTC), "test"
	return &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{
		{Name: "W", DType: snapshot.F32, Shape: []int64{4096, 64}, Data: snapshot.Bytes(w)},
	}}
}

// PushSnapshotFile writes the skeleton a push of the encoded WTXT writes,
// at the automatic segment size, keeps the segment cache file, and says
// which failures are a local file's.
func TestPushSnapshotFile(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.Start(t, "", "")
	repo, err := Open(reg.Host+"/snapd/file", Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := fileSnapshot(1)
	var enc bytes.Buffer
	want, err := wtxt.Encode(ctx, &enc, s, wtxt.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	skel := filepath.Join(dir, "gen.wtxt.skel")
	res, got, segSize, err := repo.PushSnapshotFile(ctx, s, wtxt.EncodeOptions{}, FilePush{Skeleton: skel})
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Root != want.Root {
		t.Errorf("the push's encode result %+v, want the root %+v wtxt.Encode reports", got, want.Root)
	}
	if want := AutoSegmentSize(int64(enc.Len())); segSize != want {
		t.Errorf("segment size %d, want AutoSegmentSize %d", segSize, want)
	}
	ref, refSkel := pushAt(t, repo, enc.Bytes(), segSize, Previous{})
	if got, err := os.ReadFile(skel); err != nil || !bytes.Equal(got, refSkel) || res.Manifest.Digest != ref.Manifest.Digest {
		t.Errorf("skeleton or manifest differ from the pushed WTXT's (%v)", err)
	}

	cache := filepath.Join(dir, "segcache")
	noKey := filepath.Join(dir, "nokey.wtxt.skel")
	if _, _, _, err := repo.PushSnapshotFile(ctx, s, wtxt.EncodeOptions{}, FilePush{Skeleton: noKey, SegmentCache: cache}); !errors.Is(err, ErrNoCacheKey) {
		t.Errorf("cache without a key: %v", err)
	}
	if _, err := os.Stat(noKey); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused push wrote its skeleton: %v", err)
	}
	opts := wtxt.EncodeOptions{HMACKey: bytes.Repeat([]byte{7}, 32)}
	if _, _, _, err := repo.PushSnapshotFile(ctx, s, opts, FilePush{Skeleton: filepath.Join(dir, "hmac.wtxt.skel"), SegmentCache: cache}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() == 0 {
		t.Errorf("segment cache file: %v %v", fi, err)
	}

	var fe *FileError
	if _, _, _, err := repo.PushSnapshotFile(ctx, s, wtxt.EncodeOptions{}, FilePush{Skeleton: filepath.Join(dir, "missing", "x.skel")}); !errors.As(err, &fe) {
		t.Errorf("skeleton in a missing directory: %v, want a *FileError", err)
	}
}

// FilePush.Progress hears of every segment once, new or known from the
// previous push (their sum is the raw size), and UploadChanged uploads
// the changed segments without a HEAD: the second push asks the
// registry about its tag only (the config blob is uploaded without
// asking).
func TestPushSnapshotFileProgress(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	px := registrytest.StartProxy(t, reg.Host)
	repo, err := Open(px.Host+"/snapd/progress", Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	s := fileSnapshot(1)
	raw, err := s.Arrays[0].NumBytes()
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	push := FilePush{Skeleton: filepath.Join(dir, "g1.wtxt.skel"), SegmentSize: 64 << 10, Progress: func(n int64) { seen.Add(n) }}
	res, _, _, err := repo.PushSnapshotFile(ctx, s, wtxt.EncodeOptions{}, push)
	if err != nil {
		t.Fatal(err)
	}
	if seen.Load() != raw {
		t.Fatalf("first push: progress %d bytes, want %d", seen.Load(), raw)
	}
	// The next generation changes the first row only.
	s2 := fileSnapshot(2)
	b := bytes.Clone(s2.Arrays[0].Data.(snapshot.Bytes))
	b[0] ^= 1
	s2.Arrays[0].Data = snapshot.Bytes(b)
	seen.Store(0)
	heads := px.Methods()[http.MethodHead]
	push.Skeleton, push.Previous, push.UploadChanged = filepath.Join(dir, "g2.wtxt.skel"), res.Keys, true
	res2, _, _, err := repo.PushSnapshotFile(ctx, s2, wtxt.EncodeOptions{}, push)
	if err != nil {
		t.Fatal(err)
	}
	if seen.Load() != raw {
		t.Fatalf("second push: progress %d bytes, want %d", seen.Load(), raw)
	}
	if res2.Uploaded != 1 || res2.Reused == 0 {
		t.Fatalf("second push: %+v, want one segment uploaded and the others reused", res2.PushStats)
	}
	if n := px.Methods()[http.MethodHead] - heads; n != 1 {
		t.Fatalf("second push: %d HEAD requests, want the tag's only", n)
	}
}

// wholeSnapshot: W (1 MiB) and V (3000 bytes) at most WholeArray, Big (3
// MiB) above it; gen 2 changes a byte of V and of Big's first row.
func wholeSnapshot(gen uint64) *snapshot.Snapshot {
	r := rand.New(rand.NewPCG(5, 6))
	fill := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	w, v, big := fill(4096*64*4), fill(3000), fill(3<<20)
	if gen > 1 {
		v[7] ^= 1
		big[0] ^= 1
	}
	m := snapshot.DefaultMeta()
	m.Gen, m.TS, m.Build = gen, time.Date(2026, 11, 29, 5, 0, int(gen), 0, time.UTC), "test"
	return &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{
		{Name: "W", DType: snapshot.F32, Shape: []int64{4096, 64}, Data: snapshot.Bytes(w)},
		{Name: "V", DType: snapshot.U8, Shape: []int64{3000}, Data: snapshot.Bytes(v)},
		{Name: "Big", DType: snapshot.U8, Shape: []int64{3 << 10, 1 << 10}, Data: snapshot.Bytes(big)},
	}}
}

// FilePush.WholeArray: arrays up to it are one blob each, streamed, its
// digest the array's sha256, the others cut at the segment size; the
// generation assembles from the registry to the WTXT Encode writes; the
// next push reuses an unchanged whole array by place and digest (no
// upload, no HEAD) and uploads the changed ones.
func TestPushSnapshotFileWholeArray(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	px := registrytest.StartProxy(t, reg.Host)
	repo, err := Open(px.Host+"/snapd/whole", Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	opts := wtxt.EncodeOptions{HMACKey: []byte("k")}
	var seen atomic.Int64
	push := FilePush{Skeleton: filepath.Join(dir, "g1.wtxt.skel"), SegmentSize: 256 << 10, WholeArray: 2 << 20, UploadChanged: true,
		Progress: func(n int64) { seen.Add(n) }}
	var raw int64
	for gen := uint64(1); gen <= 2; gen++ {
		s := wholeSnapshot(gen)
		var enc bytes.Buffer
		if _, err := wtxt.Encode(ctx, &enc, s, opts); err != nil {
			t.Fatal(err)
		}
		seen.Store(0)
		heads := px.Methods()[http.MethodHead]
		push.Skeleton = filepath.Join(dir, fmt.Sprintf("g%d.wtxt.skel", gen))
		res, _, _, err := repo.PushSnapshotFile(ctx, s, opts, push)
		if err != nil {
			t.Fatal(err)
		}
		if raw == 0 {
			raw = seen.Load()
		}
		if seen.Load() != raw || raw != 4096*64*4+3000+3<<20 {
			t.Fatalf("gen %d: progress %d bytes, want every raw byte once", gen, seen.Load())
		}
		wholes := 0
		for _, sg := range res.Generation.Segments {
			a := s.Arrays[map[string]int{"W": 0, "V": 1, "Big": 2}[sg.Array]]
			b := a.Data.(snapshot.Bytes)
			switch {
			case a.Name != "Big" && (sg.FirstChunk != 0 || sg.Size != int64(len(b)) || sg.Digest != sha256.Sum256(b)):
				t.Fatalf("gen %d: segment %+v of %s is not the whole array", gen, sg, a.Name)
			case a.Name == "Big" && sg.Size > push.SegmentSize:
				t.Fatalf("gen %d: segment of %d bytes of Big above the segment size", gen, sg.Size)
			case a.Name != "Big":
				wholes++
			}
		}
		if wholes != 2 {
			t.Fatalf("gen %d: %d whole-array segments, want 2", gen, wholes)
		}
		skel, err := os.ReadFile(push.Skeleton)
		if err != nil {
			t.Fatal(err)
		}
		out, err := assembleFrom(t, repo, skel)
		if err != nil || !bytes.Equal(out, enc.Bytes()) {
			t.Fatalf("gen %d: assembled from the registry: %v (equal to Encode's WTXT: %v)", gen, err, bytes.Equal(out, enc.Bytes()))
		}
		if gen == 2 {
			// V and Big's first segment changed; W and Big's other 11
			// segments are reused, without a HEAD.
			if res.Uploaded != 2 || res.Reused != 12 {
				t.Fatalf("gen 2: %+v, want 2 segments uploaded and 12 reused", res.PushStats)
			}
			if n := px.Methods()[http.MethodHead] - heads; n > 2 {
				t.Fatalf("gen 2: %d HEAD requests, want at most the config blob's and the tag's", n)
			}
		}
		push.Previous = res.Keys
	}
}

// TestPushSnapshotFileManifestEarly: the manifest's first half (the
// config blob, the tag's lookup) does not wait for the last segments'
// uploads: an upload held until the tag has been looked up completes,
// and the manifest is pushed after it.
func TestPushSnapshotFileManifestEarly(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	px := registrytest.StartProxy(t, reg.Host)
	s := wholeSnapshot(1)
	held := fmt.Sprintf("sha256:%x", sha256.Sum256(s.Arrays[0].Data.(snapshot.Bytes)))
	looked := make(chan struct{})
	var once sync.Once
	var early, late atomic.Bool
	var released atomic.Bool
	px.SetBefore(func(r *http.Request) {
		switch {
		case r.Method == http.MethodHead && strings.Contains(r.URL.Path, "/manifests/"):
			once.Do(func() { close(looked) })
		case r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/"):
			late.Store(released.Load())
		case r.Method == http.MethodPut && r.URL.Query().Get("digest") == held:
			select {
			case <-looked:
				early.Store(true)
			case <-time.After(5 * time.Minute): // a guard: the lookup never came first
			}
			released.Store(true)
		}
	})
	repo, err := Open(px.Host+"/snapd/early", Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	opts := wtxt.EncodeOptions{HMACKey: []byte("k")}
	var enc bytes.Buffer
	if _, err := wtxt.Encode(ctx, &enc, s, opts); err != nil {
		t.Fatal(err)
	}
	skelPath := filepath.Join(t.TempDir(), "g1.wtxt.skel")
	if _, _, _, err := repo.PushSnapshotFile(ctx, s, opts, FilePush{Skeleton: skelPath, SegmentSize: 256 << 10, WholeArray: 2 << 20}); err != nil {
		t.Fatal(err)
	}
	if !early.Load() {
		t.Fatal("the tag was looked up only once every segment was uploaded")
	}
	if !late.Load() {
		t.Fatal("the manifest was pushed before the held segment's upload completed")
	}
	skel, err := os.ReadFile(skelPath)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := assembleFrom(t, repo, skel); err != nil || !bytes.Equal(out, enc.Bytes()) {
		t.Fatalf("assembled from the registry: %v (equal to Encode's WTXT: %v)", err, bytes.Equal(out, enc.Bytes()))
	}
}
