package wtxt

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// cacheGen returns generation gen of a model whose rows [lo, hi) of "w"
// differ from generation 1's (gen XORed in), read through ReaderAt (as a
// checkpoint file is) or from memory.
func cacheGen(gen uint64, lo, hi int, read bool) *snapshot.Snapshot {
	w := randArray(11, "w", snapshot.F32, 512, 256) // 1 KiB rows, 64 a chunk
	b, _ := snapshot.BytesOf(w.Data)
	for i := lo * 1024; i < hi*1024; i++ {
		b[i] ^= byte(gen)
	}
	arrs := []*snapshot.Array{randArray(12, "a.bias", snapshot.F32, 300), w, randArray(13, "z", snapshot.U8, 3, 70000)}
	if read {
		for _, a := range arrs {
			bb, _ := snapshot.BytesOf(a.Data)
			a.Data = readerOnly{snapshot.Bytes(bb)}
		}
	}
	return &snapshot.Snapshot{Meta: testMeta(gen), Arrays: arrs}
}

// prevSkel parses a skeleton EncodeSkeleton wrote.
func prevSkel(t *testing.T, skel []byte) *PrevSkeleton {
	t.Helper()
	p, err := ParsePrevSkeleton(context.Background(), skel, "prev.skel")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// cachedRun is EncodeSkeleton with c, and the cache file it leaves.
func cachedRun(t *testing.T, s *snapshot.Snapshot, opts EncodeOptions, sopts SplitOptions, c *SegmentCache) (*Result, *skelRun, []byte) {
	t.Helper()
	sopts.Cache = c
	res, r := encSkeleton(t, s, opts, sopts, nil)
	var f bytes.Buffer
	if _, err := c.WriteTo(&f); err != nil {
		t.Fatal(err)
	}
	return res, r, f.Bytes()
}

// TestSegmentCacheSkipsUnchanged: with the previous skeleton and the cache
// file its push left, EncodeSkeleton takes the chunk sums of every
// segment whose bytes did not change from the cache (and only those), and
// writes exactly what it writes without a cache; a cache made with
// another secret, an edited one, or a chunk geometry that changed gives
// misses, never other output.
func TestSegmentCacheSkipsUnchanged(t *testing.T) {
	secret := []byte("hmac key")
	opts := EncodeOptions{SignKey: testKey(1), HMACKey: secret}
	sopts := SplitOptions{SegmentSize: 128 << 10} // w: 4 segments of 128 rows
	for _, read := range []bool{true, false} {
		for _, workers := range []int{1, 3} {
			o := opts
			o.Workers = workers
			name := fmt.Sprintf("read=%v/workers=%d", read, workers)
			c1, err := NewSegmentCache(secret, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, r1, file1 := cachedRun(t, cacheGen(1, 0, 0, read), o, sopts, c1)
			if c1.Hits() != 0 || len(r1.segs) < 6 {
				t.Fatalf("%s: gen 1: %d hits, %d segments", name, c1.Hits(), len(r1.segs))
			}
			// Gen 2 changes rows 130-140 of w: its second segment only.
			wres, want := encSkeleton(t, cacheGen(2, 130, 140, read), o, sopts, nil)
			c2, err := NewSegmentCache(secret, prevSkel(t, r1.skel), file1)
			if err != nil {
				t.Fatal(err)
			}
			gres, got, file2 := cachedRun(t, cacheGen(2, 130, 140, read), o, sopts, c2)
			sameRun(t, name+"/gen 2", wres, gres, want, got)
			if c2.Hits() != int64(len(got.segs)-1) {
				t.Fatalf("%s: gen 2: %d hits of %d segments, want all but the changed one", name, c2.Hits(), len(got.segs))
			}
			// Gen 3 from gen 2's cache: rows 130-140 change again, and
			// rows 0-1 (the first segment of w).
			wres3, want3 := encSkeleton(t, cacheGen(3, 0, 140, read), o, sopts, nil)
			c3, err := NewSegmentCache(secret, prevSkel(t, got.skel), file2)
			if err != nil {
				t.Fatal(err)
			}
			gres3, got3, _ := cachedRun(t, cacheGen(3, 0, 140, read), o, sopts, c3)
			sameRun(t, name+"/gen 3", wres3, gres3, want3, got3)
			if c3.Hits() != int64(len(got3.segs)-2) {
				t.Fatalf("%s: gen 3: %d hits of %d segments, want all but two", name, c3.Hits(), len(got3.segs))
			}
		}
	}

	// Another secret: its cache file is ignored.
	c1, _ := NewSegmentCache(secret, nil, nil)
	_, r1, file1 := cachedRun(t, cacheGen(1, 0, 0, true), opts, sopts, c1)
	wres, want := encSkeleton(t, cacheGen(2, 130, 140, true), opts, sopts, nil)
	other, _ := NewSegmentCache([]byte("another key"), prevSkel(t, r1.skel), file1)
	gres, got, _ := cachedRun(t, cacheGen(2, 130, 140, true), opts, sopts, other)
	sameRun(t, "other secret", wres, gres, want, got)
	if other.Hits() != 0 || other.KeyID() == c1.KeyID() {
		t.Fatalf("a cache file of another secret gave %d hits", other.Hits())
	}

	// Edited files: a tag moved to the changed segment's line (it then
	// claims that segment's old key for the new bytes), or flipped.
	lines := strings.Split(string(file1), "\n")
	var changed, donor int
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "w 2 "):
			changed = i
		case strings.HasPrefix(l, "w 0 "):
			donor = i
		}
	}
	if changed == 0 || donor == 0 {
		t.Fatalf("cache file lines: %q", lines)
	}
	for name, tc := range map[string]struct {
		misses int
		edit   func([]string)
	}{
		// The moved tag does not prove the changed bytes: one miss, as
		// without the edit.
		"moved tag": {1, func(l []string) {
			l[changed] = l[changed][:strings.LastIndex(l[changed], " ")] + l[donor][strings.LastIndex(l[donor], " "):]
		}},
		// The flipped one proves nothing: its unchanged segment misses too.
		"flipped tag": {2, func(l []string) {
			b := []byte(l[donor])
			b[len(b)-1] ^= 1
			if b[len(b)-1] > 'f' || (b[len(b)-1] > '9' && b[len(b)-1] < 'a') {
				b[len(b)-1] = '0'
			}
			l[donor] = string(b)
		}},
	} {
		l := append([]string(nil), lines...)
		tc.edit(l)
		c, err := NewSegmentCache(secret, prevSkel(t, r1.skel), []byte(strings.Join(l, "\n")))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		gres, got, _ := cachedRun(t, cacheGen(2, 130, 140, true), opts, sopts, c)
		sameRun(t, name, wres, gres, want, got)
		if c.Hits() != int64(len(got.segs)-tc.misses) {
			t.Fatalf("%s: %d hits of %d segments, want %d misses", name, c.Hits(), len(got.segs), tc.misses)
		}
	}

	// The same bytes cut into other chunks: sums from the cache would
	// be wrong, so none is taken.
	o2 := opts
	o2.RowsPerChunk = 32
	wres, want = encSkeleton(t, cacheGen(1, 0, 0, true), o2, sopts, nil)
	c, _ := NewSegmentCache(secret, prevSkel(t, r1.skel), file1)
	gres, got, _ = cachedRun(t, cacheGen(1, 0, 0, true), o2, sopts, c)
	sameRun(t, "rows_per_chunk 32", wres, gres, want, got)
	if hits := c.Hits(); hits != 0 {
		t.Fatalf("another chunk geometry: %d hits", hits)
	}
}

// TestSegmentCacheChunkGeometry: the same bytes at the same place (array,
// first chunk, chunk count, size) but cut into other chunks have other
// chunk sums: the cache must miss.
func TestSegmentCacheChunkGeometry(t *testing.T) {
	secret := []byte("k")
	mk := func() *snapshot.Snapshot {
		return &snapshot.Snapshot{Meta: testMeta(1), Arrays: []*snapshot.Array{randArray(5, "w", snapshot.F32, 128, 256)}}
	}
	sopts := SplitOptions{SegmentSize: 1 << 20}
	c1, _ := NewSegmentCache(secret, nil, nil)
	_, r1, file1 := cachedRun(t, mk(), EncodeOptions{HMACKey: secret, RowsPerChunk: 64}, sopts, c1) // 2 chunks of 64 KiB
	o := EncodeOptions{HMACKey: secret, RowsPerChunk: 100}                                          // 2 chunks: 100 KiB and 28 KiB
	wres, want := encSkeleton(t, mk(), o, sopts, nil)
	c, err := NewSegmentCache(secret, prevSkel(t, r1.skel), file1)
	if err != nil {
		t.Fatal(err)
	}
	gres, got, _ := cachedRun(t, mk(), o, sopts, c)
	sameRun(t, "rows_per_chunk 64 then 100", wres, gres, want, got)
	if len(got.segs) != 1 || got.segs[0].Chunks != 2 || c.Hits() != 0 {
		t.Fatalf("segments %+v, %d hits", got.segs, c.Hits())
	}
}

// TestParseSegmentCache: what WriteTo writes parses back; anything else is
// refused with the line named and nothing of the content echoed.
func TestParseSegmentCache(t *testing.T) {
	c, _ := NewSegmentCache([]byte("k"), nil, nil)
	c.learn(segPos{"w", 4, 2, 100}, SegmentKey{1}, [32]byte{2})
	c.learn(segPos{"a.b", 0, 1, 7}, SegmentKey{3}, [32]byte{4})
	var f bytes.Buffer
	c.WriteTo(&f)
	id, tags, err := parseSegmentCache(f.Bytes())
	if err != nil || id != c.KeyID() || len(tags) != 2 || tags[segPos{"w", 4, 2, 100}] != c.tag(SegmentKey{1}, [32]byte{2}) {
		t.Fatalf("round trip: %q %v %v\n%s", id, tags, err, f.Bytes())
	}
	head := SegmentCacheMagic + " keyid=" + c.KeyID() + "\n"
	tag := strings.Repeat("ab", 32)
	for name, tc := range map[string]struct{ in, want string }{
		"magic":     {"snapd-segment-cache 2 keyid=0011223344556677\n", "line 1"},
		"keyid":     {SegmentCacheMagic + " keyid=SECRET\n", "line 1: keyid"},
		"fields":    {head + "w 0 1 SECRET\n", "line 2"},
		"name":      {head + "w$ 0 1 5 " + tag + "\n", "line 2"},
		"decimal":   {head + "w 01 1 5 " + tag + "\n", "line 2"},
		"chunks":    {head + "w 0 0 5 " + tag + "\n", "line 2"},
		"tag":       {head + "w 0 1 5 " + strings.ToUpper(tag) + "\n", "line 2: tag"},
		"duplicate": {head + "w 0 1 5 " + tag + "\nw 0 1 5 " + tag + "\n", "line 3"},
		"no LF":     {head + "w 0 1 5 " + tag, "line 2: no LF"},
	} {
		_, _, err := parseSegmentCache([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
	if _, _, err := parseSegmentCache(make([]byte, MaxSegmentCacheBytes+1)); err == nil {
		t.Error("an oversized cache file was accepted")
	}
}

// FuzzParseSegmentCache: no input panics, and what parses writes back to
// something that parses to the same.
func FuzzParseSegmentCache(f *testing.F) {
	c, _ := NewSegmentCache([]byte("k"), nil, nil)
	c.learn(segPos{"w", 4, 2, 100}, SegmentKey{1}, [32]byte{2})
	var b bytes.Buffer
	c.WriteTo(&b)
	f.Add(b.Bytes())
	f.Add([]byte(SegmentCacheMagic + " keyid=0011223344556677\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		id, tags, err := parseSegmentCache(in)
		if err != nil {
			return
		}
		w := &SegmentCache{keyID: id, next: tags}
		var out bytes.Buffer
		w.WriteTo(&out)
		id2, tags2, err := parseSegmentCache(out.Bytes())
		if err != nil || id2 != id || len(tags2) != len(tags) {
			t.Fatalf("round trip: %v", err)
		}
		for p, tg := range tags {
			if tags2[p] != tg {
				t.Fatalf("round trip lost %+v", p)
			}
		}
	})
}

// TestSegmentCacheGivesUpOnDense: a push whose first cacheProbe segments
// the cache does not recognise (a dense update) stops using it (the
// segments left out are summed without the keyed BLAKE3, and not
// learned), with the same output; a sparse update uses it throughout, and
// a cache without a previous generation learns every segment.
func TestSegmentCacheGivesUpOnDense(t *testing.T) {
	secret := []byte("hmac key")
	opts := EncodeOptions{SignKey: testKey(1), HMACKey: secret, Workers: 2, RowsPerChunk: 8}
	sopts := SplitOptions{SegmentSize: 8 << 10} // w: 64 segments of one 8-row chunk
	learned := func(c *SegmentCache) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.next)
	}
	c1, _ := NewSegmentCache(secret, nil, nil)
	_, r1, file1 := cachedRun(t, cacheGen(1, 0, 0, true), opts, sopts, c1)
	if n := learned(c1); n != len(r1.segs) || n < 64 {
		t.Fatalf("gen 1 (no previous): learned %d of %d segments", n, len(r1.segs))
	}
	for _, tc := range []struct {
		name   string
		lo, hi int
		dense  bool
	}{{"dense", 0, 512, true}, {"sparse", 130, 140, false}} {
		wres, want := encSkeleton(t, cacheGen(2, tc.lo, tc.hi, true), opts, sopts, nil)
		c, err := NewSegmentCache(secret, prevSkel(t, r1.skel), file1)
		if err != nil {
			t.Fatal(err)
		}
		gres, got, _ := cachedRun(t, cacheGen(2, tc.lo, tc.hi, true), opts, sopts, c)
		sameRun(t, tc.name, wres, gres, want, got)
		n := learned(c)
		if tc.dense && n >= len(got.segs)/2 {
			t.Fatalf("dense: the cache went through %d of %d segments, want it given up after about %d", n, len(got.segs), cacheProbe)
		}
		if !tc.dense && (n != len(got.segs) || c.Hits() < int64(len(got.segs)-3)) {
			t.Fatalf("sparse: the cache went through %d of %d segments with %d hits", n, len(got.segs), c.Hits())
		}
	}
}

// TestChangedChunks: chunk by chunk, whatever the segment cut; an array
// the previous skeleton lacks counts whole.
func TestChangedChunks(t *testing.T) {
	opts := EncodeOptions{HMACKey: []byte("k"), RowsPerChunk: 8}
	_, r1 := encSkeleton(t, cacheGen(1, 0, 0, false), opts, SplitOptions{SegmentSize: 8 << 10}, nil)
	p1 := prevSkel(t, r1.skel)
	same, all := p1.ChangedChunks(p1)
	if same != 0 || all < 64+2 {
		t.Fatalf("itself: %d of %d chunks changed", same, all)
	}
	for _, tc := range []struct {
		name    string
		s       *snapshot.Snapshot
		seg     int64
		changed int64
	}{
		{"same, other cut", cacheGen(1, 0, 0, false), 64 << 10, 0},
		{"rows 130-140", cacheGen(2, 130, 140, false), 8 << 10, 2},
		{"every row of w", cacheGen(3, 0, 512, false), 1 << 20, 64},
	} {
		_, r := encSkeleton(t, tc.s, opts, SplitOptions{SegmentSize: tc.seg}, nil)
		changed, total := p1.ChangedChunks(prevSkel(t, r.skel))
		if changed != tc.changed || total != all {
			t.Fatalf("%s: %d of %d chunks changed, want %d of %d", tc.name, changed, total, tc.changed, all)
		}
	}
	extra := cacheGen(1, 0, 0, false)
	extra.Arrays = append(extra.Arrays, randArray(14, "new", snapshot.U8, 10, 1)) // 8 rows a chunk: 2 chunks
	_, r := encSkeleton(t, extra, opts, SplitOptions{}, nil)
	if changed, total := p1.ChangedChunks(prevSkel(t, r.skel)); changed != 2 || total != all+2 {
		t.Fatalf("a new array of 2 chunks: %d of %d chunks changed, want 2 of %d", changed, total, all+2)
	}
}
