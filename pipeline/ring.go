package pipeline

import (
	"fmt"

	"github.com/snapd-ml/snapd/pipeline/ring"
)

// FS is the seam through which the pipeline writes the ring's files and
// the chain state (see ring.FS): tests inject failures such as a full
// disk.
type FS = ring.FS

// AtomicFile is one pending atomic write (see ring.AtomicFile).
type AtomicFile = ring.AtomicFile

// OSFS writes through internal/atomicfile (see ring.OSFS).
type OSFS = ring.OSFS

// Suffixes of the files of one ring entry (see doc.go and package ring).
const (
	ExtWTXT  = ring.ExtWTXT
	ExtDelta = ring.ExtDelta
	ExtWSUM  = ring.ExtWSUM
	ExtSeal  = ring.ExtSeal
	// ExtPicture: the SVG of the change from the previous generation
	// (picture.go), committed as gitops.FilePicture.
	ExtPicture = ring.ExtPicture
)

// RingEntry is one generation in the ring.
type RingEntry = ring.Entry

// ringPath returns the path of generation gen's file with extension ext.
func ringPath(ringDir string, gen uint64, ext string) string {
	return ring.Path(ringDir, gen, ext)
}

// ListRing returns the ring's entries, ascending by generation. An entry
// a crash left half-written is listed too (RingEntry.Complete).
func ListRing(ringDir string) ([]RingEntry, error) {
	ents, err := ring.List(ringDir)
	if err != nil {
		return nil, fmt.Errorf("pipeline: list ring: %w", err)
	}
	return ents, nil
}
