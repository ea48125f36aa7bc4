package snapshot

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

func TestUserMetaCanonical(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"step": 1200, "epoch": 3, "loss": 0.41, "lr": 3e-4}`, `{"epoch":3,"loss":0.41,"lr":0.0003,"step":1200}`},
		{`{}`, ``},
		{" {\n\t\"a\" : true , \"b\":false,\"c\":null } ", `{"a":true,"b":false,"c":null}`},
		{`{"x":1.0,"z":1E2}`, `{"x":1,"z":100}`},
		{`{"a":1e-7,"b":1e21,"c":1e20,"d":123456789e-15,"e":-2.5e-6}`, `{"a":1e-7,"b":1e+21,"c":100000000000000000000,"d":1.23456789e-7,"e":-0.0000025}`},
		{`{"s":"a\u00e9\ud83d\ude00\"\\\/\b\f\n\r\t\u0001\u007f"}`, `{"s":"a\u00e9\ud83d\ude00\"\\/\b\f\n\r\t\u0001\u007f"}`},
		{`{"s":"é"}`, `{"s":"\u00e9"}`},
		{`{"n":9007199254740992,"m":-9007199254740992}`, `{"m":-9007199254740992,"n":9007199254740992}`},
		{`{"A.b-c_9":"x"}`, `{"A.b-c_9":"x"}`},
	} {
		m, err := ParseUserMeta([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if got := string(m.JSON()); got != c.want {
			t.Errorf("%s: got %s, want %s", c.in, got, c.want)
		}
		if c.want == "" {
			continue
		}
		// Canonical text parses to itself, and only it.
		m2, err := ParseUserMetaCanonical([]byte(c.want))
		if err != nil || !m2.Equal(m) {
			t.Errorf("%s: canonical reparse: %v", c.want, err)
		}
		if c.in != c.want {
			if _, err := ParseUserMetaCanonical([]byte(c.in)); err == nil {
				t.Errorf("%s: accepted as canonical", c.in)
			}
		}
		// The one-line form parses back.
		l, err := ParseUserMetaLine(m.String())
		if err != nil || !l.Equal(m) {
			t.Errorf("%q: line reparse: %v", m.String(), err)
		}
		// Canonical JSON is what encoding/json reads as the same values.
		var a, b map[string]any
		if err := json.Unmarshal([]byte(c.in), &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(m.JSON(), &b); err != nil {
			t.Fatalf("%s: %v", m.JSON(), err)
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("%s: values changed: %s vs %s", c.in, ja, jb)
		}
	}
}

func TestUserMetaRefused(t *testing.T) {
	long := strings.Repeat("k", 65)
	many := "{"
	for i := 0; i <= MaxUserMetaKeys; i++ {
		if i > 0 {
			many += ","
		}
		many += `"k` + strconv.Itoa(i) + `":1`
	}
	many += "}"
	big := `{"a":"` + strings.Repeat("x", 250) + `","b":"` + strings.Repeat("x", 250) + `","c":"` + strings.Repeat("x", 250) +
		`","d":"` + strings.Repeat("x", 250) + `","e":"` + strings.Repeat("x", 250) + `","f":"` + strings.Repeat("x", 250) +
		`","g":"` + strings.Repeat("x", 250) + `","h":"` + strings.Repeat("x", 250) + `"}`
	for _, c := range []struct{ in, want string }{
		{`[]`, "byte 0: want a JSON object"},
		{`{"a":[1]}`, `key "a": values are JSON scalars`},
		{`{"a":{"b":1}}`, `key "a": values are JSON scalars`},
		{`{"a":1,"a":2}`, `key "a": given twice`},
		{`{"a b":1}`, "key a key of 3 bytes"},
		{`{"` + long + `":1}`, "key a key of 65 bytes"},
		{`{"":1}`, "key a key of 0 bytes"},
		{many, "more than 64 keys"},
		{`{"s":"` + strings.Repeat("x", 257) + `"}`, `key "s": string of 257 bytes exceeds 256`},
		{big, `key "h": the canonical JSON exceeds 2048 bytes`},
		{`{"n":9007199254740993}`, `key "n": integer is not exactly a double`},
		{`{"n":1e400}`, `key "n": number out of the range`},
		{`{"n":01}`, "want ',' or '}'"},
		{`{"n":1.}`, "malformed number"},
		{`{"n":NaN}`, "want a JSON scalar"},
		{"{\"s\":\"\xff\"}", "not valid UTF-8"},
		{`{"s":"\ud800"}`, "unpaired UTF-16 surrogate"},
		{`{"s":"\udc00\ud800"}`, "unpaired UTF-16 surrogate"},
		{"{\"s\":\"a\nb\"}", "control byte"},
		{`{"a":1} x`, "text after the object"},
		{`{"a":1`, "want ',' or '}'"},
		{`{"a":"x`, "unterminated string"},
		{"{" + strings.Repeat(" ", MaxUserMetaInput) + "}", "exceeds 16384"},
	} {
		_, err := ParseUserMeta([]byte(c.in))
		if err == nil || !errors.Is(err, ErrUserMeta) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60s: got %v, want %q", c.in, err, c.want)
		}
		if err != nil && len(c.in) > 8 && strings.Contains(err.Error(), "xxxxxxxx") {
			t.Errorf("%.60s: error echoes the value: %v", c.in, err)
		}
	}
}

func TestUserMetaValue(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"1200", "1200"}, {"3e-4", "0.0003"}, {"0.41", "0.41"}, {"true", "true"}, {"null", "null"},
		{"adamw", `"adamw"`}, {`"1200"`, `"1200"`}, {"truex", `"truex"`}, {"0x10", `"0x10"`},
		{"a b", `"a b"`}, {"", `""`}, {"-", `"-"`}, {"1.", `"1."`},
	} {
		got, err := ParseUserMetaValue("k", c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: got %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"1e999", "9007199254740993", strings.Repeat("x", 257)} {
		if _, err := ParseUserMetaValue("k", in); err == nil {
			t.Errorf("%.20q accepted", in)
		}
	}
	if _, err := ParseUserMetaValue("bad key", "1"); err == nil {
		t.Error("bad key accepted")
	}
}

// TestFormatMetaNumber: the number form is encoding/json's float64 form
// (which follows ECMAScript), with -0 as 0; it round-trips.
func TestFormatMetaNumber(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	vals := []float64{1, -1, 0.1, 1e-6, 9.999999e-7, 1e21, 9.99999e20, 1e-7, 5e-324, math.MaxFloat64, 1.5, 123456.789, 2.5e-5}
	for i := 0; i < 20000; i++ {
		vals = append(vals, math.Float64frombits(rng.Uint64()))
	}
	for _, f := range vals {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		got := FormatMetaNumber(f)
		want, _ := json.Marshal(f)
		if string(want) != got {
			t.Fatalf("%v: got %s, encoding/json %s", f, got, want)
		}
		back, err := strconv.ParseFloat(got, 64)
		if err != nil || back != f {
			t.Fatalf("%s does not round-trip", got)
		}
		if c, err := canonicalNumber("k", got); err == nil && c != got {
			t.Fatalf("%s: not a fixed point (%s)", got, c)
		}
	}
	if FormatMetaNumber(math.Copysign(0, -1)) != "0" {
		t.Error("-0")
	}
	m, err := ParseUserMeta([]byte(`{"y":-0,"w":-0.0,"v":-0e5}`))
	if err != nil || string(m.JSON()) != `{"v":0,"w":0,"y":0}` {
		t.Errorf("-0: %s %v", m.JSON(), err)
	}
}

func TestDiffUserMeta(t *testing.T) {
	a, _ := ParseUserMeta([]byte(`{"loss":0.52,"step":1000,"old":1}`))
	b, _ := ParseUserMeta([]byte(`{"loss":0.41,"step":1000,"new":"x"}`))
	got := DiffUserMeta(a, b)
	want := []MetaChange{{Key: "loss", Old: "0.52", New: "0.41"}, {Key: "new", New: `"x"`}, {Key: "old", Old: "1"}}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%d: %v, want %v", i, got[i], want[i])
		}
	}
}

func TestUserMetaInAttrs(t *testing.T) {
	m, _ := ParseUserMeta([]byte(`{"step":3,"loss":0.5}`))
	s := &Snapshot{Arrays: []*Array{{Name: "w", DType: U8, Shape: []int64{1}, Data: Bytes([]byte{1})}}, UserMeta: m}
	doc, err := EncodeAttrs(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"meta":{"loss":0.5,"step":3},"v":1}`; string(doc) != want {
		t.Fatalf("got %s, want %s", doc, want)
	}
	s.Attrs = map[string]string{"f.x": "1"}
	s.Arrays[0].Attrs = map[string]string{"a": "b"}
	doc, _ = EncodeAttrs(s)
	if want := `{"arrays":{"w":{"a":"b"}},"meta":{"loss":0.5,"step":3},"snapshot":{"f.x":"1"},"v":1}`; string(doc) != want {
		t.Fatalf("got %s, want %s", doc, want)
	}
	s2 := &Snapshot{Arrays: []*Array{{Name: "w"}}}
	if err := ApplyAttrs(s2, doc); err != nil || !s2.UserMeta.Equal(m) || s2.Attrs["f.x"] != "1" {
		t.Fatalf("apply: %v %v", err, s2.UserMeta)
	}
	for _, bad := range []string{`{"meta":{"step":3.0},"v":1}`, `{"meta":{},"v":1}`, `{"meta":null,"v":1}`, `{"meta":[1],"v":1}`, `{"meta":{"b":1,"a":2},"v":1}`} {
		if err := ApplyAttrs(&Snapshot{}, []byte(bad)); err == nil || !errors.Is(err, ErrUserMeta) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// FuzzParseUserMeta: whatever parses has a canonical form within the
// limits that parses to itself, in every representation.
func FuzzParseUserMeta(f *testing.F) {
	for _, s := range []string{`{"step":1200,"loss":0.41,"lr":3e-4,"ok":true,"n":null,"s":"a\u00e9"}`, `{}`, `{"a":-0.0e-0}`, `{"x":"\ud83d\ude00"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseUserMeta(b)
		if err != nil {
			if !errors.Is(err, ErrUserMeta) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if m == nil {
			return
		}
		j := m.JSON()
		if len(j) > MaxUserMetaSize || len(m) > MaxUserMetaKeys {
			t.Fatalf("limits: %d bytes, %d keys", len(j), len(m))
		}
		for i := 0; i < len(j); i++ {
			if j[i] < 0x20 || j[i] > 0x7e {
				t.Fatalf("non-ASCII canonical byte %d", i)
			}
		}
		m2, err := ParseUserMetaCanonical(j)
		if err != nil || !m2.Equal(m) {
			t.Fatalf("canonical %s: %v", j, err)
		}
		m3, err := ParseUserMetaLine(m.String())
		if err != nil || !m3.Equal(m) {
			t.Fatalf("line %q: %v", m.String(), err)
		}
		if !json.Valid(j) {
			t.Fatalf("invalid JSON %s", j)
		}
	})
}
