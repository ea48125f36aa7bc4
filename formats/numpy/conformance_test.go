package numpy

import (
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
)

func TestConformance(t *testing.T) {
	t.Run("npy", func(t *testing.T) {
		files := []string{"testdata/beu2_f.npy", "testdata/big_endian.npy", "testdata/c_order.npy", "testdata/fortran_order.npy", "testdata/leb1_c.npy", "testdata/scalar.npy", "testdata/v2.npy", "testdata/v2_fortran_be.npy", "testdata/v3.npy", "testdata/zero_size_f.npy"}
		formatstest.Suite{Codec: New(), Files: files, Exact: files, Hostile: hostileNPY}.Run(t)
	})
	t.Run("npz", func(t *testing.T) {
		formatstest.Suite{Codec: NewNPZ(), Files: []string{"testdata/deflated.npz", "testdata/savez.npz", "testdata/savez_compressed.npz", "testdata/savez_zip64.npz", "testdata/stored.npz"}, Exact: []string{"testdata/savez.npz", "testdata/stored.npz"}, Hostile: hostileNPZ}.Run(t)
	})
}
