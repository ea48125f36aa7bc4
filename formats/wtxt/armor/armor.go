package armor

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"filippo.io/age"
	agearmor "filippo.io/age/armor"
)

// Armor header and footer lines.
const (
	Header = agearmor.Header
	Footer = agearmor.Footer
)

// ErrNotArmored is returned when input does not start with the age armor
// header.
var ErrNotArmored = errors.New("not an age ASCII-armored file")

// NewWriter returns a writer that encrypts what is written to it to
// recipients and writes it to dst wrapped in age ASCII armor, as
// age.Encrypt does for binary age. Close must be called to flush the last
// chunk, the armor's last line and its footer; it does not close dst.
// Errors (from dst or from age) are wrapped "encrypt: ...", and the first
// one is returned again by every later Write and Close. The output is
// exactly Encrypt's for the same bytes (and `age -a`'s format).
func NewWriter(dst io.Writer, recipients ...age.Recipient) (io.WriteCloser, error) {
	if len(recipients) == 0 {
		return nil, errors.New("encrypt: no recipients")
	}
	aw := agearmor.NewWriter(dst)
	w, err := age.Encrypt(aw, recipients...)
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	return &writer{armor: aw, age: w}, nil
}

// writer is NewWriter's result: age's stream inside the armor encoder.
type writer struct {
	armor, age io.WriteCloser
	err        error // first error; sticky
	closed     bool
}

func (w *writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.closed {
		w.err = errors.New("encrypt: write after Close")
		return 0, w.err
	}
	n, err := w.age.Write(p)
	if err != nil {
		w.err = fmt.Errorf("encrypt: %w", err)
	}
	return n, w.err
}

// Close flushes age's last chunk and then the armor (last line, footer).
// It is idempotent.
func (w *writer) Close() error {
	if w.err != nil || w.closed {
		return w.err
	}
	w.closed = true
	if err := w.age.Close(); err != nil {
		w.err = fmt.Errorf("encrypt: %w", err)
		return w.err
	}
	if err := w.armor.Close(); err != nil {
		w.err = fmt.Errorf("encrypt: armor: %w", err)
	}
	return w.err
}

// Encrypt copies src to dst encrypted to recipients and wrapped in age
// ASCII armor (NewWriter, io.Copy, Close).
func Encrypt(dst io.Writer, src io.Reader, recipients ...age.Recipient) error {
	w, err := NewWriter(dst, recipients...)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, src); err != nil {
		if werr := w.(*writer).err; werr != nil {
			return werr // already "encrypt: ..."
		}
		return fmt.Errorf("encrypt: %w", err) // reading src
	}
	return w.Close()
}

// Decrypt returns a reader of the plaintext of an armored age file. Errors
// distinguish bad armor (wrapping *agearmor.Error, e.g. bad base64), a
// wrong identity (*age.NoIdentityMatchError) and corrupt ciphertext; reading
// the returned reader fails if the payload was tampered with.
func Decrypt(src io.Reader, identities ...age.Identity) (io.Reader, error) {
	br := bufio.NewReader(src)
	head, err := br.Peek(len(Header))
	if err != nil || string(head) != Header {
		return nil, ErrNotArmored
	}
	r, err := age.Decrypt(agearmor.NewReader(br), identities...)
	if err != nil {
		var nm *age.NoIdentityMatchError
		if errors.As(err, &nm) {
			return nil, fmt.Errorf("decrypt: no identity matches a recipient of this file: %w", err)
		}
		return nil, fmt.Errorf("decrypt: %w", err)
	}
	return r, nil
}

// IsArmored reports whether b starts with the armor header.
func IsArmored(b []byte) bool { return bytes.HasPrefix(b, []byte(Header)) }

// Digest is the size and SHA-256 of an armored file.
type Digest struct {
	Bytes  int64
	SHA256 [32]byte
}

// Scan reads an armored file to its end, checking that it is armor as this
// package and `age -a` write it — the header line, base64 lines of exactly
// 64 columns except a shorter last one (strict, canonical base64), the
// footer line, one final LF, only bytes 0x20-0x7E and LF — and returns its
// size and SHA-256. It does not decrypt and holds one line in memory. The
// error names the line.
func Scan(r io.Reader) (Digest, error) {
	h := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(r, h), 4096)
	var d Digest
	var dec [48]byte
	lineNo := 0
	state := 0 // 0 header, 1 body, 2 after short body line, 3 after footer
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return d, fmt.Errorf("armor: line %d: longer than %d bytes", lineNo+1, br.Size())
		}
		if err == io.EOF {
			if len(line) > 0 {
				return d, fmt.Errorf("armor: line %d: missing final LF", lineNo+1)
			}
			break
		}
		if err != nil {
			return d, err
		}
		lineNo++
		d.Bytes += int64(len(line))
		l := line[:len(line)-1]
		for i, c := range l {
			if c < 0x20 || c > 0x7e {
				return d, fmt.Errorf("armor: line %d column %d: byte 0x%02x is not printable ASCII", lineNo, i+1, c)
			}
		}
		switch {
		case state == 3:
			return d, fmt.Errorf("armor: line %d: data after the footer", lineNo)
		case state == 0:
			if string(l) != Header {
				return d, fmt.Errorf("armor: line %d: want %q", lineNo, Header)
			}
			state = 1
		case string(l) == Footer:
			if lineNo == 2 {
				return d, fmt.Errorf("armor: line %d: empty body", lineNo)
			}
			state = 3
		case state == 2:
			return d, fmt.Errorf("armor: line %d: body line after a short line", lineNo)
		default:
			if len(l) == 0 || len(l) > 64 || len(l)%4 != 0 {
				return d, fmt.Errorf("armor: line %d: %d columns, want 64 (shorter only on the last body line, a multiple of 4)", lineNo, len(l))
			}
			if _, err := base64.StdEncoding.Strict().Decode(dec[:], l); err != nil {
				return d, fmt.Errorf("armor: line %d: bad base64: %v", lineNo, err)
			}
			if len(l) < 64 || bytes.IndexByte(l, '=') >= 0 {
				state = 2
			}
		}
	}
	if state != 3 {
		return d, fmt.Errorf("armor: truncated: no footer line %q", Footer)
	}
	copy(d.SHA256[:], h.Sum(nil))
	return d, nil
}
