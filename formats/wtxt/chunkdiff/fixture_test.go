package chunkdiff

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/snapshot"
)

// genFixture is two generations as WTXT bytes: gen1 is testdata/gen1.wtxt
// as it is, gen2 testdata/gen2.wtxt (the same arrays with a few rows of
// layer.0/w and tok.counts changed) after mutate, encoded with 8 rows per
// chunk as the testdata are.
type genFixture struct{ gen1, gen2 []byte }

func newFixture(t testing.TB, mutate func(*snapshot.Snapshot) *snapshot.Snapshot) *genFixture {
	t.Helper()
	g1, err := os.ReadFile(filepath.Join("testdata", "gen1.wtxt"))
	if err != nil {
		t.Fatal(err)
	}
	s2 := decodeFile(t, filepath.Join("testdata", "gen2.wtxt"))
	if mutate != nil {
		s2 = mutate(s2)
	}
	return &genFixture{gen1: g1, gen2: encode(t, s2, wtxt.EncodeOptions{RowsPerChunk: 8})}
}

func decodeFile(t testing.TB, path string) *snapshot.Snapshot {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := wtxt.New().Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: path})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func encode(t testing.TB, s *snapshot.Snapshot, opts wtxt.EncodeOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := wtxt.Encode(context.Background(), &buf, s, opts); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// setF32 returns a copy of s where element i of the f32 array name is v.
func setF32(s *snapshot.Snapshot, name string, i int, v float32) *snapshot.Snapshot {
	out := &snapshot.Snapshot{Meta: s.Meta, Attrs: s.Attrs}
	for _, a := range s.Arrays {
		c := *a
		if a.Name == name {
			b, err := snapshot.ReadAll(a.Data)
			if err != nil {
				panic(err)
			}
			b = bytes.Clone(b)
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
			c.Data = snapshot.Bytes(b)
		}
		out.Arrays = append(out.Arrays, &c)
	}
	return out
}
