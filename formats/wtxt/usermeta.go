package wtxt

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"

	"github.com/snapd-ml/snapd/snapshot"
)

// ReadUserMeta returns the generation metadata (snapshot.UserMeta) a WTXT
// carries in its attributes document, nil when it has none. It reads the
// structure (ReadIndex) and only the attributes array's chunks, checking
// each chunk's crc32c and sha256 against its ch line; authenticity (the
// root and signature over them) is Verify's job.
func ReadUserMeta(ctx context.Context, name string, r io.ReaderAt, size int64) (snapshot.UserMeta, error) {
	x, err := ReadIndex(ctx, name, r, size)
	if err != nil {
		return nil, err
	}
	return x.UserMeta(name, r)
}

// UserMeta reads the metadata of the indexed file r (see ReadUserMeta);
// name is used in errors.
func (x *Index) UserMeta(name string, r io.ReaderAt) (snapshot.UserMeta, error) {
	a := x.Array(snapshot.AttrsArrayName)
	if a == nil {
		return nil, nil
	}
	if a.DType != snapshot.U8 || len(a.Shape) != 1 || a.Bytes > snapshot.MaxAttrsSize {
		return nil, &Error{File: name, Line: a.Line, Array: a.Name, Check: CheckGeometry,
			Msg: fmt.Sprintf("the reserved array must be u8 of rank 1 and at most %d bytes", snapshot.MaxAttrsSize)}
	}
	doc := make([]byte, 0, a.Bytes)
	for i := range a.Chunks {
		c := &a.Chunks[i]
		b, err := ReadChunk(r, name, a, c)
		if err != nil {
			return nil, err
		}
		if sha256.Sum256(b) != c.SHA256 {
			return nil, &Error{File: name, Line: c.Line, Array: a.Name, Chunk: c.IX, Check: CheckChunkSHA, Msg: "chunk sha256 mismatch"}
		}
		doc = append(doc, b...)
	}
	m, err := snapshot.UserMetaOfAttrs(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}
