package stb

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestCountDisagreesWithData: the same class as AERO's TOC
// count. A tensor_count lowered (to 0, or by one) with the data still in
// the file is refused: every byte of the data region must belong to a
// tensor.
func TestCountDisagreesWithData(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.stb")
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, f := range files {
		orig, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := binary.LittleEndian.Uint16(orig[6:])
		if n == 0 {
			continue
		}
		for _, c := range []uint16{0, n - 1} {
			b := append([]byte(nil), orig...)
			binary.LittleEndian.PutUint16(b[6:], c)
			s, err := Codec{}.Decode(context.Background(), snapshot.Bytes(b), int64(len(b)), formats.DecodeOptions{Name: "x.stb"})
			if s != nil || !errors.Is(err, ErrCorrupt) || !errors.Is(err, formats.ErrCorrupt) || !(strings.Contains(err.Error(), "belong to no tensor") || strings.Contains(err.Error(), "padding")) {
				t.Errorf("%s: tensor_count %d -> %d: snapshot %v, error %v", filepath.Base(f), n, c, s != nil, err)
			}
		}
	}
}
