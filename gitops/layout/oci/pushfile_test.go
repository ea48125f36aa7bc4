package oci

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
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
// registry about the config blob only.
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
	if n := px.Methods()[http.MethodHead] - heads; n > 2 {
		t.Fatalf("second push: %d HEAD requests, want at most the config blob's and the tag's", n)
	}
}
