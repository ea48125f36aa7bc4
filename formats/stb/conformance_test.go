package stb

import (
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/formatstest"
)

func TestConformance(t *testing.T) {
	files := []string{"testdata/empty.stb", "testdata/multi_dtype.stb", "testdata/rank0_rank4.stb", "testdata/single_f32.stb"}
	formatstest.Suite{Codec: New(), Files: files, Exact: files, Hostile: hostileSTB, HostileErr: formats.ErrCorrupt}.Run(t)
}
