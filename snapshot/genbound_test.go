package snapshot

import (
	"errors"
	"testing"
)

func TestGenBound(t *testing.T) {
	for _, gen := range []uint64{MaxGen + 1, 1<<63 - 1, 1<<64 - 1} {
		s := &Snapshot{Meta: Meta{Gen: gen}}
		if err := s.Validate(); !errors.Is(err, ErrGenRange) {
			t.Fatalf("Validate gen %d: %v", gen, err)
		}
		if err := CheckGen(gen); !errors.Is(err, ErrGenRange) {
			t.Fatalf("CheckGen %d: %v", gen, err)
		}
	}
	if err := CheckGen(0); !errors.Is(err, ErrGenRange) {
		t.Fatal("gen 0 accepted")
	}
	for _, gen := range []uint64{1, MaxGen} {
		if err := CheckGen(gen); err != nil {
			t.Fatal(err)
		}
		if err := (&Snapshot{Meta: Meta{Gen: gen}}).Validate(); err != nil {
			t.Fatal(err)
		}
	}
}
