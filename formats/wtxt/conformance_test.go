package wtxt

import (
	"testing"

	"github.com/snapd-ml/snapd/formats"

	"github.com/snapd-ml/snapd/formats/formatstest"
)

func TestConformance(t *testing.T) {
	files := []string{"testdata/golden-ext.wtxt", "testdata/golden-signed.wtxt", "testdata/golden-tiny.wtxt", "testdata/golden-widerow.wtxt"}
	formatstest.Suite{Codec: New(), Files: files, Exact: []string{"testdata/golden-tiny.wtxt", "testdata/golden-widerow.wtxt"}, EchoWindow: 32, Hostile: hostileWTXT, HostileErr: formats.ErrCorrupt}.Run(t)
}
