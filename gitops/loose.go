package gitops

import (
	"compress/zlib"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing"
)

// objectsDir returns the objects directory of the repository at dir (bare
// or with a work tree), or "" when there is none.
func objectsDir(dir string) string {
	for _, p := range []string{filepath.Join(dir, "objects"), filepath.Join(dir, ".git", "objects")} {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
	}
	return ""
}

// looseLevel is the zlib level of the loose objects Repo writes: stored
// blocks (no compression). go-git writes level 6, about 4x the CPU of
// level 1 on base64 text, and level 1 still costs a deflate here and an
// inflate in pack-objects for ~25% of size on a local repository that
// git push repacks anyway (at pack.compression, packCompression).
const looseLevel = zlib.NoCompression

// writeLoose stores a blob of size bytes read from r as a loose object
// at looseLevel. The
// object is written to a temp file in its fan-out directory and renamed,
// as git does; it returns the hash of what was read, which is the
// caller's to check.
func writeLoose(objects string, size int64, r io.Reader) (plumbing.Hash, error) {
	tmp, err := os.CreateTemp(objects, "tmp_obj_")
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer os.Remove(tmp.Name())
	hasher := plumbing.NewHasher(plumbing.BlobObject, size)
	zw, err := zlib.NewWriterLevel(tmp, looseLevel)
	if err != nil {
		tmp.Close()
		return plumbing.ZeroHash, err
	}
	hdr := append(append([]byte("blob "), strconv.FormatInt(size, 10)...), 0)
	_, err = zw.Write(hdr)
	var n int64
	if err == nil {
		n, err = io.Copy(io.MultiWriter(zw, hasher), io.LimitReader(r, size))
	}
	if err == nil && n != size {
		err = fmt.Errorf("short read: %d of %d bytes", n, size)
	}
	if err == nil {
		err = zw.Close()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return plumbing.ZeroHash, err
	}
	h := hasher.Sum()
	hex := h.String()
	dir := filepath.Join(objects, hex[:2])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, hex[2:])); err != nil {
		return plumbing.ZeroHash, err
	}
	return h, nil
}
