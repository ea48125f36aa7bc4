package layout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// splitToMap splits data and returns the manifest and the parts by name,
// checking the limit and the emit order against the manifest.
func splitToMap(t testing.TB, data []byte, limit int64) (*Manifest, map[string][]byte) {
	t.Helper()
	parts := map[string][]byte{}
	var order []string
	m, err := SplitParts(t.Context(), bytes.NewReader(data), int64(len(data)), limit, func(pt Part, p []byte) error {
		name := pt.Name
		if _, dup := parts[name]; dup {
			t.Fatalf("part %s emitted twice", name)
		}
		if int64(len(p)) > limit {
			t.Fatalf("part %s: %d bytes > limit %d", name, len(p), limit)
		}
		parts[name] = bytes.Clone(p)
		order = append(order, name)
		return nil
	})
	if err != nil {
		t.Fatalf("Split: %v", err)
	}
	if len(order) != len(m.Parts) {
		t.Fatalf("%d parts emitted, manifest lists %d", len(order), len(m.Parts))
	}
	for i, p := range m.Parts {
		if p.Name != order[i] {
			t.Fatalf("manifest part %d is %s, emitted %s", i, p.Name, order[i])
		}
	}
	return m, parts
}

func assembleMap(t testing.TB, m *Manifest, parts map[string][]byte) ([]byte, error) {
	t.Helper()
	fsys := fstest.MapFS{ManifestName: {Data: m.Encode()}}
	for n, p := range parts {
		fsys[n] = &fstest.MapFile{Data: p}
	}
	var out bytes.Buffer
	err := AssembleFS(fsys, ".", &out)
	return out.Bytes(), err
}

func bigWTXT(seed int) []byte {
	w, _ := genWTXT(7, "", []testArray{
		{name: "a.weight", data: pseudo(seed, 300_000), chunk: 4096},
		{name: "b/bias", data: pseudo(seed+1, 1000)},
		{name: "c.huge", data: pseudo(seed+2, 120_000), chunk: 100_000}, // a chunk larger than the part limit
		{name: "d.empty", data: nil},
		{name: "e:small", data: pseudo(seed+3, 57*3), chunk: 57},
		{name: "f.tiny_chunks", data: pseudo(seed+4, 60_000), chunk: 64}, // per-chunk overhead dominates
	})
	return w
}

func TestSplitAssembleStructured(t *testing.T) {
	data := bigWTXT(1)
	for _, limit := range []int64{MinPartLimit, 100_000, 1 << 20} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			m, parts := splitToMap(t, data, limit)
			sum := sha256.Sum256(data)
			if m.Bytes != int64(len(data)) || m.SHA256 != hex.EncodeToString(sum[:]) {
				t.Fatalf("manifest bytes=%d sha=%s, want %d %x", m.Bytes, m.SHA256, len(data), sum)
			}
			got, err := assembleMap(t, m, parts)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("reassembled bytes differ")
			}
			// Boundaries: every part starts at a structural line.
			for _, p := range m.Parts {
				first, _, _ := strings.Cut(string(parts[p.Name]), "\n")
				switch {
				case p.Name == "0000-header.part":
					if first != "WTXT 1" {
						t.Errorf("header part starts %q", first)
					}
				case p.Name == "9999-trailer.part":
					if string(parts[p.Name]) != "endwtxt\n" {
						t.Errorf("trailer part %q", parts[p.Name])
					}
				case strings.HasSuffix(p.Name, ".head.part"):
					if !strings.HasPrefix(first, "arr ") {
						t.Errorf("%s starts %q", p.Name, first)
					}
				case strings.Contains(p.Name, ".l") && !strings.HasSuffix(p.Name, ".l0000000.part"):
					// continuation of an oversized chunk: base64 lines
					if len(first) != 78 {
						t.Errorf("%s starts %q", p.Name, first)
					}
				default:
					if !strings.HasPrefix(first, "ch ix=") {
						t.Errorf("%s starts %q", p.Name, first)
					}
				}
			}
		})
	}
}

func TestSplitPartsPerChunkRun(t *testing.T) {
	// 300000 bytes in 4096-byte chunks at the minimum limit: a chunk
	// encodes to ~5.8 KB, so several chunks share a part, runs aligned on ix.
	data, _ := genWTXT(1, "", []testArray{{name: "w", data: pseudo(5, 300_000), chunk: 4096}})
	m, parts := splitToMap(t, data, MinPartLimit)
	var chunkParts []string
	for _, p := range m.Parts {
		if strings.Contains(p.Name, ".c") {
			chunkParts = append(chunkParts, p.Name)
		}
	}
	// 74 chunks; K = (65536-512)/(ch line 157 + 72*79 + 13) = 11 per part.
	if len(chunkParts) != 7 {
		t.Fatalf("chunk parts %v", chunkParts)
	}
	prefix := ArrayPartPrefix("w")
	for i, n := range chunkParts {
		if want := fmt.Sprintf("%s.c%06d.part", prefix, i*11); n != want {
			t.Errorf("part %d = %s, want %s", i, n, want)
		}
		if c := strings.Count(string(parts[n]), "\nendch\n"); i < 6 && c != 11 {
			t.Errorf("part %s holds %d chunks", n, c)
		}
	}
}

// TestSplitBlobStability changes one chunk of one array: only the header,
// that array's head part and the part holding the chunk may change.
func TestSplitBlobStability(t *testing.T) {
	a := pseudo(1, 300_000)
	b := pseudo(2, 50_000)
	gen1, mt := genWTXT(1, "", []testArray{{name: "a", data: a, chunk: 4096}, {name: "b", data: b, chunk: 4096}})
	a2 := bytes.Clone(a)
	a2[4096*23+17] ^= 0xff // chunk 23 → part c000022 (11 chunks per part)
	gen2, _ := genWTXT(2, mt, []testArray{{name: "a", data: a2, chunk: 4096}, {name: "b", data: b, chunk: 4096}})
	m1, _ := splitToMap(t, gen1, MinPartLimit)
	m2, _ := splitToMap(t, gen2, MinPartLimit)
	old := map[string]Part{}
	for _, p := range m1.Parts {
		old[p.Name] = p
	}
	var changed []string
	for _, p := range m2.Parts {
		if old[p.Name] != p {
			changed = append(changed, p.Name)
		}
	}
	pa := ArrayPartPrefix("a")
	want := []string{"0000-header.part", pa + ".head.part", pa + ".c000022.part"}
	if fmt.Sprint(changed) != fmt.Sprint(want) {
		t.Fatalf("changed parts %v, want %v", changed, want)
	}
	if len(m1.Parts) != len(m2.Parts) {
		t.Fatalf("part count %d → %d", len(m1.Parts), len(m2.Parts))
	}
}

func TestSplitGeneric(t *testing.T) {
	noLF := pseudo(3, 200_000)
	for i := range noLF {
		if noLF[i] == '\n' {
			noLF[i] = 'x'
		}
	}
	var text bytes.Buffer
	for i := 0; text.Len() < 300_000; i++ {
		fmt.Fprintf(&text, "line %d %s\n", i, strings.Repeat("y", i%300))
	}
	delta := append([]byte("WTXT-DELTA 2 base_sha256_all="+strings.Repeat("0", 64)+"\n"), bigWTXT(4)[7:]...)
	for name, data := range map[string][]byte{"binary-no-lf": noLF, "text": text.Bytes(), "delta": delta, "empty": nil, "tiny": []byte("x"), "exact": bytes.Repeat([]byte("z\n"), MinPartLimit/2)} {
		t.Run(name, func(t *testing.T) {
			m, parts := splitToMap(t, data, MinPartLimit)
			got, err := assembleMap(t, m, parts)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("round trip: err=%v equal=%v", err, bytes.Equal(got, data))
			}
			for i, p := range m.Parts {
				if want := fmt.Sprintf("blob.%06d.part", i); p.Name != want {
					t.Fatalf("part %d name %s", i, p.Name)
				}
				// With LFs present, parts end at line boundaries.
				if name == "text" && !bytes.HasSuffix(parts[p.Name], []byte("\n")) {
					t.Fatalf("part %s does not end with LF", p.Name)
				}
			}
		})
	}
}

func TestSplitErrors(t *testing.T) {
	good := bigWTXT(9)
	cases := map[string][]byte{
		"missing endwtxt":   bytes.TrimSuffix(good, []byte("endwtxt\n")),
		"data after end":    append(bytes.Clone(good), "x\n"...),
		"no final LF":       bytes.TrimSuffix(good, []byte("\n")),
		"wrong line count":  bytes.Replace(good, []byte("lines=1\n"), []byte("lines=2\n"), 1),
		"ix gap":            bytes.Replace(good, []byte("ch ix=000001"), []byte("ch ix=000002"), 1),
		"junk between":      bytes.Replace(good, []byte("endarr\narr "), []byte("endarr\njunk\narr "), 1),
		"missing endch":     bytes.Replace(good, []byte("endch\nendarr\n"), []byte("endarr\n"), 1),
		"long line":         append([]byte("WTXT 1\n"+strings.Repeat("m", maxLine+10)+"\n"), good[7:]...),
		"duplicate array":   dupArray(good),
		"arr without name":  bytes.Replace(good, []byte("arr name=a.weight"), []byte("arr nome=a.weight"), 1),
		"base64 line long":  longB64(good),
		"only magic":        []byte("WTXT 1\n"),
		"endwtxt then junk": bytes.Replace(good, []byte("endwtxt\n"), []byte("endwtxt\nendwtxt\n"), 1),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			if bytes.Equal(data, good) {
				t.Fatal("test case did not change the input")
			}
			_, err := SplitParts(t.Context(), bytes.NewReader(data), int64(len(data)), MinPartLimit, func(Part, []byte) error { return nil })
			if !errors.Is(err, ErrParts) {
				t.Fatalf("err = %v, want ErrParts", err)
			}
		})
	}
	for _, limit := range []int64{0, MinPartLimit - 1, MaxPartLimit + 1} {
		if _, err := SplitParts(t.Context(), bytes.NewReader(good), int64(len(good)), limit, func(Part, []byte) error { return nil }); !errors.Is(err, ErrParts) {
			t.Errorf("limit %d: err = %v", limit, err)
		}
	}
	boom := errors.New("boom")
	if _, err := SplitParts(t.Context(), bytes.NewReader(good), int64(len(good)), MinPartLimit, func(Part, []byte) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("emit error not returned: %v", err)
	}
}

// dupArray repeats the first array block, giving two parts with one name.
func dupArray(w []byte) []byte {
	s := string(w)
	i := strings.Index(s, "\narr ") + 1
	j := strings.Index(s, "\nendarr\n") + len("\nendarr\n")
	return []byte(s[:j] + s[i:j] + s[j:])
}

// longB64 makes the first base64 line 5 bytes longer.
func longB64(w []byte) []byte {
	s := string(w)
	i := strings.Index(s, "\nch ix=") + 1
	i += strings.IndexByte(s[i:], '\n') + 1
	return []byte(s[:i] + "xxxxx" + s[i:])
}

func TestParseManifest(t *testing.T) {
	data := bigWTXT(2)
	m, _ := splitToMap(t, data, MinPartLimit)
	enc := m.Encode()
	got, err := ParseManifest(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Encode(), enc) {
		t.Fatal("manifest does not re-encode")
	}
	h := strings.Repeat("a", 64)
	bad := map[string]string{
		"empty":          "",
		"no LF":          strings.TrimSuffix(string(enc), "\n"),
		"bad magic":      "WTXT-PARTS 2 bytes=0 sha256=" + h + " parts=0\n",
		"count mismatch": "WTXT-PARTS 1 bytes=1 sha256=" + h + " parts=2\nx.part 1 " + h + "\n",
		"size mismatch":  "WTXT-PARTS 1 bytes=2 sha256=" + h + " parts=1\nx.part 1 " + h + "\n",
		"traversal":      "WTXT-PARTS 1 bytes=1 sha256=" + h + " parts=1\n../x.part 1 " + h + "\n",
		"slash":          "WTXT-PARTS 1 bytes=1 sha256=" + h + " parts=1\na/x.part 1 " + h + "\n",
		"dot name":       "WTXT-PARTS 1 bytes=1 sha256=" + h + " parts=1\n.x.part 1 " + h + "\n",
		"dup":            "WTXT-PARTS 1 bytes=2 sha256=" + h + " parts=2\nx.part 1 " + h + "\nx.part 1 " + h + "\n",
		"leading zero":   "WTXT-PARTS 1 bytes=01 sha256=" + h + " parts=1\nx.part 01 " + h + "\n",
		"negative":       "WTXT-PARTS 1 bytes=0 sha256=" + h + " parts=2\nx.part -1 " + h + "\ny.part 1 " + h + "\n",
		"upper hex":      "WTXT-PARTS 1 bytes=1 sha256=" + strings.ToUpper(h) + " parts=1\nx.part 1 " + h + "\n",
		"extra space":    "WTXT-PARTS 1  bytes=1 sha256=" + h + " parts=1\nx.part 1 " + h + "\n",
		"trailing field": "WTXT-PARTS 1 bytes=1 sha256=" + h + " parts=1 x=y\nx.part 1 " + h + "\n",
		"overflow":       "WTXT-PARTS 1 bytes=9223372036854775807 sha256=" + h + " parts=2\nx.part 9223372036854775807 " + h + "\ny.part 9223372036854775807 " + h + "\n",
		"not a part":     "WTXT-PARTS 1 bytes=1 sha256=" + h + " parts=1\nMANIFEST 1 " + h + "\n",
	}
	for name, s := range bad {
		if _, err := ParseManifest([]byte(s)); !errors.Is(err, ErrParts) {
			t.Errorf("%s: err = %v, want ErrParts", name, err)
		}
	}
}

func TestAssembleDetectsDamage(t *testing.T) {
	data := bigWTXT(3)
	m, parts := splitToMap(t, data, MinPartLimit)
	dir := t.TempDir()
	for n, p := range parts {
		writeFile(t, dir, n, p)
	}
	writeFile(t, dir, ManifestName, m.Encode())
	var out bytes.Buffer
	if err := Assemble(dir, &out); err != nil || !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("Assemble: %v", err)
	}
	victim := m.Parts[2].Name
	orig := parts[victim]
	for name, mutate := range map[string]func(){
		"flipped byte": func() { b := bytes.Clone(orig); b[5] ^= 1; writeFile(t, dir, victim, b) },
		"extra byte":   func() { writeFile(t, dir, victim, append(bytes.Clone(orig), 'x')) },
		"short":        func() { writeFile(t, dir, victim, orig[:len(orig)-1]) },
		"missing":      func() { os.Remove(filepath.Join(dir, victim)) },
		"whole sha": func() {
			m2 := *m
			m2.SHA256 = strings.Repeat("0", 64)
			writeFile(t, dir, ManifestName, m2.Encode())
		},
	} {
		t.Run(name, func(t *testing.T) {
			mutate()
			defer writeFile(t, dir, victim, orig)
			defer writeFile(t, dir, ManifestName, m.Encode())
			if err := Assemble(dir, &bytes.Buffer{}); err == nil {
				t.Fatal("damage not detected")
			}
		})
	}
}

// FuzzSplit: seeds in testdata/fuzz/FuzzSplit (TestWriteFuzzSeeds).
func FuzzSplit(f *testing.F) {
	requireSeeds(f, "FuzzSplit")
	f.Fuzz(func(t *testing.T, data []byte) {
		parts := map[string][]byte{}
		m, err := SplitParts(t.Context(), bytes.NewReader(data), int64(len(data)), MinPartLimit, func(pt Part, p []byte) error {
			name := pt.Name
			if int64(len(p)) > MinPartLimit {
				t.Fatalf("part %s too big", name)
			}
			parts[name] = bytes.Clone(p)
			return nil
		})
		if err != nil {
			if !errors.Is(err, ErrParts) {
				t.Fatalf("error not ErrParts: %v", err)
			}
			return
		}
		if _, err := ParseManifest(m.Encode()); err != nil {
			t.Fatalf("manifest does not parse: %v", err)
		}
		got, err := assembleMap(t, m, parts)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("round trip failed: %v", err)
		}
	})
}
