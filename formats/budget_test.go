package formats_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/internal/testutil"
)

func TestDefaultMaxDecoded(t *testing.T) {
	for _, c := range []struct{ size, want int64 }{
		{-1, formats.DefaultBudgetFloor},
		{0, formats.DefaultBudgetFloor},
		{107 << 10, formats.DefaultBudgetFloor},
		{10 << 20, 10 << 20 * formats.DefaultBudgetRatio},
		{1 << 40, formats.DefaultBudgetCap},
		{1<<63 - 1, formats.DefaultBudgetCap},
	} {
		if got := formats.DefaultMaxDecoded(c.size); got != c.want {
			t.Errorf("DefaultMaxDecoded(%d) = %d, want %d", c.size, got, c.want)
		}
	}
	if got := (formats.DecodeOptions{MaxDecoded: 5}).Budget(1 << 30).Limit(); got != 5 {
		t.Errorf("MaxDecoded ignored: %d", got)
	}
}

func TestBudgetTake(t *testing.T) {
	b := formats.NewBudget(100)
	if err := b.Take(60, "a"); err != nil {
		t.Fatal(err)
	}
	err := b.Take(41, `chunk "x"`)
	if !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), `chunk "x"`) || !strings.Contains(err.Error(), "41 bytes") {
		t.Fatalf("over budget: %v", err)
	}
	if b.Remaining() != 40 {
		t.Fatalf("a refused Take was charged: %d left", b.Remaining())
	}
	b.Give(60)
	if b.Remaining() != 100 {
		t.Fatalf("Give: %d left", b.Remaining())
	}
	if err := b.Take(-1, "neg"); !errors.Is(err, formats.ErrCorrupt) {
		t.Fatalf("negative: %v", err)
	}
}

func TestDecompressZstd(t *testing.T) {
	ctx := context.Background()
	// Exact size within budget.
	b := formats.NewBudget(1 << 20)
	out, err := b.DecompressZstd(ctx, bytes.NewReader(testutil.ZstdBomb(1000, 'x', false)), 1000, true, "t")
	if err != nil || len(out) != 1000 || out[999] != 'x' {
		t.Fatalf("exact: %d bytes, %v", len(out), err)
	}
	if b.Remaining() != 1<<20-1000 {
		t.Fatalf("charged %d", 1<<20-b.Remaining())
	}
	// Short or long output against an exact size.
	for _, n := range []int64{999, 1001} {
		_, err := formats.NewBudget(1<<20).DecompressZstd(ctx, bytes.NewReader(testutil.ZstdBomb(n, 'x', false)), 1000, true, "t")
		if !errors.Is(err, formats.ErrCorrupt) {
			t.Errorf("%d bytes for 1000: %v", n, err)
		}
	}
	// A declared content size beyond the limit or the budget is refused
	// before decoding: the "frame" after the header is garbage that
	// decoding would reject as corrupt.
	hdr := testutil.ZstdBomb(1<<40, 0, true)[:14]
	junk := append(hdr, bytes.Repeat([]byte{0xff}, 64)...)
	if _, err := formats.NewBudget(1<<20).DecompressZstd(ctx, bytes.NewReader(junk), 1<<30, false, "t"); !errors.Is(err, formats.ErrCorrupt) || !strings.Contains(err.Error(), "declares") {
		t.Errorf("declared beyond limit: %v", err)
	}
	if _, err := formats.NewBudget(1<<20).DecompressZstd(ctx, bytes.NewReader(junk), 1<<50, false, "t"); !errors.Is(err, formats.ErrLimit) || !strings.Contains(err.Error(), "declares") {
		t.Errorf("declared beyond budget: %v", err)
	}
	// Undeclared bomb, no exact size: stops at the budget.
	_, err = formats.NewBudget(1<<20).DecompressZstd(ctx, bytes.NewReader(testutil.ZstdBomb(3<<30, 0, false)), 1<<62, false, "t")
	if !errors.Is(err, formats.ErrLimit) {
		t.Errorf("undeclared bomb: %v", err)
	}
	// Streaming to a writer is charged too.
	b = formats.NewBudget(1 << 20)
	if _, err := b.DecompressZstdTo(ctx, io.Discard, bytes.NewReader(testutil.ZstdBomb(2<<20, 0, false)), 2<<20, true, "t"); !errors.Is(err, formats.ErrLimit) {
		t.Errorf("streamed beyond budget: %v", err)
	}
	// Garbage.
	if _, err := formats.NewBudget(1<<20).DecompressZstd(ctx, strings.NewReader("not zstd at all"), 10, false, "t"); !errors.Is(err, formats.ErrCorrupt) {
		t.Errorf("garbage: %v", err)
	}
	// Cancelled context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := formats.NewBudget(1<<30).DecompressZstd(cctx, bytes.NewReader(testutil.ZstdBomb(1<<20, 0, false)), 1<<20, true, "t"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// FuzzDecompressZstd: whatever the frames, DecompressZstd never panics,
// never returns more than the limit (exactly the limit when exact), and
// charges the budget exactly what it returns.
func FuzzDecompressZstd(f *testing.F) {
	f.Add(testutil.ZstdBomb(1000, 'x', false), int64(1000), true)
	f.Add(testutil.ZstdBomb(1000, 'x', true), int64(999), false)
	f.Add(testutil.ZstdBomb(5<<20, 0, false), int64(1<<30), false)
	f.Add(testutil.ZstdBomb(0, 0, true), int64(0), true)
	f.Add([]byte("not zstd"), int64(8), false)
	f.Fuzz(func(t *testing.T, src []byte, limit int64, exact bool) {
		const budget = 4 << 20
		if limit < 0 || limit > 1<<40 {
			return
		}
		b := formats.NewBudget(budget)
		out, err := b.DecompressZstd(context.Background(), bytes.NewReader(src), limit, exact, "fuzz")
		if err != nil {
			if !errors.Is(err, formats.ErrLimit) && !errors.Is(err, formats.ErrCorrupt) {
				t.Fatalf("error wraps neither ErrLimit nor ErrCorrupt: %v", err)
			}
			if b.Remaining() != budget {
				t.Fatalf("failed call charged %d bytes", budget-b.Remaining())
			}
			return
		}
		if int64(len(out)) > limit || (exact && int64(len(out)) != limit) {
			t.Fatalf("%d bytes for limit %d (exact %v)", len(out), limit, exact)
		}
		if got := budget - b.Remaining(); got != int64(len(out)) {
			t.Fatalf("charged %d bytes for %d returned", got, len(out))
		}
	})
}
