package formats_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
)

// ContextReader reads through until its context is cancelled, then fails
// with the context's error on the next Read.
func TestContextReader(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := formats.ContextReader(ctx, strings.NewReader("abcdef"))
	var p [3]byte
	if n, err := r.Read(p[:]); n != 3 || err != nil || string(p[:]) != "abc" {
		t.Fatalf("read %d %v %q", n, err, p)
	}
	cancel()
	if n, err := r.Read(p[:]); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %d %v", n, err)
	}
	if _, err := io.ReadAll(formats.ContextReader(context.Background(), strings.NewReader("x"))); err != nil {
		t.Fatal(err)
	}
}
