package wtxt

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/snapshot"
)

// goldenRoots are the roots of the golden files (the streamed one with its
// WSUM), which Check accepts.
func goldenRoots(t testing.TB) []Root {
	var out []Root
	for _, name := range []string{"golden-tiny.wtxt", "golden-signed.wtxt", "golden-ext.wtxt", "golden-stream.wtxt"} {
		b := formatstest.ReadTestdata(t, name)
		x, err := ReadIndex(context.Background(), name, snapshot.Bytes(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		var w *WSUM
		if x.Header.Pending {
			if w, err = ParseWSUM(formatstest.ReadTestdata(t, "golden-stream.wsum")); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, x.Header.Complete(w))
	}
	return out
}

// Root's text form round-trips, agrees with the header it came from and
// with the Merkle rule; Encode's Result carries the same Root the parser
// reads back.
func TestRoot(t *testing.T) {
	for _, r := range goldenRoots(t) {
		if err := r.Check(); err != nil {
			t.Errorf("%s: %v", r, err)
		}
		p, err := ParseRoot(r.String())
		if err != nil || p != r {
			t.Errorf("ParseRoot(%s) = %+v, %v", r, p, err)
		}
		bad := r
		bad.Build += "x"
		if bad.Check() == nil {
			t.Errorf("%s: a changed build still checks", r)
		}
	}
	s := &snapshot.Snapshot{Meta: snapshot.Meta{Schema: "weights/v1", Gen: 7, TS: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Build: "b1", Host: "cpu", Cuda: "off"},
		Arrays: []*snapshot.Array{{Name: "a", DType: snapshot.U8, Shape: []int64{3}, Data: snapshot.Bytes("abc")}}}
	var buf strings.Builder
	res, err := Encode(context.Background(), &buf, s, EncodeOptions{PrevMerkle: [32]byte{1}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ReadHeader(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if res.Root != h.Root || res.Gen != "000007" || res.Build != "b1" || res.Root.Check() != nil {
		t.Errorf("encode result %+v, header %+v", res.Root, h.Root)
	}
}

// ParseRoot refuses every malformed form with an error naming the field
// and never quoting the input.
func TestParseRootRefuses(t *testing.T) {
	good := goldenRoots(t)[0].String()
	for name, in := range map[string]string{
		"empty":       "",
		"order":       strings.Replace(good, "gen=", "geN=", 1),
		"short gen":   strings.Replace(good, "gen=000", "gen=0", 1),
		"ts":          strings.Replace(good, "T", " ", 1),
		"upper hex":   strings.Replace(good, "sha256_all=", "sha256_all=A", 1)[:len(good)],
		"extra field": good + " x=1",
		"two spaces":  strings.Replace(good, " ", "  ", 1),
		"long":        good + strings.Repeat(" ", 2000),
		"empty build": strings.Replace(good, "build="+goldenRoots(t)[0].Build, "build=", 1),
	} {
		if _, err := ParseRoot(in); err == nil {
			t.Errorf("%s: accepted", name)
		} else if len(in) > 20 && strings.Contains(err.Error(), in[len(in)-20:]) {
			t.Errorf("%s: the error quotes the input: %v", name, err)
		}
	}
}

// FuzzParseRoot: ParseRoot never panics, and what it accepts is canonical
// (String gives the input back).
func FuzzParseRoot(f *testing.F) {
	// Seeded from the testdata's roots (goldenRoots fails when a file is
	// missing).
	for _, r := range goldenRoots(f) {
		f.Add(r.String())
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRoot(s)
		if err == nil && r.String() != s {
			t.Fatalf("accepted %q, which prints as %q", s, r.String())
		}
	})
}

// Fields is the text the WTXT header carries: for each golden file its
// hash values are the file's root (or WSUM) line values and its gen, ts
// and build the meta line's, its keys the same for every Root, and
// String is built from them.
func TestRootFields(t *testing.T) {
	keys := Root{}.Fields()
	files := []string{"golden-tiny.wtxt", "golden-signed.wtxt", "golden-ext.wtxt", "golden-stream.wsum"}
	for i, r := range goldenRoots(t) {
		text := string(formatstest.ReadTestdata(t, files[i]))
		f := r.Fields()
		var kv []string
		for i, fi := range f {
			if fi.Key != keys[i].Key {
				t.Errorf("%s: key %d is %s, want %s", r, i, fi.Key, keys[i].Key)
			}
			kv = append(kv, fi.Key+"="+fi.Value)
		}
		if strings.Join(kv, " ") != r.String() {
			t.Errorf("String %q, fields %q", r.String(), kv)
		}
		hashes := "sha256_all=" + f[3].Value + " merkle_prev=" + f[4].Value + " merkle_this=" + f[5].Value
		if !strings.Contains(text, " "+hashes) {
			t.Errorf("%s does not carry %s", files[i], hashes)
		}
		if i < 3 && !strings.Contains(text, " gen="+f[0].Value+" ts="+f[1].Value+" build="+f[2].Value+" ") {
			t.Errorf("%s: meta does not carry gen %s ts %s build %s", files[i], f[0].Value, f[1].Value, f[2].Value)
		}
	}
}
