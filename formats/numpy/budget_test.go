package numpy

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// zeroBomb returns an .npz whose one deflated member "z.npy" is a u1
// array of mib MiB of zeros: about 1 KiB of deflate per MiB, with the
// member's true size and CRC-32, so only a budget can refuse it. The
// deflate stream is the header plus the first MiB, then one flushed block
// of a MiB of zeros repeated (its back references stay inside the zeros
// before it), then an empty final stored block.
func zeroBomb(tb testing.TB, mib int) []byte {
	tb.Helper()
	const block = 1 << 20
	npy := npyFile(fmt.Sprintf("{'descr': '|u1', 'fortran_order': False, 'shape': (%d,), }", mib*block), nil)
	zeros := make([]byte, block)
	var buf bytes.Buffer
	w, err := flate.NewWriter(&buf, flate.BestCompression)
	if err != nil {
		tb.Fatal(err)
	}
	w.Write(npy)
	w.Write(zeros)
	w.Flush()
	head := bytes.Clone(buf.Bytes())
	buf.Reset()
	w.Write(zeros)
	w.Flush()
	rep := bytes.Clone(buf.Bytes())
	stream := append([]byte(nil), head...)
	for range mib - 1 {
		stream = append(stream, rep...)
	}
	stream = append(stream, 1, 0, 0, 0xff, 0xff) // final empty stored block
	crc := crc32.ChecksumIEEE(npy)
	for range mib {
		crc = crc32.Update(crc, crc32.IEEETable, zeros)
	}
	size := len(npy) + mib*block
	return mkzip([]zmember{{name: "z.npy", method: 8, data: stream, crc: crc, usize: uint32(size)}})
}

// TestZeroBombIsValid: the bomb builder's stream really inflates to the
// declared bytes (checked on a small one), so a refusal is the budget's.
func TestZeroBombIsValid(t *testing.T) {
	raw := zeroBomb(t, 3)
	s, err := NewNPZ().Decode(context.Background(), snapshot.Bytes(raw), int64(len(raw)), formats.DecodeOptions{Name: "bomb.npz"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := snapshot.ReadAll(s.Arrays[0].Data)
	if err != nil || len(b) != 3<<20 || !bytes.Equal(b, make([]byte, 3<<20)) {
		t.Fatalf("bomb array: %d bytes, %v", len(b), err)
	}
}

// TestNPZBombWithinDefaultBudget: a 0.5 MB .npz inflating to 512 MiB is
// refused by the file's default decode budget (256 × its size, at least
// 256 MiB) before anything is inflated, naming the member; the budget
// it was charged to never exceeds its limit.
func TestNPZBombWithinDefaultBudget(t *testing.T) {
	raw := zeroBomb(t, 512)
	if len(raw) > 600<<10 {
		t.Fatalf("bomb is %d bytes", len(raw))
	}
	for _, r := range []io.ReaderAt{snapshot.Bytes(raw), bytes.NewReader(raw)} {
		_, err := NewNPZ().Decode(context.Background(), r, int64(len(raw)), formats.DecodeOptions{Name: "bomb.npz"})
		if !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), `member "z.npy"`) || !strings.Contains(err.Error(), "decode budget") {
			t.Fatalf("512 MiB bomb in %d bytes: %v, want ErrLimit naming the member", len(raw), err)
		}
		bud := formats.NewBudget(formats.DefaultMaxDecoded(int64(len(raw))))
		_, err = NewNPZ().Decode(context.Background(), r, int64(len(raw)), formats.DecodeOptions{Name: "bomb.npz", SharedBudget: bud})
		if !errors.Is(err, formats.ErrLimit) || bud.Peak() > bud.Limit() {
			t.Fatalf("shared budget: %v, peak %d of %d", err, bud.Peak(), bud.Limit())
		}
	}
}

// TestNPZMembersShareOneBudget: the declared sizes of all deflated
// members count against the one budget of the file.
func TestNPZMembersShareOneBudget(t *testing.T) {
	one := deflated("a.npy", npyFile("{'descr': '|u1', 'fortran_order': False, 'shape': (600,), }", make([]byte, 600)))
	two := one
	two.name = "b.npy"
	raw := mkzip([]zmember{one, two})
	limit := int64(one.usize) + int64(one.usize)/2
	_, err := NewNPZ().Decode(context.Background(), snapshot.Bytes(raw), int64(len(raw)), formats.DecodeOptions{Name: "two.npz", MaxDecoded: limit})
	if !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), `member "b.npy"`) {
		t.Fatalf("second member past the budget: %v", err)
	}
	if _, err := NewNPZ().Decode(context.Background(), snapshot.Bytes(raw), int64(len(raw)), formats.DecodeOptions{Name: "two.npz", MaxDecoded: 2 * int64(one.usize)}); err != nil {
		t.Fatal(err)
	}
}

// TestUnmappedCopyChargesBudget: a big-endian .npy read through a reader
// that is not memory-backed is copied into memory, and charged for it.
func TestUnmappedCopyChargesBudget(t *testing.T) {
	raw := npyFile("{'descr': '>f8', 'fortran_order': False, 'shape': (64,), }", make([]byte, 64*8))
	bud := formats.NewBudget(1 << 20)
	if _, err := New().Decode(context.Background(), bytes.NewReader(raw), int64(len(raw)), formats.DecodeOptions{SharedBudget: bud}); err != nil {
		t.Fatal(err)
	}
	if bud.Used() != 64*8 {
		t.Fatalf("charged %d bytes, want %d", bud.Used(), 64*8)
	}
	_, err := New().Decode(context.Background(), bytes.NewReader(raw), int64(len(raw)), formats.DecodeOptions{MaxDecoded: 100})
	if !errors.Is(err, formats.ErrLimit) {
		t.Fatalf("copy past the budget: %v", err)
	}
}

// hostileNPY is a .npy v2.0 file whose header length field declares 4 GiB.
func hostileNPY(tb testing.TB) []byte {
	b := append([]byte(npyMagic), 2, 0)
	b = binary.LittleEndian.AppendUint32(b, 1<<32-1)
	return append(b, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }"...)
}

// hostileNPZ is a 0.5 MB .npz inflating to 512 MiB.
func hostileNPZ(tb testing.TB) []byte { return zeroBomb(tb, 512) }
