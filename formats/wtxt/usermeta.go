package wtxt

import (
	"bufio"
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

// ReadSkeletonUserMeta returns the generation metadata of the WTXT the
// skeleton skel (size bytes; Split's output) was split from, as
// ReadUserMeta does for that WTXT: nil when it has no attributes
// document. A skeleton holds no chunk bytes, only whether the document
// exists (its arr line) and its hashes; the document's bytes are read
// from src, and only the blobs of that array's segments, each checked as
// Assemble checks it (every chunk's sha256 and crc32c against its ch
// line, the blob's length and digest). Every skeleton line is checked as
// SkeletonSegments checks it. Errors are *Error values naming name, the
// line, array and chunk; a blob src does not have is one with Check
// "blob" wrapping ErrBlobNotFound. Authenticity (the skeleton's header
// and signature, or the signed commit holding it) is the caller's job.
func ReadSkeletonUserMeta(ctx context.Context, name string, skel io.ReaderAt, size int64, src BlobSource) (snapshot.UserMeta, error) {
	x, err := ReadSkeletonIndex(ctx, name, bufio.NewReaderSize(io.NewSectionReader(skel, 0, size), 1<<20), IndexOptions{NoChunks: true})
	if err != nil {
		return nil, err
	}
	a := x.Array(snapshot.AttrsArrayName)
	if a == nil {
		return nil, nil
	}
	if err := attrsGeometry(name, a); err != nil {
		return nil, err
	}
	as := &assembler{ctx: ctx, lr: newLineReader(io.NewSectionReader(skel, 0, size), name), w: bufio.NewWriter(io.Discard), src: src,
		info: &AssembleInfo{}, pick: func(_ int, s Segment) bool { return s.Array == snapshot.AttrsArrayName },
		keep: snapshot.AttrsArrayName, keepMax: a.Bytes, kept: make([]byte, 0, a.Bytes)}
	err = as.run()
	if as.blob != nil {
		as.blob.Close()
	}
	if err != nil {
		return nil, err
	}
	if int64(len(as.kept)) != a.Bytes {
		return nil, &Error{File: name, Line: a.Line, Array: a.Name, Chunk: -1, Check: CheckGeometry,
			Msg: fmt.Sprintf("the chunks hold %d bytes, the arr line declares %d", len(as.kept), a.Bytes)}
	}
	return attrsUserMeta(name, as.kept)
}

// attrsGeometry checks the reserved array's arr line: u8, rank 1, at
// most snapshot.MaxAttrsSize bytes.
func attrsGeometry(name string, a *IndexArray) error {
	if a.DType != snapshot.U8 || len(a.Shape) != 1 || a.Bytes > snapshot.MaxAttrsSize {
		return &Error{File: name, Line: a.Line, Array: a.Name, Check: CheckGeometry,
			Msg: fmt.Sprintf("the reserved array must be u8 of rank 1 and at most %d bytes", snapshot.MaxAttrsSize)}
	}
	return nil
}

// attrsUserMeta decodes the metadata of an attributes document.
func attrsUserMeta(name string, doc []byte) (snapshot.UserMeta, error) {
	m, err := snapshot.UserMetaOfAttrs(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// UserMeta reads the metadata of the indexed file r (see ReadUserMeta);
// name is used in errors.
func (x *Index) UserMeta(name string, r io.ReaderAt) (snapshot.UserMeta, error) {
	a := x.Array(snapshot.AttrsArrayName)
	if a == nil {
		return nil, nil
	}
	if err := attrsGeometry(name, a); err != nil {
		return nil, err
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
	return attrsUserMeta(name, doc)
}
