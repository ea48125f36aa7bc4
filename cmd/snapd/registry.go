package main

import (
	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/aero"
	"github.com/snapd-ml/snapd/formats/dcp"
	"github.com/snapd-ml/snapd/formats/fold"
	"github.com/snapd-ml/snapd/formats/numpy"
	"github.com/snapd-ml/snapd/formats/safetensors"
	"github.com/snapd-ml/snapd/formats/stb"
	"github.com/snapd-ml/snapd/formats/torch"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/ztensor"
)

// newRegistry lists every format snapd reads and writes. Sniffing tries
// them in this order; each format's magic bytes are distinct.
func newRegistry() *formats.Registry {
	return formats.NewRegistry(
		wtxt.New(),
		safetensors.New(),
		ztensor.New(),
		stb.New(),
		fold.New(),
		aero.New(),
		numpy.New(),
		numpy.NewNPZ(),
		torch.New(),
		dcp.New(), // a directory format: named for --to dcp, sniffs nothing
	)
}
