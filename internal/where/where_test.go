package where

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

type loc struct {
	w   Where
	err error
}

func (l *loc) Error() string { return "loc" }
func (l *loc) Unwrap() error { return l.err }
func (l *loc) Where() Where  { return l.w.Under(Cause(l.err)) }

func TestOfOutermostMergesCause(t *testing.T) {
	inner := &loc{w: Where{File: "in", Line: 3, Offset: -1, Array: "a", Chunk: 0, Check: "wtxt/crc32c"}}
	outer := &loc{w: Where{File: "out", Offset: 7, Chunk: -1}, err: fmt.Errorf("ctx: %w", inner)}
	w, ok := Of(fmt.Errorf("top: %w", outer))
	if !ok {
		t.Fatal("no Where")
	}
	want := Where{File: "out", Line: 3, Offset: 7, Array: "a", Chunk: 0, Check: "wtxt/crc32c"}
	if w != want {
		t.Fatalf("got %+v, want %+v", w, want)
	}
	if w.Namespace() != "wtxt" || w.Name() != "crc32c" {
		t.Fatalf("namespace %q name %q", w.Namespace(), w.Name())
	}
}

func TestOfPathErrorAndNone(t *testing.T) {
	w, ok := Of(fmt.Errorf("x: %w", &fs.PathError{Op: "open", Path: "/p", Err: fs.ErrNotExist}))
	if !ok || w.File != "/p" || w.Offset != -1 || w.Chunk != -1 {
		t.Fatalf("PathError: %+v %v", w, ok)
	}
	if w, ok := Of(errors.New("plain")); ok || w != None() {
		t.Fatalf("plain error located: %+v", w)
	}
}

func TestAtKeepsMessageAndChain(t *testing.T) {
	sentinel := errors.New("s")
	inner := &loc{w: Where{Offset: -1, Chunk: -1, Check: "seal/grammar"}, err: sentinel}
	err := At("f.wseal", inner)
	if err.Error() != inner.Error() || !errors.Is(err, sentinel) {
		t.Fatalf("At changed the error: %v", err)
	}
	if w, _ := Of(err); w.File != "f.wseal" || w.Check != "seal/grammar" {
		t.Fatalf("At: %+v", w)
	}
	if w, _ := Of(At("x", &loc{w: Where{File: "own", Offset: -1, Chunk: -1}})); w.File != "own" {
		t.Fatalf("At overrode the error's own file: %+v", w)
	}
	if At("x", nil) != nil {
		t.Fatal("At(nil) != nil")
	}
}

func TestCheck(t *testing.T) {
	if Check(Ledger, "chain") != "ledger/chain" || Check(WAL, "") != "" {
		t.Fatal(Check(Ledger, "chain"))
	}
	if (Where{Check: "plain"}).Name() != "plain" || (Where{Check: "plain"}).Namespace() != "" {
		t.Fatal("a check without namespace")
	}
}
