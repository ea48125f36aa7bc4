package gitops

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing"
)

// Reading big loose blobs (a single-file WTXT or skeleton, split parts, as
// Commit writes them) straight from their files: git cat-file maps a
// loose object whole while it inflates it, so its resident size grows to
// the object's size (416 MB for a 300 MB checkpoint's WTXT), and go-git
// reads a loose object whole into memory. Here the zlib stream is
// inflated through a 64 KiB buffer. Nothing is trusted to it beyond what
// cat-file would be trusted with: readers check every chunk's SHA-256
// and the signed root.

// looseMin is the smallest loose file read directly; smaller blobs go
// through cat-file (pipelined) or go-git as before.
const looseMin = catBuffered

// maxLooseHeader bounds a loose object's header ("blob <size>\x00").
const maxLooseHeader = 32

// openLoose opens blob h from its loose file under objects when that file
// exists and holds at least looseMin bytes: ok=false (and no error) when
// it does not, so the caller reads the blob another way. The reader
// yields exactly the size its header states; a stream that ends early or
// goes on, or fails its Adler-32, is an error at its end.
func openLoose(objects string, h plumbing.Hash) (rc io.ReadCloser, size int64, ok bool, err error) {
	if objects == "" {
		return nil, 0, false, nil
	}
	hex := h.String()
	f, err := os.Open(filepath.Join(objects, hex[:2], hex[2:]))
	if err != nil {
		return nil, 0, false, nil
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() < looseMin {
		f.Close()
		return nil, 0, false, nil
	}
	zr, err := zlib.NewReader(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		f.Close()
		return nil, 0, false, fmt.Errorf("loose object %s: %w", hex, err)
	}
	br := bufio.NewReaderSize(zr, 64<<10)
	head, err := br.Peek(maxLooseHeader)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, 0, false, fmt.Errorf("loose object %s: %w", hex, err)
	}
	nul := bytes.IndexByte(head, 0)
	rest, isBlob := bytes.CutPrefix(head[:max(nul, 0)], []byte("blob "))
	size, perr := strconv.ParseInt(string(rest), 10, 64)
	if nul < 0 || !isBlob || perr != nil || size < 0 {
		f.Close()
		return nil, 0, false, fmt.Errorf("loose object %s: not a blob header", hex)
	}
	_, _ = br.Discard(nul + 1)
	return &looseReader{f: f, zr: zr, r: br, left: size}, size, true, nil
}

// looseReader streams a loose blob's content (see openLoose).
type looseReader struct {
	f    *os.File
	zr   io.ReadCloser
	r    *bufio.Reader
	left int64
	done bool
}

func (l *looseReader) Read(p []byte) (int, error) {
	if l.left == 0 {
		if !l.done {
			// Read to the stream's end: zlib checks the Adler-32 there.
			var b [1]byte
			if n, err := l.r.Read(b[:]); n != 0 || !errors.Is(err, io.EOF) {
				if err == nil || errors.Is(err, io.EOF) {
					err = errors.New("content longer than its header states")
				}
				return 0, fmt.Errorf("loose object: %w", err)
			}
			l.done = true
		}
		return 0, io.EOF
	}
	n, err := l.r.Read(p[:min(int64(len(p)), l.left)])
	l.left -= int64(n)
	if errors.Is(err, io.EOF) && l.left > 0 {
		err = fmt.Errorf("loose object: %w", io.ErrUnexpectedEOF)
	} else if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

func (l *looseReader) Close() error {
	l.zr.Close()
	return l.f.Close()
}

// looseFS is a treeFS whose big loose blobs are read from their files
// (openLoose); every other blob through the treeFS.
type looseFS struct {
	treeFS
	objects string
}

func (f looseFS) Open(name string) (fs.File, error) {
	if fs.ValidPath(name) {
		if e, err := f.t.FindEntry(name); err == nil && e.Mode.IsFile() {
			rc, size, ok, err := openLoose(f.objects, e.Hash)
			if err != nil {
				return nil, &fs.PathError{Op: "open", Path: name, Err: err}
			}
			if ok {
				return &treeFile{ReadCloser: rc, name: name, size: size}, nil
			}
		}
	}
	return f.treeFS.Open(name)
}
