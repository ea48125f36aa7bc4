package ztensor

import (
	"testing"

	"github.com/snapd-ml/snapd/internal/testutil"
)

// hostileZT is a ~100 KB file whose one zstd component inflates to 1 GiB
// (the frame does not declare its size; the shape does).
func hostileZT(tb testing.TB) []byte {
	const huge = 1 << 30
	return oneTensor(testutil.ZstdBomb(huge, 0, false), []uint64{huge}, "zstd")
}
