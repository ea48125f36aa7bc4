package pipeline

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/snapshot"
)

// FS is the seam through which the pipeline writes the ring's files. The
// default (OSFS) uses internal/atomicfile; tests inject failures such as a
// full disk. Whatever an implementation does, a file must become visible
// under its final name only through Commit.
type FS interface {
	// Create starts an atomic write of path with mode perm.
	Create(path string, perm os.FileMode) (AtomicFile, error)
}

// AtomicFile is one pending atomic write.
type AtomicFile interface {
	// Writer is where the content goes. OSFS returns the *os.File itself,
	// which lets the WTXT encoder overlap its passes.
	Writer() io.Writer
	// Commit makes the content visible under the final name (durably).
	Commit() error
	// Abort discards the write; it is a no-op after Commit.
	Abort()
}

// OSFS writes through internal/atomicfile: temp file, fsync, rename,
// fsync of the directory.
type OSFS struct{}

// Create implements FS.
func (OSFS) Create(path string, perm os.FileMode) (AtomicFile, error) {
	f, err := atomicfile.Create(path, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

type osFile struct{ f *atomicfile.File }

func (o osFile) Writer() io.Writer { return o.f.File }
func (o osFile) Commit() error     { return o.f.Commit() }
func (o osFile) Abort()            { o.f.Abort() }

// Suffixes of the files of one ring entry (see doc.go).
const (
	ExtWTXT  = ".wtxt"
	ExtDelta = ".wtxtdelta"
	ExtWSUM  = ".wsum"
	ExtSeal  = ".wseal"
	// ExtPicture: the SVG of the change from the previous generation
	// (picture.go), committed as gitops.FilePicture.
	ExtPicture = ".diff.svg"
)

// RingEntry is one generation in the ring.
type RingEntry struct {
	Gen   uint64   `json:"gen"`
	Files []string `json:"files"` // names inside the ring directory, sorted
	Bytes int64    `json:"bytes"` // total size of Files
	// Paths of the main files ("" when absent).
	WTXT  string `json:"wtxt"`
	Delta string `json:"delta,omitempty"`
	WSUM  string `json:"wsum,omitempty"`
}

// ringPath returns the path of generation gen's file with extension ext.
func ringPath(ringDir string, gen uint64, ext string) string {
	return filepath.Join(ringDir, snapshot.GenName(gen, ext))
}

// ringGen parses a ring file name: gen-NNNNNN followed by one of the
// ring's extensions (optionally + .wseal).
func ringGen(name string) (uint64, bool) {
	gen, suffix, ok := snapshot.ParseGenName(name)
	if !ok {
		return 0, false
	}
	suffix = strings.TrimSuffix(suffix, ExtSeal)
	switch suffix {
	case ExtWTXT, ExtDelta, ExtWSUM, ExtPicture:
		return gen, true
	}
	return 0, false
}

// ListRing returns the ring's entries, ascending by generation. An entry
// without its WTXT (a crash between files) is listed with WTXT "".
func ListRing(ringDir string) ([]RingEntry, error) {
	ents, err := os.ReadDir(ringDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pipeline: list ring: %w", err)
	}
	byGen := map[uint64]*RingEntry{}
	for _, e := range ents {
		gen, ok := ringGen(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		r := byGen[gen]
		if r == nil {
			r = &RingEntry{Gen: gen}
			byGen[gen] = r
		}
		r.Files = append(r.Files, e.Name())
		if info, err := e.Info(); err == nil {
			r.Bytes += info.Size()
		}
		p := filepath.Join(ringDir, e.Name())
		switch e.Name() {
		case snapshot.GenName(gen, ExtWTXT):
			r.WTXT = p
		case snapshot.GenName(gen, ExtDelta):
			r.Delta = p
		case snapshot.GenName(gen, ExtWSUM):
			r.WSUM = p
		}
	}
	out := make([]RingEntry, 0, len(byGen))
	for _, r := range byGen {
		sort.Strings(r.Files)
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Gen < out[j].Gen })
	return out, nil
}

// removeRingGen deletes every file of generation gen from the ring (and
// its plaintext copy).
func removeRingGen(ringDir string, gen uint64) error {
	var errs []error
	for _, ext := range []string{ExtPicture, ExtDelta, ExtDelta + ExtSeal, ExtWSUM, ExtWSUM + ExtSeal, ExtWTXT + ExtSeal, ExtWTXT} {
		if err := os.Remove(ringPath(ringDir, gen, ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(ringPath(filepath.Join(ringDir, plainDir), gen, ExtWTXT)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
