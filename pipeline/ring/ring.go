// Package ring owns the daemon's ring directory: the layout of one
// generation's files, how they are written (atomically, through the FS
// seam, armored and sealed when encrypting, the WTXT's commit overlapped
// with the delta), how they are listed and removed.
//
// Layout (dir is STATE_DIR/ring):
//
//	dir/gen-NNNNNN.wtxt               the WTXT (age armor when encrypting)
//	dir/gen-NNNNNN.wtxt.wseal         its seal (encrypting only)
//	dir/gen-NNNNNN.wtxtdelta          DELTA v2 from the previous chained generation
//	dir/gen-NNNNNN.wtxtdelta.wseal    (encrypting only)
//	dir/gen-NNNNNN.wsum               WSUM (streaming only; + .wseal when encrypting)
//	dir/gen-NNNNNN.request            the request the generation was made from (JSON,
//	                                  written by the pipeline with Writer.Put)
//	dir/.plain/gen-NNNNNN.wtxt        encrypting only: plaintext of the chain head,
//	                                  0600 in a 0700 directory, the base of the next
//	                                  delta; removed when the next head is persisted
//
// Every file — WTXT, armored copy, WSUM, delta, seals, and whatever the
// caller writes with Writer.Put (the pipeline's chain state) — is written
// through FS, so no partial file is ever visible under its final name and
// a test's FS sees (and can fail) every write. The package knows nothing
// of the chain: which generation is the head, when one is committed and
// which may be trimmed are the caller's decisions, passed in.
package ring

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/snapd-ml/snapd/internal/atomicfile"
	"github.com/snapd-ml/snapd/snapshot"
)

// FS is the seam through which the ring's files are written. The default
// (OSFS) uses internal/atomicfile; tests inject failures such as a full
// disk. Whatever an implementation does, a file must become visible under
// its final name only through Commit.
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

// Suffixes of the files of one ring entry, and the plaintext directory.
const (
	ExtWTXT  = ".wtxt"
	ExtDelta = ".wtxtdelta"
	ExtWSUM  = ".wsum"
	// ExtPicture: the SVG of the change from the previous generation
	// (pipeline/picture.go), committed as gitops.FilePicture.
	ExtPicture = ".diff.svg"
	ExtSeal    = ".wseal"
	PlainDir   = ".plain"
	// ExtRequest: the request a generation was made from (the pipeline's
	// JSON record of source, position and content identity).
	ExtRequest = ".request"
	// ExtSkeleton: a generation encoded straight to the registry layout
	// (skeleton here, segments in the registry; no WTXT in the ring), and
	// ExtOCI its record (where its manifest is), written once the
	// manifest is in the registry.
	ExtSkeleton = ".wtxt.skel"
	ExtOCI      = ".oci"
)

// Entry is one generation in the ring.
type Entry struct {
	Gen   uint64   `json:"gen"`
	Files []string `json:"files"` // names inside the ring directory, sorted
	Bytes int64    `json:"bytes"` // total size of Files
	// Paths of the main files ("" when absent).
	WTXT  string `json:"wtxt"`
	Delta string `json:"delta,omitempty"`
	WSUM  string `json:"wsum,omitempty"`
	// Skeleton and OCI: a generation in the registry layout (ExtSkeleton,
	// ExtOCI); it has no WTXT.
	Skeleton string `json:"skeleton,omitempty"`
	OCI      string `json:"oci,omitempty"`
}

// Complete reports whether e holds a whole generation: its WTXT, or its
// skeleton with the record of its manifest.
func (e Entry) Complete() bool { return e.WTXT != "" || (e.Skeleton != "" && e.OCI != "") }

// Path returns the path of generation gen's file with extension ext in the
// ring directory dir.
func Path(dir string, gen uint64, ext string) string {
	return filepath.Join(dir, snapshot.GenName(gen, ext))
}

// PlainPath returns the path of generation gen's plaintext WTXT copy (kept
// when encrypting) in the ring directory dir.
func PlainPath(dir string, gen uint64) string {
	return Path(filepath.Join(dir, PlainDir), gen, ExtWTXT)
}

// parseName parses a ring file name: gen-NNNNNN followed by one of the
// ring's extensions (optionally + .wseal).
func parseName(name string) (uint64, bool) {
	gen, suffix, ok := snapshot.ParseGenName(name)
	if !ok {
		return 0, false
	}
	suffix = strings.TrimSuffix(suffix, ExtSeal)
	switch suffix {
	case ExtWTXT, ExtDelta, ExtWSUM, ExtPicture, ExtRequest, ExtSkeleton, ExtOCI:
		return gen, true
	}
	return 0, false
}

// List returns the entries of the ring directory dir, ascending by
// generation; a missing directory is an empty ring. An entry without its
// WTXT or its skeleton's record (a crash between files) is listed too:
// see Entry.Complete. The error is os.ReadDir's, unwrapped.
func List(dir string) ([]Entry, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	byGen := map[uint64]*Entry{}
	for _, e := range ents {
		gen, ok := parseName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		r := byGen[gen]
		if r == nil {
			r = &Entry{Gen: gen}
			byGen[gen] = r
		}
		r.Files = append(r.Files, e.Name())
		if info, err := e.Info(); err == nil {
			r.Bytes += info.Size()
		}
		p := filepath.Join(dir, e.Name())
		switch e.Name() {
		case snapshot.GenName(gen, ExtWTXT):
			r.WTXT = p
		case snapshot.GenName(gen, ExtDelta):
			r.Delta = p
		case snapshot.GenName(gen, ExtWSUM):
			r.WSUM = p
		case snapshot.GenName(gen, ExtSkeleton):
			r.Skeleton = p
		case snapshot.GenName(gen, ExtOCI):
			r.OCI = p
		}
	}
	out := make([]Entry, 0, len(byGen))
	for _, r := range byGen {
		sort.Strings(r.Files)
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Gen < out[j].Gen })
	return out, nil
}

// Remove deletes every file of generation gen from the ring directory dir
// (and its plaintext copy); files already absent are not an error.
func Remove(dir string, gen uint64) error {
	var errs []error
	for _, ext := range []string{ExtRequest, ExtPicture, ExtDelta, ExtDelta + ExtSeal, ExtWSUM, ExtWSUM + ExtSeal, ExtWTXT + ExtSeal, ExtOCI, ExtSkeleton, ExtWTXT} {
		if err := os.Remove(Path(dir, gen, ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(PlainPath(dir, gen)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Files are the paths (and sizes) of one generation's files found in the
// ring; a path is "" when the file is absent.
type Files struct {
	WTXT       string
	WTXTBytes  int64
	Delta      string
	DeltaBytes int64
	WSUM       string
	Seal       string // the WTXT's seal
}

// Lookup returns generation gen's files in the ring directory dir.
func Lookup(dir string, gen uint64) Files {
	var fl Files
	for _, f := range []struct {
		ext   string
		path  *string
		bytes *int64
	}{{ExtWTXT, &fl.WTXT, &fl.WTXTBytes}, {ExtDelta, &fl.Delta, &fl.DeltaBytes}, {ExtWSUM, &fl.WSUM, nil}, {ExtWTXT + ExtSeal, &fl.Seal, nil}} {
		p := Path(dir, gen, f.ext)
		if st, err := os.Stat(p); err == nil {
			*f.path = p
			if f.bytes != nil {
				*f.bytes = st.Size()
			}
		}
	}
	return fl
}
