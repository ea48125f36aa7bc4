package ztensor

import (
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
)

func TestConformance(t *testing.T) {
	files := []string{"testdata/dense_dtypes.zt", "testdata/empty.zt", "testdata/sparse_csr_coo.zt", "testdata/zstd_crc32c.zt"}
	formatstest.Suite{Codec: New(), Files: files, Exact: []string{"testdata/dense_dtypes.zt", "testdata/empty.zt"}, Hostile: hostileZT}.Run(t)
}
