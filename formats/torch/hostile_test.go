package torch

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats"
	"github.com/snapd-ml/snapd/snapshot"
)

// deflatedPkl is a small .pt whose data.pkl (deflated, as a zip may
// hold it) is pkl.
func deflatedPkl(t *testing.T, pkl []byte) []byte {
	t.Helper()
	b := makeZip(t, zmember{name: "archive/data.pkl", data: pkl, deflate: true}, zmember{name: "archive/version", data: []byte("3\n")})
	if len(b) > 128<<10 {
		t.Fatalf("test file is %d bytes", len(b))
	}
	return b
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestHostilePickles: the audit's pickles, each a few KB as a .pt file.
// The old unpickler overflowed the stack, ran for CPU-hours ignoring
// cancellation, or grew to GBs; now each fails with its class (or
// decodes) while the decode budget, which every object built is charged
// to, stays within its limit.
func TestHostilePickles(t *testing.T) {
	hdr := []byte{0x80, 2}
	memoKey := concat(hdr, []byte{'}', 'X', 0, 0, 0x40, 0}, bytes.Repeat([]byte{'k'}, 4<<20), []byte{'q', 0, '0'},
		bytes.Repeat([]byte{'h', 0, 'N', 's'}, 1<<20), []byte{'.'})
	cases := []struct {
		name string
		pkl  []byte
		want error // nil: decodes
		msg  string
	}{
		{"dict key of a tuple nested 8M deep", concat(hdr, []byte{'}', 'N'}, bytes.Repeat([]byte{0x85}, 8<<20), []byte("Ns.")), ErrLimit, "tuples nested deeper than 1000"},
		{"memoized 4 MB key set a million times", memoKey, nil, ""},
		{"8M EMPTY_LISTs", concat(hdr, bytes.Repeat([]byte{']'}, 8<<20), []byte{'.'}), ErrLimit, "the objects built exceed the decode budget"},
		{"8M nested TUPLE1s", concat(hdr, []byte{'N'}, bytes.Repeat([]byte{0x85}, 8<<20), []byte{'.'}), ErrLimit, "nested deeper"},
		{"8M NONEs", concat(hdr, bytes.Repeat([]byte{'N'}, 8<<20), []byte{'.'}), ErrLimit, "decode budget"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := deflatedPkl(t, tc.pkl)
			budget := formats.NewBudget(64 << 20)
			s, err := New().Decode(context.Background(), snapshot.Bytes(file), int64(len(file)), formats.DecodeOptions{Name: "bad.pt", SharedBudget: budget})
			if budget.Remaining() < 0 || budget.Remaining() > budget.Limit() {
				t.Fatalf("budget %d of %d", budget.Remaining(), budget.Limit())
			}
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if len(s.Arrays) != 0 {
					t.Fatalf("arrays %d", len(s.Arrays))
				}
				// The 8 MiB pickle and the 4 MiB string once, not 4 MiB
				// per SETITEM.
				if used := budget.Limit() - budget.Remaining(); used > 24<<20 {
					t.Fatalf("charged %d bytes", used)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "torch: bad.pt: data.pkl (deflated): offset ") {
				t.Fatalf("got %v, want %v containing %q", err, tc.want, tc.msg)
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		file := deflatedPkl(t, memoKey)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := New().Decode(ctx, snapshot.Bytes(file), int64(len(file)), formats.DecodeOptions{Name: "bad.pt"})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
	})
}

// TestUnknownGlobalPath: a global outside the allowlist is named with
// the key path where the checkpoint holds it.
func TestUnknownGlobalPath(t *testing.T) {
	var p pickler
	p.op(0x80, 2, '}')
	p.str("scheduler")
	p.op('}')
	p.str("anneal_func")
	p.global("torch.optim.lr_scheduler", "_cosine_anneal")
	p.op('s', 's', '.')
	err := decodeStrict(t, ckptZip(t, p.buf.Bytes(), nil))
	if !errors.Is(err, ErrRefused) || strings.Contains(err.Error(), `offset`) ||
		!strings.HasPrefix(err.Error(), `torch: bad.pt: data.pkl: key path "scheduler.anneal_func": global torch.optim.lr_scheduler._cosine_anneal is not allowed`) {
		t.Fatalf("got %v", err)
	}
}

// TestPlainDataWithoutTreeForm: values torch's loader allows but
// torch.tree cannot hold (a set, a complex) are unsupported, not corrupt.
func TestPlainDataWithoutTreeForm(t *testing.T) {
	for name, pkl := range map[string]string{
		"set":     "\x80\x02}X\x01\x00\x00\x00scbuiltins\nset\n]\x85Rs.",
		"complex": "\x80\x02}X\x01\x00\x00\x00ccbuiltins\ncomplex\nK\x01K\x02\x86Rs.",
	} {
		err := decodeErr(t, ckptZip(t, []byte(pkl), nil))
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "not supported in a checkpoint tree") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
