package stb

import (
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
	"github.com/snapd-ml/snapd/snapshot"
)

// TestNewDTypesRefused: the stb spec has no fp8 or complex dtype: Encode
// refuses them naming the array, dtype and format, or drops and reports
// them under Lossy.
func TestNewDTypesRefused(t *testing.T) {
	formatstest.RefusesDTypes(t, New(), &snapshot.Array{Name: "t1", DType: snapshot.F32, Shape: []int64{2}, Data: snapshot.Bytes(make([]byte, 8))},
		snapshot.F8E4M3, snapshot.F8E5M2, snapshot.F8E8M0, snapshot.C64, snapshot.C128)
}
