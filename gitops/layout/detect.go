package layout

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// Errors of Detect and Stored; test with errors.Is.
var (
	// ErrNoLayout means a generation directory holds no stored WTXT.
	ErrNoLayout = errors.New("layout: no stored WTXT")
	// ErrAmbiguous means a generation directory holds more than one
	// stored form of the same file (snapd never writes that).
	ErrAmbiguous = errors.New("layout: more than one stored form")
)

// DetectError is a failure of Detect or Stored. Path is the entry of the
// generation directory at fault (the first of those in conflict, or the
// name that is missing); Msg says what was found, without the directory.
type DetectError struct {
	Path string
	Msg  string
	Err  error // ErrNoLayout or ErrAmbiguous
}

func (e *DetectError) Error() string { return e.Path + ": " + e.Msg }

// Unwrap returns ErrNoLayout or ErrAmbiguous.
func (e *DetectError) Unwrap() error { return e.Err }

// Has reports whether a generation directory has an entry of that name
// (a file or a directory).
type Has func(name string) bool

// TreeHas is Has over the entries of a Git tree.
func TreeHas(t *object.Tree) Has {
	names := make(map[string]bool, len(t.Entries))
	for _, e := range t.Entries {
		names[e.Name] = true
	}
	return func(n string) bool { return names[n] }
}

// Detect returns the layout of the generation directory whose entries has
// reports. Exactly one stored form must be present: FileSkeleton or its
// parts (Skeleton), else exactly one of FileWTXT (Single), DirWTXTParts
// (Split) and DirWTXTSegs (Segments). Anything else is a *DetectError
// naming the entry at fault. Detect looks at names only: the reader of
// the layout checks every entry's mode and content.
func Detect(has Has) (Name, error) {
	skel := has(FileSkeleton) || has(FileSkeleton+PartsSuffix)
	if skel {
		if has(FileWTXT) || has(DirWTXTParts) || has(DirWTXTSegs) {
			return "", &DetectError{Path: FileSkeleton, Err: ErrAmbiguous,
				Msg: fmt.Sprintf("both %s and %s (or %s/ or %s/) present", FileSkeleton, FileWTXT, DirWTXTParts, DirWTXTSegs)}
		}
		if _, err := Stored(has, FileSkeleton); err != nil {
			return "", err
		}
		return Skeleton, nil
	}
	n, err := Stored(has, FileWTXT)
	if err != nil {
		return "", err
	}
	if n == "" {
		return "", &DetectError{Path: FileWTXT, Err: ErrNoLayout,
			Msg: fmt.Sprintf("none of %s, %s/, %s/", FileWTXT, DirWTXTParts, DirWTXTSegs)}
	}
	return n, nil
}

// DetectWithoutSkeleton is Detect of the directory with its skeleton
// entries left out: how a reader that reported a skeleton in conflict
// (Detect's first *DetectError) goes on to the WTXT beside it.
func DetectWithoutSkeleton(has Has) (Name, error) {
	return Detect(func(n string) bool { return n != FileSkeleton && n != FileSkeleton+PartsSuffix && has(n) })
}

// IsRanks reports whether a generation directory holds a multi-rank
// generation (Ranks): the directory DirRanks and no stored WTXT.
func IsRanks(has Has) bool {
	if !has(DirRanks) {
		return false
	}
	_, err := Detect(has)
	return errors.Is(err, ErrNoLayout)
}

// Stored returns how the file name is stored in a generation directory:
// Single (name itself), Split (name + PartsSuffix) or, for FileWTXT only,
// Segments (DirWTXTSegs); "" when none of them is present. More than one
// is a *DetectError wrapping ErrAmbiguous.
func Stored(has Has, name string) (Name, error) {
	single, split := has(name), has(name+PartsSuffix)
	segs := name == FileWTXT && has(DirWTXTSegs)
	switch {
	case single && split:
		return "", &DetectError{Path: name, Err: ErrAmbiguous, Msg: fmt.Sprintf("both %s and %s%s/ present", name, name, PartsSuffix)}
	case segs && (single || split):
		other := name
		if split {
			other = name + PartsSuffix + "/"
		}
		return "", &DetectError{Path: DirWTXTSegs, Err: ErrAmbiguous, Msg: fmt.Sprintf("both %s and %s/ present", other, DirWTXTSegs)}
	case single:
		return Single, nil
	case split:
		return Split, nil
	case segs:
		return Segments, nil
	}
	return "", nil
}

// Entry returns the entry of a generation directory that holds the
// WTXT (or, for Skeleton, the skeleton) stored in layout n when the file
// is not split: FileWTXT, DirWTXTParts, DirWTXTSegs or FileSkeleton.
func (n Name) Entry() string {
	switch n {
	case Single:
		return FileWTXT
	case Split:
		return DirWTXTParts
	case Segments:
		return DirWTXTSegs
	case Skeleton:
		return FileSkeleton
	}
	return ""
}

// DetectPartsDir returns the layout of a directory that holds a
// MANIFEST (a parts or segments directory as checked out, fsys rooted at
// it): Segments when the first piece the MANIFEST lists starts with the
// skeleton's magic line, else Split (whose reader then reports what is
// wrong with a directory that is neither).
func DetectPartsDir(fsys fs.FS) Name {
	f, err := fsys.Open(ManifestName)
	if err != nil {
		return Split
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxManifestSize+1))
	f.Close()
	if err != nil {
		return Split
	}
	m, err := ParseManifest(b)
	if err != nil || len(m.Parts) == 0 {
		return Split
	}
	p, err := fsys.Open(m.Parts[0].Name)
	if err != nil {
		return Split
	}
	defer p.Close()
	if hasPrefix(p, wtxt.SkeletonMagic+"\n") {
		return Segments
	}
	return Split
}

// IsSkeletonFile reports whether the file at p starts with the skeleton's
// magic line (wtxt.SkeletonMagic): a skeleton, not a WTXT. An unreadable
// or short file is not one.
func IsSkeletonFile(p string) bool {
	return startsWith(p, wtxt.SkeletonMagic+"\n")
}

// startsWith reports whether the file at p starts with prefix.
func startsWith(p, prefix string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	return hasPrefix(f, prefix)
}

// hasPrefix reports whether r starts with prefix.
func hasPrefix(r io.Reader, prefix string) bool {
	b := make([]byte, len(prefix))
	n, _ := io.ReadFull(r, b)
	return string(b[:n]) == prefix
}

// IsPlainWTXTFile reports whether the file at p starts with the WTXT
// magic line (an age-armored WTXT does not): only a plain WTXT has the
// structure the Segments layout cuts.
func IsPlainWTXTFile(p string) bool { return startsWith(p, "WTXT 1\n") }
