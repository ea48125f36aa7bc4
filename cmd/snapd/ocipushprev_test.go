package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/snapshot"
)

// prevModel writes generation gen of a 4 MiB f32 model (4096 rows of 1
// KiB) as safetensors; generation 2 changes rows 1000..1009.
func prevModel(t *testing.T, dir string, gen int) string {
	t.Helper()
	w := make([]byte, 4096*1024)
	r := rand.New(rand.NewPCG(7, 8))
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	if gen >= 2 {
		for i := 1000 * 1024; i < 1010*1024; i++ {
			w[i] ^= 0xa5
		}
	}
	s := &snapshot.Snapshot{Arrays: []*snapshot.Array{
		{Name: "b", DType: snapshot.F32, Shape: []int64{256}, Data: snapshot.Bytes(make([]byte, 1024))},
		{Name: "w", DType: snapshot.F32, Shape: []int64{4096, 256}, Data: snapshot.Bytes(w)},
	}}
	var buf bytes.Buffer
	if err := safetensors.New().Encode(context.Background(), &buf, s, formats.EncodeOptions{}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "gen"+string(rune('0'+gen))+".safetensors")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// prevGens returns generations 1 and 2 of prevModel converted to WTXT,
// signed with the vector keys, 2 chained to 1; made once
// (shared.dirOnce), read only.
func prevGens(t *testing.T) (g1, g2 string) {
	t.Helper()
	d := shared.dirOnce(t, "prevgens", func(t *testing.T, d string) {
		k := vectorKeys(t)
		sign := []string{"--sign-key", filepath.Join(k, "sign_ed25519"), "--hmac-key", filepath.Join(k, "hmac.key"), "--ts", "2026-11-24T06:00:00Z"}
		m1, m2 := prevModel(t, d, 1), prevModel(t, d, 2)
		mustRun(t, append([]string{"convert", m1, filepath.Join(d, "g1.wtxt"), "--gen", "1"}, sign...)...)
		mustRun(t, append([]string{"convert", m2, filepath.Join(d, "g2.wtxt"), "--gen", "2", "--prev", filepath.Join(d, "g1.wtxt")}, sign...)...)
	})
	return filepath.Join(d, "g1.wtxt"), filepath.Join(d, "g2.wtxt")
}

// TestOCIPushPrevSkeleton: `snapd oci push --prev-skeleton` writes the
// same skeleton and manifest as a push without it while reading only the
// changed segment; the result assembles byte for byte. A previous skeleton
// naming a blob the registry lacks costs only the reuse of that segment;
// a malformed one fails with exit 1 and a located error.
func TestOCIPushPrevSkeleton(t *testing.T) {
	d := t.TempDir()
	g1, g2 := prevGens(t)
	a, err := os.ReadFile(g2)
	if err != nil {
		t.Fatal(err)
	}

	reg := registrytest.Start(t, "", "")
	repo := reg.Host + "/snapd/prev"
	push := func(in, skel string, extra ...string) map[string]any {
		t.Helper()
		args := append([]string{"oci", "push", in, "--oci-repository", repo, "--segment-size", "262144", "--skeleton", skel, "--json"}, extra...)
		code, out, errs := snapd(t, nil, args...)
		if code != 0 {
			t.Fatalf("oci push %v: exit %d\n%s%s", extra, code, out, errs)
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	s1 := filepath.Join(d, "g1.skel")
	r1 := push(g1, s1)
	if r1["reused"].(float64) != 0 || r1["uploaded"].(float64) != 17 {
		t.Fatalf("gen 1 push: %v", r1)
	}
	s2 := filepath.Join(d, "g2.skel")
	r2 := push(g2, s2, "--prev-skeleton", s1)
	// 17 segments: 16 of w (4 chunks each) and b's; w's 4th holds the change.
	if r2["reused"].(float64) != 16 || r2["uploaded"].(float64) != 1 || r2["uploaded_bytes"].(float64) != 262144 {
		t.Fatalf("gen 2 push with --prev-skeleton: %v", r2)
	}
	s2full := filepath.Join(d, "g2full.skel")
	r2full := push(g2, s2full)
	if r2full["manifest"] != r2["manifest"] || r2full["reused"].(float64) != 0 {
		t.Fatalf("manifests differ: %v vs %v", r2full, r2)
	}
	x, _ := os.ReadFile(s2)
	y, _ := os.ReadFile(s2full)
	if !bytes.Equal(x, y) {
		t.Fatal("skeletons differ")
	}
	asm := filepath.Join(d, "asm.wtxt")
	mustRun(t, "assemble", "--oci-repository", repo, s2, asm)
	if got, _ := os.ReadFile(asm); !bytes.Equal(got, a) {
		t.Fatal("assembled WTXT differs")
	}

	// A previous skeleton whose first seg line names a blob the registry
	// does not have: that segment is read and checked, not reused.
	skel1, _ := os.ReadFile(s1)
	i := bytes.Index(skel1, []byte("\nseg "))
	j := bytes.Index(skel1[i:], []byte("sha256=")) + i + len("sha256=")
	bad := bytes.Clone(skel1)
	copy(bad[j:], strings.Repeat("0", 64))
	badPath := filepath.Join(d, "bad.skel")
	os.WriteFile(badPath, bad, 0o644)
	s3 := filepath.Join(d, "g2b.skel")
	r3 := push(g2, s3, "--prev-skeleton", badPath)
	if r3["reused"].(float64) != 15 || r3["manifest"] != r2["manifest"] {
		t.Fatalf("push with a wrong digest in the previous skeleton: %v", r3)
	}
	if z, _ := os.ReadFile(s3); !bytes.Equal(z, x) {
		t.Fatal("skeleton differs")
	}
	// Malformed: a seg line covering more chunks than its array has.
	broken := bytes.Replace(skel1, []byte("seg chunks=1 "), []byte("seg chunks=9 "), 1)
	os.WriteFile(badPath, broken, 0o644)
	code, out, errs := snapd(t, nil, "oci", "push", g2, "--oci-repository", repo, "--skeleton", s3, "--prev-skeleton", badPath)
	if code != 1 || !strings.Contains(errs, "bad.skel") || !strings.Contains(errs, "--prev-skeleton") {
		t.Fatalf("malformed previous skeleton: exit %d\n%s%s", code, out, errs)
	}
}

// TestOCIPushSegmentCache: `snapd oci push CHECKPOINT --segment-cache`
// takes the chunk sums of the segments the previous push saw unchanged
// from the cache and --prev-skeleton, and writes the skeleton and
// manifest a push without it writes; an unusable cache file is logged
// and costs only the hashing (and is rewritten); the flag needs a key and
// a checkpoint input.
func TestOCIPushSegmentCache(t *testing.T) {
	k := vectorKeys(t)
	d := t.TempDir()
	m1, m2 := prevModel(t, d, 1), prevModel(t, d, 2)
	reg := registrytest.Start(t, "", "")
	repo := reg.Host + "/snapd/segcache"
	cache := filepath.Join(d, "segments.cache")
	push := func(in, skel string, gen string, extra ...string) (map[string]any, string) {
		t.Helper()
		args := append([]string{"oci", "push", in, "--oci-repository", repo, "--segment-size", "262144", "--skeleton", skel, "--json",
			"--gen", gen, "--ts", "2026-11-24T06:00:0" + gen + "Z", "--sign-key", filepath.Join(k, "sign_ed25519"), "--hmac-key", filepath.Join(k, "hmac.key")}, extra...)
		code, out, errs := snapd(t, nil, args...)
		if code != 0 {
			t.Fatalf("oci push %v: exit %d\n%s%s", extra, code, out, errs)
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r, errs
	}
	s1 := filepath.Join(d, "g1.skel")
	if r1, _ := push(m1, s1, "1", "--segment-cache", cache); r1["cache_hits"].(float64) != 0 || r1["segments"].(float64) != 17 {
		t.Fatalf("gen 1: %v", r1)
	}
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("no cache file after gen 1: %v", err)
	}
	ref := filepath.Join(d, "g2ref.skel")
	rRef, _ := push(m2, ref, "2", "--prev", s1, "--prev-skeleton", s1)
	s2 := filepath.Join(d, "g2.skel")
	r2, _ := push(m2, s2, "2", "--prev", s1, "--prev-skeleton", s1, "--segment-cache", cache)
	// 17 segments, w's 4th changed: 16 unchanged.
	if r2["cache_hits"].(float64) != 16 || r2["manifest"] != rRef["manifest"] || rRef["cache_hits"].(float64) != 0 {
		t.Fatalf("gen 2 with the cache: %v; without: %v", r2, rRef)
	}
	a, _ := os.ReadFile(s2)
	b, _ := os.ReadFile(ref)
	if !bytes.Equal(a, b) {
		t.Fatal("skeletons with and without the segment cache differ")
	}
	// The cache now describes gen 2: pushing gen 2 again hits everything.
	if r, _ := push(m2, s2, "2", "--prev", s1, "--prev-skeleton", ref, "--segment-cache", cache); r["cache_hits"].(float64) != 17 {
		t.Fatalf("gen 2 again: %v", r)
	}

	// An unusable cache file: a warning, every segment hashed, same output.
	os.WriteFile(cache, []byte("not a cache\n"), 0o600)
	r3, errs := push(m2, s2, "2", "--prev", s1, "--prev-skeleton", s1, "--segment-cache", cache)
	if r3["cache_hits"].(float64) != 0 || r3["manifest"] != rRef["manifest"] || !strings.Contains(errs, "segment cache not used") || strings.Contains(errs, "not a cache") {
		t.Fatalf("bad cache file: %v\n%s", r3, errs)
	}
	if a, _ := os.ReadFile(s2); !bytes.Equal(a, b) {
		t.Fatal("skeleton differs after a bad cache file")
	}
	if c, _ := os.ReadFile(cache); !bytes.HasPrefix(c, []byte("snapd-segment-cache 1 ")) {
		t.Fatal("the bad cache file was not rewritten")
	}

	// Usage errors: no key to derive from; a WTXT input.
	code, _, errs := snapd(t, nil, "oci", "push", m2, "--oci-repository", repo, "--skeleton", s2, "--segment-cache", cache)
	if code != 2 || !strings.Contains(errs, "--segment-cache needs") {
		t.Fatalf("no key: exit %d\n%s", code, errs)
	}
	g := filepath.Join(d, "g.wtxt")
	mustRun(t, "convert", m1, g, "--gen", "1")
	code, _, errs = snapd(t, nil, "oci", "push", g, "--oci-repository", repo, "--skeleton", s2, "--segment-cache", cache)
	if code != 2 || !strings.Contains(errs, "--segment-cache applies to a checkpoint input") {
		t.Fatalf("WTXT input: exit %d\n%s", code, errs)
	}
}
