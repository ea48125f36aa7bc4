package diffsvg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/snapd-ml/snapd/snapshot"
)

// TestWorkersSamePicture: the picture, sampled strips included, does not
// depend on how many arrays are compared at once.
func TestWorkersSamePicture(t *testing.T) {
	for _, sample := range []int64{0, 256} {
		want := compute(t, Options{SampleBytes: sample}).SVG()
		for _, w := range []int{2, 3, 16} {
			got := compute(t, Options{SampleBytes: sample, Workers: w}).SVG()
			if !bytes.Equal(got, want) {
				t.Fatalf("sample %d, %d workers: the picture differs from one worker's", sample, w)
			}
		}
	}
}

// failSource fails every read; reads counts them.
type failSource struct {
	size  int64
	reads *atomic.Int64
}

var errRead = errors.New("disk on fire")

func (f failSource) Size() int64 { return f.size }
func (f failSource) ReadAt(p []byte, off int64) (int, error) {
	f.reads.Add(1)
	return 0, errRead
}

// TestWorkersFailure: with several workers, an array whose source fails
// makes Compute fail with that array's error (not the cancellation it
// caused in the others); with the caller's context cancelled nothing is
// read.
func TestWorkersFailure(t *testing.T) {
	old, new := fixture()
	var reads atomic.Int64
	bad := &snapshot.Array{Name: "layers.2.w", DType: snapshot.F32, Shape: []int64{5000, 4}, Data: failSource{size: 5000 * 16, reads: &reads}}
	for i, a := range new.Arrays {
		if a.Name == bad.Name {
			new.Arrays[i] = bad
		}
	}
	_, err := Compute(context.Background(), old, new, Options{Workers: 4})
	if !errors.Is(err, errRead) || !strings.Contains(err.Error(), "layers.2.w") {
		t.Fatalf("err = %v, want the failing array's read error", err)
	}
	if reads.Load() != 1 {
		t.Fatalf("%d reads of the failing source, want 1", reads.Load())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	reads.Store(0)
	_, err = Compute(ctx, old, new, Options{Workers: 4})
	if !errors.Is(err, context.Canceled) || reads.Load() != 0 {
		t.Fatalf("cancelled: err = %v after %d reads, want context.Canceled after none", err, reads.Load())
	}
}

// TestFirstFailure: a failure, not the cancellation it caused in the
// arrays before it, is what a parallel Compute returns; with only
// cancellations, the caller's.
func TestFirstFailure(t *testing.T) {
	canceled := fmt.Errorf("array %q: %w", "a", context.Canceled)
	for _, tc := range []struct {
		errs []error
		want error
	}{
		{[]error{nil, nil}, nil},
		{[]error{canceled, errRead, canceled}, errRead},
		{[]error{nil, canceled, nil}, context.Canceled},
		{[]error{context.DeadlineExceeded, errRead}, context.DeadlineExceeded},
	} {
		if got := firstFailure(tc.errs); !errors.Is(got, tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("firstFailure(%v) = %v, want %v", tc.errs, got, tc.want)
		}
	}
}

// TestBinsTouched: binsTouched counts the bins holding rows of the
// ranges, as marking them one row at a time does.
func TestBinsTouched(t *testing.T) {
	for _, tc := range []struct {
		rows   int64
		bins   int
		ranges []snapshot.RowRange
	}{
		{10, 10, nil},
		{10, 10, []snapshot.RowRange{{Start: 0, End: 10}}},
		{1000, 7, []snapshot.RowRange{{Start: 0, End: 1}, {Start: 2, End: 3}, {Start: 142, End: 144}, {Start: 999, End: 1000}}},
		{1000, 720, []snapshot.RowRange{{Start: 3, End: 5}, {Start: 6, End: 400}, {Start: 401, End: 402}}},
		{5, 5, []snapshot.RowRange{{Start: 1, End: 2}, {Start: 3, End: 4}}},
	} {
		seen := map[int]bool{}
		for _, r := range tc.ranges {
			for row := r.Start; row < r.End; row++ {
				seen[binOf(row, tc.rows, tc.bins)] = true
			}
		}
		if got := binsTouched(tc.ranges, tc.rows, tc.bins); got != len(seen) {
			t.Errorf("rows %d, bins %d, ranges %v: %d bins, want %d", tc.rows, tc.bins, tc.ranges, got, len(seen))
		}
	}
}
