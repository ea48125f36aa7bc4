package numpy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// findNumpy returns a python3 that imports numpy, or skips the test.
func findNumpy(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("cross-check with the real NumPy skipped in -short mode")
	}
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		py, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		if exec.Command(py, "-c", "import numpy").Run() == nil {
			return py
		}
	}
	t.Skip("no python3 with numpy (Debian: apt-get install python3-numpy); skipping the NumPy cross-check")
	return ""
}

type manifestArray struct {
	DType   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Fortran bool    `json:"fortran"`
	SHA256  string  `json:"sha256"`
}

func openFile(t *testing.T, path string) *snapshot.Snapshot {
	t.Helper()
	m, err := snapshot.MapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	s, err := codecFor(path).Decode(context.Background(), m, m.Size(), formats.DecodeOptions{Name: filepath.Base(path)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func writeFile(t *testing.T, path string, s *snapshot.Snapshot) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := codecFor(path).Encode(context.Background(), f, s, formats.EncodeOptions{}); err != nil {
		t.Fatalf("%s: %v", filepath.Base(path), err)
	}
}

// TestNumPyWritesSnapdReads: NumPy writes every dtype in both byte orders
// and both orders, v2.0/v3.0 headers, 0-d, zero-size, savez and
// savez_compressed (unsorted keys, a non-portable key); snapd reads each to
// the values NumPy reports and writes it back byte for byte (compressed
// members: the same arrays).
//
// TestSnapdWritesNumPyReads (same NumPy files): snapd writes .npy/.npz with
// default layout (must equal np.save/np.savez byte for byte), and with
// Fortran order, big-endian, v2.0/v3.0 and deflate set by attributes;
// np.load(allow_pickle=False) loads each equal to the original.
func TestNumPyCrossCheck(t *testing.T) {
	py := findNumpy(t)
	dir := t.TempDir()
	gen := exec.Command(py, "testdata/numpy_cases.py", "gen", dir)
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("numpy gen: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest map[string]map[string]manifestArray
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) < 50 {
		t.Fatalf("numpy wrote only %d files", len(manifest))
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	var pairs [][3]any
	names := make([]string, 0, len(manifest))
	for n := range manifest {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		want := manifest[name]
		path := filepath.Join(dir, name)
		s := openFile(t, path)
		if len(s.Arrays) != len(want) {
			t.Fatalf("%s: %d arrays, numpy has %d", name, len(s.Arrays), len(want))
		}
		for _, a := range s.Arrays {
			key := a.Name
			if v, ok := a.Attrs[AttrName]; ok {
				key = v
			}
			if strings.HasSuffix(name, ".npy") {
				key = ""
			}
			w, ok := want[key]
			if !ok {
				t.Fatalf("%s: array %q (key %q) not in numpy's file", name, a.Name, key)
			}
			descr := npyDescr[a.DType]
			if a.Attrs[AttrByteOrder] == "big" {
				descr = ">" + descr[1:]
			}
			if descr != w.DType || !reflect.DeepEqual(a.Shape, w.Shape) {
				t.Fatalf("%s[%q]: %s %v, numpy says %s %v", name, key, descr, a.Shape, w.DType, w.Shape)
			}
			if w.Fortran && a.Attrs[AttrFortranOrder] != "true" {
				t.Fatalf("%s[%q]: Fortran order not recorded", name, key)
			}
			b := readOdd(t, a.Data)
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != w.SHA256 {
				t.Fatalf("%s[%q]: C-order little-endian bytes differ from numpy's", name, key)
			}
		}
		// snapd writes it back
		back := filepath.Join(out, "same_"+name)
		writeFile(t, back, s)
		x, _ := os.ReadFile(path)
		y, _ := os.ReadFile(back)
		if string(x) != string(y) && !strings.HasPrefix(name, "savez_compressed") {
			t.Fatalf("%s: written back not byte-identical", name)
		}
		pairs = append(pairs, [3]any{back, path, false})

		// default layout: must be what np.save / np.savez write
		plain := stripLayout(s)
		pl := filepath.Join(out, "plain_"+name)
		writeFile(t, pl, plain)
		pairs = append(pairs, [3]any{pl, path, true})

		// every layout attribute set at once
		for _, v := range []string{"2.0", "3.0"} {
			fancy := withLayout(s, v)
			fp := filepath.Join(out, "v"+v+"_"+name)
			writeFile(t, fp, fancy)
			pairs = append(pairs, [3]any{fp, path, false})
			// and snapd reads its own fancy file back to the same arrays
			sameData(t, s, openFile(t, fp))
		}
	}
	pj := filepath.Join(dir, "pairs.json")
	b, _ := json.Marshal(pairs)
	if err := os.WriteFile(pj, b, 0o644); err != nil {
		t.Fatal(err)
	}
	chk := exec.Command(py, "testdata/numpy_cases.py", "check", pj)
	if o, err := chk.CombinedOutput(); err != nil {
		t.Fatalf("numpy check: %v\n%s", err, o)
	} else {
		t.Logf("%s", strings.TrimSpace(string(o)))
	}
}

// stripLayout returns s with every layout attribute removed (names kept).
func stripLayout(s *snapshot.Snapshot) *snapshot.Snapshot {
	out := &snapshot.Snapshot{Meta: s.Meta, Attrs: s.Attrs}
	for _, a := range s.Arrays {
		c := *a
		c.Attrs = nil
		if v, ok := a.Attrs[AttrName]; ok {
			c.Attrs = map[string]string{AttrName: v}
		}
		out.Arrays = append(out.Arrays, &c)
	}
	return out
}

// withLayout returns s with Fortran order, big-endian (multi-byte real dtypes),
// header version v and deflated members.
func withLayout(s *snapshot.Snapshot, v string) *snapshot.Snapshot {
	out := stripLayout(s)
	for _, a := range out.Arrays {
		if a.Attrs == nil {
			a.Attrs = map[string]string{}
		}
		a.Attrs[AttrVersion] = v
		a.Attrs[AttrFortranOrder] = "true"
		a.Attrs[AttrZipMethod] = "deflate"
		// (snapd writes no big-endian complex array in Fortran order)
		if a.DType.Size() > 1 && !a.DType.IsComplex() {
			a.Attrs[AttrByteOrder] = "big"
		}
	}
	return out
}

// sameData compares names, dtypes, shapes and bytes (not attributes).
func sameData(t *testing.T, a, b *snapshot.Snapshot) {
	t.Helper()
	as, bs := a.Sorted(), b.Sorted()
	if len(as) != len(bs) {
		t.Fatalf("%d arrays, want %d", len(bs), len(as))
	}
	for i := range as {
		x, y := as[i], bs[i]
		if x.Name != y.Name || x.DType != y.DType || !reflect.DeepEqual(x.Shape, y.Shape) {
			t.Fatalf("array %q came back as %q %s %v", x.Name, y.Name, y.DType, y.Shape)
		}
		xb, _ := snapshot.ReadAll(x.Data)
		yb, _ := snapshot.ReadAll(y.Data)
		if string(xb) != string(yb) {
			t.Fatalf("array %q: bytes differ", x.Name)
		}
	}
}
