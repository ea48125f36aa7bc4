package pipeline

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestNonFiniteGenerationWarns: a generation that makes elements NaN or
// Inf is logged as a warning, recorded in its result and the chain state,
// and `snapd status` (ReadStatus) warns; the next clean generation clears
// the status warning.
func TestNonFiniteGenerationWarns(t *testing.T) {
	f := newFixture(t)
	f.start(t, nil)
	publishModel := func(gen uint64, s *snapshot.Snapshot) string {
		st, err := snapshot.OpenGenStore(filepath.Join(f.dir, GensDir))
		if err != nil {
			t.Fatal(err)
		}
		g, err := st.Publish(gen, ".safetensors", func(w io.Writer) error {
			return safetensors.New().Encode(context.Background(), w, s, formats.EncodeOptions{})
		})
		if err != nil {
			t.Fatal(err)
		}
		return g.Path
	}
	withNaN := func(s *snapshot.Snapshot, arr int, nan, inf []int) *snapshot.Snapshot {
		b := append([]byte(nil), s.Arrays[arr].Data.(snapshot.Bytes)...)
		for _, i := range nan {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(math.NaN())))
		}
		for _, i := range inf {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(math.Inf(1))))
		}
		s.Arrays[arr].Data = snapshot.Bytes(b)
		return s
	}
	// Generation 1 starts with one NaN in embed.weight: warned against
	// nothing.
	request(t, f.dir, 1, publishModel(1, withNaN(model(1), 0, []int{3}, nil)))
	if r := f.wait(t, 1); r.Error != "" || len(r.NonFinite) != 1 || r.NonFinite[0].Array != "embed.weight" || r.NonFinite[0].NewNaN != 1 {
		t.Fatalf("gen 1: %+v", r)
	}
	if st, _ := ReadStatus(f.dir); !strings.Contains(strings.Join(st.Warnings, "\n"), "generation 1 introduced NaN/Inf (the first of the chain): embed.weight (1 NaN, 0 Inf)") {
		t.Fatalf("status warnings: %v", st.Warnings)
	}
	// Generation 2 keeps that NaN (not new) and adds three in head.weight.
	request(t, f.dir, 2, publishModel(2, withNaN(withNaN(model(1), 0, []int{3}, nil), 1, []int{7, 100}, []int{2000})))
	r := f.wait(t, 2)
	if r.Error != "" || len(r.NonFinite) != 1 || r.NonFinite[0].Array != "head.weight" || r.NonFinite[0].NewNaN != 2 || r.NonFinite[0].NewInf != 1 {
		t.Fatalf("gen 2: %+v", r.NonFinite)
	}
	if l := f.logs.String(); !strings.Contains(l, "generation introduces NaN/Inf") || !strings.Contains(l, "head.weight (2 NaN, 1 Inf)") {
		t.Fatalf("log:\n%s", l)
	}
	st, err := ReadStatus(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(st.Warnings, "\n"), "generation 2 introduced NaN/Inf (against generation 1): head.weight (2 NaN, 1 Inf)") {
		t.Fatalf("status warnings: %v", st.Warnings)
	}
	request(t, f.dir, 3, publishModel(3, model(3)))
	if r := f.wait(t, 3); r.Error != "" || r.NonFinite != nil {
		t.Fatalf("gen 3: %+v", r)
	}
	f.stop(t)
	if st, _ := ReadStatus(f.dir); strings.Contains(strings.Join(st.Warnings, "\n"), "NaN") {
		t.Fatalf("status still warns: %v", st.Warnings)
	}
}
