package fold

import (
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
)

func TestConformance(t *testing.T) {
	files := []string{"testdata/basic_nocomp.fold", "testdata/ecc_rs32_head.mind", "testdata/ecc_rs32_spec_era.mind", "testdata/zstd_tsav_npz.fold"}
	formatstest.Suite{Codec: New(), Files: files, Exact: []string{"testdata/basic_nocomp.fold", "testdata/ecc_rs32_head.mind"}, Hostile: hostileFold}.Run(t)
}
