package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"filippo.io/age"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/internal/where"
	"github.com/snapd-ml/snapd/keys"
	"github.com/snapd-ml/snapd/snapshot"
)

// openedSnapshot is a decoded input whose array data may alias a memory map;
// Close releases the map.
type openedSnapshot struct {
	*snapshot.Snapshot
	Codec formats.Codec
	// Diagnostics are the reader's notes (e.g. ECC corrections); they are
	// not part of the snapshot.
	Diagnostics []formats.Diagnostic
	m           *snapshot.Mapping
	closer      io.Closer // a directory input (formats/sharddir)
}

func (o *openedSnapshot) Close() error {
	if o.closer != nil {
		return o.closer.Close()
	}
	if o.m != nil {
		return o.m.Close()
	}
	return nil
}

// openSnapshot memory-maps path and decodes it with the codec named from,
// or the one its magic bytes (then extension) select.
// A directory is read as one snapshot (formats/sharddir).
func openSnapshot(ctx context.Context, reg *formats.Registry, path, from string) (*openedSnapshot, error) {
	return openSnapshotStrict(ctx, reg, path, from, false)
}

// openSnapshotStrict is openSnapshot with formats.DecodeOptions.Strict:
// a checkpoint the decoder would carry verbatim (a torch pickle naming
// globals outside the allowlist) is refused instead.
func openSnapshotStrict(ctx context.Context, reg *formats.Registry, path, from string, strict bool) (*openedSnapshot, error) {
	if isDir(path) {
		return openDirStrict(ctx, reg, path, from, nil, strict)
	}
	m, err := snapshot.MapFile(path)
	if err != nil {
		return nil, ioError{err}
	}
	var c formats.Codec
	if from != "" {
		c, err = reg.ByName(from)
		if err != nil {
			m.Close()
			return nil, usageError{err}
		}
	} else if c, err = reg.Detect(path, m.Guarded(), m.Size()); err != nil {
		m.Close()
		if armor.IsArmored(head(m)) {
			return nil, withHint(fmt.Errorf("%s: %w", path, err), "the file is age-encrypted: run `snapd decrypt IN OUT --identity FILE` first")
		}
		return nil, withHint(fmt.Errorf("%s: %w", path, err), "name the format with --from")
	}
	// Guarded: a source truncated while mapped is an error, not SIGBUS.
	var diags []formats.Diagnostic
	s, err := c.Decode(ctx, m.Guarded(), m.Size(), formats.DecodeOptions{Name: path, Strict: strict, Diagnostic: func(d formats.Diagnostic) { diags = append(diags, d) }})
	if err != nil {
		m.Close()
		var fe *formats.Error
		if errors.As(err, &fe) && fe.File == path && fe.Format == c.Name() {
			return nil, err // names the file and the format already
		}
		return nil, fmt.Errorf("%s: %s: %w", path, c.Name(), err)
	}
	return &openedSnapshot{Snapshot: s, Codec: c, Diagnostics: diags, m: m}, nil
}

// head returns the first bytes of m that a codec's Sniff is given.
func head(m *snapshot.Mapping) []byte {
	b := make([]byte, min(formats.SniffLen, m.Size()))
	n, _ := m.Guarded().ReadAt(b, 0)
	return b[:n]
}

// prevMerkleFromFile reads merkle_this from a previous generation: a WTXT
// file (its root line), a WSUM file, or an armored file's seal.
func prevMerkleFromFile(path string) ([32]byte, error) {
	var zero [32]byte
	b, err := readHead(path, 1<<16)
	if err != nil {
		return zero, ioError{err}
	}
	switch {
	case wtxt.IsWSUM(b):
		full, err := os.ReadFile(path)
		if err != nil {
			return zero, ioError{err}
		}
		w, err := wtxt.ParseWSUM(full)
		if err != nil {
			return zero, fmt.Errorf("--prev %s: %w", path, where.At(path, err))
		}
		return w.MerkleThis, nil
	case armor.IsArmored(b):
		sb, err := os.ReadFile(armor.SealPath(path))
		if err != nil {
			return zero, withHint(ioError{err}, "an encrypted --prev needs its .wseal seal beside it")
		}
		s, err := armor.ParseSeal(sb)
		if err != nil {
			return zero, fmt.Errorf("--prev %s: %w", armor.SealPath(path), where.At(armor.SealPath(path), err))
		}
		return s.MerkleThis, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return zero, ioError{err}
	}
	defer f.Close()
	var r io.Reader = f
	if wtxt.IsSkeleton(b) {
		// A skeleton: its header follows the first line.
		r = io.NewSectionReader(f, int64(len(wtxt.SkeletonMagic)+1), 1<<62)
	}
	h, err := wtxt.ReadHeader(r)
	if err != nil {
		return zero, fmt.Errorf("--prev %s: %w", path, where.At(path, err))
	}
	if h.Pending {
		return zero, withHint(fmt.Errorf("--prev %s: streamed snapshot has no final merkle_this", path), "pass its WSUM file as --prev")
	}
	return h.MerkleThis, nil
}

func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	k, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:k], nil
}

// writeWTXT encodes s to out atomically, writes the WSUM when streaming,
// and, with --encrypt-to, armors the output and writes its seal.
func writeWTXT(ctx context.Context, e *env, s *snapshot.Snapshot, opts wtxt.EncodeOptions, out string, f *wtxtFlags) (*wtxt.Result, error) {
	var recipients []age.Recipient
	if f.encryptTo != "" {
		r, err := keys.LoadAgeRecipients(f.encryptTo)
		if err != nil {
			return nil, keyError(err)
		}
		recipients = r
	}
	var res *wtxt.Result
	encode := func(w io.Writer) error {
		var err error
		res, err = wtxt.Encode(ctx, f.meter.Wrap(w), s, opts)
		return err
	}
	if recipients == nil {
		if err := writeAtomic(out, func(file *os.File) error { return encode(file) }); err != nil {
			return nil, err
		}
	} else {
		// Encrypt while encoding: the plaintext never touches the disk.
		if err := writeAtomic(out, func(file *os.File) error { return encryptStream(file, recipients, encode) }); err != nil {
			return nil, err
		}
	}
	if f.stream != "" {
		wsum := res.WSUM
		if recipients != nil {
			var buf bytes.Buffer
			if err := armor.Encrypt(&buf, bytes.NewReader(wsum), recipients...); err != nil {
				return nil, err
			}
			if err := writeAtomic(f.stream, func(file *os.File) error { _, err := file.Write(buf.Bytes()); return err }); err != nil {
				return nil, err
			}
			if err := writeSeal(f.stream, armor.KindWSUM, res, opts); err != nil {
				return nil, err
			}
		} else if err := writeAtomic(f.stream, func(file *os.File) error { _, err := file.Write(wsum); return err }); err != nil {
			return nil, err
		}
	}
	if recipients != nil {
		if err := writeSeal(out, armor.KindWTXT, res, opts); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// writeSeal writes path.wseal for the armored file at path.
func writeSeal(path, kind string, res *wtxt.Result, opts wtxt.EncodeOptions) error {
	v := armor.Seal{Kind: kind, Root: res.Root}
	if _, err := armor.WriteSeal(path, v, opts.SignKey, 0o644); err != nil {
		return err
	}
	return nil
}
