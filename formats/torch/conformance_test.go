package torch

import (
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
)

func TestConformance(t *testing.T) {
	formatstest.Suite{Codec: New(), Files: []string{"testdata/mixed_views.pt", "testdata/state_dict.pt", "testdata/state_dict_legacy.pt", "testdata/training_checkpoint.pt"}, Hostile: hostileTorch}.Run(t)
}
