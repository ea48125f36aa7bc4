package wtxt

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/snapshot"
)

var testTS = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testMeta(gen uint64) snapshot.Meta {
	m := snapshot.DefaultMeta()
	m.Gen, m.TS, m.Build = gen, testTS, "test"
	return m
}

// randArray returns an array of the given shape filled from a seeded PRNG.
func randArray(seed uint64, name string, dt snapshot.DType, shape ...int64) *snapshot.Array {
	a := &snapshot.Array{Name: name, DType: dt, Shape: shape}
	n, err := a.NumBytes()
	if err != nil {
		panic(err)
	}
	a.Data = snapshot.Bytes(randBytes(seed, n))
	return a
}

// bigRand keeps the random bytes of the large test arrays: tests make
// the same multi-MiB arrays again and again, and under the race
// detector generating them a byte at a time costs more than encoding
// them. Callers get a copy, free to change.
var bigRand struct {
	sync.Mutex
	m map[[2]uint64][]byte
}

// randBytes returns n pseudo-random bytes from seed (the same bytes for
// the same seed and n).
func randBytes(seed uint64, n int64) []byte {
	const cacheFrom = 256 << 10
	if n >= cacheFrom {
		bigRand.Lock()
		defer bigRand.Unlock()
		if b, ok := bigRand.m[[2]uint64{seed, uint64(n)}]; ok {
			return bytes.Clone(b)
		}
	}
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if n >= cacheFrom {
		if bigRand.m == nil {
			bigRand.m = map[[2]uint64][]byte{}
		}
		bigRand.m[[2]uint64{seed, uint64(n)}] = bytes.Clone(b)
	}
	return b
}

func testKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, 32))
}

func encodeBytes(t testing.TB, s *snapshot.Snapshot, opts EncodeOptions) ([]byte, *Result) {
	t.Helper()
	var buf bytes.Buffer
	// Sized up front: growing a buffer by copies costs more than the
	// encoding itself under -race for the multi-MiB snapshots.
	if n, err := EncodedSize(s, opts); err == nil && n < 1<<30 {
		buf.Grow(int(n))
	}
	res, err := Encode(context.Background(), &buf, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), res
}

// TestDeterminism: the same snapshot and options give the same bytes for
// any worker count and GOMAXPROCS, through a plain writer and a file
// (where the body is written while sha256_all is computed), including a
// chunk big enough to be streamed by the writer goroutine. The matrix of
// GOMAXPROCS and workers runs without big_rows (8 MiB, slow under -race);
// the snapshot with it runs at GOMAXPROCS=4 with a worker a core, to the
// writer and to the file.
func TestDeterminism(t *testing.T) {
	small := []*snapshot.Array{
		randArray(2, "R", snapshot.F64, 4096, 64),
		randArray(3, "odd", snapshot.U8, 1000, 3),
		randArray(4, "layer.0/w", snapshot.BF16, 33, 17),
		randArray(5, "scalar", snapshot.I64),
		randArray(6, "empty", snapshot.F16, 0, 5),
	}
	s := &snapshot.Snapshot{Meta: testMeta(9), Arrays: append([]*snapshot.Array{
		randArray(1, "big_rows", snapshot.F32, 2, (bigChunk/4)+100), // rows above bigChunk
	}, small...)}
	opts := EncodeOptions{SignKey: testKey(1), HMACKey: []byte("k"), PrevMerkle: [32]byte{1}}
	ref := EncodeOptions{SignKey: opts.SignKey, HMACKey: opts.HMACKey, PrevMerkle: opts.PrevMerkle, Workers: 1}
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	matrix := func(s *snapshot.Snapshot, procsSet, workersSet []int) []byte {
		t.Helper()
		want, _ := encodeBytes(t, s, ref)
		for pi, procs := range procsSet {
			runtime.GOMAXPROCS(procs)
			for wi, workers := range workersSet {
				if raceEnabled && len(procsSet) == len(workersSet) && pi != wi {
					continue // under the race detector the diagonal: every value of each once
				}
				o := opts
				o.Workers = workers
				got, _ := encodeBytes(t, s, o)
				if !bytes.Equal(got, want) {
					t.Fatalf("%d arrays, GOMAXPROCS=%d workers=%d: output differs at %d", len(s.Arrays), procs, workers, firstDiff(got, want))
				}
			}
		}
		runtime.GOMAXPROCS(prev)
		return want
	}
	matrix(&snapshot.Snapshot{Meta: s.Meta, Arrays: small}, []int{1, 2, 4}, []int{0, 1, 5})
	want := matrix(s, []int{4}, []int{0})
	// Through an *os.File, after some leading bytes.
	f, err := os.Create(filepath.Join(t.TempDir(), "x.wtxt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("prefix")
	res, err := Encode(context.Background(), f, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("suffix")
	got, _ := os.ReadFile(f.Name())
	if string(got[:6]) != "prefix" || string(got[len(got)-6:]) != "suffix" || !bytes.Equal(got[6:len(got)-6], want) || res.Written != int64(len(want)) {
		t.Fatalf("file output differs from the writer output (len %d vs %d)", len(got)-12, len(want))
	}
	rep, err := Verify(context.Background(), bytes.NewReader(want), VerifyOptions{TrustedKeys: []ed25519.PublicKey{opts.SignKey.Public().(ed25519.PublicKey)}, HMACKey: opts.HMACKey, RequireSignature: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Arrays) != 6 || rep.Signature != SigVerified {
		t.Fatalf("report: %+v", rep)
	}
}

// TestRoundTrip: decode(encode(s)) has the same arrays, bytes and attrs.
func TestRoundTrip(t *testing.T) {
	s := &snapshot.Snapshot{Meta: testMeta(3), Attrs: map[string]string{"safetensors.metadata": `{"format":"pt"}`}, Arrays: []*snapshot.Array{
		randArray(1, "w", snapshot.F32, 300, 7),
		randArray(2, "b", snapshot.Bool, 9),
		randArray(3, "s", snapshot.U16),
	}}
	s.Arrays[0].Attrs = map[string]string{"stb.layout": "COL_MAJOR"}
	for _, rpc := range []int{0, 1, 7} {
		data, _ := encodeBytes(t, s, EncodeOptions{RowsPerChunk: rpc})
		got, err := New().Decode(context.Background(), bytes.NewReader(data), int64(len(data)), decodeOpts())
		if err != nil {
			t.Fatal(err)
		}
		if got.Meta.Gen != 3 || !got.Meta.TS.Equal(testTS) || got.Attrs["safetensors.metadata"] != `{"format":"pt"}` {
			t.Fatalf("meta/attrs lost: %+v", got)
		}
		for _, a := range s.Arrays {
			b := got.Array(a.Name)
			if b == nil || b.DType != a.DType || len(b.Shape) != len(a.Shape) {
				t.Fatalf("array %s lost or changed", a.Name)
			}
			x, _ := snapshot.ReadAll(a.Data)
			y, err := snapshot.ReadAll(b.Data)
			if err != nil || !bytes.Equal(x, y) {
				t.Fatalf("rpc=%d array %s: bytes differ (%v)", rpc, a.Name, err)
			}
			if len(a.Attrs) != len(b.Attrs) {
				t.Fatalf("array %s attrs %v, want %v", a.Name, b.Attrs, a.Attrs)
			}
		}
		// Re-encoding the decoded snapshot reproduces the file.
		again, _ := encodeBytes(t, got, EncodeOptions{RowsPerChunk: rpc})
		if !bytes.Equal(again, data) {
			t.Fatalf("rpc=%d: re-encode differs at %d", rpc, firstDiff(again, data))
		}
	}
}

func TestEncodeRejects(t *testing.T) {
	good := func() *snapshot.Snapshot {
		return &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{randArray(1, "a", snapshot.U8, 4)}}
	}
	for name, mut := range map[string]func(s *snapshot.Snapshot){
		"bad name":   func(s *snapshot.Snapshot) { s.Arrays[0].Name = "a b" },
		"long name":  func(s *snapshot.Snapshot) { s.Arrays[0].Name = strings.Repeat("x", 1025) },
		"dup name":   func(s *snapshot.Snapshot) { s.Arrays = append(s.Arrays, randArray(2, "a", snapshot.U8, 1)) },
		"short data": func(s *snapshot.Snapshot) { s.Arrays[0].Data = snapshot.Bytes{1} },
		"bad build":  func(s *snapshot.Snapshot) { s.Meta.Build = "a b" },
		"no ts":      func(s *snapshot.Snapshot) { s.Meta.TS = time.Time{} },
		"reserved name": func(s *snapshot.Snapshot) {
			s.Arrays[0].Name = snapshot.AttrsArrayName
			s.Attrs = map[string]string{"x": "y"}
		},
	} {
		s := good()
		mut(s)
		if _, err := Encode(context.Background(), &bytes.Buffer{}, s, EncodeOptions{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Encode(context.Background(), &bytes.Buffer{}, good(), EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
}

// failingSource fails reads past a point.
type failingSource struct{ n int64 }

func (f failingSource) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.n/2 {
		return 0, errors.New("disk on fire")
	}
	clear(p)
	return len(p), nil
}
func (f failingSource) Size() int64 { return f.n }

func TestEncodeSourceError(t *testing.T) {
	s := &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{{Name: "a", DType: snapshot.U8, Shape: []int64{4 << 20}, Data: failingSource{4 << 20}}}}
	_, err := Encode(context.Background(), &bytes.Buffer{}, s, EncodeOptions{})
	if err == nil || !strings.Contains(err.Error(), "disk on fire") || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestDefaultTS(t *testing.T) {
	now := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 500, time.UTC) }
	got, err := DefaultTS(func(string) string { return "1700000000" }, now)
	if err != nil || FormatTS(got) != "2023-11-14T22:13:20Z" {
		t.Fatalf("SOURCE_DATE_EPOCH: %v %v", got, err)
	}
	got, _ = DefaultTS(func(string) string { return "" }, now)
	if FormatTS(got) != "2030-01-01T00:00:00Z" {
		t.Fatal(got)
	}
	if _, err := DefaultTS(func(string) string { return "-5" }, now); err == nil {
		t.Fatal("negative epoch accepted")
	}
}
