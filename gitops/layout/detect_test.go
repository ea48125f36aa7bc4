package layout

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

func has(names ...string) Has {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return func(n string) bool { return m[n] }
}

// TestDetect: every layout is recognised from its entries alone, and every
// conflict or absence is a *DetectError naming the entry at fault.
func TestDetect(t *testing.T) {
	for _, c := range []struct {
		entries []string
		want    Name
		path    string
		err     error
	}{
		{[]string{FileWTXT, "generation.txt"}, Single, "", nil},
		{[]string{DirWTXTParts, "current.wtxtdelta.parts"}, Split, "", nil},
		{[]string{DirWTXTSegs}, Segments, "", nil},
		{[]string{FileSkeleton}, Skeleton, "", nil},
		{[]string{FileSkeleton + PartsSuffix}, Skeleton, "", nil},
		{[]string{"generation.txt"}, "", FileWTXT, ErrNoLayout},
		{[]string{FileWTXT, DirWTXTParts}, "", FileWTXT, ErrAmbiguous},
		{[]string{FileWTXT, DirWTXTSegs}, "", DirWTXTSegs, ErrAmbiguous},
		{[]string{DirWTXTParts, DirWTXTSegs}, "", DirWTXTSegs, ErrAmbiguous},
		{[]string{FileSkeleton, FileWTXT}, "", FileSkeleton, ErrAmbiguous},
		{[]string{FileSkeleton, DirWTXTSegs}, "", FileSkeleton, ErrAmbiguous},
		{[]string{FileSkeleton, FileSkeleton + PartsSuffix}, "", FileSkeleton, ErrAmbiguous},
	} {
		got, err := Detect(has(c.entries...))
		if c.err == nil {
			if err != nil || got != c.want {
				t.Errorf("%v: %q, %v; want %q", c.entries, got, err, c.want)
			}
			continue
		}
		var de *DetectError
		if !errors.As(err, &de) || !errors.Is(err, c.err) || de.Path != c.path || got != "" {
			t.Errorf("%v: %q, %v; want a DetectError at %s wrapping %v", c.entries, got, err, c.path, c.err)
		}
	}
	// A skeleton reported in conflict: the WTXT beside it is still found.
	if got, err := DetectWithoutSkeleton(has(FileSkeleton, DirWTXTParts)); err != nil || got != Split {
		t.Errorf("DetectWithoutSkeleton: %q, %v", got, err)
	}
}

// TestStored: a sidecar is stored whole or as parts; only the WTXT has
// a segments form.
func TestStored(t *testing.T) {
	if n, err := Stored(has("current.wtxtdelta.parts"), "current.wtxtdelta"); n != Split || err != nil {
		t.Errorf("delta parts: %q, %v", n, err)
	}
	if n, err := Stored(has(DirWTXTSegs), "current.wtxtdelta"); n != "" || err != nil {
		t.Errorf("delta beside segments: %q, %v", n, err)
	}
	if _, err := Stored(has("x", "x.parts"), "x"); !errors.Is(err, ErrAmbiguous) || err.Error() != "x: both x and x.parts/ present" {
		t.Errorf("both forms: %v", err)
	}
}

// TestSniffFiles: a skeleton file and a plain WTXT are told apart by their
// first line; an armored or short file is neither.
func TestSniffFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	skel, plain := write("s", "WTXT-SKELETON 1\nmeta\n"), write("w", "WTXT 1\nmeta\n")
	armored, short := write("a", "-----BEGIN AGE ENCRYPTED FILE-----\n"), write("e", "WTX")
	if !IsSkeletonFile(skel) || IsSkeletonFile(plain) || IsSkeletonFile(short) || IsSkeletonFile(filepath.Join(dir, "none")) {
		t.Error("IsSkeletonFile")
	}
	if !IsPlainWTXTFile(plain) || IsPlainWTXTFile(skel) || IsPlainWTXTFile(armored) || IsPlainWTXTFile(short) {
		t.Error("IsPlainWTXTFile")
	}
}

// TestDetectPartsDir: a checked-out segments directory is told from a
// parts directory by its first piece; anything unreadable reads as parts
// (whose reader says what is wrong).
func TestDetectPartsDir(t *testing.T) {
	w, _ := genWTXT(1, "", []testArray{{name: "x", data: pseudo(1, 5000), chunk: 100}})
	m, parts := splitToMap(t, w, MinPartLimit)
	fsys := fstest.MapFS{ManifestName: {Data: m.Encode()}}
	for n, p := range parts {
		fsys[n] = &fstest.MapFile{Data: p}
	}
	if got := DetectPartsDir(fsys); got != Split {
		t.Errorf("parts: %s", got)
	}
	skel := []byte(wtxt.SkeletonMagic + "\nmeta gen=000001\n")
	sm := Manifest{Parts: []Part{{Name: "0000-header.part", Size: int64(len(skel)), SHA256: sha(skel)}}, Bytes: int64(len(skel)), SHA256: sha(skel)}
	segs := fstest.MapFS{ManifestName: {Data: sm.Encode()}, "0000-header.part": {Data: skel}}
	if got := DetectPartsDir(segs); got != Segments {
		t.Errorf("segments: %s", got)
	}
	if got := DetectPartsDir(fstest.MapFS{}); got != Split {
		t.Errorf("empty: %s", got)
	}
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
