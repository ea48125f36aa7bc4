package snapshot

import (
	"bytes"
	"io"
	"testing"
)

func TestDTypes(t *testing.T) {
	for _, d := range AllDTypes() {
		p, err := ParseDType(d.String())
		if err != nil || p != d {
			t.Fatalf("ParseDType(%q) = %v, %v", d, p, err)
		}
		if d.Size() == 0 {
			t.Fatalf("%v has size 0", d)
		}
	}
	if _, err := ParseDType("f8"); err == nil {
		t.Fatal("f8 accepted")
	}
	if len(AllDTypes()) != 18 {
		t.Fatalf("want 18 dtypes, got %d", len(AllDTypes()))
	}
}

func TestNumBytesOverflow(t *testing.T) {
	a := &Array{Name: "x", DType: F64, Shape: []int64{1 << 40, 1 << 30}}
	if _, err := a.NumBytes(); err == nil {
		t.Fatal("overflow not detected")
	}
	a.Shape = []int64{-1}
	if _, err := a.NumBytes(); err == nil {
		t.Fatal("negative dim accepted")
	}
	a.Shape = nil
	if n, _ := a.NumBytes(); n != 8 {
		t.Fatalf("scalar bytes = %d", n)
	}
}

func TestValidate(t *testing.T) {
	s := &Snapshot{Arrays: []*Array{
		{Name: "b", DType: U8, Shape: []int64{3}, Data: Bytes{1, 2, 3}},
		{Name: "a", DType: I16, Shape: []int64{2}, Data: Bytes{1, 2, 3, 4}},
	}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := s.Sorted(); got[0].Name != "a" || s.Arrays[0].Name != "b" {
		t.Fatal("Sorted wrong or modified s")
	}
	s.Arrays[1].Shape = []int64{3}
	if err := s.Validate(); err == nil {
		t.Fatal("size mismatch accepted")
	}
	s.Arrays[1].Shape = []int64{2}
	s.Arrays[1].Name = "b"
	if err := s.Validate(); err == nil {
		t.Fatal("duplicate accepted")
	}
}

func TestAttrsRoundTrip(t *testing.T) {
	s := &Snapshot{
		Attrs:  map[string]string{"z": "1", "a": "<&>"},
		Arrays: []*Array{{Name: "w", DType: U8, Attrs: map[string]string{"k": "v"}}, {Name: "x", DType: U8}},
	}
	doc, err := EncodeAttrs(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"arrays":{"w":{"k":"v"}},"snapshot":{"a":"<&>","z":"1"},"v":1}`
	if string(doc) != want {
		t.Fatalf("got %s\nwant %s", doc, want)
	}
	s2 := &Snapshot{Arrays: []*Array{{Name: "w"}, {Name: "x"}}}
	if err := ApplyAttrs(s2, doc); err != nil {
		t.Fatal(err)
	}
	if s2.Attrs["a"] != "<&>" || s2.Arrays[0].Attrs["k"] != "v" || s2.Arrays[1].Attrs != nil {
		t.Fatalf("bad apply: %+v", s2)
	}
	if err := ApplyAttrs(&Snapshot{}, doc); err == nil {
		t.Fatal("unknown array accepted")
	}
	if d, _ := EncodeAttrs(&Snapshot{}); d != nil {
		t.Fatal("empty attrs should encode to nil")
	}
}

func TestSectionZeroCopy(t *testing.T) {
	b := Bytes("hello world")
	s := Section(b, 6, 5)
	got, ok := BytesOf(s)
	if !ok || string(got) != "world" {
		t.Fatalf("section = %q %v", got, ok)
	}
	if &got[0] != &b[6] {
		t.Fatal("section copied")
	}
	s2 := Section(bytes.NewReader([]byte("hello world")), 0, 5)
	buf := make([]byte, 5)
	if _, err := s2.ReadAt(buf, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if string(buf) != "hello" {
		t.Fatal(string(buf))
	}
}

func TestMapFile(t *testing.T) {
	p := t.TempDir() + "/f"
	if err := writeFile(p, []byte("abcdef")); err != nil {
		t.Fatal(err)
	}
	m, err := MapFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if string(m.Bytes()) != "abcdef" || m.Size() != 6 {
		t.Fatal("bad map")
	}
	sec, _ := BytesOf(Section(m, 2, 2))
	if string(sec) != "cd" {
		t.Fatal("bad section of mapping")
	}
	e := t.TempDir() + "/e"
	_ = writeFile(e, nil)
	m2, err := MapFile(e)
	if err != nil || m2.Size() != 0 {
		t.Fatal("empty map", err)
	}
}
