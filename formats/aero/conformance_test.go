package aero

import (
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
)

func TestConformance(t *testing.T) {
	formatstest.Suite{Codec: New(), Files: []string{"testdata/dtypes.aero", "testdata/lowlevel_hashb3_2shards.aero", "testdata/multishard_ihsh_phsh.aero", "testdata/test_vector.aero"}, Hostile: hostileAERO}.Run(t)
}
