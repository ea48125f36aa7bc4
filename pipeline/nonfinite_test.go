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
	request(t, f.dir, 1, publishModel(1, model(1)))
	if r := f.wait(t, 1); r.Error != "" || r.NonFinite != nil {
		t.Fatalf("gen 1: %+v", r)
	}
	bad := model(1)
	b := append([]byte(nil), bad.Arrays[1].Data.(snapshot.Bytes)...)
	binary.LittleEndian.PutUint32(b[4*7:], math.Float32bits(float32(math.NaN())))
	binary.LittleEndian.PutUint32(b[4*100:], math.Float32bits(float32(math.NaN())))
	binary.LittleEndian.PutUint32(b[4*2000:], math.Float32bits(float32(math.Inf(1))))
	bad.Arrays[1].Data = snapshot.Bytes(b)
	request(t, f.dir, 2, publishModel(2, bad))
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
