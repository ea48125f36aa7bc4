package armor

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"filippo.io/age"
)

// NewWriter's output, written in uneven pieces (across age's 64 KiB
// chunks and the armor's 48-byte lines), is canonical armor that age -d
// and Decrypt both turn back into the input.
func TestNewWriterRoundTrip(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz\n"), 5000) // ~185 KB: 3 age chunks
	for _, in := range [][]byte{nil, []byte("x"), plain, big} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, id.Recipient())
		if err != nil {
			t.Fatal(err)
		}
		for rest, step := in, 1; len(rest) > 0; step = step*3 + 1 {
			n := min(step, len(rest))
			if m, err := w.Write(rest[:n]); err != nil || m != n {
				t.Fatalf("write %d: %d, %v", n, m, err)
			}
			rest = rest[n:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		enc := buf.Bytes()
		d, err := Scan(bytes.NewReader(enc))
		if err != nil {
			t.Fatalf("%d bytes: own armor fails Scan: %v", len(in), err)
		}
		if d.Bytes != int64(len(enc)) {
			t.Fatalf("Scan counted %d bytes, wrote %d", d.Bytes, len(enc))
		}
		got, err := decrypt(t, enc, id)
		if err != nil || !bytes.Equal(got, in) {
			t.Fatalf("%d bytes: round trip: %v (got %d bytes)", len(in), err, len(got))
		}
		if _, err := w.Write([]byte("late")); err == nil {
			t.Fatal("Write after Close accepted")
		}
	}

	ageBin, err := exec.LookPath("age")
	if err != nil {
		t.Skip("age CLI not installed (scripts/test.sh installs it)")
	}
	dir := t.TempDir()
	keyFile, encFile := filepath.Join(dir, "key.txt"), filepath.Join(dir, "big.age")
	if err := os.WriteFile(keyFile, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, id.Recipient())
	w.Write(big)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(encFile, buf.Bytes(), 0o644)
	out, err := exec.Command(ageBin, "-d", "-i", keyFile, encFile).Output()
	if err != nil || !bytes.Equal(out, big) {
		t.Fatalf("age -d of NewWriter output: %v", err)
	}
}

// failAfter accepts n bytes, then fails every write with ENOSPC.
type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) <= f.n {
		f.n -= len(p)
		return len(p), nil
	}
	n := f.n
	f.n = 0
	return n, &os.PathError{Op: "write", Path: "out", Err: syscall.ENOSPC}
}

// A failing destination surfaces from Write or Close as an "encrypt:"
// error that still matches the cause (errors.Is), and sticks.
func TestNewWriterDestinationError(t *testing.T) {
	id, _ := age.GenerateX25519Identity()
	w, err := NewWriter(&failAfter{n: 1000}, id.Recipient())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{'a'}, 200<<10)
	_, werr := w.Write(data)
	cerr := w.Close()
	if werr == nil {
		werr = cerr
	}
	if !errors.Is(werr, syscall.ENOSPC) || !strings.HasPrefix(werr.Error(), "encrypt: ") {
		t.Fatalf("want an encrypt: error wrapping ENOSPC, got %v", werr)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("error not sticky on Write: %v", err)
	}
	if err := w.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("error not sticky on Close: %v", err)
	}
	if _, err := NewWriter(&bytes.Buffer{}); err == nil {
		t.Fatal("no recipients accepted")
	}
}
