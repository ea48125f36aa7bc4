package safetensors

import (
	"testing"

	"github.com/snapd-ml/snapd/formats/formatstest"
)

func TestConformance(t *testing.T) {
	files := []string{"testdata/v1-basic.safetensors", "testdata/v2-ext.safetensors"}
	formatstest.Suite{Codec: New(), Files: files, Exact: files, Hostile: hostileST}.Run(t)
}
